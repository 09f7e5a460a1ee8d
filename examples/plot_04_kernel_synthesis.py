"""
Kernel synthesis by the contour-shifted FFT, and its error
==========================================================

A discrete delay system's convolution kernel ``K_0 .. K_{L-1}`` is the inverse z-transform of its
exact transfer function. Sampling the transfer function on the unit circle aliases (the kernel decays
slowly); ddesys samples it on the circle ``|z| = 1/rho`` instead and restores ``rho^-t`` afterwards.
Two errors remain: aliasing, about ``eps = rho^M``, which falls as ``rho`` shrinks, and rounding,
amplified by ``rho^-(L-1)``, which grows. :meth:`~ddesys.DiscreteDelaySystem.kernel` picks ``eps``
per channel to balance them (``eps="auto"``); the exact recurrence is the reference.
"""
import matplotlib.pyplot as plt
import numpy as np

from ddesys import plot
from ddesys.verification.systems import random_delay_system

# %%
# Sixteen channels of 32 modes shaped like a DS4D layer at initialization, with delays up to ``L / 2``
# (at ``dt = 1e-3`` the slowest modes barely decay over ``L`` steps, which is where sampling on the unit
# circle would alias):

L = 2048
sys = random_delay_system(np.random.default_rng(0), H=16, N2=32, dt=1e-3, L=L)
K_ref = sys.kernel(L, method="recurrence")                 # (16, L), the exact recurrence
contour = sys.contour(L)                                   # what eps="auto" picks
print("FFT length M =", contour.M, " eps per channel in", [f"{e:.1e}" for e in (contour.eps.min(), contour.eps.max())])


def rel_error(K):
    return float(np.abs(K - K_ref).max() / np.abs(K_ref).max())


def error_at(eps, dtype):
    """The kernel's error for a fixed contour, NaN where ``kernel`` refuses the contour."""
    try:
        return rel_error(sys.kernel(L, eps=eps, M=2 * L, compute_dtype=dtype))
    except ValueError:
        return np.nan


print(f"automatic, float64 synthesis:  {rel_error(sys.kernel(L)):.1e}")
print(f"automatic, float32 synthesis:  {rel_error(sys.kernel(L, compute_dtype=np.float32)):.1e}")
print(f"eps = 1e-3, M = 2L, float32:   {rel_error(sys.kernel(L, eps=1e-3, M=2 * L, compute_dtype=np.float32)):.1e}")

# %%
# A few of the kernels (the delayed echo is visible where a channel's delay falls):

fig = plot.plot_kernel(sys, L)
plt.show()

# %%
# The trade-off: error against ``eps`` at ``M = 2L`` for float64 and float32 synthesis. Aliasing
# dominates on the right (error about ``eps``), rounding on the left; the automatic choice sits near
# the bottom of each curve. Where rounding would swamp the kernel, ``kernel`` refuses (``ValueError``)
# rather than return noise: those points are missing.

eps_grid = np.logspace(-1, -13, 25)
fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
for dtype, colour in ((np.float64, "C0"), (np.float32, "C1")):
    errors = [error_at(e, dtype) for e in eps_grid]
    ax.loglog(eps_grid, errors, marker=".", color=colour, label=f"{np.dtype(dtype).name} synthesis")
    auto = rel_error(sys.kernel(L, M=2 * L, compute_dtype=dtype))
    ax.axhline(auto, color=colour, ls=":", lw=1)
ax.loglog(eps_grid, eps_grid, "k--", lw=0.8, label="eps (aliasing)")
ax.invert_xaxis()
ax.set_xlabel("eps = rho^M")
ax.set_ylabel("max relative error")
ax.set_title("kernel error against the contour (dotted: eps='auto')")
ax.legend()
plt.show()
