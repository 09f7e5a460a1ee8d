"""
Margins of a loop with dead time
================================

A first-order process with dead time, ``G(s) = e^{-s} / (s + 1)``, under proportional control ``k``.
The margins are exact (no Pade model): the critical gain is ``sqrt(1 + w^2)`` with ``w + atan(w) = pi``,
and at ``k = 2`` the phase margin is 20.76 degrees at ``w = sqrt 3``, so the loop tolerates
``pm / wgc`` more dead time; the closed loop's delay margin finds the same limit by sweeping the delay.
"""
import matplotlib.pyplot as plt
import numpy as np

import ddesys

G = ddesys.tf([1.0], [1.0, 1.0], delay=1.0)
gm, _, _, wpc, _, _ = ddesys.stability_margins(G)
print(f"critical gain {gm:.6f} at w = {wpc:.6f} rad/s")

L = 2.0 * G
gm, pm, sm, wpc, wgc, wms = ddesys.stability_margins(L)
print(f"k = 2: gain margin {gm:.4f}, phase margin {pm:.4f} deg at {wgc:.4f} rad/s, stability margin {sm:.4f}")
print(f"extra dead time tolerated: {np.radians(pm) / wgc:.6f}")
print(f"closed-loop delay margin (total loop delay): {ddesys.feedback(L).delay_margin():.6f}")

# %%
# The Nyquist curve of ``2 G`` spirals into the origin (the dead time turns the phase without bound);
# it passes the critical point ``-1`` at the distance ``sm``:

fig = L.nyquist()
ax = fig.axes[0]
ax.add_patch(plt.Circle((-1.0, 0.0), sm, fill=False, ls=":", color="C3"))
ax.set_xlim(-2.2, 2.2)
ax.set_ylim(-2.2, 2.2)
ax.set_title("Nyquist plot of 2 e^{-s} / (s + 1)")
plt.show()

# %%
# The Bode plot: the magnitude of a first-order lag, the phase falling linearly with the dead time.

fig = L.bode(np.logspace(-2, 1.5, 400))
plt.show()

# %%
# Closed-loop step responses for three gains: well damped, the nominal ``k = 2``, and past the
# critical gain.

t = np.linspace(0.0, 40.0, 801)
fig, ax = plt.subplots(figsize=(7, 3.6), layout="constrained")
for k in (0.5, 2.0, 2.4):
    loop = ddesys.feedback(k * G)
    a = loop.spectral_abscissa()
    ax.plot(t, loop.step(t).y[0, 0], label=f"k = {k} (max Re s = {a:+.3f})")
ax.set_ylim(-1.5, 3.4)
ax.set_xlabel("t")
ax.set_ylabel("y")
ax.set_title("closed-loop step responses")
ax.legend(loc="upper left", fontsize="x-small", ncols=3)
plt.show()
