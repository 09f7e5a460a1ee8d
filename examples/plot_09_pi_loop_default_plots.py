"""
Bode and Nyquist plots of a PI loop with dead time, at default settings
=======================================================================

The plant ``P(s) = e^{-s} / (3 s + 1)`` under the PI controller ``C(s) = 0.8 + 0.3 / s``: the loop
``L = C P`` has an integrator (a pole at ``s = 0``) and a dead time, the two features that make a plot on
a fixed frequency grid unreadable (the integrator sends the Nyquist curve to infinity, the dead time
winds the phase without bound). The default plots choose their own range as python-control does:

* the frequencies reach a decade below the system's features (its poles, ``1 / delay``, the crossovers)
  and, because of the dead time, end a few times past the last crossover, so the phase turns only as far
  as it matters for the margins;
* the Nyquist curve is drawn exactly where ``|L|`` is moderate and on a circle (dash-dotted) beyond, so
  the critical point ``-1`` stays in view; the title counts the encirclements of ``-1`` over the whole
  Nyquist contour (``N = Z - P``).
"""
import numpy as np

import ddesys

P = ddesys.tf([1.0], [3.0, 1.0], delay=1.0)
C = ddesys.tf([0.8, 0.3], [1.0, 0.0])
L = C * P                                        # P first, then C
print(L)
gm, pm, sm, wpc, wgc, wms = ddesys.stability_margins(L)
print(f"gain margin {gm:.3f} at {wpc:.3f} rad/s, phase margin {pm:.2f} deg at {wgc:.3f} rad/s, "
      f"stability margin {sm:.3f}")

# %%
# The Bode plot at default settings: the gain crossover (where the magnitude passes 0 dB) and the
# phase crossover (where the phase passes -180 deg, dotted) are both in view.

fig = L.bode()

# %%
# The Nyquist plot at default settings. The integrator's branch is drawn on the circle of the radius in
# the legend; the curve does not encircle ``-1`` (``N = 0``) and the loop has no unstable open-loop pole
# (``P = 0``), so the closed loop is stable (``Z = 0``).

fig = L.nyquist()
print("encirclements of -1:", fig.encirclements)

# %%
# Eight times the gain is too much (the gain margin is 5.76): the curve now encircles ``-1`` twice clockwise,
# the closed loop has two roots in the right half-plane (the count comes from the whole contour, not from the
# plotted grid).

fig = (8.0 * L).nyquist()
print("encirclements of -1 at eight times the gain:", fig.encirclements)

# %%
# The closed loop's response to a reference step, with the time response's own plot.

loop = ddesys.feedback(L)
print(loop)
fig = loop.step(np.linspace(0.0, 30.0, 601)).plot(title="closed-loop step response")
