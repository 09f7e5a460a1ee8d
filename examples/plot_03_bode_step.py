"""
Bode plot and step response of a matrix delay system
====================================================

The frequency response of a delay system is exact (``G(i omega) = C (i omega I - A - Ad e^{-i omega
tau})^{-1} B + D``) and its time responses come from a fourth-order method of steps.
:meth:`~ddesys.DelayStateSpace.delay_margin` finds the smallest delay at which the system loses
stability; the step responses below sit on either side of it.
"""
import matplotlib.pyplot as plt
import numpy as np

import ddesys

A = [[-2.0, 1.0], [0.0, -0.9]]
Ad = [[-1.0, 0.0], [-1.0, -1.0]]
sys = ddesys.DelayStateSpace(A, Ad=Ad, tau=1.0, B=[1.0, 1.0], C=[1.0, 0.0])

print("stable:", bool(sys.is_stable()), " spectral abscissa:", round(sys.spectral_abscissa(), 4))
margin = sys.delay_margin()
print("delay margin:", round(margin, 4))
for crossing in sys.crossings(tau_max=10.0):
    print(crossing)
print("H2 norm:", round(sys.h2_norm(), 4), " Hinf norm:", sys.hinf_norm())

# %%
# The Bode plot (magnitude and phase of the exact frequency response):

fig = sys.bode(np.logspace(-2, 1.3, 400))
plt.show()

# %%
# Step responses at the nominal delay, just below the margin and just above it:

t = np.linspace(0.0, 40.0, 401)
fig, ax = plt.subplots(figsize=(7, 3.6), layout="constrained")
for tau in (1.0, 0.95 * margin, 1.05 * margin):
    resp = ddesys.DelayStateSpace(A, Ad=Ad, tau=tau, B=[1.0, 1.0], C=[1.0, 0.0]).step(t)
    ax.plot(resp.t, resp.y[0, 0], label=f"tau = {tau:.3f}")
ax.set_xlabel("t")
ax.set_ylabel("y")
ax.set_title("step response")
ax.legend()
plt.show()

# %%
# The exact discretization at ``dt = 0.01`` (a 100-step delay) keeps the frequency response on the
# unit circle: its impulse response, divided by ``dt``, follows the continuous one.

sd = sys.discretize(dt=0.01)
print("discrete system stable:", bool(sd.is_stable()), " spectral radius:", round(sd.spectral_radius(), 6))
K = sd.impulse(2000)                                     # (outputs, inputs, L)
imp = sys.impulse(np.arange(2000) * 0.01)
fig, ax = plt.subplots(figsize=(7, 3.2), layout="constrained")
ax.plot(imp.t, imp.y[0, 0], label="continuous impulse response")
ax.plot(np.arange(2000) * 0.01, K[0, 0] / 0.01, "--", label="discrete kernel / dt")
ax.set_xlabel("t")
ax.legend()
plt.show()
