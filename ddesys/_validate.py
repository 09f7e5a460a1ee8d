"""Input checks shared by the public classes: every bad input raises naming its argument."""
from __future__ import annotations

import numpy as np

from ._array import get_namespace, to_numpy


def as_array(xp, value, name, kind):
    """Convert ``value`` to an array of ``kind`` ('complex' or 'real') in namespace ``xp``; reject
    non-finite entries and complex values where a real is required."""
    try:
        arr = xp.asarray(value)
    except Exception as exc:  # noqa: BLE001 - re-raised with the argument's name
        raise TypeError(f"{name} must be an array of numbers, got {type(value).__name__}") from exc
    host = to_numpy(arr)
    if host.dtype.kind not in "biufc":
        raise TypeError(f"{name} must hold numbers, got dtype {host.dtype}")
    if kind == "real" and host.dtype.kind == "c":
        if np.any(host.imag != 0):
            raise TypeError(f"{name} must be real, got complex values")
        arr = xp.real(arr)
        host = host.real
    if not np.all(np.isfinite(host)):
        raise ValueError(f"{name} must be finite; it holds {int(np.size(host) - np.isfinite(host).sum())} "
                         "non-finite value(s)")
    if kind == "complex":
        return xp.astype(arr, xp.complex64 if arr.dtype in (xp.float32, xp.complex64) else xp.complex128)
    return xp.astype(arr, xp.float32 if arr.dtype in (xp.float32, xp.complex64) else xp.float64)


def broadcast_modes(named):
    """Broadcast ``{name: (..., N2) array}`` together; a clear error names the first misfit."""
    shapes = {k: tuple(v.shape) for k, v in named.items()}
    for k, s in shapes.items():
        if len(s) == 0:
            raise ValueError(f"{k} must have a trailing mode axis (shape (..., N2)), got a scalar")
    try:
        full = np.broadcast_shapes(*shapes.values())
    except ValueError:
        raise ValueError("mode-parameter shapes do not broadcast: "
                         + ", ".join(f"{k}{s}" for k, s in shapes.items())) from None
    return full


def check_batch(name, shape, batch):
    """``shape`` must broadcast against the system's batch shape ``batch``."""
    try:
        out = np.broadcast_shapes(tuple(shape), tuple(batch))
    except ValueError:
        raise ValueError(f"{name} of shape {tuple(shape)} does not broadcast against the system's batch "
                         f"shape {tuple(batch)}") from None
    return out


def check_length(L, name="L"):
    if isinstance(L, bool) or not isinstance(L, (int, np.integer)) or L < 1:
        raise ValueError(f"{name} must be a positive integer, got {L!r}")
    return int(L)


__all__ = ["as_array", "broadcast_modes", "check_batch", "check_length", "get_namespace"]
