"""Exact stability of a discrete matrix delay system without the lifted companion matrix.

The recurrence ``x_t = Phi x_{t-1} + sum_k G_k ((1 - a_k) x_{t-k_k} + a_k x_{t-k_k-1}) + ...`` has the
characteristic matrix, written by lags ``j`` (:func:`lag_form`)::

    P(z) = I - sum_j E_j z^-j,      E_1 = Phi + ...,  E_{k_k} += (1 - a_k) G_k,  E_{k_k+1} += a_k G_k

``det(z^J P(z))`` (``J`` the largest lag) is a monic polynomial of degree ``n J``: its roots are the
eigenvalues of the lifted companion matrix (:func:`ddesys.matrix.discrete_radius.companion_matrix`). The
number of them in ``|z| < r`` is ``n J + wind(det P, |z| = r)``, so the system is stable iff ``det P`` has
winding number 0 on the unit circle and does not vanish there. :func:`winding_count` certifies the count:

* ``P`` is sampled at ``M = nextpow2(max(64, 8 n J))`` angles (the powers ``e^{-i j theta}`` from the
  integer ``(m j) mod M``); at each sample ``P0``, ``slogdet`` gives the phase of ``det P0`` and the
  inverse the bounds ``beta_j >= ||P0^-1 E_j||_2 r^-j`` (Frobenius norms, inflated for rounding).
* On an arc of width ``h`` from ``P0``, ``P(theta) = P0 + Delta`` with ``||P0^-1 Delta||_2 <= V(h) =
  sum_j beta_j 2 sin(min(j h / 2, pi / 2))``. If ``V(h) < 2^(1/n) - 1``, then ``|det(P0 + Delta) / det P0
  - 1| <= (1 + V)^n - 1 < 1``: ``det P`` stays in a disk around ``det P0`` that excludes 0, and the arc's
  phase increment is the principal ``arg(det P1 / det P0)`` (either endpoint may serve as ``P0``).
* Arcs that fail are split (into the power of two, 2 to 64, that the bound asks for), recursively, up to
  ``MAX_DEPTH`` levels and an evaluation budget. Past it the count is returned as a best effort with
  ``certified=False``: a root lies within the resolution of the circle.

Cost: ``O(M (n^3 + n^2 L))`` for ``L`` distinct lags (``L <= 1 + 2K``), plus refinement local to the arcs
near roots. The size of a count (its ``M`` samples at their working memory each, :func:`count_bytes`) is
checked against ``max_bytes`` (default :data:`EXACT_MAX_BYTES`, capped by :mod:`ddesys.budget`) before any
work, as the diagonal class's exact test does: that bounds both the memory and the time of a count.
docs/theory.md §9.6 states the method and its references.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..budget import check_bytes

EXACT_MAX_BYTES = 2**30     # default memory budget of one count
MAX_DEPTH = 16              # refinement levels before giving up certification
MAX_SPLIT = 64              # largest split of one arc at one level
BLOCK = 8192               # coarse samples refined together
ARC_BYTES = 128            # memory per pending arc of the refinement
MAX_SAMPLES = 2**31         # (m j) mod M computed as m (j mod M) < M**2 <= 2**62
_U = 2.0**-52


class LagForm(NamedTuple):
    """``P(z) = I - sum_l E[l] z^-lags[l]``: ``lags`` ``(L,)`` int64 distinct ascending ``>= 1``, ``E``
    ``(L, n, n)`` float64 or complex128; ``degree`` ``J = lags.max()`` (``det(z^J P)`` has degree ``n J``)."""

    lags: np.ndarray
    E: np.ndarray
    n: int
    degree: int


class WindingCount(NamedTuple):
    """Result of :func:`winding_count`: ``wind <= 0`` (``-wind`` roots in ``|z| >= r``), ``certified``,
    ``evaluations`` (points where ``P`` was evaluated) and a ``message`` (empty when certified)."""

    wind: int
    certified: bool
    evaluations: int
    message: str


class StabilityReport(NamedTuple):
    """Outcome of the exact stability test.

    Attributes
    ----------
    stable : bool
        Certified stable (every root of ``det(z^J P)`` in ``|z| < 1``); False also when not certified.
    certified : bool
        Whether the answer is proved (sufficient criterion, or a certified winding count).
    roots_outside : int
        Roots in ``|z| >= 1`` (0 when the sufficient criterion answered; a best effort when not
        certified).
    method : str
        ``"sufficient"`` or ``"winding"``.
    evaluations : int
        Points where ``P`` was evaluated on the unit circle.
    message : str
        Why the count is not certified (empty otherwise).
    """

    stable: bool
    certified: bool
    roots_outside: object
    method: str
    evaluations: int
    message: str


def lag_form(Phi, G, k, alpha):
    """The lags and coefficient matrices of ``P(z)`` (module docstring).

    Parameters
    ----------
    Phi : ``(n, n)``;  G : ``(K, n, n)``;  k : int ``(K,)`` ``>= 1``;  alpha : real ``(K,)`` in ``[0, 1)``

    Returns
    -------
    LagForm

    Examples
    --------
    >>> import numpy as np
    >>> f = lag_form(np.eye(2) * 0.5, np.eye(2)[None] * 0.2, np.array([3]), np.array([0.25]))
    >>> f.lags.tolist(), f.degree, np.round(f.E[:, 0, 0].real, 3).tolist()
    ([1, 3, 4], 4, [0.5, 0.15, 0.05])
    """
    dt = np.result_type(np.asarray(Phi), np.asarray(G), np.float64)
    Phi = np.array(Phi, dt)
    terms = {1: Phi}
    for Gk, kk, a in zip(np.asarray(G, dt), np.asarray(k, np.int64), np.asarray(alpha, float)):
        for lag, w in ((int(kk), 1.0 - a), (int(kk) + 1, a)):
            if w != 0:
                terms[lag] = terms.get(lag, 0) + w * Gk
    lags = np.array(sorted(terms), np.int64)
    return LagForm(lags, np.stack([terms[int(j)] for j in lags]), Phi.shape[0], int(lags[-1]))


def _weights(form, r):
    """``||E_l||_2 r^-lag_l`` ``(L,)``."""
    nrm = np.linalg.norm(form.E, 2, axis=(1, 2))
    with np.errstate(over="ignore"):
        return nrm * np.exp(-form.lags * math.log(r))


def samples_on_circle(form):
    """``M = nextpow2(max(64, 8 n J))``: the first sampling of :func:`winding_count`."""
    return 1 << max(6, math.ceil(math.log2(8 * form.n * form.degree)))


def point_bytes(form):
    """Peak working memory per evaluated point (``P``, its inverse, the lag phases, temporaries)."""
    return 16 * (2 * form.lags.size + 6 * form.n**2) + 128


def count_bytes(form):
    """The size of one count: its ``M`` samples at their working memory each (:func:`point_bytes`, the
    arcs). The count samples in blocks; like the diagonal class's exact test, the budget bounds this
    size, so that the time of a count (about ``M`` evaluations of ``P``) is bounded with it."""
    return samples_on_circle(form) * (point_bytes(form) + 2 * ARC_BYTES + 32 * form.lags.size)


def check_count(form, max_bytes, what, hint):
    """The budget of a count (``max_bytes``, else :data:`EXACT_MAX_BYTES` capped by the memory budget of
    :mod:`ddesys.budget`), after refusing a count over it or over the integer phase arithmetic."""
    M = samples_on_circle(form)
    if M > MAX_SAMPLES:
        raise ValueError(f"{what}: n J = {form.n * form.degree} needs M = {M} samples, beyond the integer phase "
                         f"arithmetic limit {MAX_SAMPLES}; {hint}")
    return check_bytes(count_bytes(form), what,
                       f"pass max_bytes= (default ddesys.matrix.discrete_stability.EXACT_MAX_BYTES = "
                       f"{EXACT_MAX_BYTES}) to allow it (time grows with it: about {M:.3g} evaluations of P), "
                       + hint, max_bytes, EXACT_MAX_BYTES)


def _eval(form, r, m, M, off):
    """At ``theta = 2 pi m / M + off`` (``m`` int64 ``(N,)``, ``off`` float ``(N,)``, ``|off| < 2 pi / M``):
    the phase of ``det P`` (unit complex, 0 where singular), ``beta`` ``(N, L + 1)`` with
    ``beta[:, l] >= ||P^-1 E_l||_2 r^-lag_l`` and ``beta[:, L]`` the rounding term, and finiteness."""
    lags, n, L = form.lags, form.n, form.lags.size
    ph = ((m[:, None] * (lags % M)[None, :]) % M) * (-2 * math.pi / M) - off[:, None] * lags
    with np.errstate(over="ignore", invalid="ignore"):
        coef = np.exp(1j * ph - lags * math.log(r))                                   # (N, L)
        P = np.eye(n) - (coef @ form.E.reshape(L, n * n)).reshape(-1, n, n)
    finite = np.isfinite(P).all(axis=(1, 2))
    P[~finite] = np.eye(n)
    sign = np.linalg.slogdet(P)[0]
    beta = np.full((m.size, L + 1), np.inf)
    ok = np.flatnonzero(finite & (sign != 0))
    if ok.size:
        Pk = P[ok]
        try:
            Z = np.linalg.inv(Pk)
        except np.linalg.LinAlgError:                     # an exactly singular LU among them: one by one
            Z = np.stack([_inv_or_inf(X) for X in Pk])
        zf, pf = _fro(Z), _fro(Pk)
        grow = 1 + 16 * n * _U * zf * pf                           # rounding of the computed inverse
        N2 = Z.shape[0]
        ZE = Z.reshape(N2 * n, n) @ form.E.transpose(1, 0, 2).reshape(n, L * n)  # rows (N2 n), cols (L n)
        ZE = ZE.view(np.float64).reshape(N2, n, L, 2 * n)
        ZE = np.sqrt(np.einsum("ailj,ailj->al", ZE, ZE))                       # ||Z E_l||_F
        with np.errstate(over="ignore", invalid="ignore"):
            ZE = ZE * np.exp(-lags * math.log(r))                               # (N2, L)
            scale = 1.0 + np.abs(coef[ok]) @ _fro(form.E)                         # size of P
            b = np.concatenate([ZE * grow[:, None], (zf * 8 * (n + L) * _U * scale)[:, None]], axis=1)
        b[~np.isfinite(b)] = np.inf
        beta[ok] = b
    sign[~finite] = 0.0
    return sign, beta, finite


def _inv_or_inf(X):
    try:
        return np.linalg.inv(X)
    except np.linalg.LinAlgError:
        return np.full(X.shape, np.inf + 0j)


def _fro(X):
    """Frobenius norms over the last two axes of a complex array."""
    X = np.ascontiguousarray(X).view(np.float64)
    return np.sqrt(np.einsum("...ij,...ij->...", X, X))


def _value(beta, lags, h):
    """Bound on ``||P0^-1 (P(theta0 + t) - P0)||_2`` for ``|t| <= h``: ``beta`` ``(..., L + 1)``,
    ``h`` broadcasting against ``beta[..., 0]``."""
    x = np.minimum(np.asarray(h, float)[..., None] * lags / 2, np.pi / 2)
    with np.errstate(invalid="ignore"):
        v = (beta[..., :-1] * (2 * np.sin(x))).sum(axis=-1) + beta[..., -1]
    return np.where(np.isnan(v), np.inf, v)


def winding_count(form, r=1.0, max_bytes=None, max_evals=None, max_depth=MAX_DEPTH):
    """Certified winding number of ``det P`` around 0 on ``|z| = r`` (module docstring).

    Parameters
    ----------
    form : LagForm
    r : float, default 1.0
        Radius of the circle, ``> 0``.
    max_bytes : int or None
        Budget of the count (default :data:`EXACT_MAX_BYTES`, capped by :mod:`ddesys.budget`): a count
        whose :func:`count_bytes` exceed it is refused (:class:`~ddesys.budget.BudgetError`, a
        ``ValueError``) before any work. The sampling runs in blocks sized to it.
    max_evals : int or None
        Budget of points evaluated in all (default ``64 M + 2**20``); past it the count is returned
        uncertified.
    max_depth : int, default :data:`MAX_DEPTH`

    Returns
    -------
    WindingCount
        ``-wind`` roots of ``det(z^J P)`` lie in ``|z| >= r``.

    Raises
    ------
    ValueError
        The memory budget or the integer phase arithmetic (``M <= 2**31``) does not allow the count.

    Examples
    --------
    The scalar ``x_t = 0.5 x_{t-1} + 0.7 x_{t-2}`` has one root outside the unit circle:

    >>> import numpy as np
    >>> f = lag_form(np.array([[0.5]]), np.array([[[0.7]]]), np.array([2]), np.array([0.0]))
    >>> winding_count(f)[:2]
    (-1, True)
    """
    n = form.n
    M = samples_on_circle(form)
    budget = check_count(form, max_bytes, f"exact stability test (certified winding count, n = {n}, largest "
                         f"lag J = {form.degree}, {M} samples on the circle)",
                         "or use the sufficient test (is_stable(method='sufficient'), sufficient_margin()), which "
                         "costs nothing at any delay")
    pb = count_bytes(form) // M
    block = min(M, BLOCK, budget // pb)                 # coarse samples per block
    cap = budget // pb                                 # points evaluated at once, at most
    max_evals = 64 * M + 2**20 if max_evals is None else int(max_evals)
    c = 2.0 ** (1.0 / n) - 1.0
    h0 = 2 * math.pi / M
    total, evals, certified, msg = 0.0, 0, True, ""
    for a0 in range(0, M, block):
        mm = np.arange(a0, min(M, a0 + block) + 1, dtype=np.int64)       # one overlap with the next block
        sg, be, fin = _eval(form, r, mm % M, M, np.zeros(mm.size))
        evals += mm.size
        if not fin.all():
            return WindingCount(0, False, evals, f"P overflows on the circle |z| = {r:.6g} (r^-J too large)")
        arcs = (mm[:-1] % M, np.zeros(mm.size - 1), np.full(mm.size - 1, h0), sg[:-1], be[:-1], sg[1:], be[1:])
        t, evals, cert, why = _refine(form, r, M, c, arcs, evals, max_evals, max_depth, cap)
        total += t
        if not cert:
            certified, msg = False, why
    wind = total / (2 * math.pi)
    wi = int(np.rint(wind)) if np.isfinite(wind) else 0
    if certified and (abs(wind - wi) > 0.1 or wi > 0):
        certified, msg = False, f"inconsistent phase total {wind:.3f} turns (rounding): not certified"
    return WindingCount(wi, certified, evals, msg)


def _refine(form, r, M, c, arcs, evals, max_evals, max_depth, cap):
    """Phase total over ``arcs = (m, off, h, sign_a, beta_a, sign_b, beta_b)``, splitting uncertified ones
    level by level; returns ``(total, evals, certified, message)``."""
    lags = form.lags
    total = 0.0
    for depth in range(max_depth + 1):
        am, aoff, ah, sga, ba, sgb, bb = arcs
        va, vb = _value(ba, lags, ah), _value(bb, lags, ah)
        ok = np.minimum(va, vb) < c
        with np.errstate(invalid="ignore"):
            inc = np.angle(sgb * np.conj(sga))
        total += float(inc[ok].sum())
        bad = np.flatnonzero(~ok)
        if bad.size == 0:
            return total, evals, True, ""
        am, aoff, ah, sga, ba, sgb, bb = (x[bad] for x in (am, aoff, ah, sga, ba, sgb, bb))
        v = np.minimum(va[bad], vb[bad])
        f = np.clip(2 ** np.ceil(np.log2(np.maximum(2 * v / c, 2))), 2, MAX_SPLIT)
        f = np.where(np.isfinite(f), f, MAX_SPLIT).astype(np.int64)
        new = int((f - 1).sum())
        if depth == max_depth or evals + new > max_evals or new > cap:
            total += float(np.nan_to_num(inc[bad]).sum())
            reason = ("the refinement depth" if depth == max_depth else
                      "the evaluation budget" if evals + new > max_evals else "the memory budget")
            return total, evals, False, (
                f"{bad.size} arc(s) of the circle |z| = {r:.6g} could not be certified within {reason} "
                f"({evals} evaluations): a root lies within about {float(ah.min()):.2g} rad of the circle")
        nxt = []
        for fv in np.unique(f):
            g = np.flatnonzero(f == fv)
            sub = ah[g] / fv
            off = aoff[g, None] + sub[:, None] * np.arange(1, fv)                      # (A, fv-1)
            sg, be, _ = _eval(form, r, np.repeat(am[g], fv - 1), M, off.ravel())
            evals += sg.size
            SG = np.concatenate([sga[g, None], sg.reshape(-1, fv - 1), sgb[g, None]], axis=1)
            BE = np.concatenate([ba[g, None], be.reshape(g.size, fv - 1, -1), bb[g, None]], axis=1)
            offs = np.concatenate([aoff[g, None], off], axis=1)
            nxt.append((np.repeat(am[g], fv), offs.ravel(), np.repeat(sub, fv), SG[:, :-1].ravel(),
                        BE[:, :-1].reshape(-1, BE.shape[-1]), SG[:, 1:].ravel(), BE[:, 1:].reshape(-1, BE.shape[-1])))
        arcs = tuple(np.concatenate(x) for x in zip(*nxt))
    return total, evals, False, "unreachable"


def stability_report(form, margin, max_bytes=None, max_evals=None):
    """The exact test: the sufficient criterion when ``margin > 0``, else the winding count on ``|z| = 1``.

    Parameters
    ----------
    form : LagForm
    margin : float
        ``1 - ||Phi||_2 - sum_k ||G_k||_2``.
    max_bytes, max_evals : int or None
        As :func:`winding_count`.

    Returns
    -------
    StabilityReport
    """
    if margin > 0:
        return StabilityReport(True, True, 0, "sufficient", 0, "")
    wc = winding_count(form, 1.0, max_bytes=max_bytes, max_evals=max_evals)
    return StabilityReport(wc.certified and wc.wind == 0, wc.certified, -wc.wind, "winding", wc.evaluations,
                           wc.message)


__all__ = ["EXACT_MAX_BYTES", "LagForm", "StabilityReport", "WindingCount", "check_count", "count_bytes", "lag_form",
           "samples_on_circle", "stability_report", "winding_count"]
