"""The delayed input tap: a pure, echo-free delay read through a window (docs/theory.md §9).

A channel may add to its output a delayed copy of its input,

    y_t += e * sum_j w_j x_{t-j},     w_j = hat((j - s) / width) / Z(s, width),  j >= 0

with ``hat(u) = max(0, 1 - |u|)`` and ``Z = sum over all integers j of hat((j - s) / width)``, so the
weights of a window that lies at ``j >= 0`` sum to one. ``width >= 1`` is the window's half-width in
steps. At ``width = 1`` the window is exactly the linear interpolation of :mod:`ddesys.interpolation`
(``w_k = 1 - alpha``, ``w_{k+1} = alpha``); a wider window spreads the read over ``2 width`` samples, so
the gradient with respect to ``s`` sees the signal that far away. Training can start wide and shrink
the width to 1 (coarse to fine), so a delay finds a lag it did not start near.

The tap is a finite impulse response (FIR) filter: its transfer function ``e W(z)``, ``W(z) = sum_j
w_j z^-j``, has no poles, so it never changes the system's stability or its characteristic
polynomial; it adds ``e w_t`` to the convolution kernel exactly (no contour, no aliasing). Written
against the array API (NumPy, CuPy, torch with autograd through ``e`` and ``s``).
"""
from __future__ import annotations

import math
from typing import Any, NamedTuple

from ._array import get_namespace, is_numpy

__all__ = ["DelayTap", "check_width", "tap_filter", "tap_kernel", "tap_span", "tap_support", "tap_transfer",
           "tap_weights"]


class DelayTap(NamedTuple):
    """A delayed input tap of every channel: gain ``e`` and delay ``delay`` (steps, ``>= 0``), real
    ``(...)``, read through a hat window of half-width ``width >= 1`` (a float shared by the batch)."""
    e: Any
    delay: Any
    width: float = 1.0


def check_width(width):
    """``width`` as a float, or ``ValueError`` unless it is finite and ``>= 1``."""
    w = float(width)
    if not (math.isfinite(w) and w >= 1.0):
        raise ValueError(f"the tap window's half-width must be a finite number >= 1 (1: linear interpolation), "
                         f"got {width!r}")
    return w


def tap_span(width):
    """``J = ceil(2 width) + 1``: the number of integer offsets a window of half-width ``width`` can cover."""
    return int(math.ceil(2.0 * check_width(width))) + 1


def _hat(s, width):
    """Offsets ``j`` (real, ``(..., J)``, first ``floor(s - width) + 1``), the unnormalized hat there and
    its sum ``Z`` ``(...)`` over all integers (the hat is zero outside these ``J`` offsets)."""
    xp = get_namespace(s)
    j = (xp.floor(s - width) + 1)[..., None] + _arange(xp, tap_span(width), s)   # (..., J)
    hat = xp.clip(1 - xp.abs(j - s[..., None]) / width, 0.0, None)            # (..., J)
    return j, hat, xp.sum(hat, axis=-1)                                       # Z > 0 for width >= 1


def tap_support(s, width):
    """The window's offsets and weights before causality: ``j`` int64 ``(..., J)`` (``J`` of
    :func:`tap_span`, first ``floor(s - width) + 1``) and real ``w`` ``(..., J)`` (zero outside the hat),
    normalized by ``Z(s, width)``; ``s`` real ``(...)``. Offsets may be negative: drop them (or use
    :func:`tap_weights`) for a causal read."""
    xp = get_namespace(s)
    j, hat, Z = _hat(s, check_width(width))
    return xp.astype(j, xp.int64), hat / Z[..., None]


def tap_weights(s, width, n):
    """Dense causal weights ``w_j``, ``j = 0 .. n-1``: real ``(..., n)`` (differentiable in ``s``)."""
    xp = get_namespace(s)
    width = check_width(width)
    _, _, Z = _hat(s, width)                                         # (...)
    j = _arange(xp, n, s)                                           # (n,)
    hat = xp.clip(1 - xp.abs(j - s[..., None]) / width, 0.0, None)  # (..., n)
    return hat / Z[..., None]


def _arange(xp, n, like):
    return xp.arange(n, dtype=like.dtype, device=None if is_numpy(xp) else like.device)


def tap_kernel(e, s, width, L):
    """The tap's contribution ``e_c w_{c,t}`` to the convolution kernel: real ``(..., L)``.

    Parameters
    ----------
    e, s : real ``(...)``: gains and delays (steps).
    width : float ``>= 1``; L : int.

    Examples
    --------
    >>> import numpy as np
    >>> tap_kernel(np.array([2.0]), np.array([1.25]), 1.0, 4)     # linear interpolation at 1.25
    array([[0. , 1.5, 0.5, 0. ]])
    """
    return e[..., None] * tap_weights(s, width, L)


def tap_transfer(e, s, width, z):
    """``e W(z) = e sum_{j >= 0} w_j z^-j`` at complex points ``z`` ``(F,)``: complex ``(..., F)``."""
    xp = get_namespace(s, z)
    j, w = tap_support(s, width)                                    # (..., J)
    w = xp.where(j >= 0, w, xp.zeros_like(w))                       # causal part
    zj = xp.exp(-xp.astype(j, z.real.dtype)[..., None] * xp.log(z))  # (..., J, F)  z^-j
    return xp.astype(e, z.dtype)[..., None] * xp.sum(xp.astype(w, z.dtype)[..., None] * zj, axis=-2)


def tap_filter(e, s, width, x):
    """The tap's output ``e_c sum_j w_j x_{c,t-j}`` in the time domain (``x_{t<0} = 0``).

    ``e, s`` real ``(C,)`` or scalars, ``x`` real ``(..., C, L)`` (``(..., L)`` for scalars): real, the
    shape of ``x``. One gather per window offset, ``O(J L)`` per channel (``J`` of :func:`tap_span`).
    """
    xp = get_namespace(x, s)
    s = xp.reshape(xp.astype(_arr(xp, s), x.dtype), (-1,))          # (C,)
    e = xp.reshape(xp.astype(_arr(xp, e), x.dtype), (-1,))          # (C,)
    j, w = tap_support(s, width)                                    # (C, J)
    L = x.shape[-1]
    t = xp.arange(L, dtype=xp.int64, device=None if is_numpy(xp) else x.device)
    y = xp.zeros(x.shape, dtype=x.dtype, device=None if is_numpy(xp) else x.device)
    for i in range(j.shape[-1]):
        src = t - j[:, i, None]                                     # (C, L) index of x_{t - j}
        ok = (src >= 0) & (j[:, i, None] >= 0)                      # (C, L) causal, in range
        idx = xp.broadcast_to(xp.where(ok, src, 0), x.shape)        # (..., C, L)
        xs = xp.take_along_axis(x, idx, axis=-1)                    # (..., C, L)
        y = y + xp.where(ok, w[:, i, None] * xs, xp.zeros_like(xs))
    return e[:, None] * y if x.ndim >= 2 and s.shape[0] == x.shape[-2] else e * y


def _arr(xp, v):
    return v if hasattr(v, "shape") else xp.asarray(v)
