"""Discretized delayed linear systems: the object that kernels, simulations and stability work on."""
from __future__ import annotations

import warnings

import numpy as np

from . import stability as _st
from .charpoly import poly_coefficients
from ._array import get_namespace, is_numpy, real_dtype_of, to_numpy, unit_roundoff
from ._validate import (MAX_DELAY_STEPS, as_array, broadcast_modes, check_batch, check_delay, check_length,
                        check_real_dtype)
from .contour import Contour, choose_contour
from .interpolation import split_delay
from .recurrence import run_recurrence
from .tap import DelayTap, check_width, tap_filter, tap_kernel, tap_transfer
from .transfer import synthesize_kernel, transfer_function


class DiscreteDelaySystem:
    """A batch of discrete diagonal delayed systems (docs/theory.md §2)::

        h_t = lam h_{t-1} + mu ((1 - alpha) h_{t-k} + alpha h_{t-k-1}) + bbar x_t,   h_{t<0} = 0
        y_t = 2 Re(sum_n c_n h_{n,t}) + d x_t,          delay = k + alpha steps

    Parameters
    ----------
    lam, mu, bbar, c : array_like, complex ``(..., N2)``
        ``N2`` stored modes per channel (conjugates implied, so the state size is ``N = 2 N2`` and the
        output is real). NumPy or CuPy arrays.
    delay : array_like, real ``(...)``
        Delay in steps, ``1 <= delay <= MAX_DELAY_STEPS`` (``2**31 - 1``: the integer part indexes the
        history in int64/int32 arithmetic), broadcasting against the batch.
    d : array_like, real ``(...)``, default 0.0
        Feedthrough.
    tap : DelayTap or (e, delay[, width]), optional
        A delayed input tap ``y_t += e sum_j w_j x_{t-j}`` (:mod:`ddesys.tap`, docs/theory.md §9): gain
        ``e`` and delay (steps, ``>= 0``) real ``(...)`` broadcasting against the batch, window half-width
        ``width >= 1`` (1: linear interpolation). An FIR term: poles and stability are those without it.

    Attributes
    ----------
    lam, mu, bbar, c : complex ``(..., N2)``
        The parameters, broadcast to the batch shape ``(...)`` at construction.
    delay, d : real ``(...)``
        Likewise.
    k, alpha : ``(...)``
        The delay split as ``k = floor(delay)`` (int64) and ``alpha = delay - k`` in ``[0, 1)``.

    Raises
    ------
    ValueError
        Bad input (non-finite values, delay < 1 or above the limit, shapes that do not broadcast, a mode
        parameter without its trailing axis or with no mode), naming the argument.
    TypeError
        A complex delay or feedthrough, non-numeric input.

    See Also
    --------
    DelaySystem.discretize : the discrete system of a continuous one.
    ddesys.ds4d_discrete : the DS4D layer's parameters as such a system.

    Notes
    -----
    Memory is checked where it is spent: :meth:`simulate` needs ``O(batch L)`` whatever the delay; the
    exact stability test needs ``O(k)`` per mode and has a budget (``max_bytes``).

    Examples
    --------
    >>> import numpy as np
    >>> from ddesys import DiscreteDelaySystem
    >>> sys = DiscreteDelaySystem(lam=[0.9, 0.5j], mu=[0.05, 0.1], bbar=[1.0, 1.0], c=[0.5, 0.25],
    ...                           delay=3.5)
    >>> sys
    DiscreteDelaySystem(batch_shape=(), n_modes=2, delay in [3.5, 3.5])
    >>> int(sys.k), float(sys.alpha)                      # delay = k + alpha
    (3, 0.5)
    >>> bool(sys.is_stable())
    True
    >>> np.round(sys.kernel(6), 4)
    array([1.5   , 0.9   , 0.685 , 0.779 , 0.7824, 0.6775])
    """

    def __init__(self, lam, mu, bbar, c, delay, d=0.0, tap=None):
        xp = get_namespace(lam, mu, bbar, c, delay, d)
        named = {n: as_array(xp, v, n, "complex") for n, v in
                 dict(lam=lam, mu=mu, bbar=bbar, c=c).items()}
        full = broadcast_modes(named)
        delay = as_array(xp, delay, "delay", "real")
        d = as_array(xp, d, "d", "real")
        batch = check_batch("delay", delay.shape, full[:-1])
        batch = check_batch("d", d.shape, batch)
        full = tuple(batch) + (full[-1],)
        if full[-1] == 0:
            raise ValueError("lam, mu, bbar, c need at least one mode (trailing axis N2 >= 1)")
        check_delay(to_numpy(delay), "delay")
        self.xp = xp
        self.lam, self.mu, self.bbar, self.c = (xp.broadcast_to(named[n], full) for n in ("lam", "mu", "bbar", "c"))
        self.delay = xp.broadcast_to(delay, tuple(batch))
        self.d = xp.broadcast_to(d, tuple(batch))
        self.k, self.alpha = split_delay(self.delay)
        self.tap = None if tap is None else self._check_tap(xp, tap, tuple(batch))
        self._stable = None

    @staticmethod
    def _check_tap(xp, tap, batch):
        if not isinstance(tap, (tuple, list)) or not 2 <= len(tap) <= 3:
            raise TypeError(f"tap must be a DelayTap or a tuple (e, delay[, width]), got {type(tap).__name__}")
        tap = DelayTap(*tap)
        e = as_array(xp, tap.e, "tap gain e", "real")
        s = as_array(xp, tap.delay, "tap delay", "real")
        check_batch("tap gain e", e.shape, batch)
        check_batch("tap delay", s.shape, batch)
        sn = to_numpy(s)
        if not (np.all(np.isfinite(sn)) and np.all(sn >= 0) and np.all(sn <= MAX_DELAY_STEPS)):
            raise ValueError(f"tap delay must be finite and in [0, MAX_DELAY_STEPS = {MAX_DELAY_STEPS}] steps")
        return DelayTap(xp.broadcast_to(e, batch), xp.broadcast_to(s, batch), check_width(tap.width))

    # ------------------------------------------------------------------ shapes
    @property
    def batch_shape(self):
        """Shape ``(...)`` of the batch of channels."""
        return tuple(self.lam.shape[:-1])

    @property
    def n_modes(self):
        """Stored complex modes per channel, ``N2``."""
        return int(self.lam.shape[-1])

    def __repr__(self):
        s = to_numpy(self.delay)
        rng = f"[{float(s.min()):.4g}, {float(s.max()):.4g}]" if s.size else "[]"
        return f"DiscreteDelaySystem(batch_shape={self.batch_shape}, n_modes={self.n_modes}, delay in {rng})"

    def _host(self):
        return (to_numpy(self.lam), to_numpy(self.mu), to_numpy(self.k)[..., None], to_numpy(self.alpha)[..., None])

    # ------------------------------------------------------------------ stability
    def stability_margin(self):
        """Sufficient stability margin ``1 - |lam| - |mu|`` per mode (docs/theory.md §3).

        Returns
        -------
        ndarray, real ``(..., N2)``
            Positive: the mode is certified stable for any delay.

        See Also
        --------
        is_stable, ddesys.stability_margin
        """
        return _st.stability_margin(to_numpy(self.lam), to_numpy(self.mu))

    def is_stable(self, exact=False, max_bytes=None):
        """Whether every mode of each channel is stable (docs/theory.md §3).

        Parameters
        ----------
        exact : bool, default False
            ``False``: the sufficient criterion ``|lam| + |mu| < 1`` (may say False for a stable
            system). ``True``: all roots of the characteristic polynomial strictly inside the unit
            disk, by the certified winding-number count (``O(k)`` per mode, see
            :mod:`ddesys.stability`), run only for modes the sufficient criterion does not certify;
            the answer is cached.
        max_bytes : int or None
            Memory budget of the exact test (default ``ddesys.stability.EXACT_MAX_BYTES``, 1 GiB:
            delays up to about a million steps).

        Returns
        -------
        ndarray of bool ``(...)``
            Per channel: all modes stable.

        Raises
        ------
        ValueError
            ``exact=True`` and a mode needs more than ``max_bytes`` (saying the size, before
            allocating).

        See Also
        --------
        stability_margin, spectral_radius, ddesys.is_stable_exact

        Examples
        --------
        A system outside the sufficient diamond can still be stable; this one is not:

        >>> from ddesys import DiscreteDelaySystem
        >>> sys = DiscreteDelaySystem(lam=[0.5], mu=[0.7], bbar=[1.0], c=[1.0], delay=2.0)
        >>> bool(sys.is_stable()), bool(sys.is_stable(exact=True))
        (False, False)
        >>> round(float(sys.spectral_radius()), 4)
        1.1232
        """
        if not exact:
            return np.all(self.stability_margin() > 0, axis=-1)
        if self._stable is None:
            self._stable = _st.is_stable_exact(*self._host(), max_bytes=max_bytes)
        return np.all(self._stable, axis=-1)

    def spectral_radius(self, per_mode=False, max_bytes=None):
        """Largest root modulus of the characteristic polynomial (docs/theory.md §3).

        Parameters
        ----------
        per_mode : bool, default False
            Return the radius of every mode instead of the largest per channel.
        max_bytes : int or None
            Memory budget of the root counts (see :meth:`is_stable`).

        Returns
        -------
        ndarray, real ``(...)``
            (``(..., N2)`` with ``per_mode``).

        Raises
        ------
        ValueError
            A mode whose root count needs more than ``max_bytes``.
        """
        r = _st.spectral_radius(*self._host(), max_bytes=max_bytes)
        return r if per_mode else r.max(axis=-1)

    def poles(self, max_degree=4096):
        """All ``k + 1`` roots of every mode's characteristic polynomial (companion eigenvalues, ``O(k^3)``).

        Parameters
        ----------
        max_degree : int, default 4096
            Largest polynomial degree ``k + 1`` accepted.

        Returns
        -------
        list of ndarray
            Over the flattened (channel, mode) pairs: complex ``(k + 1,)`` roots.

        Raises
        ------
        ValueError
            A degree above ``max_degree``: use :meth:`spectral_radius` or ``is_stable(exact=True)``,
            which are ``O(k)``.
        """
        lam, mu, k, alpha = (np.broadcast_to(a, self.lam.shape).ravel() for a in self._host())
        if k.max(initial=0) + 1 > max_degree:
            raise ValueError(f"poles(): degree {int(k.max()) + 1} exceeds max_degree={max_degree}; use "
                             "spectral_radius() or is_stable(exact=True), which are O(k)")
        out = []
        for lm, m, kk, a in zip(lam, mu, k, alpha):
            out.append(np.roots(poly_coefficients(lm, m, kk, a)))
        return out

    def decay_bound(self):
        """An upper bound on the spectral radius per channel; drives the automatic contour.

        Returns
        -------
        ndarray, real ``(...)``
            The Rouche bound (:func:`ddesys.radius_bound`), or the exact radius for modes where that
            bound is ``>= 1``.
        """
        lam, mu, k, alpha = self._host()
        r = _st.radius_bound(lam, mu, k, alpha)
        loose = r >= 1
        if np.any(loose):
            kb, ab = np.broadcast_to(k, r.shape), np.broadcast_to(alpha, r.shape)
            r[loose] = _st.spectral_radius(lam[loose], mu[loose], kb[loose], ab[loose]) * (1 + 1e-9)
        return r.max(axis=-1)

    # ------------------------------------------------------------------ frequency domain
    def transfer(self, z):
        """Exact transfer function ``K(z)`` (docs/theory.md §4), ``d`` included.

        Parameters
        ----------
        z : array_like, complex ``(F,)``
            Evaluation points (flattened if not 1-D), nonzero.

        Returns
        -------
        ndarray, complex ``(..., F)``

        Raises
        ------
        ValueError
            ``z`` contains 0 (a pole of order ``k + 1``).

        See Also
        --------
        freqresp, ddesys.transfer_function
        """
        xp = self.xp
        z = xp.asarray(z, dtype=self.lam.dtype)
        if z.ndim != 1:
            z = xp.reshape(z, (-1,))
        if bool(xp.any(z == 0)):
            raise ValueError("z must not contain 0 (the transfer function has a pole of order k+1 there)")
        H = transfer_function(self.lam, self.mu, self.bbar, self.c, self.k, self.alpha, self.d, z)
        if self.tap is not None:
            H = H + tap_transfer(self.tap.e, self.tap.delay, self.tap.width, z)
        return H

    def freqresp(self, omega):
        """Frequency response ``K(e^{i omega})`` on the unit circle (docs/theory.md §4).

        Parameters
        ----------
        omega : array_like, real ``(F,)``
            Angular frequencies in radians per step.

        Returns
        -------
        ndarray, complex ``(..., F)``

        See Also
        --------
        transfer

        Examples
        --------
        The DC gain is the sum of the impulse response:

        >>> import numpy as np
        >>> from ddesys import DiscreteDelaySystem
        >>> sys = DiscreteDelaySystem(lam=[0.5], mu=[0.25], bbar=[1.0], c=[0.5], delay=4.0)
        >>> H = sys.freqresp([0.0, np.pi])
        >>> H.shape, np.round(H.real, 4)
        ((2,), array([4. , 0.8]))
        >>> round(float(sys.impulse(200).sum()), 4)
        4.0
        """
        xp = self.xp
        omega = as_array(xp, omega, "omega", "real")
        return self.transfer(xp.exp(1j * xp.astype(xp.reshape(omega, (-1,)), self.lam.dtype)))

    # ------------------------------------------------------------------ time domain
    def kernel(self, L, method="fft", eps="auto", M=None, dtype=None, compute_dtype=None, return_contour=False):
        """The length-``L`` real convolution kernel ``K_t = 2 Re sum_n c_n g_{n,t}`` (``d`` excluded; the
        tap's ``e w_t`` included).

        Parameters
        ----------
        L : int
            Kernel length.
        method : {"fft", "recurrence"}
            Contour-shifted synthesis (docs/theory.md §5) or the exact recurrence.
        eps : "auto" or float
            Aliasing suppression ``rho^M`` in ``(0, 1)``, or ``"auto"``: chosen per channel from the
            working precision and the system's decay to minimize the predicted error
            (:mod:`ddesys.contour`; about 1e-13 relative in float64).
        M : int or None
            FFT length ``>= 2L``; default ``nextpow2(2L)``, or ``nextpow2(4L)`` when ``eps="auto"``
            predicts a larger error than the precision's tolerance at ``2L`` (slow modes).
        dtype : float32 or float64, optional
            Real output dtype (default: that of the parameters).
        compute_dtype : float32 or float64, optional
            Real dtype of the synthesis. Default float64: the synthesis costs ``O(M N2)`` per channel
            and does not depend on the batch, and float64 removes the float32 restoration floor
            (docs/theory.md §5). Pass float32 for the fast/low-precision path.
        return_contour : bool, default False
            Also return the :class:`~ddesys.contour.Contour` used (``method="fft"``).

        Returns
        -------
        K : ndarray, real ``(..., L)``
        contour : Contour
            Only with ``return_contour``.

        Raises
        ------
        ValueError
            An unstable system (the FFT kernel of a growing response does not exist), a bad
            ``eps``/``M``/``L``/``method``, a stability test over its memory budget (see
            :meth:`is_stable`).
        TypeError
            ``dtype`` or ``compute_dtype`` not float32/float64 (integer outputs are refused).

        See Also
        --------
        impulse : the kernel with ``d`` added at ``t = 0``.
        ddesys.choose_contour, ddesys.synthesize_kernel

        Examples
        --------
        >>> import numpy as np
        >>> from ddesys import DiscreteDelaySystem
        >>> sys = DiscreteDelaySystem(lam=[[0.9], [0.5]], mu=[0.05], bbar=[1.0], c=[0.5],
        ...                           delay=[3.5, 10.0])
        >>> K, contour = sys.kernel(16, return_contour=True)
        >>> K.shape, contour.rho.shape
        ((2, 16), (2,))
        >>> contour.M                    # nextpow2(4L): the slow channel has not decayed within 2L
        64
        >>> bool(np.allclose(K, sys.kernel(16, method="recurrence"), atol=1e-12))
        True
        """
        L = check_length(L)
        xp = self.xp
        out_dt = check_real_dtype(xp, dtype, "dtype") if dtype is not None else real_dtype_of(xp, self.lam.dtype)
        cdt = check_real_dtype(xp, compute_dtype, "compute_dtype") if compute_dtype is not None else xp.float64
        if method == "recurrence":
            K = self._kernel_recurrence(L)
            return xp.astype(K, out_dt)
        if method != "fft":
            raise ValueError(f"method must be 'fft' or 'recurrence', got {method!r}")
        try:
            stable = self.is_stable(exact=True)
        except ValueError as exc:
            raise ValueError(f"kernel(method='fft') needs the exact stability test, which refused: {exc}. "
                             "(is_stable(exact=True) caches its answer; method='recurrence' needs no test)") from None
        if not np.all(stable):
            bad = np.argwhere(~np.asarray(stable)).tolist()[:5] if np.ndim(stable) else "the only channel"
            raise ValueError(f"kernel(method='fft') asked of an unstable system ({bad}): its impulse "
                             "response grows, so no contour inside the unit disk represents it. "
                             "Use method='recurrence' for a finite-length response.")
        u = unit_roundoff(cdt)
        r = self.decay_bound()
        contour = choose_contour(L, r, u, eps=eps, M=M)
        cplx = xp.complex64 if cdt == xp.float32 else xp.complex128
        rho = xp.asarray(contour.rho, dtype=cdt)
        if not is_numpy(xp):
            rho = xp.asarray(rho, device=self.lam.device)
        K = synthesize_kernel(xp.astype(self.lam, cplx), xp.astype(self.mu, cplx),
                              xp.astype(self.c * self.bbar, cplx), self.k, self.alpha, L, contour.M, rho)
        if self.tap is not None:                     # the FIR tap adds exactly (no contour)
            K = K + xp.astype(tap_kernel(self.tap.e, self.tap.delay, self.tap.width, L), K.dtype)
        K = xp.astype(K, out_dt)
        return (K, contour) if return_contour else K

    def _kernel_recurrence(self, L):
        xp = self.xp
        x = xp.zeros(self.batch_shape + (L,), dtype=real_dtype_of(xp, self.lam.dtype))
        x[..., 0] = 1
        saved, self.d = self.d, xp.zeros_like(self.d)
        try:  # the finite-length response of an unstable system is what was asked: warn only on overflow
            return self._simulate(x, False, warn_unstable=False)
        finally:
            self.d = saved

    def impulse(self, L, **kernel_kw):
        """Impulse response of ``x -> y``: the kernel with ``d`` added at ``t = 0``.

        Parameters
        ----------
        L : int
            Length.
        **kernel_kw
            Passed to :meth:`kernel` (``method``, ``eps``, ``M``, ``dtype``, ``compute_dtype``).

        Returns
        -------
        ndarray, real ``(..., L)``

        Raises
        ------
        ValueError, TypeError
            As :meth:`kernel`.
        """
        K = self.kernel(L, **kernel_kw)
        K[..., 0] = K[..., 0] + self.d
        return K

    def simulate(self, x, return_states=False):
        """Run the exact recurrence (docs/theory.md §2) on real inputs, zero initial history.

        Parameters
        ----------
        x : array_like, real ``(..., L)``
            Inputs; the batch part broadcasts with the system's batch shape.
        return_states : bool, default False
            Also return the states.

        Returns
        -------
        y : ndarray, real ``(batch, L)``
            ``batch`` is the broadcast batch shape; ``x``'s dtype.
        h : ndarray, complex ``(batch, N2, L)``
            Only with ``return_states``.

        Raises
        ------
        TypeError
            Complex ``x``.
        ValueError
            Non-finite ``x``, a batch that does not broadcast, no time axis.

        Warns
        -----
        RuntimeWarning
            Once per call for a system that is not stable, naming the channels, their stability margin
            ``1 - |lam| - |mu|`` and spectral radius: nothing is checked when the sufficient criterion
            certifies every mode; otherwise the exact test runs (cached) when it costs no more than the
            simulation itself (or ``2**20`` samples). A non-finite output always warns.

        Notes
        -----
        NumPy: compiled with Numba (parallel over channels, complex128 states), or the vector path when
        Numba is absent. CuPy: the array module's vector path. Memory ``O(batch L)`` (``O(batch N2 L)``
        with ``return_states``) whatever the delay: a delay ``>= L`` is simply never read.

        Examples
        --------
        >>> import numpy as np
        >>> from ddesys import DiscreteDelaySystem
        >>> sys = DiscreteDelaySystem(lam=[[0.9], [0.5]], mu=[0.05], bbar=[1.0], c=[0.5],
        ...                           delay=[3.5, 10.0])
        >>> x = np.zeros((4, 2, 16)); x[..., 0] = 1            # (batch 4, channels 2, L)
        >>> y, h = sys.simulate(x, return_states=True)
        >>> y.shape, h.shape
        ((4, 2, 16), (4, 2, 1, 16))
        >>> bool(np.allclose(y[0], sys.impulse(16)))
        True
        """
        return self._simulate(x, return_states, warn_unstable=True)

    def _simulate(self, x, return_states, warn_unstable):
        xp = self.xp
        if getattr(x, "dtype", None) is not None and "complex" in str(x.dtype):
            raise TypeError("simulate(x): x must be real; a complex input has no meaning for the real "
                            "system (split it into real and imaginary parts)")
        x = as_array(xp, x, "x", "real")
        if x.ndim < 1:
            raise ValueError("x must have a trailing time axis (shape (..., L))")
        batch = check_batch("x (batch part)", x.shape[:-1], self.batch_shape)
        L = x.shape[-1]
        B = int(np.prod(batch, dtype=np.int64))
        flat = lambda a, tail: xp.reshape(xp.broadcast_to(a, tuple(batch) + tail), (B,) + tail)  # noqa: E731
        N2 = (self.n_modes,)
        res = run_recurrence(flat(self.lam, N2), flat(self.mu, N2), flat(self.bbar, N2), flat(self.c, N2),
                             flat(self.k, ()), flat(self.alpha, ()), flat(self.d, ()),
                             flat(x, (L,)), return_states=return_states)
        y = res[0] if return_states else res
        if self.tap is not None:
            y = y + tap_filter(flat(self.tap.e, ()), flat(self.tap.delay, ()), self.tap.width,
                               xp.astype(flat(x, (L,)), y.dtype))
        _warn_unstable(self, y, B * self.n_modes * L, warn_unstable)
        odt = x.dtype
        if return_states:
            return xp.reshape(xp.asarray(y, dtype=odt), tuple(batch) + (L,)), \
                xp.reshape(res[1], tuple(batch) + N2 + (L,))
        return xp.reshape(xp.asarray(y, dtype=odt), tuple(batch) + (L,))


def _warn_unstable(system, y, work, check_stability):
    """One ``RuntimeWarning`` for :meth:`DiscreteDelaySystem.simulate` (see its docstring)."""
    xp = system.xp
    nonfinite = int(xp.sum(xp.astype(~xp.isfinite(y), xp.int64))) if y.size else 0
    margin = system.stability_margin()                                  # (..., N2)
    uncertified = ~(margin > 0)
    unstable, skipped = None, False
    if check_stability and uncertified.any():
        k = np.broadcast_to(to_numpy(system.k)[..., None], margin.shape)[uncertified]
        cost = int(_st.samples_per_mode(k).sum())
        if system._stable is not None or cost <= max(2**20, work):
            try:
                unstable = ~np.asarray(system.is_stable(exact=True))
            except ValueError:
                skipped = True
        else:
            skipped = True
    bad = unstable is not None and bool(unstable.any())
    if not nonfinite and not bad:
        return
    if bad:
        chans, what = unstable, "not stable"
    elif unstable is None and uncertified.any():
        chans = np.any(uncertified, axis=-1)
        what = ("not certified stable (|lam| + |mu| >= 1; the exact test was "
                + ("skipped as too costly)" if skipped else "not run)"))
    else:
        warnings.warn(f"simulate: the output holds {nonfinite} non-finite value(s) although the system is "
                      "stable: the inputs or parameters are too large for the floating-point range",
                      RuntimeWarning, stacklevel=4)
        return
    idx = [tuple(int(j) for j in i) for i in np.argwhere(chans)] if np.ndim(chans) else []
    where = f"{len(idx)} of {chans.size} channel(s), first {idx[:5]}" if np.ndim(chans) else "its only channel"
    sel = np.broadcast_to(np.asarray(chans)[..., None], margin.shape)
    lam, mu, k, alpha = (np.broadcast_to(a, margin.shape)[sel] for a in system._host())
    if int(k.max()) + 1 < _st.EIG_MAX_DEGREE:
        radius = f"spectral radius {float(_st.spectral_radius(lam, mu, k, alpha).max()):.6g}"
    else:
        radius = (f"spectral radius <= {float(_st.radius_bound(lam, mu, k, alpha).max()):.6g} (Rouche bound; "
                  "spectral_radius() gives it exactly)")
    out = f"; here the output holds {nonfinite} non-finite value(s)" if nonfinite else ""
    warnings.warn(f"simulate: the system is {what} in {where}: stability margin 1 - |lam| - |mu| down to "
                  f"{float(margin[sel].min()):.6g}, {radius}. Its response may grow without bound{out}. "
                  "Check is_stable(exact=True) before simulating long sequences.", RuntimeWarning, stacklevel=4)


__all__ = ["DiscreteDelaySystem", "Contour"]
