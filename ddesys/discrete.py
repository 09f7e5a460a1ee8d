"""Discretized delayed linear systems: the object that kernels, simulations and stability work on.

:class:`DiscreteDelaySystem` is a :class:`~ddesys.lti.DelayLTI` (``dt``, ``sys(z)``,
``frequency_response``, exact-by-default ``is_stable``, immutable); its time-domain methods (``kernel``,
``contour``, ``impulse``, ``simulate``, ``states``) live in :mod:`ddesys.discrete_response`.
"""
from __future__ import annotations

import numpy as np

from . import stability as _st
from ._array import get_namespace, to_numpy
from ._pairs import channel_index, pair_matrices
from ._validate import MAX_DELAY_STEPS, as_array, broadcast_modes, check_batch, check_delay, check_dt
from .charpoly import poly_coefficients
from .contour import Contour
from .discrete_response import DiscreteResponses
from .interpolation import split_delay
from .lti import DelayLTI
from .sum_system import Summable
from .transfer import transfer_function


class DiscreteDelaySystem(Summable, DiscreteResponses, DelayLTI):
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
    dt : True or float, default True (keyword only)
        The step in time units, or ``True`` when unspecified. With a numeric ``dt``,
        :meth:`frequency_response` takes radians per time unit (``z = e^{i omega dt}``);
        :meth:`freqresp` always takes radians per step.

    Attributes
    ----------
    lam, mu, bbar, c : complex ``(..., N2)``
        The parameters, broadcast to the batch shape ``(...)`` at construction.
    delay, d : real ``(...)``
        Likewise.
    k, alpha : ``(...)``
        The delay split as ``k = floor(delay)`` (int64) and ``alpha = delay - k`` in ``[0, 1)``.
    dt : True or float
        As given.
    tap : None
        No delayed input tap: one is added as a system of its own, ``sys + DelayTap(e, delay, width)``
        (a :class:`~ddesys.SumSystem`, whose ``tap`` is that :class:`~ddesys.DelayTap`).

    Raises
    ------
    ValueError
        Bad input (non-finite values, delay < 1 or above the limit, shapes that do not broadcast, a mode
        parameter without its trailing axis or with no mode), naming the argument.
    TypeError
        A complex delay or feedthrough, non-numeric input, a ``dt`` that is not ``True`` or a number.

    See Also
    --------
    DelaySystem.discretize : the discrete system of a continuous one.
    ddesys.ds4d_discrete : the DS4D layer's parameters as such a system.
    to_statespace : one channel as a :class:`~ddesys.DiscreteDelayStateSpace`.

    Notes
    -----
    Stability (docs/theory.md §3): ``is_stable()`` is exact by default, all roots of every mode's
    characteristic polynomial strictly inside the unit disk by the certified winding-number count
    (``O(k)`` per mode, run only for modes the sufficient test does not certify; cached; option
    ``max_bytes``, the memory budget, default ``ddesys.stability.EXACT_MAX_BYTES``). It raises
    ``ValueError`` when a mode needs more than ``max_bytes``. ``is_stable(method="sufficient")`` is
    ``|lam| + |mu| < 1`` for every mode (:meth:`sufficient_margin` ``> 0``): it holds for every delay,
    costs nothing, and may say False for a stable system.

    Systems are immutable (attributes cannot be set; no method changes them). Memory is checked where
    it is spent: :meth:`simulate` needs ``O(batch L)`` whatever the delay; the exact stability test
    needs ``O(k)`` per mode and has a budget (``max_bytes``).

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

    Stable although the sufficient test cannot say so (Levin & May 1976: ``h_t = h_{t-1} - q h_{t-3}``
    is stable for ``0 < q < 2 cos(2 pi / 5) = 0.618``):

    >>> lm = DiscreteDelaySystem(lam=[1.0], mu=[-0.5], bbar=[1.0], c=[1.0], delay=3.0, dt=0.1)
    >>> bool(lm.is_stable()), bool(lm.is_stable(method="sufficient")), lm.dt
    (True, False, 0.1)
    """

    def __init__(self, lam, mu, bbar, c, delay, d=0.0, *, dt=True):
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
        self.dt = check_dt(dt)
        self.xp = xp
        self.lam, self.mu, self.bbar, self.c = (xp.broadcast_to(named[n], full) for n in ("lam", "mu", "bbar", "c"))
        self.delay = xp.broadcast_to(delay, tuple(batch))
        self.d = xp.broadcast_to(d, tuple(batch))
        k, alpha = split_delay(self.delay)
        for v in (k, alpha):
            if isinstance(v, np.ndarray):
                v.flags.writeable = False
        self.k, self.alpha = k, alpha
        self.tap = None                  # a tap is a system of its own: self + DelayTap(...)
        self._freeze()

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
        step = "" if self.dt is True else f", dt={self.dt:.6g}"
        return (f"DiscreteDelaySystem(batch_shape={self.batch_shape}, n_modes={self.n_modes}, "
                f"delay in {rng}{step})")

    def _host(self):
        return (to_numpy(self.lam), to_numpy(self.mu), to_numpy(self.k)[..., None], to_numpy(self.alpha)[..., None])

    # ------------------------------------------------------------------ stability
    def sufficient_margin(self):
        """Margin ``1 - |lam| - |mu|`` of the sufficient stability test, per mode (docs/theory.md §3.2).

        Not a control "stability margin" (gain or phase margin): a positive value proves the mode
        stable for every delay; a non-positive one proves nothing (see :meth:`is_stable`).

        Returns
        -------
        ndarray, real ``(..., N2)``

        See Also
        --------
        is_stable, ddesys.sufficient_margin

        Examples
        --------
        A system outside the sufficient diamond can still be stable; this one is not:

        >>> from ddesys import DiscreteDelaySystem
        >>> sys = DiscreteDelaySystem(lam=[0.5], mu=[0.7], bbar=[1.0], c=[1.0], delay=2.0)
        >>> sys.sufficient_margin().round(4), bool(sys.is_stable(method="sufficient"))
        (array([-0.2]), False)
        >>> bool(sys.is_stable()), round(float(sys.spectral_radius()), 4)
        (False, 1.1232)
        """
        return _st.sufficient_margin(to_numpy(self.lam), to_numpy(self.mu))

    def _is_stable_sufficient(self):
        return np.all(self.sufficient_margin() > 0, axis=-1)

    def _is_stable_exact(self, max_bytes=None):
        modes = self._cache.get("stable_modes")
        if modes is None:
            modes = _st.is_stable_exact(*self._host(), max_bytes=max_bytes)
            modes.flags.writeable = False
            self._cache["stable_modes"] = modes
        return np.all(modes, axis=-1)

    def spectral_radius(self, per_mode=False, max_bytes=None):
        """Largest root modulus of the characteristic polynomial (docs/theory.md §3).

        Parameters
        ----------
        per_mode : bool, default False
            Return the radius of every mode instead of the largest per channel.
        max_bytes : int or None
            Memory budget of the root counts (as for the exact :meth:`is_stable`).

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
            A degree above ``max_degree``: use :meth:`spectral_radius` or ``is_stable()``, which are
            ``O(k)``.
        """
        lam, mu, k, alpha = (np.broadcast_to(a, self.lam.shape).ravel() for a in self._host())
        if k.max(initial=0) + 1 > max_degree:
            raise ValueError(f"poles(): degree {int(k.max()) + 1} exceeds max_degree={max_degree}; use "
                             "spectral_radius() or is_stable(), which are O(k)")
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
            bound is ``>= 1``. Computed once (cached).
        """
        if "decay_bound" in self._cache:
            return self._cache["decay_bound"].copy()
        lam, mu, k, alpha = self._host()
        r = _st.radius_bound(lam, mu, k, alpha)
        loose = r >= 1
        if np.any(loose):
            kb, ab = np.broadcast_to(k, r.shape), np.broadcast_to(alpha, r.shape)
            r[loose] = _st.spectral_radius(lam[loose], mu[loose], kb[loose], ab[loose]) * (1 + 1e-9)
        self._cache["decay_bound"] = r.max(axis=-1)
        return self._cache["decay_bound"].copy()

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
        return transfer_function(self.lam, self.mu, self.bbar, self.c, self.k, self.alpha, self.d, z)

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

    # ------------------------------------------------------------------ conversion
    def to_statespace(self, index=None):
        """One channel as a :class:`~ddesys.DiscreteDelayStateSpace` with ``n = 2 N2`` states.

        The stored modes and their implied conjugates, written out (complex matrices, real output)::

            Phi = diag(lam, conj lam)    G = [diag(mu, conj mu)]    delay = [delay]
            Bd  = [bbar; conj bbar]      C = [c, conj c]            D = [[d]]

        Parameters
        ----------
        index : int or tuple of int, optional
            The channel (one int per batch axis); may be omitted only for a batch shape ``()``.

        Returns
        -------
        DiscreteDelayStateSpace
            ``Phi (n, n)``, ``G (1, n, n)``, ``delay (1,)``, ``B (n, 1)``, ``C (1, n)``, ``D (1, 1)``; the
            same ``dt``.

        Raises
        ------
        ValueError
            A missing or out-of-range ``index`` (a sum with a delayed input tap, :class:`~ddesys.SumSystem`,
            refuses the conversion: the FIR term is not a state-space term).
        TypeError
            A non-integer ``index``.

        Examples
        --------
        >>> from ddesys import DiscreteDelaySystem
        >>> sys = DiscreteDelaySystem(lam=[[0.9, 0.5j]], mu=[0.05, 0.1], bbar=[1.0, 1.0], c=[0.5, 0.25],
        ...                           delay=3.5, dt=0.1)
        >>> ss = sys.to_statespace(index=0)                
        >>> ss.dt                                          
        0.1
        """
        idx = channel_index(self.batch_shape, index)
        lam, mu, bbar, c = (to_numpy(v)[idx] for v in (self.lam, self.mu, self.bbar, self.c))
        Phi, G, Bd, C, D = pair_matrices(lam, mu, bbar, c, to_numpy(self.d)[idx])
        from .matrix.discrete import DiscreteDelayStateSpace
        return DiscreteDelayStateSpace(Phi, G, [float(to_numpy(self.delay)[idx])], Bd, C, D, dt=self.dt)


__all__ = ["DiscreteDelaySystem", "Contour", "MAX_DELAY_STEPS"]
