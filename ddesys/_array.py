"""Array-module plumbing: one code path for NumPy, CuPy and torch arrays.

The formulas in :mod:`ddesys` are written against the Python array API standard through
``array-api-compat``, so the same function runs on NumPy and CuPy arrays (and on torch tensors, with
autograd, for the :mod:`nn` layers). Nothing here imports CuPy or torch: they are only touched when the
caller hands us one of their arrays.
"""
from __future__ import annotations

import math

import numpy as np

try:  # pure Python, a hard dependency; the fallback only keeps `import ddesys` alive without it
    import array_api_compat as _compat
except ImportError:  # pragma: no cover - exercised only on a broken install
    _compat = None


def get_namespace(*arrays):
    """The array namespace of ``arrays`` (python scalars, lists and ``None`` count as NumPy).

    Returns the ``array-api-compat`` namespace for NumPy, CuPy or torch; mixing libraries raises
    ``TypeError``.
    """
    if _compat is None:
        return np
    arrs = [a for a in arrays if a is not None and not isinstance(a, (int, float, complex, bool, list, tuple,
                                                                     np.generic))]
    arrs = [a for a in arrs if _compat.is_array_api_obj(a)]
    if not arrs:
        return _compat.array_namespace(np.zeros(0))
    return _compat.array_namespace(*arrs)


def is_numpy(xp) -> bool:
    return _compat is None or _compat.is_numpy_namespace(xp)


def is_torch(xp) -> bool:
    return _compat is not None and _compat.is_torch_namespace(xp)


def is_cupy(xp) -> bool:
    return _compat is not None and _compat.is_cupy_namespace(xp)


def to_numpy(x):
    """Host NumPy copy of a NumPy / CuPy / torch array (analysis routines run on the host)."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "get") and type(x).__module__.startswith("cupy"):
        return x.get()
    if type(x).__module__.startswith("torch"):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def real_dtype_of(xp, dtype):
    """float32 for float32/complex64, float64 for float64/complex128 (the namespace's objects)."""
    if dtype in (xp.float32, xp.complex64):
        return xp.float32
    return xp.float64


def complex_dtype_of(xp, dtype):
    return xp.complex64 if real_dtype_of(xp, dtype) == xp.float32 else xp.complex128


def unit_roundoff(real_dtype) -> float:
    """Machine epsilon of a (NumPy, CuPy or torch) float dtype: 2**-23 for float32, 2**-52 for float64."""
    name = str(real_dtype)
    return 2.0**-23 if "32" in name else 2.0**-52


def next_pow2(n: int) -> int:
    """Smallest power of two >= n (n >= 1)."""
    return 1 << max(0, math.ceil(math.log2(max(1, int(n)))))
