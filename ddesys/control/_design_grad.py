"""Derivatives for fixed-order design (private helper of :mod:`ddesys.control.design`).

* :func:`system_derivatives`: the derivatives of a parameterized system's matrices ``(A, Ad, tau, B, C, D)``
  with respect to the real parameters, from the caller, by complex step or by central differences;
* :func:`rightmost`: the rightmost characteristic roots (fast fixed-degree path or the certified one);
* :func:`root_gradient`: ``ds/dp_j = -u^H (dM/dp_j) v / (u^H M'(s) v)`` at a simple root ``s`` with right
  and left null vectors ``v``, ``u`` of ``M(s)``;
* :func:`sigma_gradient`: ``d sigma_max(G(i w)) / dp_j = Re(u^H (dG/dp_j) v)`` at fixed ``w`` (at a peak of
  ``sigma_max`` the peak's motion does not enter: its ``w``-derivative is zero).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..matrix._roots_igd import igd_matrix, newton
from ..matrix.charmatrix import char_matrix, char_matrix_ds

_FIELDS = ("A", "Ad", "tau", "B", "C", "D")


class SystemDerivative(NamedTuple):
    """Derivatives of the matrices with respect to ``P`` parameters: ``A (P, n, n)``, ``Ad (P, K, n, n)``,
    ``tau (P, K)``, ``B (P, n, m)``, ``C (P, p, n)``, ``D (P, p, m)``."""

    A: np.ndarray
    Ad: np.ndarray
    tau: np.ndarray
    B: np.ndarray
    C: np.ndarray
    D: np.ndarray


def call_system(system_fn, p):
    """``system_fn(p)`` as a :class:`~ddesys.DelayStateSpace`: a :class:`~ddesys.DelayIOSystem` (a loop
    built with ``ddesys.feedback``) gives its internal dynamics, whose roots are the loop's."""
    from ..matrix.statespace import DelayStateSpace

    sys = system_fn(p)
    if not isinstance(sys, DelayStateSpace) and hasattr(sys, "internal_dynamics"):
        inner = sys.internal_dynamics()
        if inner is None:
            raise ValueError("system_fn(p) reads no state late: its roots are the eigenvalues of A, a "
                             "delay-free design problem")
        sys = inner
    if not isinstance(sys, DelayStateSpace):
        raise TypeError(f"system_fn(p) must return a DelayStateSpace or a DelayIOSystem, got {type(sys).__name__}")
    return sys


def _matrices(sys):
    return (sys.A, sys.Ad, sys.tau, sys.B, sys.C, sys.D)


def _check_same_shape(base, other, where):
    for name, a, b in zip(_FIELDS, _matrices(base), _matrices(other)):
        if a.shape != b.shape:
            raise ValueError(f"system_fn changed the shape of {name} from {a.shape} to {b.shape} at {where}: "
                             "the structure (states, delays, inputs, outputs) must not depend on p")


def system_derivatives(system_fn, p, sys0, *, derivative=None, method="central"):
    """Derivatives of ``system_fn(p)``'s matrices with respect to each entry of ``p``.

    Parameters
    ----------
    system_fn : callable
        ``p (P,) -> DelayStateSpace``.
    p : ndarray ``(P,)``
    sys0 : DelayStateSpace
        ``system_fn(p)``.
    derivative : callable, optional
        ``derivative(p) -> mapping`` with any of the keys ``"A", "Ad", "tau", "B", "C", "D"`` (a missing
        key means that matrix does not depend on ``p``), each ``(P,) + shape``.
    method : {"central", "complex"}
        Without ``derivative``: central differences with step ``eps^(1/3) max(1, |p_j|)`` (exact up to
        rounding for matrices affine in ``p``), or the complex step ``Im(f(p + i h e_j)) / h`` (exact to
        rounding, but ``system_fn`` must be analytic in ``p`` and the system real; delays that depend
        on ``p`` need ``"central"``).

    Returns
    -------
    SystemDerivative
    """
    P = p.size
    base = _matrices(sys0)
    if derivative is not None:
        got = derivative(p.copy())
        unknown = set(got) - set(_FIELDS)
        if unknown:
            raise ValueError(f"derivative(p) returned unknown keys {sorted(unknown)}; use {_FIELDS}")
        out = []
        for name, m in zip(_FIELDS, base):
            if name in got and got[name] is not None:
                d = np.asarray(got[name])
                if d.shape != (P,) + m.shape:
                    raise ValueError(f"derivative(p)[{name!r}] must have shape {(P,) + m.shape}, got {d.shape}")
                out.append(d)
            else:
                out.append(np.zeros((P,) + m.shape))
        return SystemDerivative(*out)
    if method not in ("central", "complex"):
        raise ValueError(f"method must be 'central' or 'complex', got {method!r}")
    real = not np.iscomplexobj(sys0.A)
    out = [np.zeros((P,) + m.shape, dtype=m.dtype) for m in base]
    for j in range(P):
        e = np.zeros(P)
        e[j] = 1.0
        if method == "complex":
            if not real:
                raise ValueError("method='complex' needs a real system (its matrices carry the step in their "
                                 "imaginary parts); use method='central'")
            h = 1e-30 * max(1.0, abs(p[j]))
            try:
                sj = call_system(system_fn, p + 1j * h * e)
            except TypeError as exc:
                raise ValueError(f"method='complex': system_fn rejected a complex p ({exc}); a delay that "
                                 "depends on p, or non-analytic code, needs method='central'") from exc
            _check_same_shape(sys0, sj, f"p + i h e_{j}")
            for k, m in enumerate(_matrices(sj)):
                out[k][j] = np.imag(m) / h
        else:
            h = np.cbrt(np.finfo(float).eps) * max(1.0, abs(p[j]))
            sp, sm = call_system(system_fn, p + h * e), call_system(system_fn, p - h * e)
            _check_same_shape(sys0, sp, f"p + h e_{j}")
            _check_same_shape(sys0, sm, f"p - h e_{j}")
            for k, (a, b) in enumerate(zip(_matrices(sp), _matrices(sm))):
                out[k][j] = (a - b) / (2 * h)
    return SystemDerivative(*out)


# ------------------------------------------------------------------------------------------ roots
MAX_FAST_GRID = 120          # the fast path's largest default degree: an eigenproblem of n (N + 1) rows


def _grid_for(A, Ad, tau, alpha):
    """Chebyshev degree resolving roots with ``Re s >= alpha``: ``|s| <= ||A|| + sum ||Ad_k|| e^{-alpha tau_k}``
    (``N = 0.7 tau_max |s| + 8``), between 16 and ``min(MAX_FAST_GRID, 1600 / n)``."""
    r = np.linalg.norm(A, 2) + sum(np.linalg.norm(m, 2) * np.exp(min(-alpha * t, 50.0)) for m, t in zip(Ad, tau))
    nmax = max(16, min(MAX_FAST_GRID, 1600 // A.shape[0] - 1))
    return int(min(nmax, max(16, np.ceil(0.7 * float(tau.max()) * r + 8))))


def _fast_roots(A, Ad, tau, N, q):
    """Rightmost ``q`` eigenvalues of the degree-``N`` discretization, Newton-refined on the exact ``M(s)``;
    an eigenvalue whose Newton iteration did not converge is kept as it is (a root estimate), so a root
    that Newton cannot settle (a multiple root) never drops out of the abscissa."""
    with np.errstate(all="ignore"):             # the callers limit BLAS threads around their loops
        ev = np.linalg.eigvals(igd_matrix(A, Ad, tau, N)).astype(np.complex128)
    top = ev[np.argsort(-ev.real)[:min(q, ev.size)]]
    s, conv = newton(A, Ad, tau, top, tol=1e-10, maxit=100)
    cand = np.where(conv, s, top)
    cand = cand[np.isfinite(cand)]
    picked = []
    for z in cand[np.argsort(-cand.real)]:
        if all(abs(z - w) > 1e-6 * (1 + abs(z)) for w in picked):
            picked.append(z)
    return np.array(picked, dtype=complex)


def rightmost(sys, *, n_roots=4, certify=False, n_grid=None):
    """The rightmost characteristic roots of ``sys``, descending real part.

    ``certify=False``: a Chebyshev discretization of fixed degree (chosen from the matrix norms at the
    abscissa found, raised once if the abscissa asks for more) refined by Newton on the exact ``M(s)``
    (the machinery of :func:`ddesys.matrix.rightmost.rightmost_roots_batch`; unconverged eigenvalues are
    kept as estimates). ``certify=True``: the certified roots of :meth:`ddesys.DelayStateSpace.roots`
    (slower, and slow at multiple roots).

    Returns
    -------
    complex ndarray ``(r,)``, ``r >= 1``
    """
    A, Ad, tau = sys.A, sys.Ad, sys.tau
    if certify:
        z = sys.roots().roots
        if z.size == 0:
            raise RuntimeError("no characteristic root found")
        return z
    q = 2 * A.shape[0] + 2 * n_roots + 2
    N = int(n_grid) if n_grid is not None else _grid_for(A, Ad, tau, 0.0)
    for _ in range(3):
        z = _fast_roots(A, Ad, tau, N, q)
        if n_grid is not None or z.size == 0:
            break
        N2 = _grid_for(A, Ad, tau, float(z[0].real))
        if N2 <= N:
            break
        N = N2
    if z.size == 0:
        raise RuntimeError(f"no characteristic root estimate at Chebyshev degree {N}; pass n_grid or certify=True")
    return z[np.lexsort((-z.imag, -np.round(z.real, 12)))][:max(n_roots, 1) * 2]


def null_vectors(sys, s):
    """Right and left null vectors ``v``, ``u`` (unit) of ``M(s)`` from its SVD: ``M v ~ 0``, ``u^H M ~ 0``."""
    M = char_matrix(sys.A, sys.Ad, sys.tau, np.asarray(s, dtype=complex))
    U, _, Vh = np.linalg.svd(M)
    return Vh[-1].conj(), U[:, -1]


def dM_dp(sys, dsys, s):
    """``dM(s)/dp_j = -dA_j - sum_k dAd_jk e^{-s tau_k} + sum_k s Ad_k e^{-s tau_k} dtau_jk``: ``(P, n, n)``."""
    E = np.exp(-s * sys.tau)                                                 # (K,)
    out = -dsys.A - np.einsum("k,pkij->pij", E, dsys.Ad)
    out = out + np.einsum("pk,kij->pij", s * E * dsys.tau, sys.Ad)
    return out


def root_gradient(sys, dsys, s):
    """``ds/dp`` ``(P,)`` complex at the root ``s``, and ``|u^H M'(s) v|`` (small: a multiple root)."""
    v, u = null_vectors(sys, s)
    Mp = char_matrix_ds(sys.A, sys.Ad, sys.tau, np.asarray(s, dtype=complex))
    den = u.conj() @ Mp @ v
    num = np.einsum("i,pij,j->p", u.conj(), dM_dp(sys, dsys, s), v)
    return -num / den, float(abs(den))


def sigma_gradient(sys, dsys, omega):
    """``d sigma_max(G(i omega)) / dp`` ``(P,)`` at a fixed frequency (``inf``: ``G = D``)."""
    if not np.isfinite(omega):
        U, _, Vh = np.linalg.svd(sys.D)
        u1, v1 = U[:, 0], Vh[0].conj()
        return np.real(np.einsum("i,pij,j->p", u1.conj(), dsys.D, v1))
    s = 1j * float(omega)
    M = char_matrix(sys.A, sys.Ad, sys.tau, np.asarray(s))
    X = np.linalg.solve(M, sys.B)                                            # M^{-1} B   (n, m)
    Y = np.linalg.solve(M.T, sys.C.T).T                                      # C M^{-1}   (p, n)
    G = sys.C @ X + sys.D
    U, _, Vh = np.linalg.svd(G)
    u1, v1 = U[:, 0], Vh[0].conj()
    a, b = Y.conj().T @ u1, X @ v1                                           # (n,), (n,)
    val = (np.einsum("i,pij,j->p", u1.conj(), dsys.C, b) + np.einsum("i,pij,j->p", a.conj(), dsys.B, v1)
           + np.einsum("i,pij,j->p", u1.conj(), dsys.D, v1)
           - np.einsum("i,pij,j->p", a.conj(), dM_dp(sys, dsys, s), b))
    return np.real(val)


__all__ = ["SystemDerivative", "call_system", "dM_dp", "null_vectors", "rightmost", "root_gradient", "sigma_gradient",
           "system_derivatives"]
