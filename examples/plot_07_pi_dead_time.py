"""
PI tuning of a dead-time plant by spectral abscissa minimization
================================================================

The plant ``P(s) = e^{-s} / (s + 1)`` (gain 1, time constant 1, dead time 1) under the PI controller
``C(s) = kp + ki / s`` in unity feedback: ``ddesys.feedback(C * P)`` builds the exact closed loop, dead
time included. :func:`ddesys.stabilize` minimizes its spectral abscissa (the largest real
part of the closed loop's characteristic roots) over ``(kp, ki)``, starting from the SIMC rule
(``kp = T / (K (tau_c + L)) = 0.5``, ``ki = kp / T = 0.5`` with ``tau_c = L``).

The optimum is known in closed form: the characteristic function ``s^2 + s + (kp s + ki) e^{-s}`` has a
triple root at ``s = -1`` for ``kp = ki = 1/e`` (the integral action cancels the plant pole and leaves
``s + e^{-1} e^{-s}``, whose double root ``-1`` is the best a single gain can do), so the decay rate of
the hand-tuned loop, ``Re W_0(-1/2) = -0.794``, improves to ``-1``.
"""
import matplotlib.pyplot as plt
import numpy as np

import ddesys
from ddesys.control.design import stabilize

P = ddesys.tf([1.0], [1.0, 1.0], delay=1.0)


def loop(p):
    """The closed loop of the PI gains ``p = (kp, ki)``."""
    return ddesys.feedback(ddesys.tf([p[0], p[1]], [1.0, 0.0]) * P)


hand = np.array([0.5, 0.5])                                   # SIMC
res = stabilize(loop, hand)
print(f"hand-tuned (kp, ki) = {hand}: spectral abscissa {loop(hand).spectral_abscissa():.6f}")
print(f"designed   (kp, ki) = {res.params.round(6)}: spectral abscissa {res.value:.6f} "
      f"(closed form: kp = ki = 1/e = {1 / np.e:.6f}, abscissa -1)")
print(f"improvement of the decay rate: {loop(hand).spectral_abscissa() - res.value:.4f}")
print(res.message)
print("margins of the designed loop (gm, pm, sm, wpc, wgc, wms):",
      np.round(ddesys.stability_margins(ddesys.tf(list(res.params), [1.0, 0.0]) * P), 4))

# %%
# The rightmost characteristic roots before and after. The designed loop's three rightmost roots sit at
# ``-1`` (a triple root, split by rounding into a tight cluster); the chains of roots further left are
# what a finite number of controller parameters cannot move.

fig, ax = plt.subplots(figsize=(6.5, 4.2), layout="constrained")
for p, style, label in ((hand, "o", "hand-tuned (SIMC)"), (res.params, "x", "designed")):
    z = loop(p).roots(re_min=-4.0, certify=False).roots
    ax.plot(z.real, z.imag, style, mfc="none", ms=8, label=label)
ax.axvline(0.0, color="k", lw=0.8)
ax.set_ylim(-30.0, 30.0)
ax.set_xlabel("Re s")
ax.set_ylabel("Im s")
ax.set_title("rightmost characteristic roots")
ax.legend()
plt.show()

# %%
# Step responses of the two loops (the reference passes the dead time before the plant responds). The
# spectral abscissa is the asymptotic decay rate: the designed loop's error decays as ``e^{-t}`` (times
# a polynomial, for the triple root) instead of ``e^{-0.794 t}``, without overshoot, while the
# hand-tuned loop rises faster; a rise-time or overshoot requirement would be a different objective.

t = np.linspace(0.0, 15.0, 751)
fig, ax = plt.subplots(figsize=(7, 3.6), layout="constrained")
for p, label in ((hand, "hand-tuned (SIMC)"), (res.params, "designed")):
    ax.plot(t, loop(p).step(t).y[0, 0], label=f"{label}: kp = {p[0]:.3f}, ki = {p[1]:.3f}")
ax.axhline(1.0, color="k", lw=0.8, ls=":")
ax.set_xlabel("t")
ax.set_ylabel("y")
ax.set_title("reference step")
ax.legend()
plt.show()
