"""
A MIMO column with a dead time per entry
========================================

The Wood-Berry distillation column (Wood and Berry, 1973) is the textbook two-by-two process with a
different dead time on each of its four paths: reflux and steam flow (inputs) to top and bottom
compositions (outputs),

.. math::

    G(s) = \\begin{bmatrix} \\frac{12.8 e^{-s}}{16.7 s + 1} & \\frac{-18.9 e^{-3 s}}{21 s + 1} \\\\
           \\frac{6.6 e^{-7 s}}{10.9 s + 1} & \\frac{-19.4 e^{-3 s}}{14.4 s + 1} \\end{bmatrix}.

:func:`ddesys.tf` takes python-control's MIMO lists (``num[i][j]``, ``den[i][j]``) with a delay per entry;
every delay stays exact (no Pade model), in the frequency response, the roots of a closed loop and its
step responses (python-control is needed here only for the Pade comparison).
"""
import control as ctrl
import matplotlib.pyplot as plt
import numpy as np

import ddesys

num = [[[12.8], [-18.9]], [[6.6], [-19.4]]]
den = [[[16.7, 1.0], [21.0, 1.0]], [[10.9, 1.0], [14.4, 1.0]]]
G = ddesys.tf(num, den, delay=[[1.0, 3.0], [7.0, 3.0]])
print(G)

# %%
# Diagonal PI control
# -------------------
#
# Luyben's BLT tuning (1986) closes each loop with a PI controller, ``Kc (1 + 1 / (tau_I s))``. The
# closed loop's rightmost roots are those of a retarded system with delays 1, 3 and 7:


def pi(kc, ti):
    return ddesys.tf([kc * ti, kc], [ti, 0.0])


def closed_loop(p):
    return ddesys.feedback(G * ddesys.append(pi(p[0], p[1]), pi(p[2], p[3])))


blt = np.array([0.375, 8.29, -0.075, 23.6])
print("BLT: rightmost roots", np.round(closed_loop(blt).poles()[:3], 4))

# %%
# Open-loop steps: each response starts after its own dead time (1, 3, 7 and 3 minutes):

t = np.linspace(0.0, 120.0, 601)
y_open = G.step(t).y                                   # (outputs, inputs, times)
fig, axes = plt.subplots(2, 2, figsize=(9, 5.0), sharex=True, layout="constrained")
for i in range(2):
    for j in range(2):
        axes[i, j].plot(t, y_open[i, j])
        axes[i, j].set_title(f"input {j} to output {i}", fontsize=9)
for ax in axes[1]:
    ax.set_xlabel("time (min)")

# %%
# Set-point steps on each loop under the BLT controllers (columns: the loop stepped; rows: the outputs),
# and the same loops with every dead time replaced by a second-order Pade model (python-control's
# ``pade``), the usual substitute, for comparison:

y = closed_loop(blt).step(t).y
cl_pade = ddesys.to_control(closed_loop(blt), pade_order=2)
fig, axes = plt.subplots(2, 2, figsize=(9, 5.5), sharex=True, layout="constrained")
for j in range(2):
    t_p, y_p = ctrl.step_response(cl_pade, t, input=j)
    for i in range(2):
        axes[i, j].plot(t, y[i, j], label="exact dead times")
        axes[i, j].plot(t_p, np.asarray(y_p).reshape(2, -1)[i], "--", label="Pade-2 model")
for i, out in enumerate(("top composition", "bottom composition")):
    axes[i, 0].set_ylabel(out)
for j, inp in enumerate(("set-point step, loop 1", "set-point step, loop 2")):
    axes[0, j].set_title(inp)
    axes[1, j].set_xlabel("time (min)")
axes[0, 0].legend()
plt.show()
