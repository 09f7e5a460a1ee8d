"""
Characteristic roots of a delay system
======================================

A continuous delay system ``h' = a h + ad h(t - tau) + b x`` has infinitely many characteristic roots,
one per branch of the Lambert W function: ``s_j = a + W_j(ad tau e^{-a tau}) / tau``.
:class:`ddesys.DelaySystem` computes them in closed form, and the exact discretization
(:meth:`~ddesys.DelaySystem.discretize`) is a :class:`ddesys.DiscreteDelaySystem` whose poles lie
inside the unit circle exactly when it is stable.
"""
import matplotlib.pyplot as plt
import numpy as np

import ddesys
from ddesys import plot

# %%
# Two modes sharing one delay ``tau = 1.3``:

sys_c = ddesys.DelaySystem(a=[-0.5 + 2j, -1 + 0.3j], ad=[0.3 - 0.2j, -0.4 + 0.1j],
                           b=[1, 0.5 + 0.5j], c=[0.7 - 0.1j, 0.2 + 0.3j], tau=1.3)
roots = sys_c.characteristic_roots(branches=range(-5, 6))     # (N2, branches) complex
print("rightmost root per mode:", np.round(sys_c.rightmost_root(), 4))
print("stable:", bool(sys_c.is_stable()))

# %%
# The roots against the imaginary axis (Lambert-W branches -5 to 5):

fig = plot.plot_roots(sys_c)
fig.axes[0].set_title("continuous system: roots in the left half-plane")

# %%
# Discretized with a zero-order hold at ``dt = 0.1`` the delay is 13 steps. The poles of the
# discrete system (the roots of each mode's characteristic polynomial) lie inside the unit circle:

sys_d = sys_c.discretize(dt=0.1)
print("delay in steps:", float(sys_d.delay), " spectral radius:", round(float(sys_d.spectral_radius()), 4))
fig = plot.plot_roots(sys_d)
fig.axes[0].set_title("discrete system: poles inside the unit circle")

# %%
# Exact stability against the sufficient test
# -------------------------------------------
#
# For the scalar recurrence ``h_t = lam h_{t-1} + mu h_{t-k}`` the sufficient criterion
# ``|lam| + |mu| < 1`` (the diamond) holds for every delay; the exact region, computed by a certified
# winding number, is larger and depends on ``k``.

fig, axes = plt.subplots(1, 2, figsize=(9, 4.2), layout="constrained")
for ax, k in zip(axes, (2, 8)):
    plot.plot_stability_region(k=k, alpha=0.0, n=121, ax=ax)
    ax.set_title(f"delay k = {k}")
plt.show()
