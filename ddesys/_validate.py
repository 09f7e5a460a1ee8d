"""Input checks shared by the public classes: every bad input raises naming its argument."""
from __future__ import annotations

import numpy as np

from ._array import get_namespace, to_numpy
from .budget import BudgetError


def as_array(xp, value, name, kind):
    """Convert ``value`` to an array of ``kind`` ('complex' or 'real') in namespace ``xp``; reject
    non-finite entries and complex values where a real is required."""
    try:
        arr = xp.asarray(value)
    except Exception as exc:  # noqa: BLE001 - re-raised with the argument's name
        raise TypeError(f"{name} must be an array of numbers, got {type(value).__name__}") from exc
    host = to_numpy(arr)
    if host.dtype.kind == "O":           # e.g. Python ints beyond int64: keep their value as a float
        try:
            host = np.asarray(host, dtype=np.complex128 if kind == "complex" else np.float64)
            arr = xp.asarray(host)
        except (TypeError, ValueError, OverflowError):
            pass
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


# Largest delay, in steps, that the library accepts. The integer part k must keep every index
# expression of the compiled loops (t - k - 1, k + 1) and the phase products (m k) mod M of the FFT
# synthesis (m < M <= 2**32) inside int64, and fit the int32 indices of the GPU kernels: k + 1 <= 2**31.
# Memory is checked separately where it is allocated (it depends on min(k, L), not on k alone).
MAX_DELAY_STEPS = 2**31 - 1


def check_delay(delay, name="delay"):
    """``delay`` (host array, steps): finite, ``>= 1`` and ``<= MAX_DELAY_STEPS``, else ``ValueError``
    naming ``name``, the limit and the remedy."""
    delay = np.asarray(delay)
    if delay.size == 0:
        return
    if not np.all(np.isfinite(delay)):
        raise ValueError(f"{name} must be finite (in steps); it holds "
                         f"{int(delay.size - np.isfinite(delay).sum())} non-finite value(s)")
    lo, hi = float(delay.min()), float(delay.max())
    if lo < 1:
        raise ValueError(f"{name} must be >= 1 step (got min {lo:.6g}); a delay below one step cannot be "
                         "read from the history buffer (use a smaller time step or a longer delay)")
    if hi > MAX_DELAY_STEPS:
        raise ValueError(f"{name} must be <= MAX_DELAY_STEPS = 2**31 - 1 = {MAX_DELAY_STEPS} steps (got "
                         f"max {hi:.6g}): its integer part indexes the history in int64/int32 "
                         "arithmetic. Use a coarser time step (fewer steps per delay) or drop the delayed "
                         "branch (mu = 0) if the delay is meant to be infinite")


def check_dt(dt, allow_true=True):
    """``dt`` of a discrete system: ``True`` (unspecified step) or a finite step ``> 0`` in time units.

    The one validator of ``dt`` (every discrete class and :func:`~ddesys.zoh_statespace`).

    Parameters
    ----------
    dt : True or real scalar
    allow_true : bool, default True
        False where a numeric step is required (discretization): ``True`` is then a ``TypeError``.

    Returns
    -------
    True or float
        ``True`` or the step as a float; anything else raises (``TypeError`` for a non-number or an
        array, ``ValueError`` for ``False``, ``0``, a negative or non-finite step).
    """
    if dt is True or (isinstance(dt, np.bool_) and bool(dt)):
        if allow_true:
            return True
        raise TypeError("dt must be a number here, a step > 0 in time units; got True, a boolean: booleans are "
                        "not steps (a discrete system's dt=True only marks its step as unspecified)")
    if dt is False or isinstance(dt, np.bool_):
        raise ValueError(f"dt must be {'True (an unspecified step) or ' if allow_true else ''}a step > 0 in time "
                         "units, got False, a boolean: booleans are not steps (dt = 0 would mean a continuous "
                         "system)")
    if np.ndim(dt) != 0 or not isinstance(np.asarray(dt).item(), (int, float)):
        raise TypeError(f"dt must be True or a real scalar step > 0 in time units, got {dt!r}")
    step = float(np.asarray(dt).item())
    if not (np.isfinite(step) and step > 0):
        raise ValueError(f"dt must be True (unspecified step) or a finite step > 0 in time units, got {dt!r}")
    return step


_REAL_DTYPES = ("float32", "float64")


def check_real_dtype(xp, dtype, name="dtype"):
    """The namespace's ``float32`` / ``float64`` for ``dtype`` (NumPy dtype, type or name, or the
    namespace's own dtype object); anything else (integer, bool, complex, float16, ...) raises
    ``TypeError`` listing the supported dtypes."""
    for want in _REAL_DTYPES:
        target = getattr(xp, want)
        try:
            if dtype is target or dtype == target or str(dtype).rsplit(".", 1)[-1] == want:
                return target
        except TypeError:
            pass
    try:
        np_dt = np.dtype(dtype)
    except TypeError:
        np_dt = None
    if np_dt is not None and np_dt.name in _REAL_DTYPES:
        return getattr(xp, np_dt.name)
    raise TypeError(f"{name} must be a real floating dtype, one of {', '.join(_REAL_DTYPES)} (the output is "
                    f"a real signal; integer, bool, complex and half-precision outputs are not supported), "
                    f"got {dtype!r}")


def check_memory(nbytes, budget, what, remedy):
    """Refuse (:class:`ddesys.budget.BudgetError`, a ``ValueError`` and a ``MemoryError``) a working set of
    ``nbytes`` above ``budget`` bytes before allocating it."""
    if nbytes > budget:
        raise BudgetError(f"{what} needs about {nbytes / 2**30:.3g} GiB of working memory, over the budget of "
                          f"{budget / 2**30:.3g} GiB; {remedy}")


__all__ = ["MAX_DELAY_STEPS", "as_array", "broadcast_modes", "check_batch", "check_delay", "check_dt", "check_length",
           "check_memory", "check_real_dtype", "get_namespace"]
