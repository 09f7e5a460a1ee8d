"""The delayed input tap: a pure, echo-free delay read through a window (docs/theory.md §8).

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

:class:`DelayTap` is the tap as a discrete system (kernel, transfer function, frequency response,
simulation). It composes with a :class:`~ddesys.DiscreteDelaySystem` as a sum, ``sys + DelayTap(e, s,
width)`` (a :class:`~ddesys.SumSystem`), rather than being a constructor flag of it.
"""
from __future__ import annotations

import math
import numpy as np

from ._array import get_namespace, is_numpy, real_dtype_of, to_numpy
from ._pairs import refuse_tap
from . import cpu
from .budget import check_bytes, resolve
from ._validate import MAX_DELAY_STEPS, as_array, check_batch, check_dt, check_length, check_real_dtype
from .lti import DelayLTI
from .sum_system import Summable

__all__ = ["DelayTap", "check_width", "offset_fir", "tap_filter", "tap_kernel", "tap_span", "tap_support",
           "tap_transfer", "tap_weights"]

KERNEL_METHODS = ("fft", "recurrence")
TAP_BYTES = 48      # working memory per window offset and channel (offsets, hat, weights; per point in transfer)


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


def _check_count(n, name):
    """``n`` a non-negative integer (a number of samples), else ``ValueError`` naming ``name``."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"{name} must be a non-negative integer (a number of samples), got {n!r}")
    return int(n)


def tap_weights(s, width, n):
    """Dense causal weights ``w_j``, ``j = 0 .. n-1``: real ``(..., n)`` (differentiable in ``s``); ``n`` a
    non-negative integer (else ``ValueError``)."""
    xp = get_namespace(s)
    n = _check_count(n, "n")
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
    return e[..., None] * tap_weights(s, width, _check_count(L, "L"))


def tap_transfer(e, s, width, z):
    """``e W(z) = e sum_{j >= 0} w_j z^-j`` at complex points ``z`` ``(F,)``: complex ``(..., F)``."""
    xp = get_namespace(s, z)
    j, w = tap_support(s, width)                                    # (..., J)
    w = xp.where(j >= 0, w, xp.zeros_like(w))                       # causal part
    zj = xp.exp(-xp.astype(j, z.real.dtype)[..., None] * xp.log(z))  # (..., J, F)  z^-j
    return xp.astype(e, z.dtype)[..., None] * xp.sum(xp.astype(w, z.dtype)[..., None] * zj, axis=-2)


def tap_filter(e, s, width, x):
    """The tap's output ``e_c sum_j w_j x_{c,t-j}`` in the time domain (``x_{t<0} = 0``).

    ``e, s`` real ``(C,)`` or scalars (a scalar serves every channel), ``x`` real ``(..., C, L)``
    (``(..., L)`` for scalars): real, the shape of ``x``. Delays ``s >= 0`` and finite (in steps). One
    gather per window offset that reaches the input, ``O(min(J, L) L)`` per channel (``J`` of
    :func:`tap_span`). ``ValueError`` naming the argument for a negative or non-finite delay, or gains,
    delays and ``x`` of different channel counts.
    """
    xp = get_namespace(x, s)
    s = xp.reshape(xp.astype(_arr(xp, s), x.dtype), (-1,))          # (C,) or (1,)
    e = xp.reshape(xp.astype(_arr(xp, e), x.dtype), (-1,))          # (C,) or (1,)
    C = _check_channels(e, s, x, check_values=is_numpy(xp))
    if s.shape[0] != C:
        s = xp.broadcast_to(s, (C,))
    j, w = tap_support(s, width)                                    # (C, J)
    L = x.shape[-1]
    t = xp.arange(L, dtype=xp.int64, device=None if is_numpy(xp) else x.device)
    y = xp.zeros(x.shape, dtype=x.dtype, device=None if is_numpy(xp) else x.device)
    first, last = 0, j.shape[-1]
    if last > L and j.shape[0]:                 # a window wider than the input: the offsets in [0, L) only
        j0 = to_numpy(j[:, 0])
        first, last = max(0, -int(j0.max())), min(last, L - int(j0.min()))
    for i in range(first, last):
        src = t - j[:, i, None]                                     # (C, L) index of x_{t - j}
        ok = (src >= 0) & (j[:, i, None] >= 0)                      # (C, L) causal, in range
        idx = xp.broadcast_to(xp.where(ok, src, 0), x.shape)        # (..., C, L)
        xs = xp.take_along_axis(x, idx, axis=-1)                    # (..., C, L)
        y = y + xp.where(ok, w[:, i, None] * xs, xp.zeros_like(xs))
    return e[:, None] * y if C > 1 else e * y


def _check_channels(e, s, x, check_values=True):
    """The channel count ``C`` of :func:`tap_filter`'s gains ``e`` and delays ``s`` (``(C,)`` or ``(1,)``) and
    input ``x`` ``(..., C, L)``, after checking the delays (finite, ``>= 0``; NumPy only: on a device the
    check would copy the delays to the host, and the layer's delays lie in its range by construction);
    ``ValueError`` naming the misfit."""
    sh = to_numpy(s) if check_values else np.zeros(0)
    if sh.size and not (np.all(np.isfinite(sh)) and sh.min() >= 0):
        raise ValueError(f"tap_filter: the delays s must be finite and >= 0 steps (a tap reads the past), got "
                         f"{sh.tolist() if sh.size <= 8 else f'min {sh.min():g}'}")
    ne, ns = e.shape[0], s.shape[0]
    if ne != ns and 1 not in (ne, ns):
        raise ValueError(f"tap_filter: e holds {ne} gains but s holds {ns} delays: give one per channel (or a "
                         "scalar for all)")
    C = max(ne, ns)
    if C > 1 and (x.ndim < 2 or x.shape[-2] != C):
        raise ValueError(f"tap_filter: e and s describe {C} channels but x has shape {tuple(x.shape)}; x must be "
                         f"(..., {C}, L)")
    return C


def offset_fir(x, j, we, P=0):
    """``y[b, c, t] = sum_i we[c, i] x[b, c, P + t - j[c, i]]`` over the terms whose index lies in
    ``[0, P + L)`` (the others are zero): the tap's output from its offsets ``j`` and weights ``we``
    (``(C, J)``, e.g. the decode constants) over inputs ``x`` ``(B, C, P + L)`` whose first ``P`` columns
    precede the chunk. NumPy, real; compiled when Numba is available (:mod:`ddesys.cpu.tap_loops`), one
    pass, ``O(B C L J)``.
    Returns ``(B, C, L)`` in ``x``'s dtype."""
    x = np.ascontiguousarray(x)
    j = np.ascontiguousarray(j, np.int64)
    we = np.ascontiguousarray(we, x.dtype)
    B, C, T = x.shape
    if j.shape != we.shape or j.ndim != 2 or j.shape[0] != C or not 0 <= P <= T:
        raise ValueError(f"offset_fir: x (B, C, P + L) = {x.shape}, j and we (C, J), P = {P}: got j {j.shape}, "
                         f"we {we.shape}")
    y = np.zeros((B, C, T - P), x.dtype)
    if cpu.available():
        from .cpu.tap_loops import offset_fir_into
        offset_fir_into(x, j, we, P, y)
        return y
    t = np.arange(T - P)
    for i in range(j.shape[1]):
        src = P + t[None, :] - j[:, i, None]                          # (C, L)
        ok = (src >= 0) & (src < T)
        at = np.broadcast_to(np.clip(src, 0, T - 1), y.shape)
        y += np.where(ok, we[:, i, None], 0) * np.take_along_axis(x, at, -1)
    return y


def _arr(xp, v):
    return v if hasattr(v, "shape") else xp.asarray(v)


class DelayTap(Summable, DelayLTI):
    """A batch of delayed input taps as a discrete FIR system::

        y_t = e sum_{j >= 0} w_j x_{t-j},    w_j = hat((j - delay) / width) / Z   (see the module docstring)

    Parameters
    ----------
    e : array_like, real ``(...)``
        Gains.
    delay : array_like, real ``(...)``
        Delays in steps, ``0 <= delay <= MAX_DELAY_STEPS``, broadcasting against ``e``.
    width : float, default 1.0
        Half-width of the hat window, finite and ``>= 1`` (1: linear interpolation), shared by the batch.
    dt : True or float, default True (keyword only)
        The step in time units, or ``True`` when unspecified (as :class:`~ddesys.DiscreteDelaySystem`).

    Attributes
    ----------
    e, delay : real ``(...)``
        Broadcast to the batch shape; ``width`` float; ``dt``.

    Raises
    ------
    ValueError
        Non-finite or negative delays, delays above ``MAX_DELAY_STEPS``, a width that is not finite or
        below 1, shapes that do not broadcast.
    ddesys.budget.BudgetError
        A window whose offsets over the batch (``2 width + 1`` per channel, :data:`TAP_BYTES` each) exceed
        the memory budget (:mod:`ddesys.budget`); :meth:`transfer` goes in batches of points within it.
    TypeError
        Complex or non-numeric ``e`` / ``delay``.

    Notes
    -----
    An FIR system (``has_poles = False``): no poles (only trivial ones at ``z = 0``), so it is stable and adds
    nothing to the poles or the stability of a sum it is part of. Its kernel is exact (no contour): the ``method``,
    ``eps`` and ``M`` options of :meth:`kernel` are accepted so that a :class:`~ddesys.SumSystem` can
    pass them to every part. Immutable, like every ddesys system.

    Examples
    --------
    >>> import numpy as np
    >>> from ddesys import DelayTap, DiscreteDelaySystem
    >>> tap = DelayTap(e=[2.0], delay=[1.25])               # linear interpolation at 1.25 steps
    >>> tap.kernel(4)
    array([[0. , 1.5, 0.5, 0. ]])
    >>> sys = DiscreteDelaySystem(lam=[0.5], mu=[0.25], bbar=[1.0], c=[0.5], delay=4.0) + DelayTap(1.0, 2.0)
    >>> type(sys).__name__, sys.tap
    ('SumSystem', DelayTap(batch_shape=(), delay in [2, 2], width=1))
    >>> bool(sys.is_stable()), np.round(sys.kernel(4), 4)      # stability: the delay system's alone
    (True, array([1.   , 0.5  , 1.25 , 0.125]))
    """

    has_poles = False

    def __init__(self, e, delay, width=1.0, *, dt=True):
        xp = get_namespace(e, delay)
        e = as_array(xp, e, "tap gain e", "real")
        s = as_array(xp, delay, "tap delay", "real")
        batch = check_batch("tap delay", s.shape, e.shape)
        sn = to_numpy(s)
        if not (np.all(sn >= 0) and np.all(sn <= MAX_DELAY_STEPS)):
            raise ValueError(f"tap delay must be in [0, MAX_DELAY_STEPS = {MAX_DELAY_STEPS}] steps, got min "
                             f"{float(sn.min()):.6g}, max {float(sn.max()):.6g}")
        self.xp, self.dt = xp, check_dt(dt)
        self.e, self.delay = xp.broadcast_to(e, tuple(batch)), xp.broadcast_to(s, tuple(batch))
        self.width = check_width(width)
        self._support_bytes(0, "the delayed input tap")
        self._freeze()

    def _support_bytes(self, points, what):
        """The bytes of the window's offsets and weights (and of ``points`` evaluations at each) over the
        batch: checked against the memory budget (:mod:`ddesys.budget`); returns the per-point bytes."""
        channels, span = int(np.prod(self.batch_shape, dtype=np.int64)), tap_span(self.width)
        per = max(1, channels) * span * TAP_BYTES
        check_bytes(per * (1 + points), f"{what}: a window of half-width {self.width:g} ({span} offsets per "
                    f"channel, {channels} channel(s))", "use a narrower window (the layer's taps keep it within a "
                    "few history lengths) or fewer channels")
        return per

    @property
    def batch_shape(self):
        """Shape ``(...)`` of the batch of channels."""
        return tuple(self.e.shape)

    def __repr__(self):
        s = to_numpy(self.delay)
        rng = f"[{float(s.min()):.4g}, {float(s.max()):.4g}]" if s.size else "[]"
        step = "" if self.dt is True else f", dt={self.dt:.6g}"
        return f"DelayTap(batch_shape={self.batch_shape}, delay in {rng}, width={self.width:.4g}{step})"

    # ------------------------------------------------------------------ stability: an FIR is stable
    def _is_stable_exact(self, max_bytes=None):
        return np.ones(self.batch_shape, dtype=bool) if self.batch_shape else np.True_

    def _is_stable_sufficient(self):
        return self._is_stable_exact()

    # ------------------------------------------------------------------ responses
    def kernel(self, L, method="fft", eps="auto", M=None, dtype=None, compute_dtype=None):
        """The tap's kernel ``e w_t``, ``t = 0 .. L-1``, exact.

        Parameters
        ----------
        L : int
            Kernel length.
        method : {"fft", "recurrence"}, default "fft"
            Checked, then ignored: the tap's kernel is exact. This and the next three are the delay
            system's options, accepted so that a :class:`~ddesys.SumSystem` passes them to every part.
        eps : "auto" or float, default "auto"
            Ignored.
        M : int, optional
            Ignored.
        compute_dtype : float32 or float64, optional
            Checked, then ignored.
        dtype : float32 or float64, optional
            Real output dtype (default: that of ``e``).

        Returns
        -------
        ndarray, real ``(..., L)``

        Raises
        ------
        ValueError
            A bad ``L`` or ``method``.
        TypeError
            ``dtype`` or ``compute_dtype`` not float32 / float64.
        """
        L = check_length(L)
        if method not in KERNEL_METHODS:
            raise ValueError(f"method must be one of {KERNEL_METHODS}, got {method!r}")
        xp = self.xp
        if compute_dtype is not None:
            check_real_dtype(xp, compute_dtype, "compute_dtype")
        out = check_real_dtype(xp, dtype, "dtype") if dtype is not None else real_dtype_of(xp, self.e.dtype)
        return xp.astype(tap_kernel(self.e, self.delay, self.width, L), out)

    def impulse(self, L, **kernel_kw):
        """Impulse response: the kernel (an FIR tap has no feedthrough of its own).

        Parameters
        ----------
        L : int
            Length.
        **kernel_kw
            Passed to :meth:`kernel`.

        Returns
        -------
        ndarray, real ``(..., L)``

        Raises
        ------
        ValueError, TypeError
            As :meth:`kernel`.
        """
        return self.kernel(L, **kernel_kw)

    def transfer(self, z):
        """The transfer function ``e W(z) = e sum_{j >= 0} w_j z^-j``.

        Parameters
        ----------
        z : array_like, complex ``(F,)``
            Nonzero points.

        Returns
        -------
        ndarray, complex ``(..., F)``

        Raises
        ------
        ValueError
            A ``z`` holding 0.
        ddesys.budget.BudgetError
            The window's offsets at one point exceed the memory budget.
        """
        xp = self.xp
        z = xp.asarray(z, dtype=xp.complex128 if self.e.dtype == xp.float64 else xp.complex64)
        z = xp.reshape(z, (-1,))
        if bool(xp.any(z == 0)):
            raise ValueError("z must not contain 0 (an FIR tap has its trivial poles there)")
        F = z.shape[0]
        per = self._support_bytes(1, "DelayTap.transfer")               # one point at a time fits, or refused
        step = max(1, resolve() // per - 1)                                # points per batch within the budget
        if F <= step:
            return tap_transfer(self.e, self.delay, self.width, z)
        return xp.concat([tap_transfer(self.e, self.delay, self.width, z[i:i + step]) for i in range(0, F, step)],
                         axis=-1)

    def freqresp(self, omega):
        """The frequency response ``e W(e^{i omega})``.

        Parameters
        ----------
        omega : array_like, real ``(F,)``
            Radians per step.

        Returns
        -------
        ndarray, complex ``(..., F)``

        Raises
        ------
        ValueError, TypeError
            Non-finite or complex ``omega``.
        """
        xp = self.xp
        omega = as_array(xp, omega, "omega", "real")
        return self.transfer(xp.exp(1j * xp.astype(xp.reshape(omega, (-1,)), xp.complex128)))

    def simulate(self, x):
        """The tap's output (inputs zero before ``t = 0``).

        Parameters
        ----------
        x : array_like, real ``(..., L)``
            Inputs; the batch part broadcasts with the tap's batch shape.

        Returns
        -------
        ndarray, real ``(batch, L)``
            In ``x``'s dtype; ``batch`` the broadcast batch shape.

        Raises
        ------
        TypeError
            Complex ``x``.
        ValueError
            Non-finite ``x``, no time axis, a batch that does not broadcast.
        """
        xp = self.xp
        if getattr(x, "dtype", None) is not None and "complex" in str(x.dtype):
            raise TypeError("simulate(x): x must be real")
        x = as_array(xp, x, "x", "real")
        if x.ndim < 1:
            raise ValueError("x must have a trailing time axis (shape (..., L))")
        batch = tuple(check_batch("x (batch part)", x.shape[:-1], self.batch_shape))
        L, B = x.shape[-1], int(np.prod(batch, dtype=np.int64))
        flat = lambda a, tail: xp.reshape(xp.broadcast_to(a, batch + tail), (B,) + tail)  # noqa: E731
        y = tap_filter(flat(self.e, ()), flat(self.delay, ()), self.width, xp.astype(flat(x, (L,)), self.e.dtype))
        return xp.reshape(xp.astype(y, x.dtype), batch + (L,))

    def to_statespace(self, index=None):
        """Refused: the FIR tap is not a state-space term.

        Parameters
        ----------
        index : int or tuple of int, optional
            Accepted for :meth:`ddesys.DiscreteDelaySystem.to_statespace`'s signature.

        Raises
        ------
        ValueError
            Always.
        """
        refuse_tap(self)
