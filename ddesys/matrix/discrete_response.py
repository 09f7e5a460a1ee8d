"""Time-domain responses of :class:`~ddesys.DiscreteDelayStateSpace`: contour, kernel, impulse response,
simulation (the class inherits them from :class:`DiscreteSSResponses`).

The kernel ``K_t = C x_t`` (``x`` driven by ``B`` at ``t = 0``, ``D`` excluded) comes either from the
recurrence or from the contour-shifted FFT of docs/theory.md §5 applied to ``C P(z)^-1 B``: sample on
``|z| = 1/rho``, inverse FFT, restore ``rho^-t``; the contour is chosen by :func:`ddesys.choose_contour`
from :meth:`decay_bound` and the float64 unit roundoff. No method changes the system.
"""
from __future__ import annotations

import warnings

import numpy as np

from .._array import unit_roundoff
from .._validate import as_array, check_length
from ..contour import choose_contour


class DiscreteSSResponses:
    """Mixin of :class:`~ddesys.DiscreteDelayStateSpace` (see the module docstring)."""

    def contour(self, L, eps="auto", M=None):
        """The sampling contour that ``kernel(L, eps=eps, M=M)`` uses (:class:`~ddesys.Contour`).

        Parameters
        ----------
        L : int
        eps, M :
            As :meth:`kernel`.

        Returns
        -------
        Contour
            ``M``, ``rho``, ``eps``, ``predicted_error`` (0-d arrays).

        Raises
        ------
        ValueError
            As :meth:`kernel` with ``method="fft"``.

        Examples
        --------
        >>> from ddesys.matrix.discrete import DiscreteDelayStateSpace
        >>> c = DiscreteDelayStateSpace([[0.5]], [[0.25]], delay=2.0).contour(64)
        >>> c.M, bool(c.predicted_error < 1e-12)
        (128, True)
        """
        L = check_length(L)
        rep = self.stability_report()
        if not rep.stable:
            why = "is unstable" if rep.certified else f"is not certified stable ({rep.message})"
            raise ValueError(f"kernel(method='fft'): the system {why}: its impulse response does not decay, "
                             "so no contour inside the unit disk represents it; use method='recurrence'")
        return choose_contour(L, np.asarray(self.decay_bound()), unit_roundoff(np.float64), eps=eps, M=M)

    def kernel(self, L, method="fft", eps="auto", M=None, max_bytes=None):
        """Impulse-response matrices without ``D``: ``K_t = C x_t`` for ``x`` driven by ``B`` at ``t = 0``.

        Parameters
        ----------
        L : int
            Length.
        method : {"fft", "recurrence"}
            ``"fft"``: sample ``C P(z)^-1 B`` on ``|z| = 1/rho``, inverse FFT, restore ``rho^-t``
            (docs/theory.md §5; contour from :meth:`decay_bound` and float64 roundoff by
            :func:`ddesys.choose_contour`). ``"recurrence"``: run the recurrence.
        eps : "auto" or float
            Aliasing suppression ``rho^M`` in ``(0, 1)``, or ``"auto"`` (minimize the predicted error,
            about 1e-13 relative; :meth:`contour` returns the choice).
        M : int, optional
            FFT length ``>= L``; default ``nextpow2(2L)`` or ``nextpow2(4L)`` (slow decay).
        max_bytes : int, optional
            Memory budget of the FFT path (default :data:`KERNEL_MAX_BYTES`).

        Returns
        -------
        ndarray ``(p, m, L)``
            Real for real matrices, else complex.

        Raises
        ------
        ValueError
            ``method="fft"`` for a system not certified stable (its response does not decay; use
            ``"recurrence"``), bad ``L`` / ``method`` / ``eps`` / ``M``, a budget exceeded.

        Examples
        --------
        >>> import numpy as np
        >>> from ddesys.matrix.discrete import DiscreteDelayStateSpace
        >>> sys = DiscreteDelayStateSpace([[0.5]], [[0.25]], delay=2.0, B=[1.0], C=[1.0])
        >>> np.round(sys.kernel(5)[0, 0], 4)
        array([1.    , 0.5   , 0.5   , 0.375 , 0.3125])
        >>> bool(np.allclose(sys.kernel(5), sys.kernel(5, method="recurrence"), atol=1e-13))
        True
        """
        L = check_length(L)
        if method == "recurrence":
            m = self.n_inputs
            u = np.zeros((m, m, L))
            u[np.arange(m), np.arange(m), 0] = 1.0
            return np.moveaxis(self._run(u, with_d=False), 0, 1)          # (m, p, L) -> (p, m, L)
        if method != "fft":
            raise ValueError(f"method must be 'fft' or 'recurrence', got {method!r}")
        contour = self.contour(L, eps=eps, M=M)
        rho, Mf = float(contour.rho), contour.M
        lags = self._form.lags
        m_idx = np.arange(Mf, dtype=np.int64)
        with np.errstate(under="ignore"):
            zp = np.exp(lags * np.log(rho) - 2j * np.pi / Mf * ((m_idx[:, None] * (lags % Mf)) % Mf))
        H = self._response(zp, max_bytes)                                  # (M, p, m): K(z_m)
        K = np.fft.ifft(H, axis=0)[:L] * (rho ** -np.arange(L, dtype=float))[:, None, None]
        K = np.moveaxis(K, 0, -1)
        if not self._is_complex():
            K = K.real
        return K

    def impulse(self, L, **kernel_kw):
        """Impulse response: :meth:`kernel` with ``D`` added at ``t = 0``.

        Parameters
        ----------
        L : int
            Length.
        **kernel_kw
            Passed to :meth:`kernel` (``method``, ``eps``, ``M``, ``max_bytes``).

        Returns
        -------
        ndarray ``(p, m, L)``
            Real for real matrices, else complex.

        Raises
        ------
        ValueError
            As :meth:`kernel`.

        Examples
        --------
        >>> from ddesys.matrix.discrete import DiscreteDelayStateSpace
        >>> sys = DiscreteDelayStateSpace([[0.5]], [[0.25]], delay=2.0, B=[1.0], C=[1.0], D=2.0)
        >>> sys.impulse(3, method="recurrence")[0, 0]
        array([3. , 0.5, 0.5])
        """
        K = self.kernel(L, **kernel_kw)
        K = K.astype(np.result_type(K, self.D))
        K[..., 0] += self.D
        return K

    def simulate(self, u):
        """Run the recurrence from zero history: ``y_t = C x_t + D u_t``.

        Parameters
        ----------
        u : array_like ``(..., m, L)``, or ``(L,)`` when ``m = 1``
            Inputs (real or complex); a leading batch is allowed.

        Returns
        -------
        y : ndarray ``(..., p, L)``
            Real when the system and ``u`` are real.

        Raises
        ------
        ValueError
            Non-finite ``u``, a shape that does not end in ``(m, L)``.

        Warns
        -----
        RuntimeWarning
            When the output is not finite (an unstable system over a long run).

        Notes
        -----
        A NumPy loop over ``t`` with a history ring of ``min(J, L - 1) + 1`` states: ``O(L n^2 (1 + 2K))``
        time, ``O(n min(J, L))`` memory besides the input and output.

        Examples
        --------
        >>> import numpy as np
        >>> from ddesys.matrix.discrete import DiscreteDelayStateSpace
        >>> sys = DiscreteDelayStateSpace([[0.5]], [[0.25]], delay=2.0, B=[1.0], C=[1.0])
        >>> sys.simulate(np.ones(4))                           # step response
        array([[1.   , 1.5  , 2.   , 2.375]])
        """
        u = as_array(np, u, "u", "complex" if np.iscomplexobj(u) else "real")
        if u.ndim == 1 and self.n_inputs == 1:
            u = u[None]
        if u.ndim < 2 or u.shape[-2] != self.n_inputs:
            raise ValueError(f"u must have shape (..., m, L) with m = {self.n_inputs} inputs (or (L,) when "
                             f"m = 1), got {u.shape}")
        return self._run(u, with_d=True)

    def _run(self, u, with_d):
        f = self._form
        L, batch = u.shape[-1], u.shape[:-2]
        dt = np.result_type(u, self.Phi)
        Bu = np.einsum("ij,...jt->t...i", self.B, u).astype(dt)          # (L, ..., n)
        R = min(f.degree, max(L - 1, 0)) + 1                              # lags past the run are never read
        ring = np.zeros((R,) + batch + (self.n_states,), dt)
        ET = np.ascontiguousarray(np.swapaxes(f.E, 1, 2)).astype(dt)     # x @ E^T
        y = np.empty((L,) + batch + (self.n_outputs,), dt)
        CT = self.C.T.astype(dt)
        lags = [int(j) for j in f.lags]
        with np.errstate(over="ignore", invalid="ignore"):
            for t in range(L):
                x = Bu[t].copy()
                for lag, Et in zip(lags, ET):
                    if lag <= t:
                        x += ring[(t - lag) % R] @ Et
                ring[t % R] = x
                y[t] = x @ CT
            y = np.moveaxis(y, 0, -1)                                       # (..., p, L)
            if with_d:
                y = y + np.einsum("ij,...jt->...it", self.D, u)
        if not np.all(np.isfinite(y)):
            warnings.warn(f"simulate: the output holds {int(np.size(y) - np.isfinite(y).sum())} non-finite "
                          "value(s): the system is not stable over this run (check is_stable())",
                          RuntimeWarning, stacklevel=3)
        return y


__all__ = ["DiscreteSSResponses"]
