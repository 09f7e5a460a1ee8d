"""The reference DDE solver of :class:`~ddesys.DelaySystem` (docs/theory.md §1.4): ``simulate`` (the
outputs) and ``states`` (the states), inherited from :class:`ContinuousResponses`.

Method of steps on a grid that contains the delay, exponential integrator, 3-point Gauss-Legendre
quadrature, cubic Hermite interpolation of the delayed state; fourth order in the step.
"""
from __future__ import annotations

import numpy as np

from ._validate import as_array
from .budget import check_bytes

SIMULATE_MAX_BYTES = 2**30   # memory budget of the reference solver's grid (argument ``max_bytes``)

# 3-point Gauss-Legendre nodes and weights on [0, 1]
_GL_X = np.array([0.5 - np.sqrt(15) / 10, 0.5, 0.5 + np.sqrt(15) / 10])
_GL_W = np.array([5 / 18, 8 / 18, 5 / 18])


def _hermite(y0, y1, d0, d1, s, h):
    """Cubic Hermite interpolation on a step of width ``h`` at local coordinates ``s`` in [0, 1]."""
    s2, s3 = s * s, s * s * s
    return ((2 * s3 - 3 * s2 + 1) * y0 + (s3 - 2 * s2 + s) * h * d0
            + (-2 * s3 + 3 * s2) * y1 + (s3 - s2) * h * d1)


class ContinuousResponses:
    """Mixin of :class:`~ddesys.DelaySystem` (see the module docstring)."""

    def simulate(self, u, t, h=None, max_bytes=None):
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
        max_bytes : int, optional
            Memory budget of the grid (states and derivatives, ``32 N2`` bytes per step; default
            ``SIMULATE_MAX_BYTES``, 1 GiB, capped by :mod:`ddesys.budget`); the solver also runs a
            Python loop over the steps.

        Returns
        -------
        ndarray, real ``(..., T)``

        Raises
        ------
        ValueError
            ``t < 0``; ``h`` not a finite positive step; a finer ``h`` or a longer ``t`` whose grid
            needs more than ``max_bytes`` (raised before allocating).

        See Also
        --------
        states : the states of the same solution.
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
        return self._solve(u, t, h, max_bytes)[0]

    def states(self, u, t, h=None, max_bytes=None):
        """The states ``h_n(t)`` of the reference solution (:meth:`simulate`) on the output times ``t``.

        Parameters
        ----------
        u, t, h, max_bytes
            As :meth:`simulate`.

        Returns
        -------
        ndarray, complex ``(..., N2, T)``
            The stored modes (their conjugate partners are ``conj(h)``): the output of :meth:`simulate`
            is ``2 Re(sum_n c_n h_n(t)) + d u(t)``.

        Raises
        ------
        ValueError
            As :meth:`simulate`.

        Examples
        --------
        Without delayed feedback the step response of a mode is ``(1 - e^{a t}) / (-a)``:

        >>> import numpy as np
        >>> from ddesys import DelaySystem
        >>> sys = DelaySystem(a=[-2.0], ad=[0.0], b=[1.0], c=[0.5], tau=1.0)
        >>> h = sys.states(np.ones_like, [0.0, 1.0])
        >>> h.shape, bool(np.allclose(h.real, [[0.0, (1 - np.exp(-2.0)) / 2]], atol=1e-9))
        ((1, 2), True)
        """
        return self._solve(u, t, h, max_bytes)[1]

    def _solve(self, u, t, h, max_bytes):
        t = as_array(np, t, "t", "real").reshape(-1)
        if np.any(t < 0):
            raise ValueError("t must be >= 0")
        h = float(np.min(self.tau)) / 200 if h is None else float(h)
        if not h > 0 or not np.isfinite(h):
            raise ValueError(f"h must be a finite step > 0, got {h}")
        t_max = float(t.max(initial=0.0))
        tau = np.unique(self.tau)
        steps = float(np.max(np.ceil(t_max * np.maximum(1.0, np.ceil(tau / h)) / tau), initial=0.0)) + 2
        check_bytes(2 * steps * self.n_modes * 16,
                    f"DelaySystem.simulate with step h={h:.4g} up to t={t_max:.4g} ({steps:.4g} steps)",
                    "use a larger h or fewer/shorter output times t, or raise max_bytes", max_bytes,
                    SIMULATE_MAX_BYTES)
        batch = self.batch_shape
        B = int(np.prod(batch, dtype=np.int64))
        N2 = self.n_modes
        a, ad, b, c = (np.reshape(v, (B, N2)) for v in (self.a, self.ad, self.b, self.c))
        tau, dd = np.reshape(self.tau, (B,)), np.reshape(self.d, (B,))
        ys = np.empty((B, t.size))
        hs = np.empty((B, N2, t.size), np.complex128)
        for i in range(B):
            ys[i], hs[i] = self._solve_channel(a[i], ad[i], b[i], c[i], tau[i], dd[i], u, t, h)
        return ys.reshape(batch + (t.size,)), hs.reshape(batch + (N2, t.size))

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


__all__ = ["ContinuousResponses", "SIMULATE_MAX_BYTES"]
