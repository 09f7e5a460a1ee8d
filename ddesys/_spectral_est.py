"""Cheap estimates of the rightmost characteristic roots of a matrix delay system (private helper).

Used by :mod:`ddesys.norms` to place quadrature breakpoints and frequency grids at the lightly damped
roots, and as a default stability screen. Not a certified root finder (that is :mod:`ddesys.roots`).

Method: Chebyshev collocation of the infinitesimal generator on ``[-tau_max, 0]`` (Breda, Maset &
Vermiglio 2005, SIAM J. Sci. Comput. 27(2), 482-495), whose eigenvalues approximate the roots of
``det M(s)`` of modest modulus, then a few Newton steps on the smallest singular triplet of the exact
``M(s)`` (``s <- s - sigma / (u^H M'(s) v)``), kept when the relative residual is ``< 1e-10``.

Size: every root with ``Re s >= -1 / tau_max`` satisfies ``|s| <= R = ||A|| + e sum_k ||Ad_k||`` (from
``s v = (A + sum_k Ad_k e^{-s tau_k}) v``); ``N = 2 R tau_max + 12`` nodes resolve that disk. The matrix
has ``n (N + 1)`` rows, capped at ``MAX_ROWS``; when the cap binds, ``resolved`` is False and roots of
modulus above ``radius`` may be missed.
"""
from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np

from .charmatrix import char_matrix, char_matrix_ds, relative_residual

MAX_ROWS = 1200          # the dense eigenproblem costs O((n (N + 1))^3): about a second at 1200 rows


class RootEstimate(NamedTuple):
    """Refined root estimates.

    Attributes
    ----------
    roots : complex ndarray ``(r,)``
        Roots found (residual ``< 1e-10``), descending real part.
    abscissa : float
        Largest real part among them (``-inf`` if none).
    radius : float
        Modulus up to which the discretization resolves the roots.
    resolved : bool
        True when ``radius`` covers every root with ``Re s >= -1 / tau_max`` (the node cap did not bind).
    R : float
        The bound ``||A|| + e sum_k ||Ad_k||`` on such roots.
    R0 : float
        ``||A|| + sum_k ||Ad_k||``: every root with ``Re s >= 0`` has ``|s| <= R0``.
    """

    roots: np.ndarray
    abscissa: float
    radius: float
    resolved: bool
    R: float
    R0: float


def _cheb(N):
    """Chebyshev points ``x_j = cos(pi j / N)`` and differentiation matrix (Trefethen 2000, ch. 6)."""
    x = np.cos(np.pi * np.arange(N + 1) / N)
    c = np.ones(N + 1)
    c[0] = c[-1] = 2.0
    c *= (-1.0) ** np.arange(N + 1)
    X = x[:, None] - x[None, :]
    Dm = np.outer(c, 1.0 / c) / (X + np.eye(N + 1))
    Dm -= np.diag(Dm.sum(axis=1))
    return x, Dm


def _lagrange_at(x, xi):
    """Values at ``xi`` of the Lagrange basis on the Chebyshev points ``x`` (barycentric form)."""
    N = x.size - 1
    w = (-1.0) ** np.arange(N + 1)
    w[0] *= 0.5
    w[-1] *= 0.5
    d = xi - x
    hit = np.isclose(d, 0.0, rtol=0, atol=1e-15)
    if hit.any():
        out = np.zeros(N + 1)
        out[np.argmax(hit)] = 1.0
        return out
    q = w / d
    return q / q.sum()


def _newton(A, Ad, tau, s, iters=12):
    """Newton on the smallest singular triplet of ``M(s)``, vectorized over the points ``s``."""
    s = np.array(s, dtype=np.complex128)
    for _ in range(iters):
        U, S, Vh = np.linalg.svd(char_matrix(A, Ad, tau, s))
        u, v = U[..., :, -1], Vh[..., -1, :].conj()
        den = np.einsum("fi,fij,fj->f", u.conj(), char_matrix_ds(A, Ad, tau, s), v)
        step = np.where(np.abs(den) > 0, -S[..., -1] / np.where(den == 0, 1, den), 0)
        step = np.where(np.isfinite(step), step, 0)
        s = s + step
        if np.all(np.abs(step) <= 1e-14 * (1 + np.abs(s))):
            break
    return s


def estimate_roots(A, Ad, tau, max_rows=MAX_ROWS):
    """Rightmost roots of ``det M(s)`` (uncertified estimates; see the module docstring).

    Parameters
    ----------
    A : ``(n, n)``;  Ad : ``(K, n, n)``;  tau : ``(K,)`` (validated, see :func:`check_statespace`)
    max_rows : int
        Cap on the size ``n (N + 1)`` of the discretized generator.

    Returns
    -------
    RootEstimate
    """
    n = A.shape[0]
    nA = float(np.linalg.norm(A, 2))
    nAd = np.array([np.linalg.norm(m, 2) for m in Ad])
    R = nA + np.e * float(nAd.sum())
    R0 = nA + float(nAd.sum())
    live = nAd > 0
    if not live.any():                                          # no delayed coupling: eig(A) exactly
        lam = np.linalg.eigvals(A).astype(np.complex128)
        lam = lam[np.argsort(-lam.real)]
        return RootEstimate(lam, float(lam.real.max()), np.inf, True, R, R0)
    Ad, tau = Ad[live], tau[live]
    tmax = float(tau.max())
    N_want = int(np.ceil(2 * R * tmax)) + 12
    N = int(min(N_want, max(12, max_rows // n - 1)))
    x, Dm = _cheb(N)
    L = np.zeros(((N + 1) * n, (N + 1) * n), dtype=np.result_type(A, Ad, np.float64))
    L[n:, :] = np.kron(Dm[1:] * (2.0 / tmax), np.eye(n))      # phi'(theta_j), j = 1..N
    L[:n, :n] += A                                            # phi'(0) = A phi(0) + sum Ad phi(-tau_k)
    for k in range(tau.size):
        ell = _lagrange_at(x, 1.0 - 2.0 * tau[k] / tmax)
        L[:n, :] += np.kron(ell[None, :], Ad[k])
    lam = np.linalg.eigvals(L)
    radius = N / (2.0 * tmax) if N < N_want else max(R, N / (2.0 * tmax))
    cand = lam[np.abs(lam) <= radius * 1.05]
    if cand.size == 0:
        return RootEstimate(np.zeros(0, np.complex128), -np.inf, radius, N >= N_want, R, R0)
    s = _newton(A, Ad, tau, cand)
    ok = np.isfinite(s)
    ok[ok] = relative_residual(A, Ad, tau, s[ok]) < 1e-10
    s = s[ok]
    s = s[np.argsort(-s.real)]
    keep = []
    for z in s:                                                 # drop duplicates (several eigenvalues, one root)
        if all(abs(z - w) > 1e-8 * (1 + abs(z)) for w in keep):
            keep.append(z)
    roots = np.array(keep, dtype=np.complex128)
    absc = float(roots.real.max()) if roots.size else -np.inf
    return RootEstimate(roots, absc, radius, N >= N_want, R, R0)


def screen_stability(est, is_stable, what):
    """Apply the stability requirement of a norm: ``is_stable`` (None, bool or a callable) else ``est``.

    Raises ``ValueError`` for an unstable (or not provably stable under the estimate) system.
    """
    if callable(is_stable):
        is_stable = is_stable()
    if is_stable is not None:
        if not bool(is_stable):
            raise ValueError(f"{what} needs a stable system; is_stable says it is not")
        return
    if est.radius < est.R0:
        warnings.warn(f"{what}: the spectral stability screen resolves roots up to |s| = {est.radius:.3g} only "
                      f"(unstable roots may reach |s| = {est.R0:.3g}); pass is_stable from an exact test",
                      RuntimeWarning, stacklevel=3)
    if est.abscissa >= -1e-9 * (1 + est.R):
        raise ValueError(f"{what} needs a stable system; a characteristic root was found at real part "
                         f"{est.abscissa:.6g} >= 0 (spectral estimate; pass is_stable=True to override "
                         "with an exact test)")
