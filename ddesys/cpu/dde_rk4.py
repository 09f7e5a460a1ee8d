"""The compiled RK4 method of steps of the matrix time responses (:mod:`ddesys.matrix.timeresp`).

:func:`ddesys.matrix._timeresp_steps.solve_fixed` lays out the grid, the delayed reads (the past interval
``idx`` and the cubic Hermite weights ``W`` of every step, stage and delay) and the forcing; this loop runs
the steps. For ``X' = A X + sum_k Ad_k X(t - tau_k) + F(t)``, one column ``x`` of ``X`` at a time, step
``j`` of length ``h``::

    D_c = sum_k Ad_k (w0 X[i] + w1 dL[i] + w2 X[i + 1] + w3 dR[i]),  (i, w) = (idx, W)[j, c, k], c = 0, 1, 2
    k1 = A x + D_0 + F_0          k2 = A (x + h/2 k1) + D_1 + F_h
    k3 = A (x + h/2 k2) + D_1 + F_h                    k4 = A (x + h k3) + D_2 + F_1
    X[j + 1] = x + h/6 (k1 + 2 k2 + 2 k3 + k4),   dL[j] = k1,   dR[j] = A X[j + 1] + D_2 + F_1

the scheme of the NumPy loop in :mod:`ddesys.matrix._timeresp_steps` (its fallback without Numba), which it
equals to rounding: the products are summed in another order, with fused multiply-adds (row ``dde.rk4``
of :mod:`ddesys.cpu.options`: ``{"contract", "nsz"}``, no reassociation, so a call is deterministic).
``A X[j + 1]`` is computed once, for ``dR[j]`` and the next step's ``k1``; a delay whose matrix is zero
(the state part of a system with input and output delays only) is skipped, as is a read of the zero
history before ``t = 0`` (all four weights zero).

States are stored one column after the other, ``(S + 1, r, n)``, and the matrices transposed, so every
matrix-vector product is a sum of columns scaled by one entry (``y += A[:, b] x_b``), contiguous in the
inner loop: it vectorizes without reordering any sum. The loop is serial (each step needs the last) and
starts no threads: nothing to fit into torch's thread budget (:mod:`ddesys.cpu.threads`).
"""
from __future__ import annotations

import numpy as np

from ._numba import nb as _nb
from .options import loop

__all__ = ["available", "rk4_steps"]


def available() -> bool:
    """Whether the compiled loop exists (Numba present and enabled)."""
    return _nb is not None


if _nb is not None:
    @loop("dde.inline")
    def _matvec(AT, k, v, y):                                              # pragma: no cover - jitted
        """``y[c] = M v[c]`` for every column ``c`` of ``v`` ``(r, n)``, ``M^T = AT[k]`` ``(n, n)``: columns of
        ``M`` scaled and added, four at a time (the ``r`` columns are independent chains)."""
        r, n = v.shape
        for c in range(r):
            for a in range(n):
                y[c, a] = 0
        b = 0
        while b + 4 <= n:
            for c in range(r):
                x0 = v[c, b]
                x1 = v[c, b + 1]
                x2 = v[c, b + 2]
                x3 = v[c, b + 3]
                for a in range(n):
                    y[c, a] += AT[k, b, a] * x0 + AT[k, b + 1, a] * x1 + AT[k, b + 2, a] * x2 \
                        + AT[k, b + 3, a] * x3
            b += 4
        while b < n:
            for c in range(r):
                x0 = v[c, b]
                for a in range(n):
                    y[c, a] += AT[k, b, a] * x0
            b += 1

    @loop("dde.rk4")
    def _rk4(AT, AdT, U, V, hs, idx, W, F, fstep, X, dL, dR):              # pragma: no cover - jitted
        """Run the ``S`` steps in place (module docstring). ``AT`` ``(1, n, n)`` is ``A`` transposed; a delay
        ``k`` acts as ``Ad_k`` (``AdT[k]``, ``(n, n)``, transposed) when ``U.shape[1] == 0``, else as
        ``U[k]^T V[k]`` (``(q, n)`` each: a factorization of a low-rank ``Ad_k``; zero rows for a lower
        rank or a zero matrix); ``hs`` ``(S,)``; ``idx`` int64 ``(S, 3, K)`` and ``W`` ``(S, 3, K, 4)`` the
        delayed reads (``W[..., 1]`` and ``W[..., 3]`` times the interval's length); ``F`` ``(3, S or 1, r,
        n)`` the forcing at the start, middle and end of each step (``fstep`` 1), or one for all steps
        (``fstep`` 0); ``X`` ``(S + 1, r, n)`` with ``X[0]`` set, ``dL`` and ``dR`` ``(S, r, n)`` filled."""
        S = hs.shape[0]
        r = X.shape[1]
        n = X.shape[2]
        K = idx.shape[2]
        q = U.shape[1]
        dt = X.dtype
        D = np.empty((3, r, n), dt)
        xd = np.empty((r, n), dt)
        ax = np.empty((r, n), dt)                # A X[j] (from the last step's dR)
        v = np.empty((r, n), dt)
        y = np.empty((r, n), dt)
        k1 = np.empty((r, n), dt)
        k2 = np.empty((r, n), dt)
        k3 = np.empty((r, n), dt)
        for c in range(r):
            for a in range(n):
                v[c, a] = X[0, c, a]
        _matvec(AT, 0, v, ax)
        for j in range(S):
            jf = j * fstep
            h = hs[j]
            for st in range(3):
                for c in range(r):
                    for a in range(n):
                        D[st, c, a] = 0
                for k in range(K):
                    w0 = W[j, st, k, 0]
                    w1 = W[j, st, k, 1]
                    w2 = W[j, st, k, 2]
                    w3 = W[j, st, k, 3]
                    if w0 == 0 and w1 == 0 and w2 == 0 and w3 == 0:
                        continue                                 # the zero history before t = 0
                    i = idx[j, st, k]
                    for c in range(r):
                        for b in range(n):
                            xd[c, b] = w0 * X[i, c, b] + w1 * dL[i, c, b] + w2 * X[i + 1, c, b] \
                                + w3 * dR[i, c, b]
                    if q == 0:
                        _matvec(AdT, k, xd, y)
                        for c in range(r):
                            for a in range(n):
                                D[st, c, a] += y[c, a]
                    else:
                        for c in range(r):
                            for m in range(q):
                                z = V[k, m, 0] * xd[c, 0]
                                for b in range(1, n):
                                    z += V[k, m, b] * xd[c, b]
                                for a in range(n):
                                    D[st, c, a] += U[k, m, a] * z
            hh = 0.5 * h
            for c in range(r):                                           # k1, and the point of k2
                for a in range(n):
                    k1[c, a] = ax[c, a] + D[0, c, a] + F[0, jf, c, a]
                    v[c, a] = X[j, c, a] + hh * k1[c, a]
            _matvec(AT, 0, v, y)
            for c in range(r):                                           # k2, and the point of k3
                for a in range(n):
                    k2[c, a] = y[c, a] + D[1, c, a] + F[1, jf, c, a]
                    v[c, a] = X[j, c, a] + hh * k2[c, a]
            _matvec(AT, 0, v, y)
            for c in range(r):                                           # k3, and the point of k4
                for a in range(n):
                    k3[c, a] = y[c, a] + D[1, c, a] + F[1, jf, c, a]
                    v[c, a] = X[j, c, a] + h * k3[c, a]
            _matvec(AT, 0, v, y)
            h6 = h / 6
            for c in range(r):                                           # k4 in y; the new state
                for a in range(n):
                    y[c, a] = y[c, a] + D[2, c, a] + F[2, jf, c, a]
                    v[c, a] = X[j, c, a] + h6 * (k1[c, a] + 2 * k2[c, a] + 2 * k3[c, a] + y[c, a])
                    X[j + 1, c, a] = v[c, a]
                    dL[j, c, a] = k1[c, a]
            _matvec(AT, 0, v, ax)
            for c in range(r):
                for a in range(n):
                    dR[j, c, a] = ax[c, a] + D[2, c, a] + F[2, jf, c, a]

    @loop("dde.rk4")
    def _hermite_out(jo, wo, X, dL, dR, Y):                                 # pragma: no cover - jitted
        """``Y[t] = w0 X[i] + w1 dL[i] + w2 X[i + 1] + w3 dR[i]`` with ``(i, w) = (jo, wo)[t]``: the states at
        the output times, ``Y`` ``(T, n, r)`` from ``X`` ``(S + 1, r, n)``, ``dL`` and ``dR`` ``(S, r, n)``."""
        r = X.shape[1]
        n = X.shape[2]
        for t in range(jo.shape[0]):
            i = jo[t]
            w0 = wo[t, 0]
            w1 = wo[t, 1]
            w2 = wo[t, 2]
            w3 = wo[t, 3]
            for a in range(n):
                for col in range(r):
                    Y[t, a, col] = w0 * X[i, col, a] + w1 * dL[i, col, a] + w2 * X[i + 1, col, a] \
                        + w3 * dR[i, col, a]
else:
    _rk4 = _hermite_out = None


def low_rank(Ad):
    """``(U, V)`` ``(K, q, n)`` with ``Ad_k = U[k]^T V[k]`` up to rounding (singular values below ``n eps``
    times the largest dropped), when every ``Ad_k`` has rank ``q < n / 2``; None otherwise (the full
    matrices are cheaper). A zero ``Ad_k`` gets zero rows."""
    K, n = Ad.shape[0], Ad.shape[1]
    parts = []
    for M in Ad:
        u, sv, vh = np.linalg.svd(M)
        keep = sv > n * np.finfo(float).eps * sv[0] if sv.size and sv[0] > 0 else np.zeros(sv.size, bool)
        q = int(keep.sum())
        if 2 * q >= n:
            return None
        parts.append(((u[:, :q] * sv[:q]).T, vh[:q]))
    q = max(1, max(p[0].shape[0] for p in parts))
    U = np.zeros((K, q, n), Ad.dtype)
    V = np.zeros((K, q, n), Ad.dtype)
    for k, (u, vh) in enumerate(parts):
        U[k, :u.shape[0]] = u
        V[k, :vh.shape[0]] = vh
    return U, V


def rk4_steps(A, Ad, hs, idx, W, F, x0, jo, wo):
    """The states at the output times of the RK4 method of steps on a grid (module docstring), compiled.

    Parameters
    ----------
    A : ``(n, n)``; Ad : ``(K, n, n)``
        In the states' dtype (float64 or complex128).
    hs : float64 ``(S,)``
        Step lengths.
    idx : int64 ``(S, 3, K)``; W : float64 ``(S, 3, K, 4)``
        Past interval and Hermite weights of every step, stage ``(0, 1/2, 1)`` and delay (the derivative
        weights times the interval's length; all zero for a read before ``t = 0``).
    F : ``(3, S or 1, n, r)``
        Forcing ``B U`` at the start, middle and end of each step (or one for every step).
    x0 : ``(n, r)``
    jo : int64 ``(T,)``; wo : float64 ``(T, 4)``
        The step of each output time and its Hermite weights (the derivative weights times the step).

    Returns
    -------
    ndarray ``(T, n, r)``
        ``wo0 X[jo] + wo1 dL[jo] + wo2 X[jo + 1] + wo3 dR[jo]``: the states at the output times, from those
        at the grid points ``X`` and the one-sided derivatives ``dL``, ``dR`` at the start and end of each step.
    """
    dt = np.result_type(A, Ad, F, x0)
    S, n, r = hs.shape[0], A.shape[0], x0.shape[1]
    X = np.empty((S + 1, r, n), dt)
    dL = np.empty((S, r, n), dt)
    dR = np.empty((S, r, n), dt)
    X[0] = np.asarray(x0).T
    Ad = np.asarray(Ad, dt)
    AT = np.ascontiguousarray(np.asarray(A, dt).T)[None]
    UV = low_rank(Ad)
    if UV is None:
        AdT = np.ascontiguousarray(np.swapaxes(Ad, 1, 2))
        U = V = np.zeros((Ad.shape[0], 0, n), dt)
    else:
        AdT = np.zeros((0, n, n), dt)
        U, V = UV
    Ft = np.ascontiguousarray(np.swapaxes(np.asarray(F, dt), 2, 3))
    _rk4(AT, AdT, U, V, np.ascontiguousarray(hs, np.float64), np.ascontiguousarray(idx, np.int64),
         np.ascontiguousarray(W, np.float64), Ft, 1 if Ft.shape[1] > 1 else 0, X, dL, dR)
    Y = np.empty((jo.shape[0], n, r), dt)
    _hermite_out(np.ascontiguousarray(jo, np.int64), np.ascontiguousarray(wo, np.float64), X, dL, dR, Y)
    return Y
