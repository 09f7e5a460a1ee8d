"""
Stability chart over two delays
===============================

A matrix delay system with two delays,
``x' = A x + Ad_1 x(t - tau_1) + Ad_2 x(t - tau_2)``, may be stable for some pairs of delays and
unstable for others. :meth:`ddesys.DelayStateSpace.stability_chart` computes the spectral abscissa
(the largest real part of a characteristic root) on a grid of ``(tau_1, tau_2)``; its zero level is
the stability boundary.
"""
import matplotlib.pyplot as plt
import numpy as np

import ddesys

A = [[-2.0, 1.0], [0.0, -0.9]]
Ad = [[[-2.5, 0.0], [0.5, -0.6]],            # Ad_1
      [[0.0, 0.3], [0.0, -0.8]]]             # Ad_2
sys = ddesys.DelayStateSpace(A, Ad=Ad, tau=[1.0, 2.0])
print(sys)

# %%
# The chart on a 40 x 40 grid (threaded over the grid points):

tau1 = np.linspace(0.05, 6.0, 40)
tau2 = np.linspace(0.05, 6.0, 40)
chart = sys.stability_chart(tau1, tau2)
print(f"stable on {chart.stable.mean():.0%} of the grid")

fig = chart.plot()
plt.show()

# %%
# The spectral abscissa along one line of the chart, ``tau_2 = 1``, where the system loses stability
# as ``tau_1`` grows:

j = np.argmin(np.abs(tau2 - 1.0))
fig, ax = plt.subplots(figsize=(6, 3.2), layout="constrained")
ax.plot(tau1, chart.abscissa[j], marker=".")
ax.axhline(0.0, color="k", lw=0.8)
ax.set_xlabel("tau_1")
ax.set_ylabel("spectral abscissa")
ax.set_title(f"tau_2 = {tau2[j]:.2f}")
plt.show()
