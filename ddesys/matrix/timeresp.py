"""Time responses of matrix delay systems: simulation, impulse and step responses (docs/theory.md §9).

``x'(t) = A x(t) + sum_k Ad[k] x(t - tau[k]) + B u(t)``, ``y = C x + D u`` with zero history before
``t = 0`` (and optionally a state ``x0`` at ``t = 0``, as right after an impulse), matrices validated by
:func:`ddesys.matrix.charmatrix.check_statespace` (real or complex).

Method of steps with classical Runge-Kutta 4 and the delayed states read by cubic Hermite
interpolation of the stored states and derivatives (Oberle & Pesch 1981, Numer. Math. 37, 235-255):
fourth order in the step ``h`` for inputs smooth on ``t > 0``. The solution is only piecewise smooth:
``x'`` (``x`` itself when ``x0 != 0``) jumps at ``t = 0`` and the jumps propagate to higher derivatives
at the breakpoints ``sum_k j_k tau[k]``. Every breakpoint with ``sum_k j_k <= 4`` is a grid point, and
every step is ``<= min(tau)``, so each delayed argument lies in the already computed past, inside one
smooth piece (a breakpoint inside a delayed step image would put its image ``+ tau[k]``, also a
breakpoint, inside the step). Derivatives are stored one-sided at both ends of each step (``x'`` can
jump at a grid point). Cost: ``3 S n r`` stored values (``S`` steps, ``r`` right-hand sides: 1 for
:func:`simulate`, ``m`` for :func:`impulse` and :func:`step`) and a Python loop over the ``S`` steps
(``python -m ddesys.experiments.bench.dss`` times it).
"""
from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np

from ..budget import check_bytes
from .charmatrix import real_vector

SIMULATE_MAX_BYTES = 2**30     # memory budget of the grid (argument ``max_bytes``)
BREAKPOINT_ORDER = 4           # breakpoints sum_k j_k tau_k with sum_k j_k <= 4 are grid points
_CSEL = np.array([1e-3, 0.5, 1 - 1e-3])      # where a stage's delayed point picks its past interval


class TimeResponse(NamedTuple):
    """A time response: unpacks as ``t, y, x``.

    Attributes
    ----------
    t : ndarray ``(T,)``
        Output times.
    y : ndarray ``(p, T)`` (:func:`simulate`) or ``(p, m, T)`` (:func:`impulse`, :func:`step`: input
        ``j`` in ``[:, j]``)
    x : ndarray ``(n, T)`` or ``(n, m, T)``
        States.
    """

    t: np.ndarray
    y: np.ndarray
    x: np.ndarray


def _check_t(t):
    arr = real_vector(t, "t", "real times")
    if np.any(arr < 0):
        raise ValueError(f"t must be >= 0 (the history before t = 0 is zero), got min {arr.min():.6g}")
    return arr


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


def _grid(tau, t_end, h):
    b = np.concatenate([breakpoints(tau, t_end), [t_end]])
    b = b[np.concatenate([[True], np.diff(b) > 64 * np.finfo(float).eps * max(1.0, t_end)])]
    if b.size < 2:                               # t_end == 0: one tiny step keeps the code uniform
        b = np.array([0.0, min(h, float(tau.min()))])
    counts = np.maximum(1, np.ceil(np.diff(b) / h - 1e-9).astype(np.int64))
    return b, counts


def _hermite_w(theta):
    t2, t3 = theta * theta, theta * theta * theta
    return np.stack([2 * t3 - 3 * t2 + 1, t3 - 2 * t2 + theta, -2 * t3 + 3 * t2, t3 - t2], axis=-1)


def _solve(A, Ad, tau, B, x0, forcing, t_out, h, max_bytes, what):
    """RK4 method of steps for ``X' = A X + sum_k Ad_k X(t - tau_k) + B U(t)``, ``X (n, r)``.

    ``forcing``: None (no input), ``("const", U (m, r))`` for ``t >= 0``, or ``("call", fn, r)`` with
    ``fn(times) -> (m, r, len(times))``. Returns the states at ``t_out``, ``(T, n, r)``.
    """
    n, K = A.shape[0], tau.size
    r = x0.shape[1]
    t_end = float(t_out.max(initial=0.0))
    b, counts = _grid(tau, t_end, h)
    S = int(counts.sum())
    item = 16 if np.iscomplexobj(np.empty(0, np.result_type(A, Ad, B, x0))) else 8
    need = (3 * S + 1) * n * r * item + S * 3 * K * 48 + (2 * S + 1) * (B.shape[1] * r * item + 8)
    check_bytes(need, f"{what} with step h={h:.4g} up to t={t_end:.4g} ({S} steps)",
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


def _check_h(h, A, Ad, tau):
    tmin = float(tau.min())
    if h is None:
        e = float(np.linalg.norm(A, 2) + sum(np.linalg.norm(m, 2) for m in Ad))
        return min(tmin / 100, 1.0 / e) if e > 0 else tmin / 100
    try:
        h = float(h)
    except (TypeError, ValueError):
        raise TypeError(f"h must be a real step, got {type(h).__name__}") from None
    if not (h > 0 and np.isfinite(h)):
        raise ValueError(f"h must be a finite step > 0, got {h}")
    h = min(h, tmin)
    rho = float(np.abs(np.linalg.eigvals(A)).max())
    if h * rho > 2.5:
        warnings.warn(f"step h={h:.4g} times the spectral radius of A ({rho:.4g}) exceeds 2.5: RK4 may be "
                      "unstable; use a smaller h", RuntimeWarning, stacklevel=3)
    return h


def simulate(A, Ad, tau, B, C, D, u, t, *, x0=None, h=None, max_bytes=None):
    """Response to the input ``u`` on the times ``t`` (zero history before ``t = 0``).

    Parameters
    ----------
    A, Ad, tau, B, C, D : ndarray
        Validated matrices (:func:`ddesys.matrix.charmatrix.check_statespace`), real or complex.
    u : callable
        Vectorized ``u(times) -> (m, len(times))`` (``(len(times),)`` allowed for ``m = 1``); only
        ``t >= 0`` is asked (``u = 0`` before). Should be smooth on ``t > 0`` for fourth order.
    t : array_like, real ``(T,)``
        Output times ``>= 0``, any order.
    x0 : array_like ``(n,)``, optional
        State at ``t = 0`` (``x(0-) = 0``); default 0.
    h : float, optional
        Largest step; default ``min(min(tau) / 100, 1 / (||A|| + sum ||Ad_k||))``; a step above
        ``min(tau)`` is reduced to it.
    max_bytes : int, optional
        Budget of the stored grid, checked before allocating (default ``SIMULATE_MAX_BYTES``, 1 GiB,
        capped by the memory budget of :mod:`ddesys.budget`).

    Returns
    -------
    TimeResponse
        ``t (T,)``, ``y (p, T)``, ``x (n, T)``; complex when the system or ``u`` is.

    Raises
    ------
    TypeError
        ``u`` not callable; non-real ``t`` or ``h``.
    ValueError
        ``t < 0`` or non-finite; ``u`` returning a wrong shape or non-finite values; ``x0`` of a wrong
        shape; ``h <= 0``; a grid over ``max_bytes``.

    Warns
    -----
    RuntimeWarning
        ``h`` times the spectral radius of ``A`` above 2.5 (RK4 stability).

    Examples
    --------
    ``x' = -x + 0.5 x(t - 1) + u`` with ``u = 1`` settles to the DC gain ``1 / (1 - 0.5) = 2``:

    >>> import numpy as np
    >>> from ddesys.matrix.charmatrix import check_statespace
    >>> from ddesys.matrix.timeresp import simulate
    >>> d = check_statespace([[-1.0]], [[0.5]], 1.0, [[1.0]], [[1.0]])
    >>> r = simulate(*d, np.ones_like, [0.0, 1.0, 80.0])
    >>> np.round(r.y[0], 6)
    array([0.      , 0.632121, 2.      ])
    """
    if not callable(u):
        raise TypeError(f"u must be a callable u(times) -> (m, len(times)), got {type(u).__name__}")
    t = _check_t(t)
    n, m = B.shape
    h = _check_h(h, A, Ad, tau)
    x0 = np.zeros((n, 1)) if x0 is None else _check_x0(x0, n)

    def fn(times):
        v = np.asarray(u(times))
        if v.dtype.kind not in "biufc":
            raise TypeError(f"u must return numbers, got dtype {v.dtype}")
        if m == 1 and v.shape == (times.size,):
            v = v[None]
        if v.shape != (m, times.size):
            raise ValueError(f"u(times) must return shape (m, len(times)) = {(m, times.size)}"
                             + (" or (len(times),)" if m == 1 else "") + f", got {v.shape}")
        if not np.all(np.isfinite(v)):
            raise ValueError("u returned non-finite values")
        return v.astype(np.result_type(v, np.float64))[:, None, :]

    X = _solve(A, Ad, tau, B, x0, ("call", fn, 1), t, h, max_bytes, "simulate")[:, :, 0]   # (T, n)
    x = X.T
    y = C @ x + D @ fn(t)[:, 0, :] if t.size else np.zeros((C.shape[0], 0), x.dtype)
    return TimeResponse(t, y, x)


def _check_x0(x0, n):
    try:
        v = np.asarray(x0)
    except Exception as exc:  # noqa: BLE001 - re-raised with the argument's name
        raise TypeError(f"x0 must be an array of numbers, got {type(x0).__name__}") from exc
    if v.dtype.kind not in "biufc":
        raise TypeError(f"x0 must hold numbers, got dtype {v.dtype}")
    if v.shape != (n,):
        raise ValueError(f"x0 must have shape (n,) = ({n},), got {v.shape}")
    if not np.all(np.isfinite(v)):
        raise ValueError("x0 must be finite")
    return v.astype(np.result_type(v, np.float64))[:, None]


def impulse(A, Ad, tau, B, C, D, t, *, h=None, max_bytes=None):
    """Impulse response: ``x(0+) = B[:, j]`` for each input ``j``, zero history; ``D delta(t)`` omitted.

    Parameters
    ----------
    A, Ad, tau, B, C, D : ndarray
        Validated matrices (:func:`ddesys.matrix.charmatrix.check_statespace`).
    t : array_like, real ``(T,)``
        Output times ``>= 0``.
    h, max_bytes
        As in :func:`simulate`.

    Returns
    -------
    TimeResponse
        ``y (p, m, T) = C x``, ``x (n, m, T)``.

    Examples
    --------
    Before the delay acts, ``x' = -x + 0.5 x(t - 1)`` decays as ``exp(-t)``:

    >>> import numpy as np
    >>> from ddesys.matrix.charmatrix import check_statespace
    >>> from ddesys.matrix.timeresp import impulse
    >>> d = check_statespace([[-1.0]], [[0.5]], 1.0, [[1.0]], [[1.0]])
    >>> r = impulse(*d, [0.0, 0.5])
    >>> r.y.shape, np.allclose(r.y[0, 0], np.exp(-r.t), atol=1e-9)
    ((1, 1, 2), True)
    """
    t = _check_t(t)
    h = _check_h(h, A, Ad, tau)
    X = _solve(A, Ad, tau, B, B.copy(), None, t, h, max_bytes, "impulse")   # (T, n, m)
    x = np.moveaxis(X, 0, -1)
    return TimeResponse(t, np.einsum("pn,nmt->pmt", C, x), x)


def step(A, Ad, tau, B, C, D, t, *, h=None, max_bytes=None):
    """Step response: ``u = e_j`` (unit step on input ``j``) for each ``j``, zero history.

    Parameters
    ----------
    A, Ad, tau, B, C, D : ndarray
        Validated matrices (:func:`ddesys.matrix.charmatrix.check_statespace`).
    t : array_like, real ``(T,)``
        Output times ``>= 0``.
    h, max_bytes
        As in :func:`simulate`.

    Returns
    -------
    TimeResponse
        ``y (p, m, T) = C x + D``, ``x (n, m, T)``; a stable system settles to the DC gain
        ``-C (A + sum_k Ad_k)^{-1} B + D``.

    Examples
    --------
    >>> import numpy as np
    >>> from ddesys.matrix.charmatrix import check_statespace
    >>> from ddesys.matrix.timeresp import step
    >>> d = check_statespace([[-1.0]], [[0.5]], 1.0, [[1.0]], [[1.0]], [[0.25]])
    >>> np.round(step(*d, [0.0, 80.0]).y[0, 0], 6)
    array([0.25, 2.25])
    """
    t = _check_t(t)
    h = _check_h(h, A, Ad, tau)
    n, m = B.shape
    X = _solve(A, Ad, tau, B, np.zeros((n, m)), ("const", np.eye(m)), t, h, max_bytes, "step")
    x = np.moveaxis(X, 0, -1)
    return TimeResponse(t, np.einsum("pn,nmt->pmt", C, x) + D[..., None], x)


__all__ = ["BREAKPOINT_ORDER", "SIMULATE_MAX_BYTES", "TimeResponse", "breakpoints", "impulse", "simulate",
           "step"]
