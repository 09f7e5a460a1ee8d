"""Error control of the time responses (:mod:`ddesys.matrix.timeresp`): Richardson's estimate on nested grids.

The fixed-step solver (:func:`ddesys.matrix._timeresp_steps.solve_fixed`) is of order 4: its global error
at an output time is ``E(t) h^4 + O(h^5)``. Two solutions on nested grids (every step of the coarse one cut
in two) give the error of the finer one, ``(y_h - y_{h/2}) / (2^4 - 1)``, at every output time
(Richardson extrapolation used as an estimator: the finer solution is returned, not the extrapolated one,
so the estimate stays the error of the numbers returned); the estimate is that term times ``SAFETY`` plus
the rounding errors, about ``eps sqrt(steps) max_t |y|``. Levels ``L = 0, 1, 2, ...`` cut the grid of the
first step ``h0`` into ``2^L`` parts; the estimate of level ``L`` compares it with level ``L - 1``. After
each estimate the number of further halvings is predicted from the fourth-order rate (aiming at half the
tolerance) and the pair of levels around it is solved, reusing a level already computed. The refinement
stops, with a ``RuntimeWarning`` naming the error reached, when the next level would pass the memory
budget (:mod:`ddesys.budget`), when the tolerance is below the rounding term of the steps it would need
(then the level where the two terms balance is the last one), when the order of convergence seen between
the last two pairs is below 2, or when halving the step no longer at least halves the estimate. From the
second pair on, the estimate uses the order seen (at most 4; :func:`observed_order`), so a solution less
smooth than the grid assumes is not reported with a fourth-order estimate.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from ..budget import BudgetError
from ._timeresp_steps import grid_counts, solve_fixed

ORDER = 4                       # of the RK4 method of steps with a cubic Hermite history
SAFETY = 2.0                    # the reported estimate is SAFETY |y_h - y_{h/2}| / (2^ORDER - 1)
MAX_LEVEL = 30                  # 2^30 times the first number of steps: far past any memory budget


def _worst(ratio):
    """The largest ratio, ``inf`` where one is not a number."""
    return float(np.nan_to_num(ratio, nan=np.inf, posinf=np.inf).max())


def _spread(y_coarse, y_fine):
    """Per channel (time on the last axis): ``max_t |y_fine - y_coarse|`` and ``max_t |y_fine|``."""
    if y_fine.size == 0:
        return np.zeros(y_fine.shape[:-1]), np.zeros(y_fine.shape[:-1])
    return np.abs(y_fine - y_coarse).max(axis=-1), np.abs(y_fine).max(axis=-1)


def _measure(diff, peak, steps, rtol, atol, order=ORDER):
    """``(estimate, ratio, rounding, worst)``: the largest estimated absolute error of the finer solution
    (computed in ``steps`` steps) of a pair whose channels differ by ``diff`` and peak at ``peak``, the largest
    ratio of a channel's estimate to its tolerance ``atol + rtol peak``, the largest ratio of the rounding
    term to the tolerance, and the flat index of the channel of the largest ratio. The estimate is
    Richardson's term for the convergence order ``order`` (per channel or one for all) plus the rounding
    errors, about ``eps sqrt(steps) peak`` per channel."""
    if diff.size == 0:
        return 0.0, 0.0, 0.0, 0
    rounding = np.finfo(float).eps * np.sqrt(steps) * peak
    e_ch = SAFETY * diff / (2.0**order - 1) + rounding
    tol = atol + rtol * peak
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(e_ch == 0, 0.0, e_ch / tol)
        fr = np.where(rounding == 0, 0.0, rounding / tol)
    worst = int(np.argmax(np.nan_to_num(ratio, nan=np.inf, posinf=np.inf)))
    return float(e_ch.max()), _worst(ratio), _worst(fr), worst


def observed_order(diff_coarse, diff_fine, levels):
    """Convergence order per channel seen between two pairs of levels ``levels`` halvings apart, their
    differences ``diff_coarse`` and ``diff_fine``: ``log2(diff_coarse / diff_fine) / levels`` in ``[1, ORDER]``
    (``ORDER`` where the finer pair agrees exactly, 1 where only it differs)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.log2(diff_coarse / diff_fine) / levels
    p = np.where(diff_fine == 0, ORDER, np.where(diff_coarse == 0, 1.0, p))
    return np.clip(np.nan_to_num(p, nan=1.0), 1.0, ORDER)


class Readout:
    """``X (T, n, m) -> y (p, m, T) = C X + D`` per time (``D`` None: no feedthrough), remembering the last
    states read: the error control reads the returned states already. The identity ``C`` (the state
    responses of :class:`~ddesys.DelayIOSystem`) is a copy; otherwise NumPy's stacked product (an ``einsum``
    over the times took longer than the compiled steps)."""

    def __init__(self, C, D=None):
        self.C, self.D = C, D
        self.eye = C.shape[0] == C.shape[1] and np.array_equal(C, np.eye(C.shape[0]))
        self.last = (None, None)

    def __call__(self, X):
        if self.last[0] is X:
            return self.last[1]
        y = X.transpose(1, 2, 0) if self.eye else np.matmul(self.C, X).transpose(1, 2, 0)
        y = np.ascontiguousarray(y) if self.D is None else y + self.D[..., None]
        self.last = (X, y)
        return y


def solve_controlled(A, Ad, tau, B, x0, forcing, t_out, h0, max_bytes, what, readout, rtol, atol, jumps=None):
    """Refine the grid until the estimated error of ``readout(X)`` is within ``atol + rtol max|y|``.

    Parameters
    ----------
    A, Ad, tau, B, x0, forcing, t_out, max_bytes, what, jumps
        As in :func:`ddesys.matrix._timeresp_steps.solve_fixed`.
    h0 : float
        Largest step of level 0 (``<= min(tau)``).
    readout : callable
        ``X (T, n, r) -> y`` with time on the last axis; the error is measured on ``y``, per channel.
    rtol, atol : float

    Returns
    -------
    X : ndarray ``(T, n, r)``
        States on the finest level computed.
    estimate : float
        Estimated largest absolute error of ``readout(X)``.
    h : float
        Largest step of that level.

    Warns
    -----
    RuntimeWarning
        The tolerance was not met (memory budget, rounding errors, an order of convergence below 2); the
        message names the estimate.

    Notes
    -----
    The first pair's estimate assumes the order ``ORDER``. From the second pair on, each channel's order is
    the one observed between the two last pairs (:func:`observed_order`, at most ``ORDER``), so a solution
    less smooth than the grid assumes (an input's jump or kink between grid points) gets an estimate of the
    order it shows, not a fourth-order one up to 7.5 times too small; below order 2 the refinement stops
    (each halving would gain too little) and warns.
    """
    sols = {}
    steps0 = int(grid_counts(tau, float(t_out.max(initial=0.0)), h0, jumps)[1].sum())

    def level(L):
        if L not in sols:
            X = solve_fixed(A, Ad, tau, B, x0, forcing, t_out, h0, max_bytes, what, split=2**L, jumps=jumps)
            sols[L] = (X, readout(X))
        return sols[L]

    level(0)                                 # the first pair must fit: a BudgetError here propagates
    L, p = 1, ORDER
    diff, peak = _spread(level(0)[1], level(1)[1])
    est, ratio, fr, _ = _measure(diff, peak, 2 * steps0, rtol, atol)
    reason, last = None, False
    rounding = "the tolerance is below the rounding errors of the steps it would take (about eps sqrt(steps))"
    while ratio > 1.0:
        more = max(1, math.ceil(math.log2(2.0 * ratio) / p)) if math.isfinite(ratio) else 1
        if fr > 0 and fr * 2 ** (more / 2) > 1:      # out of reach: go where the two terms balance, then stop
            more = math.floor(math.log2(8 * (ratio - fr) / fr) / (p + 0.5)) if ratio > 2 * fr else 0
            last = True
            if more < 1:
                reason = rounding
                break
        new = None
        for cand in range(min(L + more, MAX_LEVEL), L, -1):      # the predicted level, else fewer halvings
            try:
                level(cand - 1)
                level(cand)
            except BudgetError:
                continue
            new = cand
            break
        if new is None:
            reason = "the next halving of the step would pass the memory budget (raise max_bytes or " \
                     "DDESYS_MEMORY_BUDGET, shorten t, or loosen rtol/atol)"
            break
        diff_new, peak_new = _spread(level(new - 1)[1], level(new)[1])
        orders = observed_order(diff, diff_new, new - L)
        est_new, ratio_new, fr, worst = _measure(diff_new, peak_new, steps0 * 2**new, rtol, atol, orders)
        before = _measure(diff, peak, steps0 * 2**L, rtol, atol, orders)[0]      # the last pair, same orders
        for k in [k for k in sols if k < new - 1]:               # only the finest pair is kept
            del sols[k]
        progress = est_new <= 0.5 * before
        p = float(np.asarray(orders).reshape(-1)[worst]) if np.size(orders) else float(ORDER)
        est, ratio, L, diff, peak = est_new, ratio_new, new, diff_new, peak_new
        if ratio <= 1.0:
            break
        if last:
            reason = rounding
        elif p < 2:
            reason = f"the error decreases at order {p:.2g} in the step only, not {ORDER} (rounding errors, " \
                     "or an input that jumps or has a kink between grid points: name the times with breaks=)"
        elif not progress:
            reason = "halving the step no longer at least halves the error estimate (rounding errors, or a " \
                     "solution not smooth enough between the grid points)"
        elif L >= MAX_LEVEL:
            reason = f"the step was halved {MAX_LEVEL} times"
        if reason is not None:
            break
    if reason is not None:
        warnings.warn(f"{what}: the tolerance rtol={rtol:.3g}, atol={atol:.3g} was not met: estimated error "
                      f"{est:.3g} ({ratio:.3g} times the tolerance) at step h={h0 / 2**L:.4g}; {reason}",
                      RuntimeWarning, stacklevel=4)
    return sols[L][0], est, h0 / 2**L


__all__ = ["ORDER", "SAFETY", "Readout", "observed_order", "solve_controlled"]
