"""H2 and Hinf norms of matrix delay systems (docs/theory.md §9).

For ``x' = A x + sum_k Ad[k] x(t - tau[k]) + B u``, ``y = C x + D u`` (validated by
:func:`ddesys.matrix.charmatrix.check_statespace`; real or complex) the transfer matrix is
``G(s) = C M(s)^{-1} B + D``. Complex systems are not conjugate symmetric (``G(-i w) != conj G(i w)``),
so their norms take the whole frequency line; real ones use ``w >= 0``.

* :func:`freqresp` (from :mod:`ddesys.matrix.freqresp`): ``G(i w)`` by one linear solve per frequency.
* :func:`h2_norm`: adaptive Gauss-Legendre quadrature of ``||G(i w)||_F^2`` on ``|w| <= W`` plus the
  exact leading tail ``2 ||C B||_F^2 / W`` and a proven bound on the rest, ``T3 / W^3``; ``W`` is chosen
  so that bound is below the tolerance.
* :func:`hinf_norm`: a frequency grid resolving the lightly damped roots and the delays, every local
  maximum refined by a bounded scalar maximizer, and a proven bound on ``sigma_max`` beyond the grid.

Both norms need the rightmost roots for their grids: they are estimated by
:func:`ddesys.matrix._spectral_est.estimate_roots` (a Chebyshev discretization of the generator plus Newton).
"""
from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np
from scipy.optimize import minimize_scalar

from ._spectral_est import estimate_roots, screen_stability
from .freqresp import freqresp, response

_GL_X, _GL_W = np.polynomial.legendre.leggauss(10)


class HinfNorm(NamedTuple):
    """The Hinf norm and where it is attained: unpacks as ``value, omega_peak``.

    Attributes
    ----------
    value : float
        ``sup_w sigma_max(G(i w))``.
    omega_peak : float
        A frequency attaining it (rad per time unit); ``inf`` when the supremum is the high-frequency
        limit ``||D||_2``.
    """

    value: float
    omega_peak: float


def require_stable(sys, what):
    """The norms exist for stable systems only: refuse others (``ValueError``) with the spectral abscissa,
    by the system's exact test (``sys.is_stable()``)."""
    if not sys.is_stable():
        raise ValueError(f"{what} of an unstable system (spectral abscissa {sys.spectral_abscissa():.6g} >= 0) "
                         "is infinite")


def _check_rtol(rtol):
    try:
        r = float(rtol)
    except (TypeError, ValueError):
        raise TypeError(f"rtol must be a real number, got {type(rtol).__name__}") from None
    if not (1e-14 <= r < 1):
        raise ValueError(f"rtol must be in [1e-14, 1), got {rtol!r}")
    return r


def _scales(A, Ad, tau, B, C):
    e = float(np.linalg.norm(A, 2) + sum(np.linalg.norm(m, 2) for m in Ad))
    live = np.array([np.any(m != 0) for m in Ad])
    tmax = float(tau[live].max()) if live.any() else 0.0
    return e, tmax


def _peak_points(roots, real, damp_max):
    """Frequencies and widths ``(beta, alpha)`` of the roots with damping ``alpha = -Re s < damp_max``."""
    r = roots[-roots.real < damp_max]
    beta = np.abs(r.imag) if real else r.imag          # s = -alpha + i beta peaks at w = beta
    return beta, np.maximum(-r.real, 1e-300)


# ------------------------------------------------------------------------------------------- H2
def _gl_panels(f, a, b):
    """10-point Gauss-Legendre on each panel ``[a_i, b_i]`` of the vectorized integrand ``f``."""
    half = (b - a) / 2
    x = (a + b)[:, None] / 2 + half[:, None] * _GL_X
    return (f(x.reshape(-1)).reshape(x.shape) @ _GL_W) * half


def _adaptive(f, edges, rtol, scale, max_panels):
    """Globally adaptive Gauss-Legendre (QUADPACK's strategy, vectorized): each panel's error estimate is
    ``|Q(panel) - Q(left half) - Q(right half)|`` (the halves' sum is kept as its value); the panels with
    the largest estimates are bisected until the estimates sum to ``<= rtol * max(value, scale)``.
    Returns ``(value, error_estimate, converged)``."""
    a, b = edges[:-1], edges[1:]
    mid = (a + b) / 2
    Q = _gl_panels(f, a, b)
    QL, QR = _gl_panels(f, a, mid), _gl_panels(f, mid, b)
    while True:
        V = QL + QR
        E = np.abs(V - Q)
        value, err = float(V.sum()), float(E.sum())
        tol = rtol * max(value, scale)
        if err <= tol:
            return value, err, True
        if a.size >= max_panels:
            return value, err, False
        order = np.argsort(-E)
        k = int(np.searchsorted(np.cumsum(E[order]), err - 0.5 * tol)) + 1
        sel = order[:max(1, min(k, max_panels - a.size))]
        keep = np.ones(a.size, bool)
        keep[sel] = False
        ca, cb = np.concatenate([a[sel], mid[sel]]), np.concatenate([mid[sel], b[sel]])
        cQ = np.concatenate([QL[sel], QR[sel]])
        cm = (ca + cb) / 2
        a, b, mid = np.concatenate([a[keep], ca]), np.concatenate([b[keep], cb]), np.concatenate([mid[keep], cm])
        Q = np.concatenate([Q[keep], cQ])
        QL = np.concatenate([QL[keep], _gl_panels(f, ca, cm)])
        QR = np.concatenate([QR[keep], _gl_panels(f, cm, cb)])


def h2_norm(A, Ad, tau, B, C, D, *, rtol=1e-8, is_stable=None, max_panels=2_000_000):
    """H2 norm ``sqrt((1/2 pi) int_{-inf}^{inf} trace(G(i w)^H G(i w)) dw)`` of a stable system.

    Parameters
    ----------
    A, Ad, tau, B, C, D : ndarray
        Validated matrices (:func:`ddesys.matrix.charmatrix.check_statespace`), real or complex.
    rtol : float, default 1e-8
        Target relative accuracy of the norm.
    is_stable : bool or callable, optional
        The caller's stability verdict (e.g. an exact test); default: a spectral estimate of the
        rightmost roots (:mod:`ddesys.matrix._spectral_est`), which warns when it cannot cover every unstable root.
    max_panels : int, default 2e6
        Cap on the quadrature panels (10 points each).

    Returns
    -------
    float
        The norm; ``inf`` when ``D != 0`` (not strictly proper: python-control's convention).

    Raises
    ------
    ValueError
        An unstable system (a root with ``Re s >= 0``), a bad ``rtol``.

    Warns
    -----
    RuntimeWarning
        The quadrature hit ``max_panels`` before meeting ``rtol`` (the estimated error is given).

    Notes
    -----
    The integrand ``f(w) = ||C M(i w)^{-1} B||_F^2`` is integrated on ``[-W, W]`` (``[0, W]``, doubled,
    for real systems) by adaptive Gauss-Legendre bisection, with panel edges at the lightly damped
    roots' frequencies and initial panels of one period ``2 pi / tau_max``. With ``e = ||A||_2 + sum_k
    ||Ad_k||_2``, for ``|w| >= 2 e`` the expansion ``G = CB/(iw) + C E(w) B/(iw)^2 + R`` gives the tail
    ``int_{|w|>W} f = 2 ||CB||_F^2 / W + r``, ``|r| <= T3 / W^3`` with ``T3 = sum_k 8 |Re tr((CB)^H C Ad_k
    B)| / tau_k + (8/3) beta e^2 (beta + ||CB||_F)``, ``beta = ||C||_2 ||B||_F`` (docs/theory.md §9).
    ``W`` makes ``T3 / W^3 <= rtol / 4`` of the integral ``I = 2 pi H2^2``; the quadrature's estimates are
    ``<= rtol / 2`` of ``I`` on ``|w| <= W0 = max(2 e, peaks)`` and ``<= rtol / 4`` beyond, so the estimated
    relative error of ``I`` is ``<= rtol`` (``rtol / 2`` for the norm), else a warning.
    Cost: about ``W tau_max / 2 pi`` panels of 10-30 points, each point one ``n x n`` solve.

    Examples
    --------
    Without delayed coupling, ``x' = -2 x + u`` has ``H2^2 = 1 / 4``:

    >>> from ddesys.matrix.charmatrix import check_statespace
    >>> from ddesys.matrix.norms import h2_norm
    >>> round(h2_norm(*check_statespace([[-2.0]], [[0.0]], 1.0, [[1.0]], [[1.0]])), 8)
    0.5
    """
    rtol = _check_rtol(rtol)
    est = estimate_roots(A, Ad, tau)
    screen_stability(est, is_stable, "h2_norm")
    if np.any(D != 0):
        return float("inf")
    real = not np.iscomplexobj(A)
    e, tmax = _scales(A, Ad, tau, B, C)
    CB = C @ B
    ncb = float(np.linalg.norm(CB))
    beta = float(np.linalg.norm(C, 2) * np.linalg.norm(B))
    T3 = (8 / 3) * beta * e**2 * (beta + ncb)
    for k in range(tau.size):
        T3 += 8 * abs(np.trace(CB.conj().T @ C @ Ad[k] @ B).real) / tau[k]

    def f(w):
        G = response(A, Ad, tau, B, C, w)
        return np.einsum("fpm,fpm->f", G.conj(), G).real

    beta_r, alpha_r = _peak_points(est.roots, real, np.inf)
    W0 = max(2 * e, float(np.max(np.abs(beta_r) + 10 * alpha_r, initial=0.0)), 1e-300)
    period = 2 * np.pi / tmax if tmax > 0 else W0 / 16
    pts = [np.linspace(0.0 if real else -W0, W0, int(np.ceil((1 if real else 2) * W0 / min(period, W0 / 16))) + 1)]
    for bt, al in zip(beta_r, alpha_r):
        if al < period:                                              # lightly damped: mark the peak
            pts.append(bt + al * np.array([-4.0, -2.0, -1.0, 0.0, 1.0, 2.0, 4.0]))
    edges = np.unique(np.concatenate(pts))
    edges = edges[(edges >= (0.0 if real else -W0)) & (edges <= W0)]
    sym = 2.0 if real else 1.0
    I0, err0, conv = _adaptive(f, edges, 0.5 * rtol, 1e-300, max_panels)       # error budget of I = H2^2
    I = sym * I0 + 2 * ncb**2 / W0                                              # (2 pi): 1/2 on |w| <= W0,
    W = max(W0, (T3 / (0.25 * rtol * I)) ** (1 / 3)) if I > 0 else W0           # 1/4 beyond, 1/4 the tail
    err = sym * err0
    if W > W0 and conv:
        n_pan = int(np.ceil((W - W0) / min(period, W0))) + 1
        if n_pan > max_panels:
            W = W0 + min(period, W0) * max_panels
            n_pan = max_panels
        ext = np.linspace(W0, W, n_pan + 1)
        I1, err1, conv = _adaptive(f, ext, 0.25 * rtol / sym if real else 0.125 * rtol, I, max_panels)
        if not real:
            I2, err2, conv2 = _adaptive(f, -ext[::-1], 0.125 * rtol, I, max_panels)
            I1, err1, conv = I1 + I2, err1 + err2, conv and conv2
        I = I - 2 * ncb**2 / W0 + sym * I1 + 2 * ncb**2 / W
        err += sym * err1
    tail = T3 / W**3
    if not conv or err + tail > 1.01 * rtol * I:
        warnings.warn(f"h2_norm: quadrature not converged to rtol={rtol:g} (estimated relative error of the "
                      f"norm {0.5 * (err + tail) / max(I, 1e-300):.2g}); raise max_panels", RuntimeWarning,
                      stacklevel=2)
    return float(np.sqrt(max(I, 0.0) / (2 * np.pi)))


# ------------------------------------------------------------------------------------------- Hinf
def top_singular(G):
    """``sigma_max`` of each matrix of ``G`` ``(F, p, m)``: ``(F,)`` (a vector's norm for one row or column)."""
    if G.shape[1] == 1 or G.shape[2] == 1:
        return np.sqrt(np.einsum("fpm,fpm->f", G.conj(), G).real)
    return np.linalg.svd(G, compute_uv=False)[:, 0]


def _sigma_max(A, Ad, tau, B, C, D, w):
    return top_singular(response(A, Ad, tau, B, C, w) + D)


def hinf_norm(A, Ad, tau, B, C, D, *, rtol=1e-9, is_stable=None, max_grid=2_000_000):
    """Hinf norm ``sup_w sigma_max(G(i w))`` of a stable system and a peak frequency.

    Parameters
    ----------
    A, Ad, tau, B, C, D : ndarray
        Validated matrices (:func:`ddesys.matrix.charmatrix.check_statespace`), real or complex.
    rtol : float, default 1e-9
        Relative accuracy of each refined local maximum.
    is_stable : bool or callable, optional
        As in :func:`h2_norm`.
    max_grid : int, default 2e6
        Cap on the grid size.

    Returns
    -------
    HinfNorm
        ``(value, omega_peak)``; ``omega_peak = inf`` when the supremum is the limit ``||D||_2`` of
        ``sigma_max`` at high frequency. For a real system ``omega_peak >= 0``.

    Raises
    ------
    ValueError
        An unstable system, a bad ``rtol``.

    Warns
    -----
    RuntimeWarning
        The grid cap kept the search from covering the frequencies where the bound beyond the grid
        exceeds the value found (the bound is given), or the root estimate could not resolve every
        lightly damped root.

    Notes
    -----
    The grid: uniform with spacing ``1 / (4 tau_max)`` on ``[0, W]`` (``[-W, W]`` for complex systems)
    plus, around each estimated root ``s = -alpha + i beta`` with ``alpha < 1 / tau_max``, 25 points of
    spacing ``alpha / 2``. Roots with ``Re s >= -1 / tau_max`` lie in ``|s| <= ||A|| + e sum ||Ad_k||``,
    and the estimate resolves that disk (else a warning), so every peak narrower than about four grid
    steps has its own local grid. Each local maximum within 20% of the best is refined by a bounded
    Brent search to ``rtol``. Beyond ``W`` (``|w| >= W > e = ||A||_2 + sum_k ||Ad_k||_2``), ``G(i w) =
    D + CB / (i w) + R`` with ``||R|| <= ||C|| ||B|| e / (|w| (|w| - e))``, and ``||D - i x CB||`` is convex in
    ``x = 1/w``, so ``sigma_max <= max(||D||, ||D -+ i CB / W||) + ||C|| ||B|| e / (W (W - e))``; ``W`` is
    extended until this bound is within ``rtol`` of the value found.
    Guaranteed: the value is a local maximum refined to ``rtol`` (or ``||D||_2``), and the global one
    when the grid resolves every peak (true when the root estimate found every lightly damped root).

    Examples
    --------
    ``x' = -2 x + u``: ``|G(i w)| = 1 / |i w + 2|``, largest (``1/2``) at ``w = 0``:

    >>> from ddesys.matrix.charmatrix import check_statespace
    >>> from ddesys.matrix.norms import hinf_norm
    >>> v, w = hinf_norm(*check_statespace([[-2.0]], [[0.0]], 1.0, [[1.0]], [[1.0]]))
    >>> round(v, 10), round(w, 6)
    (0.5, 0.0)
    """
    rtol = _check_rtol(rtol)
    est = estimate_roots(A, Ad, tau)
    screen_stability(est, is_stable, "hinf_norm")
    real = not np.iscomplexobj(A)
    e, tmax = _scales(A, Ad, tau, B, C)
    nD = float(np.linalg.norm(D, 2)) if D.size else 0.0
    cb = float(np.linalg.norm(C, 2) * np.linalg.norm(B, 2))
    if not est.resolved:
        warnings.warn(f"hinf_norm: lightly damped roots above |s| = {est.radius:.3g} could not be located "
                      f"(bound {est.R:.3g}); peaks there are searched on the uniform grid only",
                      RuntimeWarning, stacklevel=2)
    beta_r, alpha_r = _peak_points(est.roots, real, np.inf)
    W = 1.05 * max(2 * e, est.R, float(np.max(np.abs(beta_r) + 8 * alpha_r, initial=0.0)), 1e-300)
    d0 = 1 / (4 * tmax) if tmax > 0 else W / 400
    d0 = min(d0, W / 400)
    CB = C @ B
    beta2 = cb * e

    def tail(w):  # sup of sigma_max over |omega| >= w (w > e): convexity in 1/omega + the O(1/w^2) rest
        first = max(nD, float(np.linalg.norm(D - 1j * CB / w, 2)), float(np.linalg.norm(D + 1j * CB / w, 2)))
        return first + beta2 / (w * (w - e))

    return peak_search(lambda w: _sigma_max(A, Ad, tau, B, C, D, w), list(zip(beta_r, alpha_r)), real=real, W=W,
                       d0=d0, nD=nD, tail=tail if cb > 0 else None, rtol=rtol, max_grid=max_grid, what="hinf_norm")


def _grid_peaks(sig, lo, hi, d0, local, rtol, floor=0.0):
    """The largest ``sig`` on ``[lo, hi]``: a grid of spacing ``d0`` plus 25 points around each lightly
    damped root ``(beta, alpha)`` of ``local``; every local maximum within 20% of the best (or of
    ``floor``) refined by a bounded Brent search. Returns ``(value, omega, grid_size)``."""
    grid = [np.linspace(lo, hi, int(np.ceil((hi - lo) / d0)) + 1)]
    for bt, al in local:
        if al < 4 * d0:
            grid.append(bt + al * np.linspace(-6, 6, 25))
    g = np.unique(np.concatenate(grid))
    g = g[(g >= lo) & (g <= hi)]
    val = sig(g)
    gl = np.concatenate([[-np.inf], val, [-np.inf]])
    imax = np.flatnonzero((gl[1:-1] >= gl[:-2]) & (gl[1:-1] >= gl[2:]))
    imax = imax[val[imax] >= 0.8 * max(val.max(), floor)]
    imax = imax[np.argsort(-val[imax])][:50]
    best_v, best_w = float(val.max()), float(g[np.argmax(val)])
    for i in imax:
        a, b = g[max(i - 1, 0)], g[min(i + 1, g.size - 1)]
        if b <= a:
            continue
        c = float(g[i])             # centred variable: Brent's sqrt(eps) |x| floor scales with the bracket
        r = minimize_scalar(lambda x: -sig(np.array([c + x]))[0], bounds=(a - c, b - c), method="bounded",
                            options={"xatol": 0.05 * np.sqrt(rtol) * (b - a)})
        for w_, v_ in ((c + float(r.x), -float(r.fun)), (c, float(val[i]))):
            if v_ > best_v:
                best_v, best_w = v_, w_
    return best_v, best_w, g.size


def peak_search(sig, local, *, real, W, d0, nD, tail, rtol, max_grid, what):
    """``sup_w sig(w)`` of a frequency response whose size beyond ``W`` is bounded by ``tail(w)``.

    Parameters
    ----------
    sig : callable
        ``omega (F,) -> sigma_max (F,)``.
    local : list of ``(beta, alpha)``
        Lightly damped roots ``s = -alpha + i beta``: their peaks get a local grid.
    real : bool
        A real system: ``w >= 0`` only.
    W, d0 : float
        The first grid ``[0, W]`` (``[-W, W]``) and its spacing.
    nD : float
        The high-frequency value attained in the limit (``||D||_2``).
    tail : callable or None
        ``w -> `` an upper bound of ``sig`` on ``|omega| >= w``, non-increasing; ``None``: ``sig`` is
        within ``nD`` beyond ``W``.
    rtol, max_grid, what
        Accuracy, grid cap and the caller's name (for the warning).

    Returns
    -------
    HinfNorm
    """
    lo = 0.0 if real else -W
    best, w_best, used = _grid_peaks(sig, lo, W, d0, local, rtol)
    target = max(best, nD) * (1 + rtol)
    if tail is not None and tail(W) > target:
        sides = 1 if real else 2
        W_cap = W + d0 * max(max_grid - used, 1000) / sides
        if tail(W_cap) > target:
            W2 = W_cap
            warnings.warn(f"{what}: grid cap reached; beyond |w| = {W2:.4g} sigma_max is only bounded by "
                          f"{tail(W2):.10g} (value found {max(best, nD):.10g})", RuntimeWarning, stacklevel=3)
        else:
            lo_w, hi_w = W, W_cap                                   # tail() is non-increasing: bisect
            for _ in range(200):
                mid = np.sqrt(lo_w * hi_w)
                lo_w, hi_w = (lo_w, mid) if tail(mid) <= target else (mid, hi_w)
                if hi_w - lo_w <= d0:
                    break
            W2 = hi_w
        for a, b in ((W, W2),) if real else ((W, W2), (-W2, -W)):
            v, w_, _ = _grid_peaks(sig, a, b, d0, [], rtol, floor=best)
            if v > best:
                best, w_best = v, w_
    if nD >= best:
        return HinfNorm(nD, float("inf"))
    return HinfNorm(float(best), abs(w_best) if real else w_best)


__all__ = ["HinfNorm", "freqresp", "h2_norm", "hinf_norm", "peak_search", "require_stable", "top_singular"]
