"""
Strong stabilization of a loop with a delay-difference part
===========================================================

A controller with a direct feedthrough around a plant with a direct feedthrough and dead time closes a
loop through the delay alone: the closed loop is *neutral*. Take the unstable biproper plant
``P(s) = (s + 2) e^{-s} / (s - 1)`` under a static gain ``k``: the characteristic equation
``(s - 1) + k (s + 2) e^{-s} = 0`` has a difference part ``1 + k e^{-s}``, whose zeros
``s = ln|k| + i (2 j + 1) pi`` form a vertical chain at ``Re s = ln|k|``, the essential bound ``c_D``.

Such a loop can be stable for its nominal delay and lose stability under arbitrarily small changes of
the delays when ``|k| >= 1`` (the difference operator is not *strongly* stable). :func:`ddesys.feedback`
builds the loop exactly, its roots and essential spectrum come from an equivalent neutral system, and
:func:`ddesys.stabilize` minimizes the strong spectral abscissa ``max(C_D, rightmost root)`` (as
TDS-CONTROL's ``tds_strong_stabilization`` does).
"""
import matplotlib.pyplot as plt
import numpy as np

import ddesys

P = ddesys.tf([1.0, 2.0], [1.0, -1.0], delay=1.0)


def loop(p):
    return ddesys.feedback(P, p[0])


for k in (0.3, 0.6, 1.2):
    L = loop([k])
    e = L.difference_loop().difference_spectrum()
    print(f"k = {k}: c_D = {e.c_D:+.4f}, gamma0 = {e.gamma0:.2f}, spectral abscissa "
          f"{L.spectral_abscissa():+.4f}, strongly stable: {L.strong_stability().strongly_stable}")

# %%
# The spectral abscissa over the gain: the essential bound ``ln|k|`` rises with ``k`` while the rightmost
# root moves left until it meets the chain; the best gain balances the two (here ``gamma0 = k < 1``, so
# ``C_D = c_D`` and the strong abscissa is the abscissa). At the optimum the rightmost roots sit on the
# essential bound.

ks = np.linspace(0.35, 0.95, 25)
alpha = np.array([loop([k]).spectral_abscissa() for k in ks])
res = ddesys.stabilize(loop, [0.3])
print(f"designed gain {res.params[0]:.4f}: strong spectral abscissa {res.value:.4f}; strongly stable: "
      f"{res.system.strong_stability().strongly_stable}")

fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
ax.plot(ks, alpha, label="spectral abscissa max(c_D, roots)")
ax.plot(ks, np.log(ks), "--", label="essential bound c_D = ln k")
ax.plot(res.params[0], res.value, "o", color="C3", label="stabilize()")
ax.axhline(0.0, color="0.6", lw=0.8)
ax.set_xlabel("gain k")
ax.set_ylabel("real part")
ax.legend()
plt.show()
