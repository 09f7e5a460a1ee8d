"""Continuous diagonal delay systems (docs/theory.md §1): roots, stability, frequency response, a
reference DDE solver, and discretization to :class:`~ddesys.DiscreteDelaySystem`.

    h_n'(t) = a_n h_n(t) + ad_n h_n(t - tau) + b_n x(t),     y(t) = 2 Re(sum_n c_n h_n(t)) + d x(t)

History before ``t = 0`` is zero. NumPy only (analysis runs on the host). :class:`DelaySystem` is a
:class:`~ddesys.lti.DelayLTI` (``dt = 0``, ``sys(s)``, ``frequency_response``, exact-by-default
``is_stable``, immutable); its reference DDE solver (``simulate``, ``states``) lives in
:mod:`ddesys.continuous_response`.
"""
from __future__ import annotations

import numpy as np
from scipy.special import lambertw

from ._pairs import channel_index, pair_matrices
from ._validate import MAX_DELAY_STEPS, as_array, broadcast_modes, check_batch
from .continuous_response import SIMULATE_MAX_BYTES, ContinuousResponses
from .discrete import DiscreteDelaySystem
from .discretize import discretize_modes
from .lti import DelayLTI

LOG_HUGE = 600.0         # |log of the Lambert-W argument| beyond which it is handled in log form


def _lambertw_huge(w, adt, at, br):
    """Replace ``w = W_k(x)``, ``x = adt exp(-at)``, where ``|log |x|| > LOG_HUGE`` (``x`` overflows or
    underflows in float64) by Newton's method on ``w + log w = Log x + 2 pi i k`` from de Bruijn's
    ``L - log L``, ``L = Log x + 2 pi i k`` (the branch identity of W for such ``|x|``); the principal branch
    of an underflowing ``x`` keeps ``W_0(x) = x``-level values.

    Parameters
    ----------
    w : complex ``(..., N2, nb)``;  adt, at : complex ``(..., N2)``;  br : int ``(nb,)``
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        lr = np.log(np.abs(adt)) - at.real                                 # log |x|
        th = np.angle(adt) - at.imag
        th = np.pi - np.mod(np.pi - th, 2 * np.pi)                        # in (-pi, pi]
        L = (lr + 1j * th)[..., None] + 2j * np.pi * br                    # (..., N2, nb)
        huge = (np.abs(lr) > LOG_HUGE)[..., None] & (adt != 0)[..., None]
        huge = huge & ((lr[..., None] > 0) | (br != 0))
        if not np.any(huge):
            return w
        Lh = L[huge]
        v = Lh - np.log(Lh)
        for _ in range(50):
            step = (v + np.log(v) - Lh) / (1 + 1 / v)
            v = v - step
            if np.all(np.abs(step) <= 4 * np.finfo(float).eps * np.abs(v)):
                break
    w = np.array(w, dtype=np.complex128)
    w[huge] = v
    return w


class DelaySystem(ContinuousResponses, DelayLTI):
    """A batch of continuous diagonal delay systems (docs/theory.md §1)::

        h_n'(t) = a_n h_n(t) + ad_n h_n(t - tau) + b_n x(t),     y(t) = 2 Re(sum_n c_n h_n(t)) + d x(t)

    Parameters
    ----------
    a, ad, b, c : array_like, complex ``(..., N2)``
        ``N2`` stored modes per channel (conjugates implied); ``ad`` is the delayed-state coefficient
        ``d_n`` of docs/theory.md §1.
    tau : array_like, real ``(...)``
        Delay ``> 0``, in time units.
    d : array_like, real ``(...)``, default 0.0
        Feedthrough.

    Raises
    ------
    ValueError
        ``tau <= 0``, non-finite values, shapes that do not broadcast.
    TypeError
        A complex ``tau`` or ``d``, non-numeric input.

    See Also
    --------
    DiscreteDelaySystem : the discrete system, from :meth:`discretize`.
    to_statespace : one channel as a :class:`~ddesys.DelayStateSpace`.

    Notes
    -----
    All parameters are broadcast to the batch shape ``(...)`` at construction; the system is immutable
    (``dt = 0``: continuous time). NumPy only.

    Stability (docs/theory.md §1.3): ``is_stable()`` is exact by default, the rightmost Lambert-W root
    of every mode (branches ``-5 .. 5``, :meth:`rightmost_root`) strictly in the left half-plane.
    ``is_stable(method="sufficient")`` is the delay-independent test ``|ad| < -Re(a)`` for every mode
    (:meth:`sufficient_margin` ``> 0``): it proves stability for *every* delay ``tau``, and may say
    False for a system that is stable at this ``tau``.

    Examples
    --------
    >>> import numpy as np
    >>> from ddesys import DelaySystem
    >>> sys = DelaySystem(a=[-1.0], ad=[0.5], b=[1.0], c=[0.5], tau=1.0)
    >>> sys
    DelaySystem(batch_shape=(), n_modes=1)
    >>> bool(sys.is_stable()), np.round(sys.rightmost_root(), 4)
    (True, array([-0.3149+0.j]))
    >>> sys.discretize(dt=0.1)                             # delay tau / dt = 10 steps
    DiscreteDelaySystem(batch_shape=(), n_modes=1, delay in [10, 10], dt=0.1)

    Stable at this delay, though not for every delay (``x' = -x - 2 x(t - tau)`` is stable iff
    ``tau < arccos(-1/2) / sqrt(3) = 1.209``, Hayes 1950):

    >>> hayes = DelaySystem(a=[-1.0], ad=[-2.0], b=[1.0], c=[0.5], tau=1.0)
    >>> bool(hayes.is_stable()), bool(hayes.is_stable(method="sufficient"))
    (True, False)
    """

    def __init__(self, a, ad, b, c, tau, d=0.0):
        named = {n: as_array(np, v, n, "complex") for n, v in dict(a=a, ad=ad, b=b, c=c).items()}
        full = broadcast_modes(named)
        tau = as_array(np, tau, "tau", "real")
        d = as_array(np, d, "d", "real")
        batch = check_batch("d", d.shape, check_batch("tau", tau.shape, full[:-1]))
        if np.any(tau <= 0):
            raise ValueError(f"tau must be > 0, got min {tau.min():.6g}")
        full = tuple(batch) + (full[-1],)
        self.a, self.ad, self.b, self.c = (np.broadcast_to(named[n], full) for n in ("a", "ad", "b", "c"))
        self.tau = np.broadcast_to(tau, tuple(batch))
        self.d = np.broadcast_to(d, tuple(batch))
        self._freeze()

    @property
    def batch_shape(self):
        """Shape ``(...)`` of the batch of channels."""
        return tuple(self.a.shape[:-1])

    @property
    def n_modes(self):
        """Stored complex modes per channel, ``N2``."""
        return int(self.a.shape[-1])

    def __repr__(self):
        return f"DelaySystem(batch_shape={self.batch_shape}, n_modes={self.n_modes})"

    # ------------------------------------------------------------------ discretization
    def discretize(self, dt, method="zoh"):
        """The discrete system for step ``dt`` (docs/theory.md §2).

        Parameters
        ----------
        dt : float or array_like ``(...)``
            Step ``> 0``; the delay becomes ``tau / dt`` steps, which must be ``>= 1``. A scalar ``dt`` is
            kept as the result's ``dt``; with an array of steps (one per channel) the result has
            ``dt = True`` (no single step: its ``frequency_response`` then takes radians per step).
        method : {"zoh", "euler"}
            ``"zoh"``: ``lam = e^{a dt}``, ``mu = (e^{a dt} - 1)/a * ad``, ``bbar = (e^{a dt} - 1)/a * b``;
            ``"euler"``: ``1 + a dt``, ``ad dt``, ``b dt``.

        Returns
        -------
        DiscreteDelaySystem

        Raises
        ------
        ValueError
            ``dt <= 0``; a delay ``tau / dt`` below 1 step or above ``MAX_DELAY_STEPS`` (saying the
            smallest ``dt`` allowed); a discrete coefficient that overflows (``|a dt|`` too large); an
            unknown ``method``.

        See Also
        --------
        ddesys.zoh, ddesys.euler

        Examples
        --------
        >>> import numpy as np
        >>> from ddesys import DelaySystem
        >>> sys = DelaySystem(a=[-1.0], ad=[0.5], b=[1.0], c=[0.5], tau=1.0)
        >>> sd = sys.discretize(0.1)
        >>> float(sd.delay), np.round(sd.lam, 4), np.round(sd.mu, 4), sd.dt
        (10.0, array([0.9048+0.j]), array([0.0476+0.j]), 0.1)
        >>> np.round(sys.discretize(0.1, method="euler").lam, 4)
        array([0.9+0.j])
        """
        dt = as_array(np, dt, "dt", "real")
        if np.any(dt <= 0):
            raise ValueError(f"dt must be > 0, got {dt}")
        with np.errstate(over="ignore"):
            s = self.tau / dt
        if np.any(s < 1):
            raise ValueError(f"dt={dt} gives a delay of {np.min(s):.4g} < 1 step (tau/dt must be >= 1)")
        if not np.all(s <= MAX_DELAY_STEPS):
            raise ValueError(f"dt={dt} gives a delay tau/dt of {np.max(s):.4g} steps, above MAX_DELAY_STEPS = "
                             f"{MAX_DELAY_STEPS}: use a larger dt (at least {np.max(self.tau) / MAX_DELAY_STEPS:.4g})")
        with np.errstate(over="ignore", invalid="ignore"):
            lam, mu, bbar = discretize_modes(self.a, self.ad, self.b, np.asarray(dt)[..., None], method)
        for name, v in (("lam", lam), ("mu", mu), ("bbar", bbar)):
            if not np.all(np.isfinite(v)):
                raise ValueError(f"discretize(dt={dt}, method={method!r}) overflows: the discrete {name} is not "
                                 "finite (|a dt| too large); use a smaller dt")
        step = float(dt) if np.ndim(dt) == 0 else True
        return DiscreteDelaySystem(lam, mu, bbar, self.c, s, self.d, dt=step)

    # ------------------------------------------------------------------ roots and stability
    def characteristic_roots(self, branches=range(-3, 4)):
        """Roots ``s_j = a + W_j(ad tau e^{-a tau}) / tau`` of ``s - a - ad e^{-s tau} = 0`` (Lambert W).

        Parameters
        ----------
        branches : iterable of int, default ``range(-3, 4)``
            Lambert-W branches ``j``.

        Returns
        -------
        ndarray, complex ``(..., N2, len(branches))``
            For a mode with ``ad = 0`` the only root is ``a`` (other entries NaN).
        """
        br = np.asarray(list(branches))
        tau = self.tau[..., None, None]
        with np.errstate(over="ignore", invalid="ignore"):
            arg = (self.ad * self.tau[..., None] * np.exp(-self.a * self.tau[..., None]))[..., None]
        with np.errstate(invalid="ignore", divide="ignore"):
            w = lambertw(arg, br)                                       # (..., N2, nb)
            w = _lambertw_huge(w, self.ad * self.tau[..., None], self.a * self.tau[..., None], br)
            roots = self.a[..., None] + w / tau
        nodelay = (self.ad == 0)[..., None]
        only = np.where(br == 0, self.a[..., None] + 0 * br, np.nan + 0j)
        return np.where(nodelay, only, roots)

    def rightmost_root(self, branches=range(-5, 6)):
        """The characteristic root of largest real part per mode, over the given branches.

        The principal branch is the rightmost for real coefficients (Shinozaki & Mori 2006); near the
        branch point ``-1/e`` and for complex coefficients several branches are compared.

        Parameters
        ----------
        branches : iterable of int, default ``range(-5, 6)``
            Lambert-W branches compared.

        Returns
        -------
        ndarray, complex ``(..., N2)``

        See Also
        --------
        characteristic_roots
        """
        r = self.characteristic_roots(branches)
        idx = np.nanargmax(np.where(np.isnan(r.real), -np.inf, r.real), axis=-1)
        return np.take_along_axis(r, idx[..., None], axis=-1)[..., 0]

    def sufficient_margin(self):
        """Margin ``-Re(a) - |ad|`` of the delay-independent stability test, per mode (docs/theory.md §1.3).

        Not a control "stability margin" (gain or phase margin): a positive value proves the mode
        stable for every delay ``tau >= 0``; a non-positive one proves nothing.

        Returns
        -------
        ndarray, real ``(..., N2)``

        Examples
        --------
        >>> from ddesys import DelaySystem
        >>> sys = DelaySystem(a=[[-1.0], [-1.0]], ad=[[0.5], [2.0]], b=[1.0], c=[0.5], tau=1.0)
        >>> sys.sufficient_margin()                            # |ad| < -a is stable for every tau
        array([[ 0.5],
               [-1. ]])
        >>> sys.is_stable(method="sufficient"), sys.is_stable()
        (array([ True, False]), array([ True, False]))
        """
        return -self.a.real - np.abs(self.ad)

    def _is_stable_sufficient(self):
        return np.all(self.sufficient_margin() > 0, axis=-1)

    def _is_stable_exact(self):
        return np.all(self.rightmost_root().real < 0, axis=-1)

    # ------------------------------------------------------------------ frequency response
    def transfer(self, s):
        """Exact transfer function ``G(s)`` of ``x -> y`` at complex ``s`` (docs/theory.md §1.4).

        ``G(s) = sum_n [c_n b_n / (s - a_n - ad_n e^{-s tau}) + conj(c_n b_n) / (s - conj(a_n) -
        conj(ad_n) e^{-s tau})] + d``, the conjugate partners included; no Pade approximation.
        ``sys(s)`` is the same.

        Parameters
        ----------
        s : array_like, complex ``(F,)``
            Evaluation points (flattened if not 1-D); a characteristic root gives ``inf``/``nan``.

        Returns
        -------
        ndarray, complex ``(..., F)``

        Raises
        ------
        ValueError
            Non-finite ``s``.

        Examples
        --------
        >>> from ddesys import DelaySystem
        >>> sys = DelaySystem(a=[-1.0], ad=[0.5], b=[1.0], c=[0.5], tau=1.0)
        >>> sys.transfer([0.0, 1.0]).round(4)                  # 2 Re(c b) / (s + 1 - 0.5 e^{-s})
        array([2.    +0.j, 0.5506+0.j])
        """
        s = as_array(np, s, "s", "complex").reshape(-1)
        tau = self.tau[..., None, None]

        def half(z):                                                    # (F,) -> (..., F)
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                den = z - self.a[..., None] - self.ad[..., None] * np.exp(-z * tau)
                return np.sum((self.c * self.b)[..., None] / den, axis=-2)

        return half(s) + np.conj(half(np.conj(s))) + self.d[..., None]

    def freqresp(self, omega):
        """Exact frequency response ``G(i omega)`` of ``x -> y`` (:meth:`transfer` on the imaginary axis).

        Parameters
        ----------
        omega : array_like, real ``(F,)``
            Angular frequencies in radians per unit time.

        Returns
        -------
        ndarray, complex ``(..., F)``

        Examples
        --------
        >>> from ddesys import DelaySystem
        >>> sys = DelaySystem(a=[-1.0], ad=[0.5], b=[1.0], c=[0.5], tau=1.0)
        >>> sys.freqresp([0.0])                                # DC gain 2 Re(c b / (-a - ad))
        array([2.+0.j])
        """
        omega = as_array(np, omega, "omega", "real").reshape(-1)
        return self.transfer(1j * omega)

    # ------------------------------------------------------------------ conversion
    def to_statespace(self, index=None):
        """One channel as a :class:`~ddesys.DelayStateSpace` with ``n = 2 N2`` states.

        The stored modes and their implied conjugates, written out in real coordinates
        ``(Re h_n, Im h_n)``: one 2 x 2 block per mode (real matrices, the same real output)::

            A_n = [[Re a, -Im a], [Im a, Re a]]    Ad_n likewise for ad        tau = [tau]
            B_n = [Re b; Im b]                     C_n = [2 Re c, -2 Im c]     D   = [[d]]

        Parameters
        ----------
        index : int or tuple of int, optional
            The channel (one int per batch axis); may be omitted only for a batch shape ``()``.

        Returns
        -------
        DelayStateSpace
            ``A (n, n)``, ``Ad (1, n, n)``, ``tau (1,)``, ``B (n, 1)``, ``C (1, n)``, ``D (1, 1)``.

        Raises
        ------
        ValueError
            A missing or out-of-range ``index``.
        TypeError
            A non-integer ``index``.

        Examples
        --------
        >>> from ddesys import DelaySystem
        >>> sys = DelaySystem(a=[[-1.0 + 2j], [-0.5]], ad=[0.5], b=[1.0], c=[0.5], tau=1.0)
        >>> ss = sys.to_statespace(index=1)                
        >>> ss.A.shape                                     
        (2, 2)
        """
        idx = channel_index(self.batch_shape, index)
        A, Ad, B, C, D = pair_matrices(self.a[idx], self.ad[idx], self.b[idx], self.c[idx], self.d[idx])
        from .matrix.statespace import DelayStateSpace
        return DelayStateSpace(A, Ad, [float(self.tau[idx])], B, C, D)


__all__ = ["DelaySystem", "SIMULATE_MAX_BYTES"]
