"""Continuous neutral delay systems: :class:`NeutralStateSpace`.

    x'(t) - sum_k H[k] x'(t - tau[k]) = A x(t) + sum_k Ad[k] x(t - tau[k]) + B u(t),   y = C x + D u

The characteristic matrix is ``M(s) = s (I - sum_k H_k e^{-s tau_k}) - A - sum_k Ad_k e^{-s tau_k}``. Unlike
a retarded system, a neutral one has infinitely many roots in some vertical strips: they cluster along
the vertical chains of the zeros of the difference operator's ``det(I - sum_k H_k e^{-s tau_k})``, whose
real parts have the supremum ``c_D`` (Hale and Verduyn Lunel, *Introduction to Functional Differential
Equations*, 1993, ch. 9; Michiels and Niculescu, *Stability, Control, and Computation for Time-Delay
Systems*, SIAM, 2nd ed. 2014, ch. 1). The spectral abscissa is ``max(c_D, rightmost root right of
c_D)``, and ``c_D`` can jump under arbitrarily small changes of the delays: the system keeps its
stability under such changes (is *strongly* stable) iff ``gamma_0 = max_theta rho(sum_k H_k e^{i
theta_k}) < 1`` and no root lies in the closed right half-plane (Hale and Verduyn Lunel, IMA J. Math.
Control Inf. 19 (2002); Michiels et al., SIAM J. Control Optim. 48 (2009)).
"""
from __future__ import annotations

import warnings

import numpy as np

from ._neutral_difference import commensurate_base, difference_data
from ._neutral_roots import find_roots, neutral_char_matrix, relative_residual, root_box
from ._neutral_types import EssentialSpectrum, NeutralAbscissa, RegionTooClose, StrongStability, check_h
from .base import MatrixLTI
from .charmatrix import check_statespace, real_vector
from .roots import RootsResult

__all__ = ["EssentialSpectrum", "NeutralAbscissa", "NeutralStateSpace", "StrongStability"]


class NeutralStateSpace(MatrixLTI):
    """A continuous linear neutral system with ``K`` discrete delays::

        x'(t) - sum_k H[k] x'(t - tau[k]) = A x(t) + sum_k Ad[k] x(t - tau[k]) + B u(t),   y = C x + D u

    Parameters
    ----------
    A : array_like ``(n, n)``
    Ad : array_like ``(n, n)`` or a sequence of ``K`` such matrices
        Delayed-state matrices (a zero matrix for a delay with a neutral term only).
    H : array_like ``(n, n)`` or a sequence of ``K`` such matrices
        Delayed-derivative matrices, one per delay (a zero matrix for a delay without one); for
        ``n = 1`` also a number or a vector of ``K`` numbers.
    tau : float or array_like ``(K,)``
        The delays, ``> 0``.
    B, C, D : array_like, optional
        ``(n, m)``, ``(p, n)``, ``(p, m)``; defaults ``B = I``, ``C = I``, ``D = 0``.

    Attributes
    ----------
    A, Ad, H, tau, B, C, D : ndarray
        Validated, read-only; ``Ad`` and ``H`` ``(K, n, n)``; float64 or complex128.
    dt : 0

    Raises
    ------
    ValueError
        Shapes that do not fit, non-finite entries, a delay ``<= 0``.
    TypeError
        Non-numeric input.

    See Also
    --------
    DelayStateSpace : the retarded case ``H = 0``.

    Notes
    -----
    ``M(s) = s (I - sum_k H_k e^{-s tau_k}) - A - sum_k Ad_k e^{-s tau_k}``. The roots right of ``c_D``
    (:meth:`essential_bound`) are finitely many in every half-plane ``Re s >= re_min > c_D``; left of it
    lie infinitely many.

    Examples
    --------
    ``x'(t) - 0.5 x'(t - 1) = -2 x(t) + 0.5 x(t - 1)``:

    >>> from ddesys.matrix.neutral import NeutralStateSpace
    >>> sys = NeutralStateSpace(A=[[-2.0]], Ad=[[0.5]], H=0.5, tau=1.0)
    >>> sys
    NeutralStateSpace(n_states=1, n_inputs=1, n_outputs=1, tau=[1.0])
    >>> round(sys.essential_bound(), 6)                   # ln(0.5) / 1
    -0.693147
    >>> bool(sys.is_stable()), bool(sys.is_stable(method="strong"))
    (True, True)
    """

    dt = 0

    def __init__(self, A, Ad, H, tau, B=None, C=None, D=None):
        data = check_statespace(A, Ad, tau, B, C, D)
        Hm = check_h(H, data.A.shape[0], data.tau.size)
        dt = np.result_type(data.A, Hm)
        for name, value in data._asdict().items():
            value = np.array(value if name == "tau" else value.astype(dt))
            value.setflags(write=False)
            setattr(self, name, value)
        Hm = Hm.astype(dt)
        Hm.setflags(write=False)
        self.H = Hm
        self._freeze()

    # ---------------------------------------------------------------- shapes (n_states, n_inputs, n_outputs: MatrixLTI)
    @property
    def n_delays(self):
        """Number of delays ``K``."""
        return int(self.tau.size)

    def _sys(self):
        return self.A, self.Ad, self.H, self.tau

    def characteristic_matrix(self, s):
        """``M(s) = s (I - sum_k H_k e^{-s tau_k}) - A - sum_k Ad_k e^{-s tau_k}`` at the points ``s``.

        Parameters
        ----------
        s : array_like, complex ``(...)``

        Returns
        -------
        ndarray, complex ``(..., n, n)``
        """
        return neutral_char_matrix(*self._sys(), np.asarray(s, dtype=complex))

    # ---------------------------------------------------------------- difference operator
    def difference_spectrum(self):
        """The difference operator's spectral data (:class:`EssentialSpectrum`): ``c_D``, ``C_D``, ``gamma0``.

        Examples
        --------
        The textbook case (Michiels and Niculescu 2014, ch. 1): ``x'(t) + x'(t-1)/2 + x'(t-2)/2 = -x(t)``
        has ``c_D = -ln(2)/2`` for the delays ``(1, 2)`` but ``C_D = 0``: ``gamma0 = 1``.

        >>> from ddesys.matrix.neutral import NeutralStateSpace
        >>> e = NeutralStateSpace([[-1.0]], [[[0.0]], [[0.0]]], [-0.5, -0.5], [1.0, 2.0]).difference_spectrum()
        >>> round(e.c_D, 6), round(e.C_D, 6), round(e.gamma0, 6)
        (-0.346574, 0.0, 1.0)
        """
        if "diff" not in self._cache:
            active = np.array([np.any(h != 0) for h in self.H])
            if not active.any():
                e = EssentialSpectrum(-np.inf, True, -np.inf, (-np.inf, -np.inf), 0.0, (0.0, 0.0), True, None)
            else:
                d = difference_data(self.H[active], self.tau[active])
                e = EssentialSpectrum(float(d["c_d"]), bool(d["c_d_exact"]), float(d["C_D"]),
                                      tuple(map(float, d["C_D_bounds"])), float(d["gamma0"]),
                                      tuple(map(float, d["gamma0_bounds"])), bool(d["commensurate"]), d["base"])
            self._cache["diff"] = e
        return self._cache["diff"]

    def essential_bound(self):
        """``c_D``: the supremum of the real parts of the zeros of ``det(I - sum_k H_k e^{-s tau_k})``.

        Returns
        -------
        float
            ``-inf`` without neutral term. See :meth:`difference_spectrum` for ``C_D`` and ``gamma0``.
        """
        return self.difference_spectrum().c_D

    # ---------------------------------------------------------------- roots
    def roots(self, re_min=None):
        """Every characteristic root with ``Re s >= re_min``, for ``re_min > c_D``.

        Parameters
        ----------
        re_min : float, optional
            Must exceed :meth:`essential_bound` (infinitely many roots lie right of any line left of it).
            Default: ``c_D + 0.1 / max(tau)`` (``-1 / max(tau)`` without neutral term).

        Returns
        -------
        RootsResult
            As :meth:`DelayStateSpace.roots`: ``roots`` (descending real part), ``multiplicity``,
            ``residuals``, ``certified`` (the argument-principle count over the whole region equals the
            roots found), ``count``, ``re_min``, ``message``; ``n_grid`` is ``None`` (no discretization).

        Raises
        ------
        ValueError
            ``re_min <= c_D``, a non-finite ``re_min``, or a region too large to search.
        """
        e = self.difference_spectrum()
        tmax = float(self.tau.max())
        if re_min is None:
            re_min = e.c_D + 0.1 / tmax if np.isfinite(e.c_D) else -1.0 / tmax
        re_min = float(real_vector([re_min], "re_min", "a real number")[0])
        if not re_min > e.c_D:
            raise ValueError(f"re_min = {re_min:.6g} must exceed the essential bound c_D = {e.c_D:.6g}: the "
                             "zeros of det(I - sum_k H_k exp(-s tau_k)) have real parts up to c_D, and "
                             "infinitely many characteristic roots cluster along them")
        key = ("roots", re_min)
        if key not in self._cache:
            self._cache[key] = self._roots(re_min, e)
        return self._cache[key]

    def _roots(self, re_min, e):
        base = commensurate_base(self.tau) if e.exact and e.commensurate else None
        tmax = float(self.tau.max())
        last = None
        for shift in (0.0, -1e-7, 1e-7):
            r0 = re_min + shift * (1 + abs(re_min))
            if not r0 > e.c_D:
                continue
            box, _ = root_box(*self._sys(), r0, base)
            if box is None:
                return RootsResult(np.zeros(0, complex), np.zeros(0, int), np.zeros(0), True, 0, r0, None,
                                   "no root can lie in the region (a priori bound)")
            n_est = self.n_states * (box[3] - box[2]) * tmax / (2 * np.pi) + self.n_states
            if n_est > 5000:
                raise RegionTooClose(f"the region Re s >= {r0:.6g} may hold about {int(n_est)} roots (box "
                                     f"|Im s| <= {box[3]:.3g}): re_min is too close to c_D = {e.c_D:.6g}; raise it")
            z, mult, total, cert, msg = find_roots(self._sys(), box, 0.5 / tmax)
            last = (r0, z, mult, total, cert, msg)
            if total is not None:
                break
        r0, z, mult, total, cert, msg = last
        keep = z.real >= r0 - 1e-12 * (1 + np.abs(z))
        z, mult = z[keep], mult[keep]
        order = np.lexsort((-z.imag, -np.round(z.real, 9)))
        z, mult = z[order], mult[order]
        zz = np.repeat(z, mult)
        mm = np.repeat(mult, mult)
        res = relative_residual(*self._sys(), zz) if zz.size else np.zeros(0)
        return RootsResult(zz, mm, res, bool(cert), total, r0, None, msg)

    def poles(self, re_min=None):
        """The characteristic roots as an array (python-control's name): ``roots(re_min).roots``.

        Parameters
        ----------
        re_min : float, optional
            As :meth:`roots` (must exceed :meth:`essential_bound`).

        Returns
        -------
        ndarray, complex ``(r,)``
            Descending real part, repeated by multiplicity.

        Raises
        ------
        ValueError
            As :meth:`roots`.
        """
        return self.roots(re_min).roots

    def spectral_abscissa(self, detail=False, margin=None):
        """``max(c_D, max Re of the roots)``.

        Parameters
        ----------
        detail : bool
            Return a :class:`NeutralAbscissa` (which of ``c_D`` and the roots dominates) instead of a float.
        margin : float, optional
            Roots are searched down to ``Re s >= c_D + margin`` (default ``0.05 / max(tau)``): when none
            lies there the value is ``c_D`` and the true abscissa is in ``[c_D, c_D + margin)``.

        Returns
        -------
        float or NeutralAbscissa

        Warns
        -----
        RuntimeWarning
            No root was found right of a line ``c_D + d`` (``d > margin``) left of which the region holds
            too many roots to search: the value is then ``c_D`` and the result's ``margin`` is ``d``.

        Notes
        -----
        The region is chosen here, from the right: the half-planes ``Re s >= c_D + d`` for ``d = max(1,
        1 - c_D), d/2, d/4, ...`` down to ``margin``, the first one holding a root giving the rightmost
        root (every root right of the line is in it). Near ``c_D`` the roots accumulate along the chains
        of the difference operator and a half-plane close to it can hold thousands of roots; a narrow
        strip is searched only when every region right of it is empty.
        """
        e = self.difference_spectrum()
        tmax = float(self.tau.max())
        margin = 0.05 / tmax if margin is None else float(margin)
        if not (np.isfinite(margin) and margin > 0):
            raise ValueError(f"margin must be a positive number, got {margin!r}")
        if np.isfinite(e.c_D):
            r, margin = self._rightmost_region(e, margin)
        else:
            for k in range(8):
                r = self.roots(-(2.0 ** k) / tmax)
                if r.roots.size:
                    break
        if r.roots.size:
            top = complex(r.roots[0])
            out = NeutralAbscissa(max(top.real, e.c_D), "roots" if top.real >= e.c_D else "essential", top,
                                  e.c_D, margin, r.certified)
        else:
            out = NeutralAbscissa(e.c_D, "essential", None, e.c_D, margin, r.certified)
        return out if detail else out.value

    def _rightmost_region(self, e, margin):
        """``(roots result, d)`` of the first half-plane ``Re s >= c_D + d`` holding a root, ``d`` halved
        from ``max(1, 1 - c_D)`` down to ``margin``; a region too large to search ends the walk (with a
        ``RuntimeWarning``) at the last one searched."""
        d = max(1.0, 1.0 - e.c_D, margin)
        last = None
        while True:
            try:
                r = self.roots(e.c_D + d)
            except RegionTooClose as exc:
                if last is None:
                    raise
                warnings.warn(f"spectral_abscissa: no root right of Re s = {last[0].re_min:.6g}, and the region "
                              f"further left cannot be searched ({exc}); the abscissa is in [c_D, c_D + "
                              f"{last[1]:.3g})", RuntimeWarning, stacklevel=3)
                return last
            last = (r, d)
            if r.roots.size or d <= margin:
                return last
            d = max(margin, 0.5 * d)

    # ---------------------------------------------------------------- stability
    def is_stable(self, method="exact", **kwargs):
        """Exponential stability (``method="exact"``) or strong stability (``method="strong"``).

        Parameters
        ----------
        method : {"exact", "strong"}, default "exact"
            ``"exact"``: ``c_D < 0`` and no root with ``Re s >= 0`` (the spectral abscissa is negative).
            ``"strong"``: :meth:`strong_stability`, stability that survives small changes of the delays.
            ``"sufficient"`` is not offered for neutral systems.
        **kwargs
            None is taken (the exact test has no options).

        Returns
        -------
        bool

        Raises
        ------
        ValueError
            ``method="sufficient"`` or an unknown method.
        TypeError
            Keyword options.
        """
        if method == "strong":
            return self.strong_stability().strongly_stable
        if method == "sufficient":
            raise ValueError("is_stable(method='sufficient') is not available for neutral systems; use "
                             "'exact' or 'strong'")
        return super().is_stable(method, **kwargs)

    def _is_stable_exact(self):
        e = self.difference_spectrum()
        if not e.c_D < 0:
            return False
        return self.roots(0.0).roots.size == 0

    def _is_stable_sufficient(self):                      # pragma: no cover - refused in is_stable
        raise ValueError("no sufficient test for neutral systems")

    def strong_stability(self):
        """Strong stability (Hale and Verduyn Lunel 2002; Michiels et al. 2009).

        Returns
        -------
        StrongStability
            ``strongly_stable`` iff ``gamma0 = max_theta rho(sum_k H_k e^{i theta_k}) < 1`` and no root
            lies in ``Re s >= 0``.
        """
        if "strong" in self._cache:
            return self._cache["strong"]
        e = self.difference_spectrum()
        lo, hi = e.gamma0_bounds
        if lo >= 1:
            out = StrongStability(False, False, e.gamma0, e.gamma0_bounds, None, True,
                                  f"gamma0 = {e.gamma0:.6g} >= 1: the difference operator is not strongly stable; "
                                  "small delay changes move root chains to Re s >= C_D >= 0")
        else:
            r = self.roots(0.0)
            n_un = int(r.roots.size)
            cert = hi < 1 and r.certified
            ok = n_un == 0
            out = StrongStability(ok, True, e.gamma0, e.gamma0_bounds, n_un, cert,
                                  f"gamma0 = {e.gamma0:.6g} < 1 (bracket [{lo:.6g}, {hi:.6g}]); {n_un} roots in "
                                  f"Re s >= 0 ({r.message})")
        self._cache["strong"] = out
        return out

    # ---------------------------------------------------------------- frequency domain
    def transfer(self, s):
        """Transfer matrix ``G(s) = C M(s)^{-1} B + D`` at complex points ``s``.

        Parameters
        ----------
        s : array_like, complex ``(F,)``

        Returns
        -------
        ndarray, complex ``(p, m, F)``

        Raises
        ------
        numpy.linalg.LinAlgError
            A point ``s`` where ``M(s)`` is singular (a characteristic root).
        """
        s = np.asarray(s, dtype=complex).reshape(-1)
        out = np.empty((s.size, self.n_outputs, self.n_inputs), complex)
        for i in range(0, s.size, 4096):
            z = s[i:i + 4096]
            X = np.linalg.solve(self.characteristic_matrix(z), np.broadcast_to(self.B, (z.size,) + self.B.shape))
            out[i:i + 4096] = np.einsum("pn,fnm->fpm", self.C, X)
        return np.moveaxis(out, 0, -1) + self.D[..., None]

