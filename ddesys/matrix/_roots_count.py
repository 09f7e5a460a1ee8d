"""Counting characteristic roots of a matrix delay system: a priori box, argument principle, clusters.

Private helpers of :mod:`ddesys.matrix.roots` (docs/theory.md, "Characteristic roots of matrix delay
systems"):

* :func:`region_box`: a rectangle that holds every root with ``Re s >= re_min``;
* :func:`winding_numbers`: the number of zeros of ``det M(s)`` inside closed curves (rectangles,
  circles) by the argument principle, sampled adaptively until every arc is resolved;
* :func:`clusters`: merge nearby approximations of one root, count each cluster's multiplicity on a
  small circle and return the cluster's centroid (well conditioned even when its members are not).
"""
from __future__ import annotations

import numpy as np

from .charmatrix import char_matrix, char_matrix_ds

__all__ = ["region_box", "Rectangle", "Circle", "CountFailure", "winding_numbers", "clusters", "centroid",
           "evaluate", "group", "MERGE_RTOL"]

MERGE_RTOL = 1e-6          # approximations closer than this (relative to 1 + |s|) are one cluster
ARG_STEP = np.pi / 4       # largest phase increment accepted on one arc
TRAP_TOL = 0.2             # largest |trapezoid estimate - actual increment| of log det M on one arc
EVAL_BYTES = 2**25         # working set of one batch of det M evaluations (points x n x n stacks)


def region_box(A, Ad, tau, re_min):
    """``(x0, x1, y0, y1)``: every root with ``Re s >= re_min`` lies in ``[x0, x1] x [y0, y1]`` (strictly
    inside, except on the edge ``Re s = x0 = re_min``); ``None`` when there is no such root.

    Two inclusions, intersected, with ``E_k = exp(-re_min tau_k)`` (``|exp(-s tau_k)| <= E_k``):

    * Perron-Frobenius: from ``(s - c) v = (A - c I) v + sum_k exp(-s tau_k) Ad_k v``, entrywise
      ``|s - c| |v| <= P |v|`` with ``P = |A - c I| + sum_k E_k |Ad_k|``, so ``|s - c| <= rho(P)``
      (Wielandt); ``c`` is the mean of ``diag(A)``. This bound sees structure: a nilpotent delayed
      coupling adds nothing to ``rho(P)`` however large ``E_k`` is;
    * numerical range: with ``|v| = 1``, ``s = v* A v + sum_k exp(-s tau_k) v* Ad_k v``, so ``s`` lies
      within ``sum_k E_k ||Ad_k||_2`` of the numerical range of ``A``, itself inside the box of the
      extreme eigenvalues of ``(A + A*)/2`` and ``(A - A*)/2i``; on the right, sharper, ``Re s <= h_max +
      sum_k ||Ad_k|| exp(-Re(s) tau_k)`` (``h_max`` the largest eigenvalue of ``(A + A*)/2``).

    The box is padded by 5% (and ``1e-3 (1 + |c| + rho)``) on the sides other than ``Re s = re_min``.
    """
    n = A.shape[0]
    E = np.exp(-re_min * tau)
    c = np.trace(A) / n
    P = np.abs(A - c * np.eye(n)) + np.einsum("k,kij->ij", E, np.abs(Ad))
    rho = float(np.max(np.abs(np.linalg.eigvals(P)))) * (1 + 1e-8) + 1e-300
    H = (A + A.conj().T) / 2
    S = (A - A.conj().T) / 2j
    h = np.linalg.eigvalsh(H)
    k = np.linalg.eigvalsh(S)
    rd = float(E @ np.array([np.linalg.norm(m, 2) for m in Ad])) * (1 + 1e-8)
    nd = np.array([np.linalg.norm(m, 2) for m in Ad])
    x0 = max(re_min, c.real - rho, h[0] - rd)
    x1 = min(c.real + rho, h[-1] + rd)
    # sharper right edge: Re s <= h_max + sum_k ||Ad_k|| exp(-Re(s) tau_k), whose left side minus the
    # right one increases with Re s: bisect for its zero
    f = lambda x: x - h[-1] - nd @ np.exp(-x * tau)                         # noqa: E731
    if x0 <= x1 and f(x0) > 0:
        return None
    if x0 <= x1 and f(x1) > 0:
        lo, hi = x0, x1
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if f(mid) <= 0 else (lo, mid)
        x1 = hi
    y0 = max(c.imag - rho, k[0] - rd)
    y1 = min(c.imag + rho, k[-1] + rd)
    if x0 > x1 or y0 > y1:
        return None
    pad = 0.05 * max(x1 - x0, y1 - y0) + 1e-3 * (1 + abs(c) + rho)
    x0 = re_min if x0 == re_min else max(re_min, x0 - pad)
    return (float(x0), float(x1 + pad), float(y0 - pad), float(y1 + pad))


class Rectangle:
    """The boundary of ``[x0, x1] x [y0, y1]``, counterclockwise from ``x0 + i y0``, as ``t in [0, 1)``;
    the corners are sample points (so every arc is a straight segment)."""

    def __init__(self, x0, x1, y0, y1):
        self.x0, self.x1, self.y0, self.y1 = x0, x1, y0, y1
        w, h = x1 - x0, y1 - y0
        self.length = 2 * (w + h)
        self.corners = np.array([0.0, w, w + h, 2 * w + h]) / self.length

    def points(self, t):
        u = np.asarray(t) * self.length
        w, h = self.x1 - self.x0, self.y1 - self.y0
        x = np.select([u < w, u < w + h, u < 2 * w + h], [self.x0 + u, self.x1, self.x1 - (u - w - h)],
                      self.x0)
        y = np.select([u < w, u < w + h, u < 2 * w + h], [self.y0, self.y0 + (u - w), self.y1],
                      self.y1 - (u - 2 * w - h))
        return x + 1j * y

    def initial(self, h0):
        m = int(np.clip(np.ceil(self.length / h0), 16, 2 ** 15))
        return np.unique(np.concatenate([np.arange(m) / m, self.corners]))


class Circle:
    """The circle ``|s - c| = r``, counterclockwise, as ``t in [0, 1)``."""

    def __init__(self, c, r):
        self.c, self.r = complex(c), float(r)
        self.length = 2 * np.pi * self.r

    def points(self, t):
        return self.c + self.r * np.exp(2j * np.pi * np.asarray(t))

    def initial(self, h0):
        m = int(np.clip(np.ceil(self.length / h0), 16, 2 ** 12))
        return np.arange(m) / m


def evaluate(A, Ad, tau, s):
    """``log |det M|``, the phase factor of ``det M`` and ``d/ds log det M = trace(M^{-1} M')``, in batches
    of at most :data:`EVAL_BYTES` of ``(points, n, n)`` stacks."""
    step = max(1, EVAL_BYTES // (96 * A.shape[-1] ** 2))
    if s.size <= step:
        return _evaluate_batch(A, Ad, tau, s)
    parts = [_evaluate_batch(A, Ad, tau, s[i:i + step]) for i in range(0, s.size, step)]
    return tuple(np.concatenate(v) for v in zip(*parts))


def _evaluate_batch(A, Ad, tau, s):
    with np.errstate(all="ignore"):
        M = char_matrix(A, Ad, tau, s)
        sign, logabs = np.linalg.slogdet(M)
        good = (sign != 0) & np.isfinite(logabs)
        g = np.full(s.shape, np.nan + 0j)
        if good.any():
            Mp = char_matrix_ds(A, Ad, tau, s[good])
            try:
                g[good] = np.trace(np.linalg.solve(M[good], Mp), axis1=-2, axis2=-1)
            except np.linalg.LinAlgError:                                  # numerically singular
                for i in np.nonzero(good)[0]:
                    try:
                        g[i] = np.trace(np.linalg.solve(M[i], char_matrix_ds(A, Ad, tau, s[i])))
                    except np.linalg.LinAlgError:
                        pass
    return logabs, sign, g


class CountFailure(str):
    """Why :func:`winding_numbers` has no count for a curve: the message (a ``str``, ``""`` when counted),
    with its cause in attributes for the callers' decisions (never read from the text):

    * ``at_root``: ``det M(s) = 0`` (numerically) at a sample of the curve;
    * ``near_root``: an arc shorter than the rounding of ``s`` is still not resolved: the curve passes
      within rounding of a root;
    * neither: the sample budget ran out.
    """

    at_root = False
    near_root = False

    def __new__(cls, message="", *, at_root=False, near_root=False):
        out = super().__new__(cls, message)
        out.at_root, out.near_root = bool(at_root), bool(near_root)
        return out


def winding_numbers(A, Ad, tau, curves, *, h0=None, max_samples=2 ** 18, h_rel=1e-12, fn=None):
    """Number of zeros of ``det M(s)`` inside each closed curve (argument principle).

    Every curve is sampled, then each arc between neighbouring samples is accepted when the phase of
    ``det M`` moves by less than ``pi/4`` along it *and* the trapezoid rule for ``int (log det M)' ds``
    (with ``(log det M)' = trace(M^{-1} M')`` at both ends) agrees with the actual change of
    ``log det M`` (modulus exact, phase principal) to within 0.2; other arcs are bisected. A root
    closer to an arc than about its length makes the trapezoid estimate fail, so hidden turns of the
    phase are caught. An arc shorter than ``h_rel (1 + |s|)`` that still fails means the curve passes
    through (or within rounding of) a root.

    Parameters
    ----------
    A, Ad, tau : the system
    curves : list of :class:`Rectangle` / :class:`Circle`
    h0 : float, optional
        Initial arc length (default: ``1 / (2 tau_max)``, a few samples per period of ``exp(-i w tau)``).
    max_samples : int
        Total budget over all curves.
    h_rel : float
        Relative length of the shortest arc bisected (see above).
    fn : callable, optional
        ``s (c,) -> (log |f|, f / |f|, f' / f)`` of another function ``f`` with the zeros of ``det M``
        (default: ``det M`` itself, :func:`evaluate`).

    Returns
    -------
    counts : list of int or None
        ``None`` for a curve that could not be resolved.
    reasons : list of CountFailure
        ``""``, or why the count is missing (with the point where it failed; its cause in the attributes).
    """
    h0 = 0.5 / float(np.max(tau)) if h0 is None else h0
    ev_fn = (lambda s: evaluate(A, Ad, tau, s)) if fn is None else fn             # noqa: E731
    ts, vals, counts, reasons = [], [], [None] * len(curves), [CountFailure()] * len(curves)
    for cv in curves:
        t = cv.initial(min(h0, cv.length / 16))
        ts.append(t)
        vals.append(ev_fn(cv.points(t)))
    pending = list(range(len(curves)))
    total = sum(t.size for t in ts)
    while pending:
        new_t = {}
        for i in pending:
            cv, t = curves[i], ts[i]
            logabs, sign, g = vals[i]
            s = cv.points(t)
            j = np.roll(np.arange(t.size), -1)
            if not np.all((sign != 0) & np.isfinite(g)):
                k = int(np.nonzero((sign == 0) | ~np.isfinite(g))[0][0])
                reasons[i] = CountFailure(f"det M(s) = 0 (numerically) on the curve at s = {s[k]:.6g}", at_root=True)
                continue
            d_arg = np.angle(sign[j] * np.conj(sign))
            actual = (logabs[j] - logabs) + 1j * d_arg
            trap = 0.5 * (g + g[j]) * (s[j] - s)
            bad = (np.abs(d_arg) > ARG_STEP) | (np.abs(trap - actual) > TRAP_TOL)
            if not bad.any():
                counts[i] = int(np.rint(d_arg.sum() / (2 * np.pi)))
                continue
            seg = np.abs(s[j] - s)
            tiny = bad & (seg < h_rel * (1 + np.abs(s)))
            if tiny.any():
                k = int(np.nonzero(tiny)[0][0])
                reasons[i] = CountFailure(f"the curve passes within {seg[k]:.1e} of a root near s = {s[k]:.6g}",
                                          near_root=True)
                continue
            tb = t[bad]
            te = np.where(j[bad] == 0, 1.0, t[j[bad]])
            new_t[i] = 0.5 * (tb + te)
        pending = list(new_t)
        total += sum(v.size for v in new_t.values())
        if total > max_samples:
            for i in pending:
                reasons[i] = CountFailure(f"more than {max_samples} samples needed to resolve the curve")
            break
        if not pending:
            break
        sizes = [new_t[i].size for i in pending]
        s_all = np.concatenate([curves[i].points(new_t[i]) for i in pending])
        ev = ev_fn(s_all)
        start = 0
        for i, m in zip(pending, sizes):
            part = [v[start:start + m] for v in ev]
            start += m
            t = np.concatenate([ts[i], new_t[i]])
            order = np.argsort(t, kind="stable")
            ts[i] = t[order]
            vals[i] = tuple(np.concatenate([v, p])[order] for v, p in zip(vals[i], part))
    return counts, reasons


def centroid(A, Ad, tau, c, r, m, *, fn=None, points=64):
    """Mean of the ``m`` zeros inside ``|s - c| = r``: ``c + (1/m) (1/2 pi i) int (s - c) (log f)' ds``
    (trapezoid rule on ``points`` points; ``c`` unchanged when ``f`` is not finite on the circle)."""
    s = c + r * np.exp(2j * np.pi * np.arange(points) / points)
    g = (evaluate(A, Ad, tau, s) if fn is None else fn(s))[2]
    if np.all(np.isfinite(g)):
        return c + np.mean((s - c) ** 2 * g) / m
    return c


def group(z, rtol):
    """Single-linkage groups of the points ``z`` closer than ``rtol (1 + |z|)``: list of index arrays."""
    m = z.size
    parent = np.arange(m)

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    if m:
        d = np.abs(z[:, None] - z[None, :])
        close = d <= rtol * (1 + np.maximum(np.abs(z)[:, None], np.abs(z)[None, :]))
        for a, b in zip(*np.nonzero(np.triu(close, 1))):
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[rb] = ra
    roots = np.array([find(a) for a in range(m)], dtype=int)
    return [np.nonzero(roots == r)[0] for r in np.unique(roots)]


def clusters(A, Ad, tau, z, *, guard=None, count=True, fn=None):
    """Merge the approximations ``z`` into clusters; with ``count``, each one's multiplicity.

    Parameters
    ----------
    z : complex ``(c,)``
        Converged Newton iterates (several may approximate one root).
    guard : float, optional
        A vertical line ``Re s = guard`` the small circles must not cross.
    count : bool
        Count the zeros inside a small circle around each cluster (radius ``max(50 spread,
        1e-5 (1 + |s|))``, at most 0.4 of the distance to the next cluster): 0 drops the cluster (not a
        root), ``m >= 2`` replaces it by the centroid ``c + (1/m) (1/2 pi i) int (s - c) (log det M)' ds``
        (trapezoid rule on 64 points); ``None`` when the circle could not be resolved.
    fn : callable, optional
        The function counted (see :func:`winding_numbers`).

    Returns
    -------
    centers : complex ``(q,)``
    mult : list of (int or None) ``(q,)`` (all 1 without ``count``)
    """
    groups = group(np.asarray(z, dtype=np.complex128), MERGE_RTOL)
    centers = np.array([np.mean(z[g]) if g.size > 1 else z[g[0]] for g in groups], dtype=np.complex128)
    if not count or centers.size == 0:
        return centers, [1] * centers.size
    spread = np.array([np.max(np.abs(z[g] - c)) for g, c in zip(groups, centers)])
    dist = np.abs(centers[:, None] - centers[None, :]) + np.diag(np.full(centers.size, np.inf))
    near = dist.min(axis=1) if centers.size > 1 else np.full(1, np.inf)
    r = np.maximum(50 * spread, 1e-5 * (1 + np.abs(centers)))
    r = np.minimum(r, 0.4 * near)
    if guard is not None:
        r = np.minimum(r, 0.5 * np.maximum(np.abs(centers.real - guard), 1e-300))
    counts, _ = winding_numbers(A, Ad, tau, [Circle(c, ri) for c, ri in zip(centers, r)],
                                h0=float(np.max(r)) / 2, fn=fn)
    out_c, out_m = [], []
    for c, ri, m in zip(centers, r, counts):
        if m == 0:
            continue
        if m is not None and m >= 2:
            c = centroid(A, Ad, tau, c, ri, m, fn=fn)
        out_c.append(c)
        out_m.append(m)
    return np.array(out_c, dtype=np.complex128), out_m
