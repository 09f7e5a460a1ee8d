"""The compiled loop of the tap's FIR over a chunk (:func:`ddesys.tap.offset_fir`, which checks the inputs
and holds the NumPy fallback)."""
from __future__ import annotations

from ._numba import nb as _nb
from .options import loop

__all__ = ["offset_fir_into"]

if _nb is not None:
    @loop("tap.fir")
    def offset_fir_into(x, j, we, P, y):                            # pragma: no cover - jitted
        """``y[b, c, t] += sum_i we[c, i] x[b, c, P + t - j[c, i]]`` over the indices in ``[0, T)``: ``x``
        ``(B, C, T)``, ``j`` int64 and ``we`` ``(C, J)``, ``y`` ``(B, C, T - P)`` (zeros on entry)."""
        B, C, T = x.shape
        L = y.shape[2]
        for b in range(B):
            for c in range(C):
                for i in range(j.shape[1]):
                    w = we[c, i]
                    off = P - j[c, i]                                # y_t += w x[t + off]
                    lo = max(0, -off)
                    hi = min(L, T - off)
                    for t in range(lo, hi):
                        y[b, c, t] += w * x[b, c, t + off]
else:
    offset_fir_into = None
