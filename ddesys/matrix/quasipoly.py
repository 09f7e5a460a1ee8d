"""Roots of a quasi-polynomial given by its coefficients (qpmr's problem), through a delay system.

``q(s) = sum_k p_k(s) e^{-s d_k}`` with ``d_0 = 0`` and polynomials ``p_k`` is the characteristic
function of the companion realization ``x' = A x + sum_k Ad_k x(t - d_k)``: ``A`` the companion matrix of
``p_0 / lead(p_0)``, and ``Ad_k`` zero but for its last row, ``-p_k / lead(p_0)`` (padded). Its certified
roots (:func:`ddesys.matrix.roots.characteristic_roots`) are the zeros of ``q``. The quasi-polynomial must be
retarded (``deg p_k < deg p_0`` for ``k >= 1``); a neutral one (equal degree) has a neutral realization
(:class:`~ddesys.NeutralStateSpace`).
"""
from __future__ import annotations

import numpy as np

from .charmatrix import real_vector


def companion_realization(coefficients, delays):
    """``(A, Ad, tau)`` whose characteristic function is ``q(s) / lead(p_0)``.

    Parameters
    ----------
    coefficients : sequence of array_like
        ``p_0, p_1, ..., p_K``: coefficients, highest power first (NumPy's convention).
    delays : array_like ``(K,)``
        ``d_1, ..., d_K``, ``> 0`` (``p_0`` has no delay).

    Returns
    -------
    A : ndarray ``(n, n)``
    Ad : ndarray ``(K, n, n)``
    tau : ndarray ``(K,)``

    Raises
    ------
    ValueError
        ``deg p_0 < 1``, a delayed polynomial of degree ``>= deg p_0`` (neutral), delays that do not fit.
    """
    polys = []
    for i, c in enumerate(coefficients):
        v = np.atleast_1d(np.asarray(c, dtype=complex if np.iscomplexobj(c) else float)).reshape(-1)
        if not np.all(np.isfinite(v)):
            raise ValueError(f"coefficients[{i}] must be finite")
        nz = np.flatnonzero(v)
        polys.append(v[nz[0]:] if nz.size else v[-1:] * 0)
    d = real_vector(delays, "delays", "delays (time units)")
    if len(polys) != d.size + 1:
        raise ValueError(f"give one polynomial more than delays (p_0 has none): {len(polys)} polynomials, "
                         f"{d.size} delays")
    if np.any(d <= 0):
        raise ValueError(f"delays must be > 0, got {d.tolist()}")
    p0 = polys[0]
    n = p0.size - 1
    if n < 1 or p0[0] == 0:
        raise ValueError("p_0 must have degree >= 1")
    for k, p in enumerate(polys[1:], 1):
        if p.size - 1 >= n and np.any(p != 0):
            raise ValueError(f"p_{k} has degree {p.size - 1} >= deg p_0 = {n}: a neutral quasi-polynomial "
                             "(use ddesys.NeutralStateSpace)")
    dtype = np.result_type(*polys, float)
    A = np.zeros((n, n), dtype)
    A[:-1, 1:] = np.eye(n - 1)
    A[-1] = -p0[1:][::-1] / p0[0]
    Ad = np.zeros((d.size, n, n), dtype)
    for k, p in enumerate(polys[1:]):
        Ad[k, -1, :p.size] = -p[::-1] / p0[0]
    return A, Ad, d


def quasipolynomial_roots(coefficients, delays, re_min, *, re_max=None, im_range=None, **kwargs):
    """Every zero of ``q(s) = p_0(s) + sum_k p_k(s) e^{-s d_k}`` with ``Re s >= re_min`` (in a rectangle).

    Parameters
    ----------
    coefficients : sequence of array_like
        ``p_0, ..., p_K``, highest power first; ``deg p_k < deg p_0`` for ``k >= 1`` (retarded).
    delays : array_like ``(K,)``
        ``d_1, ..., d_K > 0``.
    re_min : float
        Left edge of the region.
    re_max : float, optional
        Right edge (default: none).
    im_range : (float, float), optional
        ``(im_min, im_max)`` of the rectangle (default: the whole strip).
    **kwargs
        Passed to :func:`ddesys.matrix.roots.characteristic_roots` (``max_grid``, ``tol``, ``certify``).

    Returns
    -------
    RootsResult
        ``certified`` counts every root with ``Re s >= re_min`` (the rectangle's other sides only filter).

    Examples
    --------
    Hayes' equation ``s + 1 + 2 e^{-s}``: its rightmost pair is ``-1 + W_0(-2 e)`` (Lambert W).

    >>> import ddesys
    >>> r = ddesys.quasipolynomial_roots([[1.0, 1.0], [2.0]], [1.0], re_min=-2.0)
    >>> r.certified, complex(round(r.roots[0].real, 6), round(abs(r.roots[0].imag), 6))
    (True, (-0.092484+1.997283j))
    """
    from .roots import characteristic_roots
    from ._roots_result import RootsResult

    A, Ad, tau = companion_realization(coefficients, delays)
    res = characteristic_roots(A, Ad, tau, float(re_min), **kwargs)
    keep = np.ones(res.roots.size, bool)
    if re_max is not None:
        keep &= res.roots.real <= float(re_max)
    if im_range is not None:
        lo, hi = (float(v) for v in im_range)
        keep &= (res.roots.imag >= lo) & (res.roots.imag <= hi)
    if keep.all():
        return res
    return RootsResult(res.roots[keep], res.multiplicity[keep], res.residuals[keep], res.certified, res.count,
                       res.re_min, res.n_grid, res.message + f"; {int(keep.sum())} of them in the rectangle")


__all__ = ["companion_realization", "quasipolynomial_roots"]
