"""Error measures of the tests and the checks (their one definition), float64 NumPy.

Inputs may be NumPy arrays or torch tensors (read as float64, or complex128 when complex, NumPy
arrays; torch is never imported); ``ref`` is the reference.
"""
from __future__ import annotations

import numpy as np

__all__ = ["rel_err", "rel_max", "rel_rmse"]


def _f64(a):
    """NumPy float64 (complex128 when complex) from an array or a torch tensor."""
    if hasattr(a, "detach"):                          # a torch tensor
        a = a.detach().cpu().numpy()
    a = np.asarray(a)
    return a.astype(np.complex128 if np.iscomplexobj(a) else np.float64)


def rel_err(K, ref):
    """Kernels ``(..., L)``: per channel ``max_t |K - ref| / max_t |ref|``, maximized over channels.

    ``K`` may hold the same kernels in another batch layout (``(1, H, L)`` against ``(H, L)``); it is
    then read in ``ref``'s shape."""
    K, ref = _f64(K), _f64(ref)
    if K.shape != ref.shape and K.size == ref.size:
        K = K.reshape(ref.shape)
    return float(np.max(np.abs(K - ref).max(-1) / np.abs(ref).max(-1)))


def rel_max(a, ref):
    """``max |a - ref| / max |ref|`` over all elements."""
    a, ref = _f64(a), _f64(ref)
    return float(np.abs(a - ref).max() / np.abs(ref).max())


def rel_rmse(a, ref):
    """Relative RMSE ``sqrt(mean |a - ref|^2 / mean |ref|^2)``."""
    a, ref = _f64(a), _f64(ref)
    return float(np.sqrt(np.mean(np.abs(a - ref) ** 2) / np.mean(np.abs(ref) ** 2)))
