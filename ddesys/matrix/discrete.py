"""Discrete matrix delay systems.

:class:`DiscreteDelayStateSpace` is the matrix generalization of the diagonal
:class:`~ddesys.DiscreteDelaySystem` (same index conventions, docs/theory.md §2)::

    x_t = Phi x_{t-1} + sum_k G_k ((1 - a_k) x_{t-k_k} + a_k x_{t-k_k-1}) + B u_t,    x_{t<0} = 0
    y_t = C x_t + D u_t,                         delay_k = k_k + a_k steps >= 1

with real or complex matrices. Its transfer function is ``F(z) = C P(z)^-1 B + D`` with
``P(z) = I - Phi z^-1 - sum_k G_k ((1 - a_k) z^-k_k + a_k z^-(k_k+1))``; stability is decided by a certified
winding count of ``det P`` on the unit circle (:mod:`ddesys.matrix.discrete_stability`), never by the dense
lifted companion matrix. :func:`ddesys.matrix.discretize.zoh_statespace` discretizes the continuous
``x' = A x + sum_k Ad_k x(t - tau_k) + B u`` into one (the input and the delayed state held over a step).
"""
from __future__ import annotations

import re
import warnings

import numpy as np

from . import discrete_radius as _rad
from . import discrete_stability as _st
from .._validate import as_array, check_delay, check_dt
from ..budget import check_bytes
from .charmatrix import check_statespace
from ..interpolation import split_delay
from .discrete_response import DiscreteSSResponses
from ..lti import DelayLTI

KERNEL_MAX_BYTES = 2**30     # working memory of transfer() / kernel(method="fft") (argument max_bytes)
POLES_MAX_SIZE = 1024        # poles(): largest lifted companion size n J by default
_CHUNK = 2**14               # points per batched solve


def _renamed(exc):
    """``check_statespace``'s message in this class's argument names."""
    msg = re.sub(r"\bAd\b", "G", str(exc))
    msg = re.sub(r"\bA\b", "Phi", msg)
    return type(exc)(re.sub(r"\btau\b", "delay", msg))


class DiscreteDelayStateSpace(DiscreteSSResponses, DelayLTI):
    """A discrete linear system with delayed-state feedback, in state-space form (module docstring).

    Parameters
    ----------
    Phi : array_like ``(n, n)``
        Main-branch matrix.
    G : array_like ``(n, n)`` or a sequence of ``K`` of them (``(K, n, n)``)
        Delayed-branch matrices, one per delay.
    delay : float or array_like ``(K,)``
        Delays in steps, real, in ``[1, MAX_DELAY_STEPS]``; split as ``k = floor(delay)``,
        ``alpha = delay - k`` (linear interpolation, docs/theory.md §2.3).
    B, C, D : array_like, optional
        ``(n, m)``, ``(p, n)``, ``(p, m)``; defaults ``I``, ``I``, ``0`` (a 1-D ``B`` is a column, a 1-D
        ``C`` a row, a scalar ``D`` broadcasts).
    dt : True or float, default True
        ``True`` for an unspecified step, else the step in time units (kept by :func:`~ddesys.zoh_statespace`).

    Attributes
    ----------
    Phi, G, delay, B, C, D : ndarray (read-only; float64, or complex128 when any matrix is complex)
    k, alpha : ndarray ``(K,)``
        int64 and float64 parts of ``delay``.
    dt : True or float

    Raises
    ------
    ValueError, TypeError
        Bad shapes, non-finite or non-numeric entries, a complex delay, a delay outside
        ``[1, MAX_DELAY_STEPS]``, a bad ``dt``: naming the argument.

    Examples
    --------
    >>> import numpy as np
    >>> from ddesys.matrix.discrete import DiscreteDelayStateSpace
    >>> sys = DiscreteDelayStateSpace([[0.5, 0.1], [0.0, 0.3]], [[0.2, 0.0], [0.1, 0.2]], delay=2.5,
    ...                               B=[1.0, 0.0], C=[0.0, 1.0])
    >>> sys
    DiscreteDelayStateSpace(n=2, inputs=1, outputs=1, delay=[2.5], dt=True)
    >>> bool(sys.is_stable()), round(float(sys.sufficient_margin()), 4)
    (True, 0.2289)
    >>> np.round(sys.kernel(6)[0, 0], 4)
    array([0.    , 0.    , 0.05  , 0.09  , 0.0745, 0.0704])
    """

    def __init__(self, Phi, G, delay, B=None, C=None, D=None, dt=True):
        delay = as_array(np, delay, "delay", "real").reshape(-1)
        check_delay(delay, "delay")
        try:
            data = check_statespace(Phi, G, delay, B, C, D)
        except (ValueError, TypeError) as exc:
            raise _renamed(exc) from None
        self.dt = check_dt(dt)
        for name in ("A", "Ad", "tau", "B", "C", "D"):
            arr = getattr(data, name)
            arr.setflags(write=False)
            self.__dict__[{"A": "Phi", "Ad": "G", "tau": "delay"}.get(name, name)] = arr
        k, alpha = split_delay(self.delay)
        k.setflags(write=False)
        alpha.setflags(write=False)
        self.k, self.alpha = k, alpha
        self._form = _st.lag_form(self.Phi, self.G, k, alpha)
        self._freeze()

    # ------------------------------------------------------------------ shapes
    @property
    def n_states(self):
        """``n``."""
        return self.Phi.shape[0]

    @property
    def n_inputs(self):
        """``m``."""
        return self.B.shape[1]

    @property
    def n_outputs(self):
        """``p``."""
        return self.C.shape[0]

    @property
    def lifted_size(self):
        """``n J``: degree of ``det(z^J P(z))``, size of the lifted companion matrix (``J`` the largest lag,
        ``k + 1`` where ``alpha > 0``)."""
        return self.n_states * self._form.degree

    def __repr__(self):
        d = ", ".join(f"{s:.6g}" for s in self.delay[:6]) + (", ..." if self.delay.size > 6 else "")
        return (f"DiscreteDelayStateSpace(n={self.n_states}, inputs={self.n_inputs}, outputs={self.n_outputs}, "
                f"delay=[{d}], dt={self.dt})")

    # ------------------------------------------------------------------ frequency domain
    def _char(self, zinv_pow):
        """``P`` from the powers ``z^-lag`` ``(F, L)``: ``(F, n, n)``."""
        f = self._form
        return np.eye(f.n) - (zinv_pow @ f.E.reshape(f.lags.size, -1)).reshape(-1, f.n, f.n)

    def _response(self, zinv_pow, max_bytes):
        """``C P^-1 B`` ``(F, p, m)`` at points given by their powers ``z^-lag`` ``(F, L)``."""
        n, m, p = self.n_states, self.n_inputs, self.n_outputs
        F = zinv_pow.shape[0]
        check_bytes(16 * F * (p * m + 2) + 48 * min(F, _CHUNK) * n * (n + m), f"the transfer function at {F} points "
                    f"(n = {n})", "pass max_bytes= or fewer points", max_bytes, KERNEL_MAX_BYTES)
        out = np.empty((F, p, m), np.complex128)
        for a in range(0, F, _CHUNK):
            P = self._char(zinv_pow[a:a + _CHUNK])
            with np.errstate(all="ignore"):
                try:
                    out[a:a + _CHUNK] = self.C @ np.linalg.solve(P, np.broadcast_to(self.B, (P.shape[0], n, m)))
                except np.linalg.LinAlgError:                     # a point exactly at a pole
                    for i, Pi in enumerate(P):
                        try:
                            out[a + i] = self.C @ np.linalg.solve(Pi, self.B)
                        except np.linalg.LinAlgError:
                            out[a + i] = np.inf
        return out

    def transfer(self, z, max_bytes=None):
        """The transfer matrix ``F(z) = C P(z)^-1 B + D`` at complex points (exact).

        Parameters
        ----------
        z : array_like, complex ``(F,)``
            Nonzero points (flattened).
        max_bytes : int, optional
            Memory budget (default :data:`KERNEL_MAX_BYTES`).

        Returns
        -------
        ndarray, complex ``(p, m, F)``
            ``inf`` at a point that is exactly a pole.

        Raises
        ------
        ValueError
            ``z`` contains 0 or a non-finite value.

        Examples
        --------
        >>> from ddesys.matrix.discrete import DiscreteDelayStateSpace
        >>> sys = DiscreteDelayStateSpace([[0.5]], [[0.25]], delay=2.0, B=[1.0], C=[1.0])
        >>> sys.transfer([1.0]).real                  # 1 / (1 - 0.5 - 0.25)
        array([[[4.]]])
        """
        z = as_array(np, z, "z", "complex").reshape(-1)
        if np.any(z == 0):
            raise ValueError("z must not contain 0 (P(z) has a pole of order J there)")
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            zp = np.exp(-np.log(z)[:, None] * self._form.lags)                 # (F, L)
        H = self._response(zp, max_bytes) + self.D
        return np.moveaxis(H, 0, -1)

    def freqresp(self, omega, max_bytes=None):
        """The frequency response ``F(e^{i omega})``.

        Parameters
        ----------
        omega : array_like, real ``(F,)``
            Radians per step.
        max_bytes : int, optional
            Memory budget of the evaluation (default :data:`KERNEL_MAX_BYTES`).

        Returns
        -------
        ndarray, complex ``(p, m, F)``

        Raises
        ------
        ValueError
            Non-finite ``omega``, a budget exceeded (:class:`ddesys.budget.BudgetError`).
        TypeError
            Complex or non-numeric ``omega``.

        Examples
        --------
        >>> import numpy as np
        >>> from ddesys.matrix.discrete import DiscreteDelayStateSpace
        >>> sys = DiscreteDelayStateSpace([[0.5]], [[0.25]], delay=2.0, B=[1.0], C=[1.0])
        >>> np.round(sys.freqresp([0.0, np.pi])[0, 0].real, 4)      # 1/(1-0.75), 1/(1+0.5-0.25)
        array([4. , 0.8])
        """
        omega = as_array(np, omega, "omega", "real").reshape(-1)
        zp = np.exp(-1j * omega[:, None] * self._form.lags)
        return np.moveaxis(self._response(zp, max_bytes) + self.D, 0, -1)

    # ------------------------------------------------------------------ stability
    def sufficient_margin(self):
        """``1 - ||Phi||_2 - sum_k ||G_k||_2``: positive proves stability for every delay (Rouche).

        Returns
        -------
        float
        """
        return float(1.0 - np.linalg.norm(self.Phi, 2) - sum(np.linalg.norm(g, 2) for g in self.G))

    def _is_complex(self):
        return self.Phi.dtype.kind == "c"

    def _is_stable_sufficient(self):
        return self.sufficient_margin() > 0

    def stability_report(self, max_bytes=None, max_evals=None):
        """The exact test with its certificate (:class:`~ddesys.matrix.discrete_stability.StabilityReport`).

        Skipped (answered True) when :meth:`sufficient_margin` is positive; otherwise the certified
        winding count of ``det P`` on the unit circle, ``O(n J)`` samples plus local refinement.
        Cached for the default budgets.

        Parameters
        ----------
        max_bytes : int, optional
            Budget of the count (default ``ddesys.matrix.discrete_stability.EXACT_MAX_BYTES``, 1 GiB, capped
            by :mod:`ddesys.budget`): its ``M`` samples at their working memory each, which bounds its
            time too; a count over it is refused with :class:`~ddesys.budget.BudgetError` (a
            ``ValueError``) before any work.
        max_evals : int, optional
            Evaluation budget of the refinement; past it the report says ``certified=False``.

        Returns
        -------
        StabilityReport
            ``stable``, ``certified``, ``roots_outside``, ``method``, ``evaluations``, ``message``.

        Examples
        --------
        >>> from ddesys.matrix.discrete import DiscreteDelayStateSpace
        >>> r = DiscreteDelayStateSpace([[0.5]], [[0.7]], delay=2.0).stability_report()
        >>> r.stable, r.certified, r.roots_outside, r.method
        (False, True, 1, 'winding')
        """
        key = ("report", max_bytes, max_evals)
        if key not in self._cache:
            self._cache[key] = _st.stability_report(self._form, self.sufficient_margin(), max_bytes, max_evals)
        return self._cache[key]

    def _is_stable_exact(self, max_bytes=None, max_evals=None):
        rep = self.stability_report(max_bytes, max_evals)
        if not rep.certified:
            warnings.warn(f"is_stable: stability could not be certified ({rep.message}); answering False "
                          "(at best marginally stable)", RuntimeWarning, stacklevel=3)
        return bool(rep.stable)

    def spectral_radius(self, rtol=1e-12, max_bytes=None):
        """Largest modulus of the roots of ``det(z^J P(z))`` (poles of the lifted system).

        Companion eigenvalues when :attr:`lifted_size` ``<= 256``; otherwise bisection on the radius with
        the certified count on ``|z| = r`` (``O(n J log(1/rtol))``).

        Parameters
        ----------
        rtol : float, default 1e-12
            Relative width at which the bisection stops.
        max_bytes : int, optional
            Budget of each count (as for :meth:`stability_report`).

        Returns
        -------
        float

        Raises
        ------
        ddesys.budget.BudgetError
            A count over the budget (a long delay: its time grows with ``n J``), at once: :meth:`is_stable`
            answers with one count, and with none when :meth:`sufficient_margin` is positive.

        Warns
        -----
        RuntimeWarning
            When a count on the way could not be certified (a root within the resolution of a circle).
        """
        rad, _, cert = _rad.spectral_radius(self._form, rtol=rtol, max_bytes=max_bytes)
        if not cert:
            warnings.warn("spectral_radius: a root count could not be certified; the value is a best "
                          "effort", RuntimeWarning, stacklevel=2)
        return rad

    def decay_bound(self):
        """An upper bound on the spectral radius (the Rouche radius when below 1, else the certified upper
        end of a bisection to ``rtol = 1e-6``): drives the FFT contour."""
        if "decay" not in self._cache:
            r = _rad.rouche_radius(self._form)
            if r >= 1:
                r = _rad.spectral_radius(self._form, rtol=1e-6)[1] * (1 + 1e-9)
            self._cache["decay"] = r
        return self._cache["decay"]

    def poles(self, max_size=POLES_MAX_SIZE):
        """All ``n J`` roots of ``det(z^J P(z))``: eigenvalues of the lifted companion matrix (``O((n J)^3)``).

        Parameters
        ----------
        max_size : int, default :data:`POLES_MAX_SIZE`

        Returns
        -------
        ndarray, complex ``(n J,)``

        Raises
        ------
        ValueError
            ``n J > max_size``: use :meth:`is_stable` or :meth:`spectral_radius`.
        """
        if self.lifted_size > max_size:
            raise ValueError(f"poles(): the lifted companion matrix has size n J = {self.lifted_size} > "
                             f"max_size = {max_size}; use is_stable() or spectral_radius(), which avoid it")
        return np.linalg.eigvals(_rad.companion_matrix(self._form))


__all__ = ["DiscreteDelayStateSpace", "KERNEL_MAX_BYTES"]
