"""Cheap estimates of the rightmost characteristic roots of a matrix delay system (private helper).

Used by :mod:`ddesys.matrix.norms` to place quadrature breakpoints and frequency grids at the lightly damped
roots, and as a default stability screen. Not a certified root finder (that is :mod:`ddesys.matrix.roots`).

Method: the Chebyshev collocation of the infinitesimal generator and the Newton iteration on the exact
``M(s)`` of :mod:`ddesys.matrix._roots_igd` (the one implementation, shared with :mod:`ddesys.matrix.roots`), sized to a
disk and capped in rows; refined roots are kept when the relative residual is ``< 1e-10``.

Size: every root with ``Re s >= -1 / tau_max`` satisfies ``|s| <= R = ||A|| + e sum_k ||Ad_k||`` (from
``s v = (A + sum_k Ad_k e^{-s tau_k}) v``); ``N = 2 R tau_max + 12`` nodes resolve that disk. The matrix
has ``n (N + 1)`` rows, capped at ``MAX_ROWS``; when the cap binds, ``resolved`` is False and roots of
modulus above ``radius`` may be missed.
"""
from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np

from ._roots_igd import igd_eigvals, newton
from .charmatrix import relative_residual

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
    lam = igd_eigvals(A, Ad, tau, N)                             # the discretized generator (one BLAS thread)
    radius = N / (2.0 * tmax) if N < N_want else max(R, N / (2.0 * tmax))
    cand = lam[np.abs(lam) <= radius * 1.05]
    if cand.size == 0:
        return RootEstimate(np.zeros(0, np.complex128), -np.inf, radius, N >= N_want, R, R0)
    s, _conv = newton(A, Ad, tau, cand)
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
