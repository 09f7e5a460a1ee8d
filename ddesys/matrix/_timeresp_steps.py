"""The fixed-step solver behind :mod:`ddesys.matrix.timeresp`: RK4 method of steps on a breakpoint grid.

Classical Runge-Kutta 4 with the delayed states read by cubic Hermite interpolation of the stored states
and one-sided derivatives (Oberle & Pesch 1981, Numer. Math. 37, 235-255); every breakpoint
``sum_k j_k tau[k]`` with ``sum_k j_k <= BREAKPOINT_ORDER`` is a grid point and every step is ``<= min(tau)``
(docs/theory.md §9.5). ``split`` divides every step of the grid of step ``h`` into equal parts, so the grids
of one ``h`` and several ``split`` are nested (the error control of :mod:`ddesys.matrix._timeresp_control`
compares them).
"""
from __future__ import annotations

import numpy as np

from ..budget import check_bytes

SIMULATE_MAX_BYTES = 2**30     # memory budget of the grid (argument ``max_bytes``)
BREAKPOINT_ORDER = 4           # breakpoints sum_k j_k tau_k with sum_k j_k <= 4 are grid points
_CSEL = np.array([1e-3, 0.5, 1 - 1e-3])      # where a stage's delayed point picks its past interval


def breakpoints(tau, t_end, order=BREAKPOINT_ORDER):
    """The sorted sums ``sum_k j_k tau[k]`` with ``1 <= sum_k j_k <= order`` in ``(0, t_end)``, plus 0.

    Parameters
    ----------
    tau : ndarray ``(K,)``
    t_end : float
    order : int

    Returns
    -------
    ndarray ``(P,)``
    """
    tau = np.unique(np.asarray(tau, dtype=np.float64))
    level, pts = np.zeros(1), [np.zeros(1)]
    for _ in range(order):
        level = np.unique((level[:, None] + tau[None, :]).reshape(-1))
        level = level[level < t_end]
        if level.size == 0:
            break
        pts.append(level)
    p = np.unique(np.concatenate(pts))
    keep = np.concatenate([[True], np.diff(p) > 64 * np.finfo(float).eps * max(1.0, t_end)])
    return p[keep]


def grid_counts(tau, t_end, h):
    """Breakpoint grid ``b (P,)`` and the number of equal steps ``<= h`` between consecutive points ``(P - 1,)``."""
    b = np.concatenate([breakpoints(tau, t_end), [t_end]])
    b = b[np.concatenate([[True], np.diff(b) > 64 * np.finfo(float).eps * max(1.0, t_end)])]
    if b.size < 2:                               # t_end == 0: one tiny step keeps the code uniform
        b = np.array([0.0, min(h, float(tau.min()))])
    counts = np.maximum(1, np.ceil(np.diff(b) / h - 1e-9).astype(np.int64))
    return b, counts


def _hermite_w(theta):
    t2, t3 = theta * theta, theta * theta * theta
    return np.stack([2 * t3 - 3 * t2 + 1, t3 - 2 * t2 + theta, -2 * t3 + 3 * t2, t3 - t2], axis=-1)


def solve_fixed(A, Ad, tau, B, x0, forcing, t_out, h, max_bytes, what, split=1):
    """RK4 method of steps for ``X' = A X + sum_k Ad_k X(t - tau_k) + B U(t)``, ``X (n, r)``.

    ``forcing``: None (no input), ``("const", U (m, r))`` for ``t >= 0``, or ``("call", fn, r)`` with
    ``fn(times) -> (m, r, len(times))``. Every step of the grid of step ``h`` is divided into ``split``
    equal steps. Returns the states at ``t_out``, ``(T, n, r)``; a grid over ``max_bytes`` raises
    :class:`ddesys.budget.BudgetError` before allocating.
    """
    n, K = A.shape[0], tau.size
    r = x0.shape[1]
    t_end = float(t_out.max(initial=0.0))
    b, counts = grid_counts(tau, t_end, h)
    counts = counts * int(split)
    S = int(counts.sum())
    item = 16 if np.iscomplexobj(np.empty(0, np.result_type(A, Ad, B, x0))) else 8
    need = (3 * S + 1) * n * r * item + S * 3 * K * 48 + (2 * S + 1) * (B.shape[1] * r * item + 8)
    check_bytes(need, f"{what} with step h={h / split:.4g} up to t={t_end:.4g} ({S} steps)",
                "use a larger h or a shorter t, or raise max_bytes", max_bytes, SIMULATE_MAX_BYTES)
    grid = np.concatenate([np.concatenate([np.linspace(b[i], b[i + 1], c, endpoint=False)
                                           for i, c in enumerate(counts)]), [b[-1]]])
    hs = np.diff(grid)
    U_grid = U_mid = None
    if forcing is not None and forcing[0] == "call":
        vals = forcing[1](np.concatenate([grid, grid[:-1] + hs / 2]))       # (m, r, 2S + 1)
        U_grid, U_mid = vals[..., :S + 1], vals[..., S + 1:]
        dtype = np.result_type(A, Ad, B, x0, vals)
    else:
        dtype = np.result_type(A, Ad, B, x0)
    BU_const = B @ forcing[1] if forcing is not None and forcing[0] == "const" else None
    # delayed reads: step j, stage c in (0, 1/2, 1), delay k -> past interval idx and Hermite weights
    c = np.array([0.0, 0.5, 1.0])
    s = grid[:-1, None, None] + c[None, :, None] * hs[:, None, None] - tau[None, None, :]      # (S, 3, K)
    sel = grid[:-1, None, None] + _CSEL[None, :, None] * hs[:, None, None] - tau[None, None, :]
    idx = np.searchsorted(grid, sel, side="right") - 1
    live = idx >= 0                                                     # before t = 0: zero history
    idx = np.clip(idx, 0, S - 1)
    hi = hs[idx]
    W = _hermite_w((s - grid[idx]) / hi) * live[..., None]
    W[..., 1] *= hi
    W[..., 3] *= hi
    X = np.zeros((S + 1, n, r), dtype)
    dL = np.zeros((S, n, r), dtype)
    dR = np.zeros((S, n, r), dtype)
    X[0] = x0
    Adt = np.asarray(Ad, dtype)

    def force(j, half):
        if BU_const is not None:
            return BU_const
        if U_grid is None:
            return 0.0
        U = U_mid[..., j] if half else U_grid[..., j]
        return B @ U

    for j in range(S):
        ij, wj = idx[j], W[j]                                           # (3, K), (3, K, 4)
        Xd = (wj[..., 0, None, None] * X[ij] + wj[..., 1, None, None] * dL[ij]
              + wj[..., 2, None, None] * X[ij + 1] + wj[..., 3, None, None] * dR[ij])   # (3, K, n, r)
        Dl = np.einsum("kab,ckbr->car", Adt, Xd)                         # (3, n, r)
        hj, x = hs[j], X[j]
        fh = force(j, True)
        f1 = force(j + 1, False)
        k1 = A @ x + Dl[0] + force(j, False)
        k2 = A @ (x + 0.5 * hj * k1) + Dl[1] + fh
        k3 = A @ (x + 0.5 * hj * k2) + Dl[1] + fh
        k4 = A @ (x + hj * k3) + Dl[2] + f1
        X[j + 1] = x + (hj / 6) * (k1 + 2 * k2 + 2 * k3 + k4)
        dL[j] = k1
        dR[j] = A @ X[j + 1] + Dl[2] + f1
    jo = np.clip(np.searchsorted(grid, t_out, side="right") - 1, 0, S - 1)
    wo = _hermite_w((t_out - grid[jo]) / hs[jo])
    return (wo[:, 0, None, None] * X[jo] + (wo[:, 1] * hs[jo])[:, None, None] * dL[jo]
            + wo[:, 2, None, None] * X[jo + 1] + (wo[:, 3] * hs[jo])[:, None, None] * dR[jo])


__all__ = ["BREAKPOINT_ORDER", "SIMULATE_MAX_BYTES", "breakpoints", "grid_counts", "solve_fixed"]
