"""Rightmost characteristic roots of a stack of continuous matrix delay systems, batched, no certificate.

The fast path for parameter studies (:mod:`ddesys.matrix.chart`): a Chebyshev discretization of the
generator of fixed degree (:mod:`ddesys.matrix._roots_igd`) for every system at once, its rightmost
eigenvalues refined by Newton on the exact ``det M(s)``. :func:`ddesys.matrix.roots.characteristic_roots`
is the certified path for one system.
"""
from __future__ import annotations

import numpy as np

from ._roots_count import MERGE_RTOL
from ._roots_igd import igd_eigvals, newton


def rightmost_roots_batch(A, Ad, tau, *, n_grid, n_roots=1, n_newton=None, tol=1e-10, maxit=30):
    """Rightmost roots of a stack of systems of one shape: fixed degree, Newton-refined, no certificate.

    Parameters
    ----------
    A : ``(B, n, n)``;  Ad : ``(B, K, n, n)``;  tau : ``(B, K)``
        Validated arrays (float64 or complex128, ``tau > 0``).
    n_grid : int
        Chebyshev degree ``N`` for every system.
    n_roots : int
        Distinct roots returned per system.
    n_newton : int, optional
        Rightmost eigenvalues refined per system (default ``2 n + 2``).

    Returns
    -------
    roots : complex ``(B, n_roots)``
        Descending real part; ``nan`` where fewer roots converged.
    estimate : float ``(B,)``
        Largest real part of a converged root, else of the discretization's eigenvalues.
    converged : bool ``(B,)``
        Whether some Newton iterate converged for the system.

    Examples
    --------
    >>> import numpy as np
    >>> from ddesys.matrix.rightmost import rightmost_roots_batch
    >>> tau = np.array([[1.0], [1.6]])                                      # x' = -x(t - tau)
    >>> roots, est, ok = rightmost_roots_batch(np.zeros((2, 1, 1)), -np.ones((2, 1, 1, 1)), tau, n_grid=16)
    >>> np.round(est, 4), ok                 # Re W_0(-tau) / tau
    (array([-0.3181,  0.0082]), array([ True,  True]))
    """
    A, Ad, tau = np.asarray(A), np.asarray(Ad), np.asarray(tau, dtype=float)
    B, n = A.shape[0], A.shape[-1]
    ev = igd_eigvals(A, Ad, tau, int(n_grid))                             # (B, n (N + 1))
    q = min(ev.shape[1], n_newton or 2 * n + 2)
    top = np.take_along_axis(ev, np.argsort(-ev.real, axis=1)[:, :q], axis=1)
    b = np.repeat(np.arange(B), q)
    s, conv = newton(A, Ad, tau, top.reshape(-1), tol=tol, maxit=maxit, batch=b)
    s, conv = s.reshape(B, q), conv.reshape(B, q)
    sr = np.where(conv, s.real, -np.inf)
    order = np.argsort(-sr, axis=1)
    s, conv = np.take_along_axis(s, order, axis=1), np.take_along_axis(conv, order, axis=1)
    roots = np.full((B, n_roots), np.nan + 0j)
    for i in range(B):
        picked = []
        for z in s[i][conv[i]]:
            if all(abs(z - p) > MERGE_RTOL * (1 + abs(z)) for p in picked):
                picked.append(z)
                if len(picked) == n_roots:
                    break
        roots[i, :len(picked)] = picked
    ok = conv.any(axis=1)
    estimate = np.where(ok, np.where(conv, s.real, -np.inf).max(axis=1), ev.real.max(axis=1))
    return roots, estimate, ok


__all__ = ["rightmost_roots_batch"]
