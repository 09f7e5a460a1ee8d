"""Nonsmooth minimization for fixed-order design (private helper of :mod:`ddesys.control.design`).

The strategy of HANSO (Lewis & Overton, "Nonsmooth optimization via quasi-Newton methods", Math.
Program. 141, 2013; Burke, Lewis & Overton, "A robust gradient sampling algorithm for nonsmooth,
nonconvex optimization", SIAM J. Optim. 15, 2005):

1. BFGS with the weak Wolfe line search (bisection and doubling), which keeps working on functions that
   are nonsmooth at the minimizer (the spectral abscissa where two rightmost roots tie in real part, or
   at a multiple root); it stops when the line search fails or the step stalls;
2. gradient sampling: at the BFGS point, gradients at random points of balls of shrinking radii, the
   smallest vector of their convex hull as a descent direction (a small quadratic program) and an Armijo
   backtracking; it stops when that vector is small at the smallest radius.

The objective ``f(x) -> (value, gradient)`` may return ``value = inf`` (e.g. an unstable point of an Hinf
objective): the line searches treat it as "too far". The random points come from a local
``numpy.random.Generator`` seeded by the caller (no global state).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.optimize import minimize


class OptResult(NamedTuple):
    x: np.ndarray
    f: float
    g: np.ndarray
    history: list
    n_iter: int
    n_eval: int
    message: str


class _Counter:
    """Wraps ``f``: counts evaluations, keeps the best finite point, and raises ``_Stop`` at the target."""

    def __init__(self, f, target, max_eval):
        self.f, self.target, self.max_eval = f, target, max_eval
        self.n = 0
        self.best = (np.inf, None, None)

    def __call__(self, x):
        if self.n >= self.max_eval:
            raise _Stop("the evaluation budget max_eval was used up")
        self.n += 1
        v, g = self.f(x)
        v, g = float(v), np.asarray(g, dtype=float)
        if not np.all(np.isfinite(g)):
            v = np.inf                                   # no usable gradient (e.g. at a multiple root)
        if np.isfinite(v) and v < self.best[0]:
            self.best = (v, x.copy(), g.copy())
        if self.target is not None and v <= self.target:
            raise _Stop(f"the target {self.target:.6g} was reached")
        return v, g


class _Stop(Exception):
    pass


def weak_wolfe(fc, x, f0, g0, d, c1=1e-4, c2=0.9, max_steps=20):
    """Lewis-Overton bisection / doubling weak Wolfe line search along ``d``.

    Returns ``(t, f, g, ok)``; ``ok`` False when no step met both conditions (the last point that
    decreased ``f`` sufficiently is returned if any, else ``t = 0``).
    """
    gd = float(g0 @ d)
    lo, hi, t = 0.0, np.inf, 1.0
    fallback = (0.0, f0, g0)
    for _ in range(max_steps):
        ft, gt = fc(x + t * d)
        if not (np.isfinite(ft) and ft <= f0 + c1 * t * gd):
            hi = t                                               # too far (or undefined): shrink
        elif float(gt @ d) < c2 * gd:
            lo = t                                               # sufficient decrease, slope too steep
            fallback = (t, ft, gt)
        else:
            return t, ft, gt, True
        t = 2.0 * lo if not np.isfinite(hi) else 0.5 * (lo + hi)
        if np.isfinite(hi) and hi - lo < 1e-16 * max(1.0, t):
            break
    return (*fallback, False)


def bfgs(fc, x0, f0, g0, *, max_iter, gtol, history, ftol=1e-13):
    """BFGS on the inverse Hessian with the weak Wolfe line search; returns ``(x, f, g, n_iter, why)``."""
    x, f, g = x0.copy(), f0, g0.copy()
    small = 0
    P = x.size
    H = np.eye(P)
    for it in range(1, max_iter + 1):
        if float(np.linalg.norm(g)) <= gtol:
            return x, f, g, it - 1, "the gradient is below gtol"
        d = -H @ g
        if float(g @ d) >= 0:                                    # lost descent: restart from the identity
            H = np.eye(P)
            d = -g
        t, fn, gn, ok = weak_wolfe(fc, x, f, g, d)
        if t == 0.0:
            return x, f, g, it - 1, "the line search found no decrease (a nonsmooth point)"
        s, y = t * d, gn - g
        x, f, g = x + s, fn, gn
        history.append(f)
        sy = float(s @ y)
        if sy > 1e-16 * float(np.linalg.norm(s) * np.linalg.norm(y)) and sy > 0:
            if it == 1:
                H = (sy / float(y @ y)) * np.eye(P)              # scale the first update
            rho = 1.0 / sy
            V = np.eye(P) - rho * np.outer(s, y)
            H = V @ H @ V.T + rho * np.outer(s, s)
        if not ok and float(np.linalg.norm(s)) <= 1e-14 * max(1.0, float(np.linalg.norm(x))):
            return x, f, g, it, "the line search stalled (a nonsmooth point)"
        small = small + 1 if len(history) > 1 and history[-2] - f <= ftol * (1.0 + abs(f)) else 0
        if small >= 3:
            return x, f, g, it, "three steps decreased f by less than ftol (1 + |f|)"
    return x, f, g, max_iter, "max_iter BFGS iterations"


def min_norm_hull(G):
    """The smallest-norm vector in the convex hull of the rows of ``G (k, P)``."""
    k = G.shape[0]
    Q = G @ G.T
    res = minimize(lambda lam: float(lam @ Q @ lam), np.full(k, 1.0 / k), jac=lambda lam: 2 * Q @ lam,
                   bounds=[(0.0, 1.0)] * k, constraints=[{"type": "eq", "fun": lambda lam: lam.sum() - 1.0,
                                                          "jac": lambda lam: np.ones(k)}],
                   method="SLSQP", options={"ftol": 1e-14, "maxiter": 200})
    lam = np.clip(res.x, 0.0, None)
    lam /= lam.sum()
    return lam @ G


def gradient_sampling(fc, x, f, g, *, radii, n_sample, gtol, rng, history, max_iter=10, max_halvings=12):
    """Gradient sampling with the radii in decreasing order; returns ``(x, f, g, n_iter, why)``."""
    P = x.size
    n_it = 0
    stops = []
    for eps in radii:
        why = f"no decrease found within {max_iter} steps"
        for _ in range(max_iter):
            pts = rng.standard_normal((n_sample, P))
            pts *= (eps * rng.random(n_sample) ** (1.0 / P) / np.linalg.norm(pts, axis=1))[:, None]
            grads = [g]
            for z in pts:
                fz, gz = fc(x + z)
                if np.isfinite(fz):
                    grads.append(gz)
            d = min_norm_hull(np.array(grads))
            nd = float(np.linalg.norm(d))
            if nd <= gtol:
                why = "stationary"                               # at this radius: shrink it
                break
            t, moved = 1.0, False
            for _ in range(max_halvings):
                ft, gt = fc(x - t * d)
                if np.isfinite(ft) and ft < f - 1e-8 * t * nd * nd:
                    x, f, g, moved = x - t * d, ft, gt, True
                    history.append(f)
                    n_it += 1
                    break
                t *= 0.5
            if not moved:
                why = "no decrease along the hull vector"
                break
        stops.append(f"{eps:.0e}: {why}")
    return x, f, g, n_it, "gradient sampling (radius: outcome) " + ", ".join(stops)


def minimize_nonsmooth(f, x0, *, target=None, max_iter=200, max_eval=2000, gtol=1e-10,
                       sampling=True, seed=0):
    """BFGS with weak Wolfe, then gradient sampling (HANSO's strategy). ``f(x) -> (value, grad)``."""
    fc = _Counter(f, target, max_eval)
    history = []
    x = np.asarray(x0, dtype=float).copy()
    scale = max(1.0, float(np.linalg.norm(x)))
    try:
        f0, g0 = fc(x)
        if not np.isfinite(f0):
            raise ValueError(f"the objective is not finite at the starting point ({f0})")
        history.append(f0)
        x, f1, g1, n_it, why = bfgs(fc, x, f0, g0, max_iter=max_iter, gtol=gtol, history=history)
        if sampling:
            rng = np.random.default_rng(seed)
            radii = scale * np.array([1e-3, 1e-4, 1e-5, 1e-6])
            x, f1, g1, n2, why2 = gradient_sampling(fc, x, f1, g1, radii=radii, n_sample=min(2 * x.size + 2, 40),
                                                     gtol=gtol, rng=rng, history=history)
            n_it += n2
            why = f"BFGS: {why}; {why2}"
        else:
            why = f"BFGS: {why}"
    except _Stop as stop:
        why, n_it = str(stop), len(history)
        history.append(fc.best[0])
    v, xb, gb = fc.best
    if xb is None:
        raise ValueError("the objective was never finite")
    return OptResult(xb, v, gb, history, n_it, fc.n, why)


__all__ = ["OptResult", "bfgs", "gradient_sampling", "min_norm_hull", "minimize_nonsmooth", "weak_wolfe"]
