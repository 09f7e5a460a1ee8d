"""The fixed-step solver behind :mod:`ddesys.matrix.timeresp`: RK4 method of steps on a breakpoint grid.

Classical Runge-Kutta 4 with the delayed states read by cubic Hermite interpolation of the stored states
and one-sided derivatives (Oberle & Pesch 1981, Numer. Math. 37, 235-255); every breakpoint
``sum_k j_k tau[k]`` with ``sum_k j_k <= BREAKPOINT_ORDER`` is a grid point and every step is ``<= min(tau)``
(docs/theory.md §9.5). ``split`` divides every step of the grid of step ``h`` into equal parts, so the grids
of one ``h`` and several ``split`` are nested (the error control of :mod:`ddesys.matrix._timeresp_control`
compares them). An input that jumps (:func:`input_jumps` finds where, or the caller names the times) would
cut RK4 to first order in the step that holds the jump: each jump ``s`` and the points ``s + sum_k j_k
tau[k]`` with ``sum_k j_k <= JUMP_ORDER`` are grid points too, and the steps on either side of ``s`` read
the input's one-sided values.
"""
from __future__ import annotations

import warnings

import numpy as np

from ..budget import check_bytes

SIMULATE_MAX_BYTES = 2**30     # memory budget of the grid (argument ``max_bytes``)
BREAKPOINT_ORDER = 4           # breakpoints sum_k j_k tau_k with sum_k j_k <= 4 are grid points
JUMP_ORDER = 3                 # and s + sum_k j_k tau_k, sum_k j_k <= 3, for every jump s of the input
_CSEL = np.array([1e-3, 0.5, 1 - 1e-3])      # where a stage's delayed point picks its past interval
_SAMPLES = (2**12, 2**20)      # least and most samples of the input searched for jumps
_JUMP_FLOOR = 1e-12            # smallest jump searched for, relative to the channel's largest value
MAX_JUMPS = 2**16              # most jumps of an input the grid follows
_SIDE = 256                    # one-sided input values at a jump s: u(s -+ _SIDE eps max(1, t_end))


def _sums(tau, t_end, order):
    """The sorted sums ``sum_k j_k tau[k]`` with ``0 <= sum_k j_k <= order`` below ``t_end`` (0 included)."""
    level, pts = np.zeros(1), [np.zeros(1)]
    for _ in range(order):
        level = np.unique((level[:, None] + tau[None, :]).reshape(-1))
        level = level[level < t_end]
        if level.size == 0:
            break
        pts.append(level)
    return np.unique(np.concatenate(pts))


def breakpoints(tau, t_end, order=BREAKPOINT_ORDER, jumps=None):
    """The sorted sums ``sum_k j_k tau[k]`` with ``1 <= sum_k j_k <= order`` in ``(0, t_end)``, plus 0, and
    with ``jumps`` the points ``s + sum_k j_k tau[k]`` (``0 <= sum_k j_k <= JUMP_ORDER``) of every ``s`` in it.

    Parameters
    ----------
    tau : ndarray ``(K,)``
    t_end : float
    order : int
    jumps : array_like, optional
        Times in ``(0, t_end)`` where the input is not smooth (it or a derivative jumps): ``x'`` (or a higher
        derivative) jumps there and ``JUMP_ORDER`` delays later the jump has reached ``x^(4)``.

    Returns
    -------
    ndarray ``(P,)``
    """
    tau = np.unique(np.asarray(tau, dtype=np.float64))
    p = _sums(tau, t_end, order)
    if jumps is not None:
        j = np.asarray(jumps, dtype=np.float64).reshape(-1)
        j = j[(j > 0) & (j < t_end)]
        if j.size:
            extra = (j[:, None] + _sums(tau, t_end, JUMP_ORDER)[None, :]).reshape(-1)
            p = np.unique(np.concatenate([p, extra[extra < t_end]]))
    keep = np.concatenate([[True], np.diff(p) > 64 * np.finfo(float).eps * max(1.0, t_end)])
    return p[keep]


def grid_counts(tau, t_end, h, jumps=None):
    """Breakpoint grid ``b (P,)`` and the number of equal steps ``<= h`` between consecutive points ``(P - 1,)``."""
    b = np.concatenate([breakpoints(tau, t_end, jumps=jumps), [t_end]])
    b = b[np.concatenate([[True], np.diff(b) > 64 * np.finfo(float).eps * max(1.0, t_end)])]
    if b.size < 2:                               # t_end == 0: one tiny step keeps the code uniform
        b = np.array([0.0, min(h, float(tau.min()))])
    counts = np.maximum(1, np.ceil(np.diff(b) / h - 1e-9).astype(np.int64))
    return b, counts


def _hermite_w(theta):
    t2, t3 = theta * theta, theta * theta * theta
    return np.stack([2 * t3 - 3 * t2 + 1, t3 - 2 * t2 + theta, -2 * t3 + 3 * t2, t3 - t2], axis=-1)


def _check_grid(A, Ad, tau, B, x0, t_end, h, split, max_bytes, what, jumps):
    """``(b, counts, S)`` of the grid (:func:`grid_counts`, ``split`` times finer, ``S`` steps), refused
    (:class:`ddesys.budget.BudgetError`) when its storage would pass ``max_bytes``."""
    b, counts = grid_counts(tau, t_end, h, jumps)
    counts = counts * int(split)
    S = int(counts.sum())
    item = 16 if np.iscomplexobj(np.empty(0, np.result_type(A, Ad, B, x0))) else 8
    n, K, r = A.shape[0], tau.size, x0.shape[1]
    need = (3 * S + 1) * n * r * item + S * 3 * K * 48 + (2 * S + 1) * (B.shape[1] * r * item + 8)
    check_bytes(need, f"{what} with step h={h / split:.4g} up to t={t_end:.4g} ({S} steps)",
                "use a larger h or a shorter t, or raise max_bytes", max_bytes, SIMULATE_MAX_BYTES)
    return b, counts, S


def input_breaks(A, Ad, tau, B, x0, forcing, t_out, h, max_bytes, what, breaks=None):
    """The times in ``(0, max(t_out)]`` where a called input is not smooth: its jumps and kinks
    (:func:`input_jumps`) and the ``breaks`` given; None for no input or a constant one. The grid of step
    ``h`` is checked against the budget first (a refused grid does not sample the input)."""
    if forcing is None or forcing[0] != "call":
        return None
    try:
        given = np.asarray(np.zeros(0) if breaks is None else breaks, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise TypeError(f"breaks must be an array of real times, got {type(breaks).__name__}") from None
    if not np.all(np.isfinite(given)):
        raise ValueError("breaks must be finite times")
    t_end = float(t_out.max(initial=0.0))
    _check_grid(A, Ad, tau, B, x0, t_end, h, 1, max_bytes, what, None)
    b = np.union1d(input_jumps(forcing[1], t_end, h), given)
    return b[(b > 0) & (b <= t_end)]


def solve_fixed(A, Ad, tau, B, x0, forcing, t_out, h, max_bytes, what, split=1, jumps=None, compiled=None):
    """RK4 method of steps for ``X' = A X + sum_k Ad_k X(t - tau_k) + B U(t)``, ``X (n, r)``.

    ``forcing``: None (no input), ``("const", U (m, r))`` for ``t >= 0``, or ``("call", fn, r)`` with
    ``fn(times) -> (m, r, len(times))``. Every step of the grid of step ``h`` is divided into ``split``
    equal steps. ``jumps``: times where the input is not smooth; they and the breakpoints they start
    (:func:`breakpoints`) are grid points, and at each the steps on either side read the input's one-sided
    values (``fn`` a little before and after it). ``compiled``: run the steps in the compiled loop
    (:mod:`ddesys.cpu.dde_rk4`, the default when Numba is available) or in the NumPy loop here (False, the
    fallback); the two agree to rounding. Returns the states at ``t_out``, ``(T, n, r)``; a grid over
    ``max_bytes`` raises :class:`ddesys.budget.BudgetError` before allocating.
    """
    from ..cpu import dde_rk4

    if compiled is None:
        compiled = dde_rk4.available()
    elif compiled and not dde_rk4.available():
        raise RuntimeError("solve_fixed(compiled=True) needs Numba (missing, or disabled by DDESYS_DISABLE_NUMBA)")
    n, r = A.shape[0], x0.shape[1]
    t_end = float(t_out.max(initial=0.0))
    b, counts, S = _check_grid(A, Ad, tau, B, x0, t_end, h, split, max_bytes, what, jumps)
    grid = np.concatenate([np.concatenate([np.linspace(b[i], b[i + 1], c, endpoint=False)
                                           for i, c in enumerate(counts)]), [b[-1]]])
    hs = np.diff(grid)
    U_start = U_end = U_mid = None
    if forcing is not None and forcing[0] == "call":
        g = _jump_points(grid, jumps, t_end)
        side = _SIDE * np.finfo(float).eps * max(1.0, t_end)
        vals = forcing[1](np.concatenate([grid, grid[:-1] + hs / 2, grid[g] - side, grid[g] + side]))
        U_grid, U_mid = vals[..., :S + 1], vals[..., S + 1:2 * S + 1]      # (m, r, S + 1), (m, r, S)
        U_end, U_start = U_grid.copy(), U_grid.copy()          # the values at the end / start of a step
        U_end[..., g] = vals[..., 2 * S + 1:2 * S + 1 + g.size]
        U_start[..., g] = vals[..., 2 * S + 1 + g.size:]
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
    jo = np.clip(np.searchsorted(grid, t_out, side="right") - 1, 0, S - 1)      # output times: their steps
    wo = _hermite_w((t_out - grid[jo]) / hs[jo])
    if compiled:
        if BU_const is not None:
            F = np.broadcast_to(BU_const, (3, 1, n, r))
        elif U_mid is None:
            F = np.zeros((3, 1, n, r))
        else:
            F = np.stack([np.einsum("nm,mrs->snr", B, U) for U in (U_start[..., :S], U_mid, U_end[..., 1:])])
        wo[:, 1] *= hs[jo]
        wo[:, 3] *= hs[jo]
        return dde_rk4.rk4_steps(np.asarray(A, dtype), np.asarray(Ad, dtype), hs, idx, W, F,
                                 np.asarray(x0, dtype), jo, wo)
    X, dL, dR = _steps_numpy(A, Ad, x0, hs, idx, W, BU_const, B, U_start, U_mid, U_end, dtype)
    return (wo[:, 0, None, None] * X[jo] + (wo[:, 1] * hs[jo])[:, None, None] * dL[jo]
            + wo[:, 2, None, None] * X[jo + 1] + (wo[:, 3] * hs[jo])[:, None, None] * dR[jo])


def _steps_numpy(A, Ad, x0, hs, idx, W, BU_const, B, U_start, U_mid, U_end, dtype):
    """The steps of :func:`solve_fixed` in NumPy (the fallback of :mod:`ddesys.cpu.dde_rk4`, the same scheme):
    ``X (S + 1, n, r)`` and the one-sided derivatives ``dL``, ``dR`` ``(S, n, r)``."""
    S, n, r = hs.size, A.shape[0], x0.shape[1]
    X = np.zeros((S + 1, n, r), dtype)
    dL = np.zeros((S, n, r), dtype)
    dR = np.zeros((S, n, r), dtype)
    X[0] = x0
    Adt = np.asarray(Ad, dtype)

    def force(j, where):
        """``B U`` in step ``j`` at its start (0), middle (1) or end (2): one-sided values at a jump."""
        if BU_const is not None:
            return BU_const
        if U_mid is None:
            return 0.0
        return B @ (U_start[..., j], U_mid[..., j], U_end[..., j + 1])[where]

    for j in range(S):
        ij, wj = idx[j], W[j]                                           # (3, K), (3, K, 4)
        Xd = (wj[..., 0, None, None] * X[ij] + wj[..., 1, None, None] * dL[ij]
              + wj[..., 2, None, None] * X[ij + 1] + wj[..., 3, None, None] * dR[ij])   # (3, K, n, r)
        Dl = np.einsum("kab,ckbr->car", Adt, Xd)                         # (3, n, r)
        hj, x = hs[j], X[j]
        fh = force(j, 1)
        f1 = force(j, 2)
        k1 = A @ x + Dl[0] + force(j, 0)
        k2 = A @ (x + 0.5 * hj * k1) + Dl[1] + fh
        k3 = A @ (x + 0.5 * hj * k2) + Dl[1] + fh
        k4 = A @ (x + hj * k3) + Dl[2] + f1
        X[j + 1] = x + (hj / 6) * (k1 + 2 * k2 + 2 * k3 + k4)
        dL[j] = k1
        dR[j] = A @ X[j + 1] + Dl[2] + f1
    return X, dL, dR


def input_jumps(fn, t_end, h):
    """Times in ``(0, t_end]`` where the input ``fn`` jumps, each to a few rounding units.

    ``fn`` is sampled at ``4 t_end / h`` equally spaced times (``2^12`` to ``2^20``); a sample interval
    whose difference (per channel, relative to the channel's largest value) is over ``_JUMP_FLOOR`` and
    4 times the smaller of its neighbours' is bisected (the half with the larger difference kept) down to
    adjacent floating-point numbers, and kept when the difference left there is at least a quarter of the
    first: a jump, not a steep smooth stretch. Two jumps closer than the sample spacing can be missed (give
    them as ``breaks``). More than ``MAX_JUMPS`` are refused (an input that is not piecewise smooth).

    Parameters
    ----------
    fn : callable
        ``fn(times) -> (m, r, len(times))``.
    t_end : float
    h : float
        The solver's step.

    Returns
    -------
    ndarray ``(J,)``
        Sorted; the time returned is the first floating-point number past the jump's left side.
    """
    if not t_end > 0:
        return np.zeros(0)
    N = int(np.clip(np.ceil(4 * t_end / h), *_SAMPLES))
    ts = np.linspace(0.0, t_end, N + 1)
    v = np.concatenate([fn(ts[i:i + 2**16]) for i in range(0, ts.size, 2**16)], axis=-1)
    v = v.reshape(-1, ts.size)
    scale = np.abs(v).max(axis=1, keepdims=True)
    scale[scale == 0] = 1.0
    d = np.abs(np.diff(v, axis=1)) / scale                                  # (channels, N)
    pad = np.pad(d, ((0, 0), (1, 1)), constant_values=np.inf)
    near = np.minimum(pad[:, :-2], pad[:, 2:])                             # the smaller neighbour
    cand = np.nonzero(((d > _JUMP_FLOOR) & (d > 4 * near)).any(axis=0))[0]
    if cand.size > MAX_JUMPS:
        warnings.warn(f"u looks discontinuous at {cand.size} of {N} samples in (0, {t_end:.6g}] (noise, or "
                      "sampled too coarsely): no jump of u is followed by the grid (only the error estimate sees "
                      "them); name them with breaks= or shorten t", RuntimeWarning, stacklevel=4)
        return np.zeros(0)
    if cand.size == 0:
        return _kinks(fn, ts, v / scale, scale[:, 0], cand)
    first = d[:, cand].max(axis=0)
    lo, hi = ts[cand], ts[cand + 1]
    vlo, vhi = v[:, cand], v[:, cand + 1]
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        live = (mid > lo) & (mid < hi)
        if not live.any():
            break
        vm = fn(mid[live]).reshape(v.shape[0], -1)
        left = (np.abs(vm - vlo[:, live]) / scale).max(axis=0)
        right = (np.abs(vhi[:, live] - vm) / scale).max(axis=0)
        go = left >= right                                       # the jump is in the left half
        il = np.nonzero(live)[0]
        hi[il[go]], vhi[:, il[go]] = mid[live][go], vm[:, go]
        lo[il[~go]], vlo[:, il[~go]] = mid[live][~go], vm[:, ~go]
    size = (np.abs(vhi - vlo) / scale).max(axis=0)
    real = (size >= 0.25 * first) & (size > _JUMP_FLOOR)
    found = np.union1d(hi[real], _kinks(fn, ts, v / scale, scale[:, 0], cand[real]))
    if found.size > MAX_JUMPS:
        warnings.warn(f"u jumps at {found.size} places in (0, {t_end:.6g}] (more than {MAX_JUMPS}): the grid "
                      "does not follow them (only the error estimate sees them); a piecewise smooth input, "
                      "or a shorter t, is followed", RuntimeWarning, stacklevel=4)
        return np.zeros(0)
    return found


def _kinks(fn, ts, v, scale, jumps):
    """Where the samples ``v (channels, N + 1)`` at ``ts``, scaled by ``scale (channels,)``, show a jump of
    the slope (a kink), away from the sample intervals ``jumps`` of the jumps: the sum of the two slope
    changes around a sample interval over ``_JUMP_FLOOR`` and 8 times the smaller of the same sums two
    intervals away. Each is bisected between the straight lines through the two samples left and right of
    its interval (the middle point closer to the left line goes left) and kept when the slopes a 64th of
    the sample spacing either side still differ by a quarter of the change seen (not a curve)."""
    if ts.size < 9:
        return np.zeros(0)
    dt = ts[1] - ts[0]
    c = np.diff(v, 2, axis=1)                                          # slope change at ts[1:-1], times dt
    pair = np.abs(c[:, :-1] + c[:, 1:])                                # around the interval [ts[j], ts[j + 1]]
    pad = np.pad(pair, ((0, 0), (2, 2)), constant_values=np.inf)
    near = np.minimum(pad[:, :-4], pad[:, 4:])
    hit = (pair > _JUMP_FLOOR) & (pair > 8 * near)                      # (channels, N - 2): interval j + 1
    j = np.nonzero(hit.any(axis=0))[0] + 1
    j = j[(j >= 2) & (j <= ts.size - 4)][:MAX_JUMPS]
    if jumps.size:
        j = j[np.abs(j[:, None] - jumps[None, :]).min(axis=1) > 3]
    if j.size == 0:
        return np.zeros(0)
    ch = np.argmax(pair[:, j - 1], axis=0)                              # the channel that shows it most
    vl0, vl1, vr0, vr1 = (v[ch, j + k] for k in (-2, -1, 2, 3))
    lo, hi = ts[j - 1], ts[j + 2]
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        live = (mid > lo) & (mid < hi)
        if not live.any():
            break
        vm = fn(mid[live]).reshape(v.shape[0], -1)[ch[live], np.arange(live.sum())] / scale[ch[live]]
        jl = j[live]
        left = np.abs(vm - (vl1[live] + (vl1[live] - vl0[live]) * (mid[live] - ts[jl - 1]) / dt))
        right = np.abs(vm - (vr0[live] - (vr1[live] - vr0[live]) * (ts[jl + 2] - mid[live]) / dt))
        go = left <= right                                             # on the left piece: the kink is right
        il = np.nonzero(live)[0]
        lo[il[go]] = mid[live][go]
        hi[il[~go]] = mid[live][~go]
    e = dt / 64                                  # a kink keeps its slope change at a 64 times finer look
    w = fn(np.concatenate([hi - 2 * e, hi - e, hi + e, hi + 2 * e])).reshape(v.shape[0], 4, -1)
    w = w[ch, :, np.arange(j.size)] / scale[ch, None]                  # (J, 4)
    change = np.abs((w[:, 3] - w[:, 2]) - (w[:, 1] - w[:, 0])) / e
    k = np.unique(hi[change >= 0.25 * pair[ch, j - 1] / dt])
    group = np.cumsum(np.concatenate([[0], np.diff(k) > dt / 2]))       # one point per kink (curvature
    return np.array([np.median(k[group == g]) for g in range(group[-1] + 1)]) if k.size else k  # moves it)


def _jump_points(grid, jumps, t_end):
    """Indices of the grid points at the ``jumps`` in ``(0, t_end]`` (each is one, up to the merging of
    :func:`breakpoints`)."""
    if jumps is None:
        return np.zeros(0, np.int64)
    j = np.asarray(jumps, dtype=np.float64).reshape(-1)
    j = j[(j > 0) & (j <= t_end)]
    i = np.clip(np.searchsorted(grid, j), 1, grid.size - 1)
    i = np.where(np.abs(grid[i - 1] - j) < np.abs(grid[i] - j), i - 1, i)
    return np.unique(i[i > 0])


__all__ = ["BREAKPOINT_ORDER", "JUMP_ORDER", "MAX_JUMPS", "SIMULATE_MAX_BYTES", "breakpoints", "grid_counts",
           "input_breaks", "input_jumps", "solve_fixed"]
