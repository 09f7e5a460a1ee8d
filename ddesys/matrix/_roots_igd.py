"""Spectral discretization of a matrix delay system and Newton's method on its characteristic matrix.

Private helpers of :mod:`ddesys.matrix.roots` and :mod:`ddesys.matrix.chart` (docs/theory.md, "Characteristic roots
of matrix delay systems"). Two pieces:

* :func:`igd_matrix`: the infinitesimal generator of ``x'(t) = A x(t) + sum_k Ad[k] x(t - tau[k])``
  discretized by collocation on ``N + 1`` Chebyshev points of ``[-tau_max, 0]`` (Breda, Maset &
  Vermiglio 2005); its eigenvalues approximate the characteristic roots, best the small ones;
* :func:`newton`: Newton's method on ``det M(s)`` written as ``s <- s - 1 / trace(M(s)^{-1} M'(s))``
  on the *exact* characteristic matrix, vectorized over starting points (and over systems).

Both accept one system (``A (n, n)``, ``Ad (K, n, n)``, ``tau (K,)``) or a stack of ``B`` systems of one
shape (``A (B, n, n)``, ``Ad (B, K, n, n)``, ``tau (B, K)``).
"""
from __future__ import annotations

import contextlib

import numpy as np

from .charmatrix import char_matrix, char_matrix_ds

__all__ = ["cheb_nodes", "lagrange_rows", "igd_matrix", "igd_eigvals", "newton", "batch_char_matrix",
           "auto_grid", "single_blas_thread"]


def cheb_nodes(N):
    """Chebyshev points ``x_j = cos(pi j / N)``, ``j = 0..N`` (``x_0 = 1``), and the differentiation
    matrix ``D`` ``(N + 1, N + 1)`` of the interpolating polynomial (Trefethen, *Spectral Methods in
    MATLAB*, 2000, ch. 6), differences by the sine identity and the diagonal by the negative row sums."""
    j = np.arange(N + 1)
    x = np.cos(np.pi * j / N)
    c = np.where((j == 0) | (j == N), 2.0, 1.0) * (-1.0) ** j
    # x_i - x_j = 2 sin(pi (i + j) / 2N) sin(pi (j - i) / 2N), accurate for neighbouring nodes
    dx = 2.0 * np.sin(np.pi * (j[:, None] + j[None, :]) / (2 * N)) * np.sin(
        np.pi * (j[None, :] - j[:, None]) / (2 * N))
    D = np.outer(c, 1.0 / c) / (dx + np.eye(N + 1))
    D[j, j] = 0.0
    D[j, j] = -D.sum(axis=1)
    return x, D


def lagrange_rows(N, xq):
    """Values ``l_j(xq)`` of the Lagrange basis on the Chebyshev points (barycentric formula, weights
    ``(-1)^j``, halved at both ends): ``(..., N + 1)`` for ``xq (...)`` in ``[-1, 1]``."""
    x = np.cos(np.pi * np.arange(N + 1) / N)
    w = (-1.0) ** np.arange(N + 1)
    w[0] *= 0.5
    w[-1] *= 0.5
    xq = np.asarray(xq, dtype=float)[..., None]
    diff = xq - x
    hit = np.abs(diff) < 1e-15
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = w / diff
        L = terms / terms.sum(axis=-1, keepdims=True)
    rows_hit = hit.any(axis=-1)
    L = np.where(rows_hit[..., None], hit.astype(float), L)
    return L


def igd_matrix(A, Ad, tau, N):
    """The discretized infinitesimal generator ``(..., n (N + 1), n (N + 1))``.

    The state is ``phi`` at ``theta_j = tau_max (x_j - 1) / 2`` (``theta_0 = 0``, ``theta_N = -tau_max``),
    ``n`` entries per node. Block row 0 is ``A phi(0) + sum_k Ad[k] phi(-tau[k])`` with
    ``phi(-tau[k]) = sum_j l_j(1 - 2 tau[k] / tau_max) phi_j``; block rows ``1..N`` are ``(2 / tau_max)
    (D (x) I_n)`` restricted to those rows.
    """
    A = np.asarray(A)
    Ad = np.asarray(Ad)
    tau = np.asarray(tau, dtype=float)
    n = A.shape[-1]
    tm = tau.max(axis=-1)                                                  # (...)
    x, D = cheb_nodes(N)
    L = lagrange_rows(N, 1.0 - 2.0 * tau / tm[..., None])                  # (..., K, N+1)
    top = np.einsum("...kj,...kpq->...pjq", L, Ad).astype(np.result_type(A, Ad, float))
    top[..., :, 0, :] += A
    top = top.reshape(A.shape[:-2] + (n, (N + 1) * n))
    low = np.kron(D[1:], np.eye(n))                                        # (N n, (N+1) n)
    low = (2.0 / tm)[..., None, None] * low
    return np.concatenate([top, np.broadcast_to(low, top.shape[:-2] + low.shape[-2:])], axis=-2)  # no copy


@contextlib.contextmanager
def single_blas_thread():
    """One BLAS thread inside the block, the caller's setting restored after it (threadpoolctl, when
    installed). Dense eigenvalue problems of a few hundred unknowns gain nothing from BLAS threads, and
    lose up to 10x when those threads compete with other work for the cores."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:                                                     # pragma: no cover
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def igd_eigvals(A, Ad, tau, N):
    """Eigenvalues of :func:`igd_matrix`: complex ``(..., n (N + 1))`` (one BLAS thread)."""
    with np.errstate(all="ignore"), single_blas_thread():
        return np.linalg.eigvals(igd_matrix(A, Ad, tau, N)).astype(np.complex128)


def auto_grid(tau_max, s_max, n_min=8):
    """Chebyshev degree that resolves ``exp(s theta)`` on ``[-tau_max, 0]`` for ``|s| <= s_max``:
    interpolation of ``exp(z x)`` on ``[-1, 1]`` converges once the degree exceeds about
    ``e |z| / 2``, ``z = s tau_max / 2``, so ``N = 0.7 tau_max s_max + 8`` (at least ``n_min``)."""
    return int(max(n_min, np.ceil(0.7 * tau_max * s_max + 8)))


def batch_char_matrix(A, Ad, tau, s, b):
    """``M(s)`` and ``M'(s)`` ``(c, n, n)`` for points ``s (c,)`` of the systems ``b (c,)`` of a stack."""
    E = np.exp(-s[:, None] * tau[b])                                        # (c, K)
    n = A.shape[-1]
    eye = np.eye(n)
    M = s[:, None, None] * eye - A[b] - np.einsum("ck,ckij->cij", E, Ad[b])
    Mp = eye + np.einsum("ck,ckij->cij", E * tau[b], Ad[b])
    return M, Mp


def _log_derivative(M, Mp):
    """``trace(M^{-1} M')`` ``(c,)``; ``nan`` where ``M`` is singular or not finite."""
    try:
        return np.trace(np.linalg.solve(M, Mp), axis1=-2, axis2=-1)
    except np.linalg.LinAlgError:
        out = np.full(M.shape[0], np.nan + 0j)
        for i in range(M.shape[0]):
            try:
                out[i] = np.trace(np.linalg.solve(M[i], Mp[i]))
            except np.linalg.LinAlgError:
                out[i] = np.inf                                            # M singular: s is a root
        return out


def newton(A, Ad, tau, s0, *, tol=1e-12, maxit=40, batch=None, fn=None):
    """Newton's method ``s <- s - 1 / trace(M(s)^{-1} M'(s))`` from each starting point.

    Parameters
    ----------
    A, Ad, tau : one system, or a stack (then ``batch`` gives each point's system)
    s0 : complex ``(c,)``
    tol : float
        Converged when the step is ``<= tol (1 + |s|)``.
    batch : int array ``(c,)``, optional
        System index of each point for a stack.
    fn : callable, optional
        ``s (c,) -> (log |f|, f / |f|, f' / f)`` of another function ``f`` with the zeros of ``det M``
        (one system only); its ``f' / f`` replaces ``trace(M^{-1} M')``.

    Returns
    -------
    s : complex ``(c,)``
    converged : bool ``(c,)``
        Quadratic convergence to ``tol``, or (for a multiple root, where Newton converges linearly and
        stalls at ``u^{1/m}``) steps below ``1e-7 (1 + |s|)`` that stopped shrinking faster than
        linearly: such points are merged and their multiplicity counted by the caller.
    """
    s = np.array(s0, dtype=np.complex128).reshape(-1)
    c = s.size
    conv = np.zeros(c, bool)
    active = np.isfinite(s)
    last = np.full(c, np.inf)
    stall = np.zeros(c, int)
    with np.errstate(all="ignore"):
        for _ in range(maxit):
            idx = np.nonzero(active)[0]
            if idx.size == 0:
                break
            sa = s[idx]
            if fn is not None:
                g = fn(sa)[2]
                g = np.where(np.isnan(g), np.inf, g)                       # f = 0 exactly: a root
            else:
                if batch is None:
                    M, Mp = char_matrix(A, Ad, tau, sa), char_matrix_ds(A, Ad, tau, sa)
                else:
                    M, Mp = batch_char_matrix(A, Ad, tau, sa, batch[idx])
                g = _log_derivative(M, Mp)
            exact = np.isinf(g)                                            # singular M: a root
            step = np.where(exact, 0.0, 1.0 / g)
            bad = ~np.isfinite(step)
            snew = sa - np.where(bad, 0.0, step)
            size = np.abs(step)
            scale = 1.0 + np.abs(snew)
            done = exact | (size <= tol * scale)
            slow = (size <= 1e-7 * scale) & (size > 0.3 * last[idx])
            stall[idx] = np.where(slow, stall[idx] + 1, 0)
            done |= stall[idx] >= 3
            s[idx] = snew
            last[idx] = size
            conv[idx] = done & ~bad
            active[idx] = ~(done | bad | ~np.isfinite(snew))
    return s, conv & np.isfinite(s)
