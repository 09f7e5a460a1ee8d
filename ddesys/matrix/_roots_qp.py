"""Delayed terms that cancel in ``det M(s)``: the characteristic quasi-polynomial, exactly (private helper).

``det M(s) = det(s I - A - sum_k z_k Ad_k)`` at ``z_k = exp(-s tau_k)`` is a polynomial ``P(s, z)`` of total
degree ``n``. Its degree in ``z_k`` is at most ``rank(Ad_k)``; it is *smaller* when the delayed terms
cancel, e.g. a nilpotent ``Ad = T N T^{-1}`` coupled so that ``det M(s) = det(s I - A)``. Then ``det M``
evaluated from the matrices is dominated by rounding wherever ``|exp(-s tau)|`` is large (terms of size
``|z|^2 ||Ad||^2`` cancel to zero), the a priori box of :func:`ddesys.matrix._roots_count.region_box` is
far too large, and the discretization has spurious eigenvalues that look like roots.

:func:`cancelled_structure` detects this (a cheap screen: ``P`` interpolated in float64 on a torus; then
for a real system of at most :data:`EXACT_MAX_N` states the coefficients of ``P`` *exactly*, in integer
arithmetic, by the Faddeev-LeVerrier recursion over ``Z[z]``) and returns the quasi-polynomial
:class:`QuasiPoly`, which :mod:`ddesys.matrix.roots` then uses instead of ``det M``: its evaluation, its
a priori (Cauchy) box, and starting points along the chains of roots ``exp(-s tau) = w(s)``.
"""
from __future__ import annotations

import numpy as np

__all__ = ["QuasiPoly", "cancelled_structure", "EXACT_MAX_N"]

EXACT_MAX_N = 8            # exact coefficients for at most this many states ...
EXACT_MAX_K = 3            # ... and delays
SCREEN_POINTS = 2 ** 14    # the float screen evaluates det M on (n + 1)^(K + 1) points at most
MAX_CHAINS = 4096          # chains exp(-s tau) = w(s) followed on each side (more: the generator's points)


class QuasiPoly:
    """``f(s) = sum_j c_j s^{i_j} exp(-s (alpha_j . tau))``, monic of degree ``n`` in ``s``.

    Attributes
    ----------
    powers : int ndarray ``(m,)``;  alpha : int ndarray ``(m, K)``;  coef : float ndarray ``(m,)``
        The nonzero terms.
    tau : float ndarray ``(K,)``
    n : int
    """

    def __init__(self, powers, alpha, coef, tau, n):
        self.powers, self.alpha, self.coef = np.asarray(powers), np.asarray(alpha), np.asarray(coef)
        self.tau, self.n = np.asarray(tau, dtype=float), int(n)
        self.rate = self.alpha @ self.tau                               # (m,) exponent rates

    @property
    def polynomial(self):
        """True when no delayed term is left: ``det M(s) = det(s I - A)``."""
        return not np.any(self.alpha)

    def evaluate(self, s):
        """``(log |f|, f / |f|, f' / f)`` at ``s (c,)``, terms scaled by their largest modulus (no
        overflow); ``f / |f| = 0`` and ``f' / f = nan`` where ``f`` vanishes."""
        s = np.asarray(s, dtype=np.complex128).reshape(-1)
        with np.errstate(all="ignore"):
            ex = -s[:, None] * self.rate[None, :]                         # (c, m)
            la = np.log(np.abs(s))[:, None] * self.powers + np.log(np.abs(self.coef)) + ex.real
            shift = np.max(np.where(np.isfinite(la), la, -np.inf), axis=1)
            shift = np.where(np.isfinite(shift), shift, 0.0)
            e = self.coef * np.exp(ex - shift[:, None])
            sp = s[:, None] ** self.powers
            f = np.sum(e * sp, axis=1)
            spm = np.where(self.powers > 0, self.powers * s[:, None] ** np.maximum(self.powers - 1, 0), 0)
            fp = np.sum(e * (spm - sp * self.rate), axis=1)
            zero = f == 0
            logabs = np.log(np.abs(f)) + shift
            sign = np.where(zero, 0.0, f / np.where(zero, 1.0, np.abs(f)))
            g = np.where(zero, np.nan, fp / np.where(zero, 1.0, f))
        return logabs, sign, g

    def box(self, re_min):
        """``(x0, x1, y0, y1)`` holding every zero with ``Re s >= re_min`` (Cauchy's bound with
        ``|exp(-s tau_k)| <= exp(-re_min tau_k)``), or ``None`` when there is none."""
        lead = (self.powers == self.n) & ~np.any(self.alpha, axis=1)
        mag = np.abs(self.coef[~lead]) * np.exp(-re_min * self.rate[~lead])
        C = np.zeros(self.n)
        np.add.at(C, self.powers[~lead], mag)
        if not np.any(C):
            R = 0.0
        else:                                   # the positive root of r^n = sum_i C_i r^i (bisect in log r)
            h = lambda r: self.n * np.log(r) - np.log(np.sum(C * r ** np.arange(self.n)))
            lo, hi = 1e-300, 1.0
            while h(hi) < 0:
                lo, hi = hi, 2 * hi
            for _ in range(200):
                mid = np.sqrt(lo * hi) if lo > 0 else hi / 2
                lo, hi = (mid, hi) if h(mid) < 0 else (lo, mid)
            R = hi
        R = R * (1 + 1e-8) + 1e-12
        if re_min > R:
            return None
        pad = 0.05 * R + 1e-3 * (1 + R)
        return (float(re_min), float(R + pad), float(-R - pad), float(R + pad))

    def in_z(self, s):
        """Single delay: coefficients ``q_j(s)`` of ``P(s, w) = sum_j q_j(s) w^j``, ``(c, d + 1)``."""
        d = int(self.alpha[:, 0].max())
        s = np.asarray(s, dtype=np.complex128).reshape(-1)
        q = np.zeros((s.size, d + 1), np.complex128)
        for i, a, c in zip(self.powers, self.alpha[:, 0], self.coef):
            q[:, a] += c * s ** i
        return q

    def starts(self, box):
        """Single delay: starting points for Newton along the chains ``s = -(Log w(s) + 2 pi i k) / tau``,
        ``w(s)`` a root of ``P(s, w) = 0`` in ``w``, for every ``k`` whose chain can meet ``box``; and the
        zeros of ``P(s, 0)`` and of the leading coefficient in ``w``."""
        tau = float(self.tau[0])
        x0, x1, y0, y1 = box
        kmax = min(int(np.ceil(max(abs(y0), abs(y1)) * tau / (2 * np.pi))) + 2, MAX_CHAINS)
        k = np.arange(-kmax, kmax + 1)
        d = int(self.alpha[:, 0].max())
        pts = [np.roots(self._poly_coeffs(0)), np.roots(self._poly_coeffs(d))]
        s = np.repeat(0.5 * (x0 + x1) + 2j * np.pi * k / tau, d)
        w = None
        with np.errstate(all="ignore"):
            for _ in range(40):
                q = self.in_z(s)                                               # (c, d + 1)
                W = _poly_roots_batch(q)                                       # (c, d)
                if w is None:
                    w = W[np.arange(s.size), np.tile(np.arange(d), k.size)]
                else:
                    w = W[np.arange(s.size), np.argmin(np.abs(W - w[:, None]), axis=1)]
                s = -(np.log(w) + 2j * np.pi * np.repeat(k, d)) / tau
                s = np.where(np.isfinite(s), s, 0.5 * (x0 + x1) + 2j * np.pi * np.repeat(k, d) / tau)
        pts.append(s)
        return np.concatenate([np.asarray(p, dtype=np.complex128) for p in pts])

    def _poly_coeffs(self, j):
        """Coefficients (highest power first) of ``q_j(s)``, single delay."""
        c = np.zeros(self.n + 1)
        sel = self.alpha[:, 0] == j
        np.add.at(c, self.n - self.powers[sel], self.coef[sel])
        nz = np.nonzero(c)[0]
        return c[nz[0]:] if nz.size else np.zeros(1)


def _poly_roots_batch(q):
    """Roots ``(c, d)`` of the polynomials ``sum_j q[:, j] w^j`` (companion eigenvalues; ``nan`` where the
    leading coefficient vanishes)."""
    c, d1 = q.shape
    d = d1 - 1
    lead = q[:, d]
    with np.errstate(all="ignore"):
        if d == 1:
            return (-q[:, 0] / lead)[:, None]
        comp = np.zeros((c, d, d), np.complex128)
        comp[:, 0, :] = -q[:, d - 1::-1] / lead[:, None]
        comp[:, np.arange(1, d), np.arange(d - 1)] = 1.0
        ok = np.all(np.isfinite(comp), axis=(1, 2))
        out = np.full((c, d), np.nan + 0j)
        if ok.any():
            out[ok] = np.linalg.eigvals(comp[ok])
    return out


# ---------------------------------------------------------------------------------------- detection
def _screen_degrees(A, Ad):
    """Degrees of ``P(s, z)`` in each ``z_k`` seen in float64 (terms below the rounding level dropped), by
    interpolation on a scaled torus; ``None`` when the grid would be too large."""
    n, K = A.shape[0], Ad.shape[0]
    if (n + 1) ** (K + 1) > SCREEN_POINTS:
        return None
    rho0 = 1.0 + np.linalg.norm(A, 2)
    rho = np.array([rho0 / max(np.linalg.norm(m, 2), 1e-300) for m in Ad])
    w = np.exp(2j * np.pi * np.arange(n + 1) / (n + 1))
    grids = np.meshgrid(*([rho0 * w] + [r * w for r in rho]), indexing="ij")
    s = grids[0].reshape(-1)
    z = np.stack([g.reshape(-1) for g in grids[1:]], axis=1)
    M = s[:, None, None] * np.eye(n) - A - np.einsum("pk,kij->pij", z, Ad)
    V = np.linalg.det(M).reshape((n + 1,) * (K + 1))
    C = np.abs(np.fft.fftn(V)) / V.size
    big = C > 64 * n * np.finfo(float).eps * np.abs(V).max()
    idx = np.argwhere(big)
    return [int(idx[:, 1 + k].max()) if idx.size else 0 for k in range(K)]


def _to_int(mats):
    """Integer arrays ``D * mats`` (``D`` the largest power-of-two denominator, so exact) and ``D``."""
    flat = [float(x) for x in np.asarray(mats).reshape(-1)]
    den = max([1] + [x.as_integer_ratio()[1] for x in flat if x != 0])
    ints = [p * (den // q) for p, q in (x.as_integer_ratio() for x in flat)]
    K1, n = np.shape(mats)[0], np.shape(mats)[1]
    return [[ints[(k * n + i) * n:(k * n + i + 1) * n] for i in range(n)] for k in range(K1)], den


def _pmul(p, q):
    out = {}
    for a, x in p.items():
        for b, y in q.items():
            key = tuple(i + j for i, j in zip(a, b))
            out[key] = out.get(key, 0) + x * y
    return {k: v for k, v in out.items() if v}


def _padd(p, q):
    out = dict(p)
    for k, v in q.items():
        out[k] = out.get(k, 0) + v
    return {k: v for k, v in out.items() if v}


def _exact_rank(M):
    """Rank of an integer matrix (fraction-free elimination)."""
    M = [list(r) for r in M]
    rank, rows, cols = 0, len(M), len(M[0])
    for c in range(cols):
        piv = next((r for r in range(rank, rows) if M[r][c]), None)
        if piv is None:
            continue
        M[rank], M[piv] = M[piv], M[rank]
        for r in range(rank + 1, rows):
            if M[r][c]:
                f, g = M[r][c], M[rank][c]
                M[r] = [g * x - f * y for x, y in zip(M[r], M[rank])]
        rank += 1
    return rank


def _exact_charpoly(A, Ad):
    """Exact terms ``{(i, alpha): c}`` of ``det(s I - A - sum_k z_k Ad_k)`` (Faddeev-LeVerrier over
    ``Z[z]`` on the integer matrices ``D A``, ``D Ad_k``), and the exact ranks of the ``Ad_k``."""
    n, K = A.shape[0], Ad.shape[0]
    ints, D = _to_int(np.concatenate([A[None], Ad]))
    zero = (0,) * K
    unit = [tuple(int(j == k) for j in range(K)) for k in range(K)]
    B = [[_padd({zero: ints[0][i][j]} if ints[0][i][j] else {},
                {unit[k]: ints[k + 1][i][j] for k in range(K) if ints[k + 1][i][j]}) for j in range(n)]
         for i in range(n)]
    c = [None] * (n + 1)
    c[n] = {zero: 1}
    Mk = [[{} for _ in range(n)] for _ in range(n)]
    for k in range(1, n + 1):                          # M_k = B M_{k-1} + c_{n-k+1} I, c_{n-k} = -tr(B M_k)/k
        prod = [[{} for _ in range(n)] for _ in range(n)]
        for i in range(n):
            for j in range(n):
                acc = {}
                for m in range(n):
                    if B[i][m] and Mk[m][j]:
                        acc = _padd(acc, _pmul(B[i][m], Mk[m][j]))
                prod[i][j] = acc
        for i in range(n):
            prod[i][i] = _padd(prod[i][i], c[n - k + 1])
        Mk = prod
        BM = {}
        for i in range(n):
            for m in range(n):
                if B[i][m] and Mk[m][i]:
                    BM = _padd(BM, _pmul(B[i][m], Mk[m][i]))
        c[n - k] = {a: -v // k for a, v in BM.items()}
    # det(s I - A - sum z Ad) = D^{-n} det(t I - B), t = D s: the coefficient of s^i is c_i D^{i - n}
    terms = {}
    for i in range(n + 1):
        for a, v in c[i].items():
            if v:
                terms[(i,) + a] = v / D ** (n - i)                         # correctly rounded
    ranks = [_exact_rank(m) for m in ints[1:]]
    return terms, ranks


def cancelled_structure(A, Ad, tau):
    """The quasi-polynomial ``det M(s)`` when its delayed terms cancel (degree in some ``z_k`` below
    ``rank(Ad_k)``), else ``None``; ``None`` also for complex systems and beyond :data:`EXACT_MAX_N`
    states or :data:`EXACT_MAX_K` delays (not checked there)."""
    n, K = A.shape[0], Ad.shape[0]
    if np.iscomplexobj(A) or np.iscomplexobj(Ad) or n > EXACT_MAX_N or K > EXACT_MAX_K:
        return None
    num_rank = [int(np.linalg.matrix_rank(m)) for m in Ad]
    if all(r == n for r in num_rank):
        return None                                    # det(-Ad_k) != 0: degree n in every z_k
    deg = _screen_degrees(A, Ad)
    if deg is None or all(d >= r for d, r in zip(deg, num_rank)):
        return None
    terms, ranks = _exact_charpoly(A, Ad)
    exact_deg = [max((key[1 + k] for key in terms), default=0) for k in range(K)]
    if all(d >= r for d, r in zip(exact_deg, ranks)):
        return None
    keys = sorted(terms)
    powers = np.array([k[0] for k in keys], dtype=int)
    alpha = np.array([k[1:] for k in keys], dtype=int).reshape(len(keys), K)
    coef = np.array([terms[k] for k in keys], dtype=float)
    return QuasiPoly(powers, alpha, coef, tau, n)
