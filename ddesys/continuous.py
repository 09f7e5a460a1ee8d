"""Continuous diagonal delay systems (docs/theory.md §1): roots, stability, frequency response, a
reference DDE solver, and discretization to :class:`~ddesys.DiscreteDelaySystem`.

    h_n'(t) = a_n h_n(t) + ad_n h_n(t - tau) + b_n x(t),     y(t) = 2 Re(sum_n c_n h_n(t)) + d x(t)

History before ``t = 0`` is zero. NumPy only (analysis runs on the host).
"""
from __future__ import annotations

import numpy as np
from scipy.special import lambertw

from ._validate import MAX_DELAY_STEPS, as_array, broadcast_modes, check_batch, check_memory

SIMULATE_MAX_BYTES = 2**30   # memory budget of the reference solver's grid (argument ``max_bytes``)
from .discrete import DiscreteDelaySystem
from .discretize import discretize_modes

# 3-point Gauss-Legendre nodes and weights on [0, 1]
_GL_X = np.array([0.5 - np.sqrt(15) / 10, 0.5, 0.5 + np.sqrt(15) / 10])
_GL_W = np.array([5 / 18, 8 / 18, 5 / 18])


def _hermite(y0, y1, d0, d1, s, h):
    """Cubic Hermite interpolation on a step of width ``h`` at local coordinates ``s`` in [0, 1]."""
    s2, s3 = s * s, s * s * s
    return ((2 * s3 - 3 * s2 + 1) * y0 + (s3 - 2 * s2 + s) * h * d0
            + (-2 * s3 + 3 * s2) * y1 + (s3 - s2) * h * d1)


class DelaySystem:
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

    Notes
    -----
    All parameters are broadcast to the batch shape ``(...)`` at construction. NumPy only.

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
    DiscreteDelaySystem(batch_shape=(), n_modes=1, delay in [10, 10])
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
            Step ``> 0``; the delay becomes ``tau / dt`` steps, which must be ``>= 1``.
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
        >>> float(sd.delay), np.round(sd.lam, 4), np.round(sd.mu, 4)
        (10.0, array([0.9048+0.j]), array([0.0476+0.j]))
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
        return DiscreteDelaySystem(lam, mu, bbar, self.c, s, self.d)

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
        arg = (self.ad * self.tau[..., None] * np.exp(-self.a * self.tau[..., None]))[..., None]
        with np.errstate(invalid="ignore", divide="ignore"):
            w = lambertw(arg, br)                                       # (..., N2, nb)
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

    def is_stable(self):
        """Whether every mode's rightmost root has negative real part (docs/theory.md §1).

        Returns
        -------
        ndarray of bool ``(...)``
            Per channel.

        Examples
        --------
        >>> from ddesys import DelaySystem
        >>> sys = DelaySystem(a=[[-1.0], [-1.0]], ad=[[0.5], [2.0]], b=[1.0], c=[0.5], tau=1.0)
        >>> sys.is_stable()                                    # |ad| < -a is stable for every tau
        array([ True, False])
        """
        return np.all(self.rightmost_root().real < 0, axis=-1)

    # ------------------------------------------------------------------ frequency response
    def freqresp(self, omega):
        """Exact frequency response ``G(i omega)`` of ``x -> y``.

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
        tau = self.tau[..., None, None]

        def half(s):                                                    # (F,) -> (..., F)
            den = s - self.a[..., None] - self.ad[..., None] * np.exp(-s * tau)
            return np.sum((self.c * self.b)[..., None] / den, axis=-2)

        s = 1j * omega
        return half(s) + np.conj(half(np.conj(s))) + self.d[..., None]

    # ------------------------------------------------------------------ reference solution
    def simulate(self, u, t, h=None, return_states=False, max_bytes=SIMULATE_MAX_BYTES):
        """Reference solution of the DDE on the output times ``t``, for an input function ``u``.

        Method of steps on a grid of width ``h' = tau / ceil(tau / h)`` (the delay lands on grid
        points, so the derivative breakpoints at multiples of ``tau`` are grid points): exponential
        integrator for ``a``, 3-point Gauss-Legendre quadrature of ``e^{a(h-s)} (ad h(t+s-tau) + b u(t+s))``,
        the delayed state read by cubic Hermite interpolation of the stored states and derivatives.
        Fourth order in ``h`` for inputs smooth on ``t > 0``; outputs interpolated the same way.

        Parameters
        ----------
        u : callable
            Vectorized ``u(times) -> values`` (real); ``u(t) = 0`` for ``t < 0`` is implied.
        t : array_like, real ``(T,)``
            Output times, ``>= 0``.
        h : float, optional
            Reference step (default ``min(tau) / 200``).
        return_states : bool, default False
            Also return the states.
        max_bytes : int, default ``SIMULATE_MAX_BYTES`` (1 GiB)
            Memory budget of the grid (states and derivatives, ``32 N2`` bytes per step); the solver
            also runs a Python loop over the steps.

        Returns
        -------
        y : ndarray, real ``(..., T)``
        states : ndarray, complex ``(..., N2, T)``
            Only with ``return_states``.

        Raises
        ------
        ValueError
            ``t < 0``; ``h`` not a finite positive step; a finer ``h`` or a longer ``t`` whose grid
            needs more than ``max_bytes`` (raised before allocating).

        See Also
        --------
        DiscreteDelaySystem.simulate : the discrete recurrence, ``O(dt)`` away from this solution.

        Examples
        --------
        Step response, settling to the DC gain 2:

        >>> import numpy as np
        >>> from ddesys import DelaySystem
        >>> sys = DelaySystem(a=[-1.0], ad=[0.5], b=[1.0], c=[0.5], tau=1.0)
        >>> y = sys.simulate(np.ones_like, np.linspace(0, 20, 5))
        >>> np.round(y, 2)
        array([0.  , 1.61, 1.92, 1.98, 2.  ])
        """
        t = as_array(np, t, "t", "real").reshape(-1)
        if np.any(t < 0):
            raise ValueError("t must be >= 0")
        h = float(np.min(self.tau)) / 200 if h is None else float(h)
        if not h > 0 or not np.isfinite(h):
            raise ValueError(f"h must be a finite step > 0, got {h}")
        t_max = float(t.max(initial=0.0))
        tau = np.unique(self.tau)
        steps = float(np.max(np.ceil(t_max * np.maximum(1.0, np.ceil(tau / h)) / tau), initial=0.0)) + 2
        check_memory(2 * steps * self.n_modes * 16, max_bytes,
                     f"DelaySystem.simulate with step h={h:.4g} up to t={t_max:.4g} ({steps:.4g} steps)",
                     "use a larger h or fewer/shorter output times t, or raise max_bytes")
        batch = self.batch_shape
        B = int(np.prod(batch, dtype=np.int64))
        N2 = self.n_modes
        a, ad, b, c = (np.reshape(v, (B, N2)) for v in (self.a, self.ad, self.b, self.c))
        tau, dd = np.reshape(self.tau, (B,)), np.reshape(self.d, (B,))
        ys = np.empty((B, t.size))
        hs = np.empty((B, N2, t.size), np.complex128)
        for i in range(B):
            ys[i], hs[i] = self._solve_channel(a[i], ad[i], b[i], c[i], tau[i], dd[i], u, t, h)
        y = ys.reshape(batch + (t.size,))
        return (y, hs.reshape(batch + (N2, t.size))) if return_states else y

    @staticmethod
    def _solve_channel(a, ad, b, c, tau, d, u, t_out, h_req):
        m = max(1, int(np.ceil(tau / h_req)))
        h = tau / m
        n_steps = int(np.ceil(t_out.max(initial=0.0) / h)) + 1
        H = np.zeros((n_steps + 1, a.size), np.complex128)              # states on the grid
        D = np.zeros_like(H)                                            # their derivatives
        E = np.exp(a * h)                                               # (N2,)
        qw = _GL_W[:, None] * h * np.exp(a * h * (1 - _GL_X[:, None]))  # (3, N2)

        def delayed(j, s):  # h(t_j + s h - tau) = h on step j - m at local s (zero before t = 0)
            jj = j - m
            if jj < 0:
                return np.zeros((np.size(s), a.size), np.complex128)
            return _hermite(H[jj], H[jj + 1], D[jj], D[jj + 1], np.asarray(s)[:, None], h)

        D[0] = b * u(np.array([0.0]))[0]
        for n in range(n_steps):
            tn = n * h
            g = ad * delayed(n, _GL_X) + b * u(tn + _GL_X * h)[:, None]   # (3, N2)
            H[n + 1] = E * H[n] + np.sum(qw * g, axis=0)
            D[n + 1] = a * H[n + 1] + ad * delayed(n + 1, np.zeros(1))[0] + b * u(np.array([tn + h]))[0]
        j = np.minimum((t_out / h).astype(np.int64), n_steps - 1)
        s = (t_out - j * h) / h
        states = _hermite(H[j], H[j + 1], D[j], D[j + 1], s[:, None], h)  # (T, N2)
        y = 2 * np.real(states @ c) + d * u(t_out)
        return y, states.T
