"""H2 and Hinf norms of a :class:`~ddesys.DelayIOSystem` (a loop built with ``feedback``, a plant with
dead time), exact with every delay (docs/theory.md §9.7).

In the explicit form (:meth:`ddesys.DelayIOSystem.explicit_form`) the transfer matrix is
``G(s) = C(s) M(s)^{-1} B(s) + D(s)`` with ``M(s) = s I - A - sum_d Ad(d) e^{-s d}`` and
``B(s) = B0 + sum_d Bd(d) e^{-s d}`` (``C(s)``, ``D(s)`` alike). Without delayed inputs, outputs or
feedthrough the system is a :class:`~ddesys.DelayStateSpace` and its norms are those of
:mod:`ddesys.matrix.norms`. Otherwise ``G(i w)`` is evaluated exactly (:meth:`DelayIOSystem.transfer`)
on the same grids, and beyond the grid ``G(i w) = D(i w) + P(i w) / (i w) + R`` with
``P(s) = C(s) B(s)``, ``||R|| <= ||C||_+ ||B||_+ e / (w (w - e))`` (``||.||_+`` the sum of the norms
of a matrix's delay terms, ``e = ||A||_2 + sum_d ||Ad(d)||_2``):

* Hinf: ``sigma_max(G(i w)) <= ||D||_+ + ||C||_+ ||B||_+ / (w - e)`` bounds the rest of the axis;
* H2 (``D = 0``): ``int_W^inf ||P(i w)||_F^2 / w^2 dw`` is exact with the sine integral
  (``||P||_F^2 = sum_{d, d'} tr(P_d^T P_d') cos(w (d - d'))``), the rest is at most
  ``2 ||P||_+ c e / W^2 + (4/3) c^2 e^2 / W^3``, ``c = ||C||_+ ||B||_{F+}``, for ``W >= 2 e``.
"""
from __future__ import annotations

import warnings

import numpy as np
from scipy.special import sici

from ..matrix._spectral_est import estimate_roots
from ..matrix.norms import _adaptive, _check_rtol, _peak_points, peak_search, require_stable, top_singular


def _norm_sum(mats, ord=2):
    return float(sum(np.linalg.norm(m, ord) for m in mats))


def _no_io_delays(f):
    return f.input_delays.size == 0 and f.output_delays.size == 0 and f.feed_delays.size == 0


def _state_part(f):
    from ..matrix.statespace import DelayStateSpace

    Ad = f.Ad if f.state_delays.size else np.zeros((1,) + f.A.shape)
    tau = f.state_delays if f.state_delays.size else np.ones(1)
    return DelayStateSpace(f.A, Ad, tau, f.B0, f.C0, f.D0)


def _scales(f):
    e = float(np.linalg.norm(f.A, 2)) + _norm_sum(f.Ad)
    delays = np.concatenate([f.state_delays, f.input_delays, f.output_delays, f.feed_delays])
    return e, float(delays.max(initial=0.0))


def _sigma(sys):
    def sig(w):
        return top_singular(np.moveaxis(sys.transfer(1j * np.asarray(w, dtype=float)), -1, 0))   # (F, p, m)
    return sig


def io_hinf_norm(sys, rtol=1e-9, max_grid=2_000_000):
    """Hinf norm ``sup_w sigma_max(G(i w))`` of a stable :class:`~ddesys.DelayIOSystem` and a peak
    frequency (see the module docstring; the grid and its refinement are those of
    :func:`ddesys.matrix.norms.hinf_norm`).

    Returns
    -------
    HinfNorm
        ``omega_peak = inf`` when the supremum is the high-frequency value ``||D0||_2``.

    Raises
    ------
    ValueError
        An unstable system; a bad ``rtol``.
    """
    rtol = _check_rtol(rtol)
    require_stable(sys, "hinf_norm")
    f = sys.explicit_form()
    if _no_io_delays(f):
        return _state_part(f).hinf_norm(rtol=rtol)
    est = estimate_roots(f.A, f.Ad if f.state_delays.size else np.zeros((0,) + f.A.shape), f.state_delays)
    e, tmax = _scales(f)
    beta_r, alpha_r = _peak_points(est.roots, True, np.inf)
    W = 1.05 * max(2 * e, est.R, float(np.max(np.abs(beta_r) + 8 * alpha_r, initial=0.0)), 1e-300)
    d0 = min(1 / (4 * tmax), W / 400)
    nB = float(np.linalg.norm(f.B0, 2)) + _norm_sum(f.Bd)
    nC = float(np.linalg.norm(f.C0, 2)) + _norm_sum(f.Cd)
    nD0 = float(np.linalg.norm(f.D0, 2)) if f.D0.size else 0.0
    nDp = nD0 + _norm_sum(f.Dd)

    def tail(w):
        return nDp + nC * nB / (w - e)

    return peak_search(_sigma(sys), list(zip(beta_r, alpha_r)), real=True, W=W, d0=d0,
                       nD=nD0 if f.feed_delays.size == 0 else 0.0, tail=tail, rtol=rtol, max_grid=max_grid,
                       what="hinf_norm")


def _tail_integral(P, delays, W):
    """``int_W^inf ||sum_d P_d e^{-i w d}||_F^2 / w^2 dw`` exactly (sine integral)."""
    G = np.einsum("apm,bpm->ab", P, P)                         # tr(P_a^T P_b)
    delta = np.abs(delays[:, None] - delays[None, :])
    si, _ = sici(delta * W)
    with np.errstate(invalid="ignore"):
        term = np.cos(delta * W) / W - delta * (np.pi / 2 - si)
    term = np.where(delta == 0, 1.0 / W, term)
    return float(np.sum(G * term))


def _products(f):
    """``P(s) = C(s) B(s)`` as ``(delays (K,), P (K, p, m))``, equal delays merged."""
    Cs = [(0.0, f.C0)] + list(zip(f.output_delays, f.Cd))
    Bs = [(0.0, f.B0)] + list(zip(f.input_delays, f.Bd))
    terms = {}
    for dc, C in Cs:
        for db, B in Bs:
            key = round(float(dc + db), 12)
            terms[key] = terms.get(key, 0.0) + C @ B
    keys = sorted(terms)
    return np.array(keys), np.stack([np.broadcast_to(terms[k], (f.C0.shape[0], f.B0.shape[1])) for k in keys])


def io_h2_norm(sys, rtol=1e-8, max_panels=2_000_000):
    """H2 norm ``sqrt((1/2 pi) int ||G(i w)||_F^2 dw)`` of a stable :class:`~ddesys.DelayIOSystem`
    (see the module docstring).

    Returns
    -------
    float
        ``inf`` when the system has a feedthrough (``D0`` or a delayed ``Dd`` nonzero).

    Raises
    ------
    ValueError
        An unstable system; a bad ``rtol``.

    Warns
    -----
    RuntimeWarning
        The quadrature did not meet ``rtol`` within ``max_panels``.
    """
    rtol = _check_rtol(rtol)
    require_stable(sys, "h2_norm")
    f = sys.explicit_form()
    if np.any(f.D0 != 0) or np.any(f.Dd != 0):
        return float("inf")
    if _no_io_delays(f):
        return _state_part(f).h2_norm(rtol=rtol)
    est = estimate_roots(f.A, f.Ad if f.state_delays.size else np.zeros((0,) + f.A.shape), f.state_delays)
    e, tmax = _scales(f)
    delays, P = _products(f)
    nP = _norm_sum(P, "fro")
    c = (float(np.linalg.norm(f.C0, 2)) + _norm_sum(f.Cd)) * (float(np.linalg.norm(f.B0)) + _norm_sum(f.Bd, "fro"))

    def rest(W):
        return 2 * nP * c * e / W**2 + (4 / 3) * c**2 * e**2 / W**3

    def fw(w):
        G = sys.transfer(1j * np.asarray(w, dtype=float))
        return np.einsum("pmf,pmf->f", G.conj(), G).real

    beta_r, alpha_r = _peak_points(est.roots, True, np.inf)
    W0 = max(2 * e, float(np.max(np.abs(beta_r) + 10 * alpha_r, initial=0.0)), 1e-300)
    period = 2 * np.pi / tmax
    pts = [np.linspace(0.0, W0, int(np.ceil(W0 / min(period, W0 / 16))) + 1)]
    for bt, al in zip(beta_r, alpha_r):
        if al < period:
            pts.append(bt + al * np.array([-4.0, -2.0, -1.0, 0.0, 1.0, 2.0, 4.0]))
    edges = np.unique(np.concatenate(pts))
    edges = edges[(edges >= 0) & (edges <= W0)]
    I0, err, conv = _adaptive(fw, edges, 0.25 * rtol, 1e-300, max_panels)
    I = 2 * (I0 + _tail_integral(P, delays, W0))
    W = W0
    while rest(W) > 0.125 * rtol * max(I, 1e-300) and W < 1e12:
        W *= 2
    if W > W0 and conv:
        n_pan = int(min(np.ceil((W - W0) / min(period, W0)) + 1, max_panels))
        W = W0 + min(period, W0) * n_pan if n_pan == max_panels else W
        I1, err1, conv = _adaptive(fw, np.linspace(W0, W, n_pan + 1), 0.125 * rtol, I / 2, max_panels)
        I = 2 * (I0 + I1 + _tail_integral(P, delays, W))
        err += err1
    bound = 2 * (err + rest(W))
    if not conv or bound > 1.01 * rtol * I:
        warnings.warn(f"h2_norm: quadrature not converged to rtol={rtol:g} (estimated relative error of the "
                      f"norm {0.5 * bound / max(I, 1e-300):.2g}); raise max_panels", RuntimeWarning, stacklevel=3)
    return float(np.sqrt(max(I, 0.0) / (2 * np.pi)))


__all__ = ["io_h2_norm", "io_hinf_norm"]
