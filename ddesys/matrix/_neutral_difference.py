"""Spectral data of the difference operator of a neutral system (private helpers of
:mod:`ddesys.matrix.neutral`).

For ``x'(t) - sum_k H_k x'(t - tau_k) = ...`` the difference operator has the characteristic matrix
``D(s) = I - sum_k H_k exp(-s tau_k)``. Its zeros lie on vertical chains and bound the essential
spectrum of the neutral system (Hale and Verduyn Lunel 1993, ch. 9; Michiels and Niculescu 2014, ch. 1):

* ``c_D = sup {Re s : det D(s) = 0}`` for the given delays. One delay: ``ln(rho(H)) / tau``.
  Commensurate delays ``tau_k = n_k h``: ``det D = det(I - sum_k H_k z^{n_k})`` with ``z = exp(-s h)``,
  so ``c_D = ln(max |w|) / h`` over the eigenvalues ``w`` of a block companion matrix;
* ``C_D``, the zero of the non-increasing ``gamma(r) = max_theta rho(sum_k H_k e^{-r tau_k} e^{i theta_k})``
  ``- 1`` (Michiels, Vyhlidal, Zitek, Nijmeijer, Henrion, SIAM J. Control Optim. 48 (2009)): the limit of
  ``c_D`` under arbitrarily small delay changes; ``c_D <= C_D``, equal for rationally independent delays;
* ``gamma_0 = gamma(0)``: the difference operator is strongly stable (``C_D < 0`` whatever the delays)
  iff ``gamma_0 < 1`` (Hale and Verduyn Lunel, IMA J. Math. Control Inf. 19 (2002)).

The maxima over the torus are bracketed by a branch-and-bound (:func:`torus_max`): a lower bound is a
value attained at a point (polished by a local search), the upper bound comes from a perturbation bound
valid on a whole cell (Bauer-Fike for the spectral radius, Weyl for the smallest singular value).
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from scipy.optimize import brentq, minimize

__all__ = [
    "c_d_commensurate",
    "commensurate_base",
    "difference_data",
    "rho_max",
    "sigma_min_min",
    "torus_max",
]

EPS = np.finfo(float).eps
MAX_COMPANION = 800        # largest block companion matrix (n N) for the commensurate c_D
MAX_DENOMINATOR = 1000     # delays tau_k / tau_min = p / q with q up to this are commensurate
MAX_GRID = 4096            # points of the first grid of torus_max, over all dimensions


def torus_max(fun, d, *, rtol=1e-9, atol=1e-12, decide=None, max_evals=200_000, m0=64, local=3, value=None):
    """Bracket ``max f`` over the torus ``[0, 2 pi)^d`` by branch and bound.

    Parameters
    ----------
    fun : callable
        ``fun(phi)``, ``phi`` ``(P, d)``, returns ``(values, slopes, excess)``, each ``(P,)``: ``f(phi)``
        and a bound ``f(psi) <= values + excess + slopes |psi - phi|_inf`` for every ``psi``
        (``excess >= 0`` covers rounding; ``slopes`` may be ``inf``).
    d : int
    rtol, atol : float
        A cell is dropped once its bound is below ``lower + rtol |lower| + atol``.
    decide : float, optional
        Only whether ``max f < decide`` matters: stop once ``lower >= decide``, drop cells whose bound
        is below ``decide``.
    max_evals : int
        Budget; on exhaustion the bound reached so far is returned (valid, wider).
    m0 : int
        Initial grid points per dimension, lowered so that the grid has at most :data:`MAX_GRID` (4096)
        points in all: ``m = min(m0, floor(4096^(1/d)))``, 2 per dimension up to ``d = 12``, one cell (the
        whole torus, its center) beyond. Every cell then splits into ``2^d`` children within
        ``max_evals``; when even that does not fit, the bound of the cells so far is returned.
    local : int
        Polish that many of the best grid points by a Nelder-Mead search (raises ``lower`` only; at most
        ``400 d`` evaluations each).
    value : callable, optional
        ``value(phi)``, ``phi`` ``(d,)``, returns ``f(phi)`` as a float: a cheaper form of ``fun`` for the
        local search, which needs no bound (default: the first output of ``fun``).

    Returns
    -------
    lower, upper : float
        ``lower <= max f <= upper``; ``lower`` is attained at ``argmax``.
    argmax : ndarray ``(d,)``
    """
    if d == 0:
        v, _, _ = fun(np.zeros((1, 0)))
        return float(v[0]), float(v[0]), np.zeros(0)
    m = _grid_size(m0, d)
    axes = (np.arange(m) + 0.5) * (2 * np.pi / m)
    centers = np.stack(np.meshgrid(*([axes] * d), indexing="ij"), -1).reshape(-1, d)
    half = np.pi / m
    vals, slopes, excess = fun(centers)
    evals = centers.shape[0]
    best = int(np.argmax(vals))
    lower, argmax = float(vals[best]), centers[best].copy()
    if local:
        neg = (lambda p: -float(fun(p[None, :])[0][0])) if value is None else (lambda p: -float(value(p)))
        for i in np.argsort(vals)[::-1][:local]:
            res = minimize(neg, centers[i], method="Nelder-Mead",
                           options={"xatol": 1e-13, "fatol": 1e-16, "maxiter": 400 * d, "maxfev": 400 * d})
            evals += int(res.nfev)
            if -res.fun > lower:
                lower, argmax = float(-res.fun), np.mod(res.x, 2 * np.pi)
    upper_pruned = -np.inf
    offs = np.stack(np.meshgrid(*([np.array([-0.5, 0.5])] * d), indexing="ij"), -1).reshape(-1, d)
    while True:
        with np.errstate(invalid="ignore"):
            ub = np.where(slopes == 0, vals + excess, vals + excess + slopes * half)
        if decide is not None and lower >= decide:
            return lower, max(lower, float(np.max(ub, initial=lower))), argmax
        drop = ub <= lower + rtol * abs(lower) + atol
        if decide is not None:
            drop |= ub < decide
        if drop.any():
            upper_pruned = max(upper_pruned, float(ub[drop].max()))
        keep = ~drop
        if not keep.any():
            return lower, max(lower, upper_pruned), argmax
        if evals + int(keep.sum()) * 2 ** d > max_evals:
            return lower, max(upper_pruned, float(ub[keep].max())), argmax
        centers = (centers[keep][:, None, :] + half * offs[None]).reshape(-1, d)
        half /= 2
        vals, slopes, excess = fun(centers)
        evals += centers.shape[0]
        i = int(np.argmax(vals))
        if vals[i] > lower:
            lower, argmax = float(vals[i]), centers[i].copy()


def _grid_size(m0, d):
    """Points per dimension of the first grid: the largest ``m <= max(m0, 1)`` with ``m^d <=``
    :data:`MAX_GRID` (integer arithmetic, no rounding of ``4096^(1/d)``), at least 1."""
    m = 1
    while m + 1 <= max(int(m0), 1) and (m + 1) ** d <= MAX_GRID:
        m += 1
    return m


def _parameterization(K, fixed_first):
    """``P`` ``(K, d)``: phases ``theta = P phi``; the first phase fixed at 0 when ``fixed_first``."""
    if fixed_first:
        return np.vstack([np.zeros((1, K - 1)), np.eye(K - 1)])
    return np.eye(K)


def _combination(H, radii, P, phi, identity):
    """``[I -] sum_k radii_k e^{i (P phi)_k} H_k`` for ``phi`` ``(Q, d)``: ``(Q, n, n)``."""
    w = radii * np.exp(1j * (phi @ P.T))                                   # (Q, K)
    S = np.einsum("qk,kij->qij", w, H)
    return np.eye(H.shape[1]) - S if identity else S


def _lipschitz(H, radii, P):
    """``|| M(phi) - M(psi) ||_2 <= L |phi - psi|_inf`` for :func:`_combination`."""
    norms = np.array([np.linalg.norm(h, 2) for h in H])
    return float(np.sum(radii * norms * np.abs(P).sum(axis=1)))


def rho_max(H, radii, **kw):
    """Bracket ``max_theta rho(sum_k radii_k e^{i theta_k} H_k)``; a common phase leaves ``rho``
    unchanged, so the first phase is fixed at 0. Returns ``(lower, upper)``.

    The bound on a cell: Bauer-Fike, ``rho(M + E) <= rho(M) + kappa(V) ||E||_2`` with ``V`` the
    eigenvectors of ``M``, or ``rho(M + E) <= ||M||_2 + ||E||_2`` when that is smaller.
    """
    K, n = H.shape[0], H.shape[1]
    P = _parameterization(K, True)
    L = _lipschitz(H, radii, P)

    def fun(phi):
        M = _combination(H, radii, P, phi, False)
        w, V = np.linalg.eig(M)
        rho = np.abs(w).max(axis=-1)
        with np.errstate(all="ignore"):
            kappa = np.linalg.cond(V)
        kappa = np.where(np.isfinite(kappa), kappa, np.inf)
        normM = np.linalg.norm(M, 2, axis=(-2, -1))
        use_bf = kappa < 1e8
        slope = np.where(use_bf, kappa * L, L)
        excess = np.where(use_bf, kappa * 16 * n * EPS * (normM + 1e-300), normM - rho)
        return rho, slope, excess

    def value(phi):
        return float(np.abs(np.linalg.eigvals(_combination(H, radii, P, phi[None, :], False)[0])).max())

    lower, upper, _ = torus_max(fun, K - 1, value=value, **kw)
    norm_bound = float(np.sum(radii * np.array([np.linalg.norm(h, 2) for h in H]))) * (1 + 16 * n * EPS)
    return lower, max(lower, min(upper, norm_bound))      # rho(M) <= ||M||_2 <= sum_k r_k ||H_k||_2


def sigma_min_min(H, radii, P, **kw):
    """Certified lower bound and attained value of ``min_phi sigma_min(I - sum_k radii_k e^{i (P phi)_k}
    H_k)`` (Weyl: ``sigma_min`` is 1-Lipschitz in the matrix). Returns ``(lower_bound, attained)``."""
    n = H.shape[1]
    L = _lipschitz(H, radii, P)

    def fun(phi):
        sv = np.linalg.svd(_combination(H, radii, P, phi, True), compute_uv=False)[:, -1]
        return -sv, np.full(sv.shape, L), np.full(sv.shape, 16 * n * EPS * (1 + L))

    lower, upper, _ = torus_max(fun, P.shape[1], **kw)
    return -upper, -lower


def commensurate_base(tau, max_den=MAX_DENOMINATOR):
    """``(h, n)`` with ``tau = n h`` for integers ``n`` when the delays are commensurate (ratios to the
    smallest delay ``p / q`` with ``q <= max_den``, to rounding), else ``None``."""
    t0 = float(np.min(tau))
    dens, nums = [], []
    for t in tau:
        r = float(t) / t0
        f = Fraction(r).limit_denominator(max_den)
        if abs(r - float(f)) > 64 * EPS * r:
            return None
        dens.append(f.denominator)
        nums.append(f)
    q = 1
    for d in dens:
        q = q * d // math.gcd(q, d)
    n = np.array([int(f * q) for f in nums])
    g = 0
    for v in n:
        g = math.gcd(g, int(v))
    n //= g
    return t0 * g / q, n


def c_d_commensurate(H, h, nk):
    """``c_D = ln(max |w|) / h`` over the roots ``w`` of ``det(w^N I - sum_k H_k w^{N - n_k}) = 0``
    (``z = 1/w = exp(-s h)``), by the eigenvalues of the block companion matrix; ``-inf`` when every
    ``w`` is 0. ``None`` when the companion matrix would exceed :data:`MAX_COMPANION`."""
    n = H.shape[1]
    N = int(nk.max())
    if n * N > MAX_COMPANION:
        return None
    coef = np.zeros((N, n, n), dtype=np.result_type(H, complex))     # coef[j]: matrix of w^{N-1-j}
    for Hk, m in zip(H, nk):
        coef[m - 1] += Hk                                              # w^{N - m} = w^{N-1-(m-1)}
    Cmp = np.zeros((n * N, n * N), dtype=coef.dtype)
    Cmp[:n, :] = np.concatenate(list(coef), axis=1)
    Cmp[n:, :-n] = np.eye(n * (N - 1))
    w = np.abs(np.linalg.eigvals(Cmp))
    wmax = float(w.max())
    if wmax <= 1e3 * EPS * max(1.0, float(np.abs(Cmp).max())):
        return -np.inf
    return math.log(wmax) / h


def _gamma_lower(H, tau, r):
    radii = np.exp(-r * tau)
    return rho_max(H, radii, max_evals=0, m0=32, local=1)[0]


def difference_data(H, tau, *, rtol=1e-6, max_evals=50_000):
    """The difference operator's spectral data as a dict (see :class:`ddesys.matrix.neutral.EssentialSpectrum`).

    ``H`` ``(K, n, n)`` and ``tau`` ``(K,)`` with the zero matrices already removed (``K >= 1``).
    """
    K, n = H.shape[0], H.shape[1]
    out = {}
    base = commensurate_base(tau)
    scalar = n == 1
    if K == 1:
        rho = float(np.abs(np.linalg.eigvals(H[0])).max())
        exact = rho > 0
        cd = math.log(rho) / float(tau[0]) if exact else -np.inf
        out.update(c_d=cd, c_d_exact=True, C_D=cd, C_D_bounds=(cd, cd), gamma0=rho, gamma0_bounds=(rho, rho))
        return out | {"commensurate": True, "base": float(tau[0]), "method": "one delay: ln(rho(H)) / tau"}
    # gamma_0 and C_D
    if scalar:
        a = np.abs(H[:, 0, 0])
        g0 = float(a.sum())
        C = brentq(lambda r: float(a @ np.exp(-r * tau)) - 1.0, *_bracket_scalar(a, tau), xtol=1e-15,
                   rtol=4 * EPS)
        out.update(gamma0=g0, gamma0_bounds=(g0, g0), C_D=C, C_D_bounds=(C, C))
        method = "scalar: gamma(r) = sum_k |h_k| e^{-r tau_k}"
    else:
        g_lo, g_hi = rho_max(H, np.ones(K), rtol=rtol, max_evals=max_evals)
        out.update(gamma0=g_lo, gamma0_bounds=(g_lo, g_hi))
        out.update(_robust_cd(H, tau))
        method = "branch and bound over the torus"
    if base is not None:
        cd = c_d_commensurate(H, *base)
    else:
        cd = None
    if cd is None:
        out.update(c_d=out["C_D"], c_d_exact=False)
    else:
        out.update(c_d=cd, c_d_exact=True)
    out.update(commensurate=base is not None, base=None if base is None else float(base[0]), method=method)
    return out


def _bracket_scalar(a, tau):
    """``(lo, hi)`` with ``sum a e^{-r tau} - 1`` positive at ``lo`` and non-positive at ``hi``."""
    hi = max(0.0, float(np.max(np.log(np.maximum(a.sum(), 1e-300)) / tau)))
    f = lambda r: float(a @ np.exp(-r * tau)) - 1.0
    while f(hi) > 0:
        hi = 2 * hi + 1
    lo = min(0.0, hi) - 1.0
    while f(lo) <= 0:
        lo = 2 * lo - 1
    return lo, hi


def _robust_cd(H, tau):
    """``C_D``: the zero of ``gamma(r) - 1`` by Brent's method on the attained lower bound of
    ``gamma``, then bracketed: ``gamma(r - delta) >= 1`` (attained) and ``gamma(r + delta) < 1``
    (branch-and-bound upper bound)."""
    norms = np.array([np.linalg.norm(h, 2) for h in H])
    f_norm = lambda r: float(norms @ np.exp(-r * tau)) - 1.0
    hi = 0.0
    while f_norm(hi) > 0:
        hi = 2 * hi + 1
    g = lambda r: _gamma_lower(H, tau, r) - 1.0
    step, lo = 1.0 / float(tau.max()), hi
    for _ in range(60):
        lo = lo - step
        if g(lo) >= 0:
            break
        step *= 2
    else:
        return {"C_D": -np.inf, "C_D_bounds": (-np.inf, -np.inf)}
    r = brentq(g, lo, hi, xtol=1e-13, rtol=1e-12)
    radii_at = lambda x: np.exp(-x * tau)
    for delta in (1e-6, 1e-4, 1e-2):
        dl = delta * (1 + abs(r))
        up_ok = rho_max(H, radii_at(r + dl), decide=1.0, max_evals=20_000)[1] < 1
        lo_ok = _gamma_lower(H, tau, r - dl) >= 1
        if up_ok and lo_ok:
            return {"C_D": r, "C_D_bounds": (r - dl, r + dl)}
    return {"C_D": r, "C_D_bounds": (lo, hi)}
