"""Error measures of the checks (the one definition in :mod:`verification`), float64 NumPy.

Inputs may be NumPy arrays or torch tensors (read as float64, or complex128 when complex, NumPy
arrays); ``ref`` is the reference.
"""
from __future__ import annotations

import numpy as np

__all__ = ["rel_err", "rel_max", "rel_rmse"]


def _f64(a):
    if hasattr(a, "detach"):                          # a torch tensor
        a = a.detach().cpu().numpy()
    a = np.asarray(a)
    return a.astype(np.complex128 if np.iscomplexobj(a) else np.float64)


def rel_err(K, ref):
    """Kernels ``(..., L)``: per channel ``max_t |K - ref| / max_t |ref|``, maximized over channels."""
    K, ref = _f64(K), _f64(ref)
    return float(np.max(np.abs(K - ref).max(-1) / np.abs(ref).max(-1)))


def rel_max(a, ref):
    """``max |a - ref| / max |ref|`` over all elements."""
    a, ref = _f64(a), _f64(ref)
    return float(np.abs(a - ref).max() / np.abs(ref).max())


def rel_rmse(a, ref):
    """Relative RMSE ``sqrt(mean |a - ref|^2 / mean |ref|^2)``."""
    a, ref = _f64(a), _f64(ref)
    return float(np.sqrt(np.mean(np.abs(a - ref) ** 2) / np.mean(np.abs(ref) ** 2)))
