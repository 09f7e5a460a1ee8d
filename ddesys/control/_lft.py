"""The algebra of delay input-output systems on their matrices (docs/theory.md §9.7).

A system is an :class:`IOData`: ``x' = A x + B1 u + B2 w``, ``y = C1 x + D11 u + D12 w``,
``z = C2 x + D21 u + D22 w``, ``w_j(t) = z_j(t - tau_j)``. Interconnections stack systems side by side
(:func:`append`) and tie inputs to outputs by a static map (:func:`connect`); delays stay exact on
their channels. This module knows no class: :class:`~ddesys.DelayIOSystem` and the block-diagram
functions (:mod:`ddesys.control.bdalg`) wrap it, the margins (:mod:`ddesys.control.margins`) read it.
"""
from __future__ import annotations

import numbers
from typing import NamedTuple

import numpy as np

from ..matrix.errors import AlgebraicLoopError

MAX_PADE_ORDER = 20         # the Pade denominator's coefficients span ~1e29 already at 20
SMALL = 4                   # transfer_at: a dense solve per point up to this n + q (tiny systems)
FEW_POINTS = 8              # transfer_at: up to this many points, one triangular solve each
_CHUNK_BYTES = 2 ** 19      # transfer_at: points per back-substitution block, so that it stays in cache
CANCEL = 1e-6               # transfer_at: |C Q Y| below this times |C Q| |Y|: cancellation, the dense solve instead


class IOData(NamedTuple):
    """Matrices of a delay input-output system (shapes in the module docstring)."""

    A: np.ndarray
    B1: np.ndarray
    C1: np.ndarray
    D11: np.ndarray
    B2: np.ndarray
    C2: np.ndarray
    D12: np.ndarray
    D21: np.ndarray
    D22: np.ndarray
    tau: np.ndarray


def make(A, B1, C1, D11, B2=None, C2=None, D12=None, D21=None, D22=None, tau=()):
    """An :class:`IOData` with missing delay-channel matrices zero (no validation beyond shapes)."""
    A = np.asarray(A, float).reshape(np.shape(A) if np.size(A) else (0, 0))
    tau = np.asarray(tau, float).reshape(-1)
    n, q = A.shape[0], tau.size
    B1, C1 = np.asarray(B1, float), np.asarray(C1, float)
    if B1.ndim != 2 or C1.ndim != 2 or B1.shape[0] != n or C1.shape[1] != n:
        raise ValueError(f"B and C must be 2-D with {n} rows / columns, got shapes {B1.shape} and {C1.shape}")
    m, p = B1.shape[1], C1.shape[0]
    z = lambda v, shape: np.zeros(shape) if v is None else np.asarray(v, float).reshape(shape)   # noqa: E731
    return IOData(A, B1, C1, z(D11, (p, m)), z(B2, (n, q)), z(C2, (q, n)), z(D12, (p, q)), z(D21, (q, m)),
                  z(D22, (q, q)), tau)


def gain(K):
    """A static gain matrix ``K (p, m)`` as a system without states or delays."""
    K = np.atleast_2d(np.asarray(K, float))
    return make(np.zeros((0, 0)), np.zeros((0, K.shape[1])), np.zeros((K.shape[0], 0)), K)


def delay_block(d):
    """The pure delay ``diag(e^{-s d_j})``, ``d >= 0`` (zero delays pass straight through)."""
    d = np.asarray(d, float).reshape(-1)
    on = np.flatnonzero(d > 0)
    k, q = d.size, on.size
    D12, D21 = np.zeros((k, q)), np.zeros((q, k))
    D12[on, np.arange(q)] = 1.0
    D21[np.arange(q), on] = 1.0
    return make(np.zeros((0, 0)), np.zeros((0, k)), np.zeros((k, 0)), np.diag((d == 0).astype(float)),
                D12=D12, D21=D21, tau=d[on])


def from_statespace(A, Ad, tau, B, C, D):
    """``x' = A x + sum_k Ad[k] x(t - tau[k]) + B u``: state delay ``k`` becomes ``n`` channels
    ``w = x(t - tau_k)`` entering through ``Ad[k]`` (exact: the explicit form sums ``Ad[k] I``)."""
    if any(np.iscomplexobj(v) for v in (A, Ad, B, C, D)):
        raise TypeError("interconnections take real systems; this one is complex")
    n, K = A.shape[0], len(tau)
    B2 = np.concatenate(list(Ad), axis=1) if K else np.zeros((n, 0))
    return make(A, B, C, D, B2=B2, C2=np.tile(np.eye(n), (K, 1)), tau=np.repeat(tau, n))


def from_neutral(A, Ad, H, tau, B, C, D):
    """``x' - sum_k H[k] x'(t - tau[k]) = A x + sum_k Ad[k] x(t - tau[k]) + B u``, exact: channels
    ``x(t - tau_k)`` enter through ``Ad[k]`` and channels ``x'(t - tau_k)`` through ``H[k]``, the latter
    fed by ``z = x' = A x + B u + sum_k (Ad[k] x(t - tau_k) + H[k] x'(t - tau_k))`` (a delay-difference
    loop whenever some ``H[k] != 0``: :meth:`ddesys.DelayIOSystem.difference_loop` analyses it)."""
    if any(np.iscomplexobj(v) for v in (A, Ad, H, B, C, D)):
        raise TypeError("interconnections take real systems; this one is complex")
    n, K = A.shape[0], len(tau)
    B2 = np.concatenate(list(Ad) + list(H), axis=1) if K else np.zeros((n, 0))
    C2 = np.vstack([np.tile(np.eye(n), (K, 1)), np.tile(A, (K, 1))])
    D21 = np.vstack([np.zeros((K * n, B.shape[1])), np.tile(B, (K, 1))])
    D22 = np.vstack([np.zeros((K * n, 2 * K * n)), np.tile(B2, (K, 1))])
    return make(A, B, C, D, B2=B2, C2=C2, D21=D21, D22=D22, tau=np.concatenate([np.repeat(tau, n)] * 2))


def from_control(sys):
    """A continuous python-control ``StateSpace`` / ``TransferFunction`` (no delay)."""
    import control

    if not sys.isctime():
        raise TypeError(f"a continuous-time system is needed; this one has dt = {sys.dt}")
    s = control.ss(sys)
    return make(*(np.asarray(v, float) for v in (s.A, s.B, s.C, s.D)))


def coerce(sys, size=None):
    """Any continuous system as :class:`IOData`: an object with ``io_data()``, a neutral system (``A, Ad,
    H, tau, B, C, D``), a matrix delay system (``A, Ad, tau, B, C, D``), one with ``to_statespace()``, a
    python-control LTI system, a number (``k I`` of ``size``) or a gain matrix; ``TypeError`` otherwise."""
    if isinstance(sys, IOData):
        return sys
    if hasattr(sys, "io_data"):
        return sys.io_data()
    if getattr(sys, "dt", 0) not in (0, None) or (hasattr(sys, "isctime") and not sys.isctime()):
        raise TypeError(f"{type(sys).__name__} is a discrete-time system; interconnections here are continuous")
    if all(hasattr(sys, a) for a in ("A", "Ad", "H", "tau", "B", "C", "D")):
        return from_neutral(sys.A, sys.Ad, sys.H, sys.tau, sys.B, sys.C, sys.D)
    if all(hasattr(sys, a) for a in ("A", "Ad", "tau", "B", "C", "D")):
        return from_statespace(sys.A, sys.Ad, sys.tau, sys.B, sys.C, sys.D)
    if hasattr(sys, "to_statespace"):
        return coerce(sys.to_statespace())
    if type(sys).__module__.split(".")[0] == "control":
        return from_control(sys)
    if isinstance(sys, bool) or isinstance(sys, (complex, np.complexfloating)):
        raise TypeError(f"a gain must be a real number, got {sys!r}")
    if isinstance(sys, (numbers.Real, np.number)):
        return gain(float(sys) * np.eye(size or 1))
    if isinstance(sys, (list, tuple, np.ndarray)):
        return gain(sys)
    raise TypeError(f"cannot use a {type(sys).__name__} as a continuous delay system")


def _is_number(x):
    return isinstance(x, (numbers.Number, np.number)) and not isinstance(x, bool)


def coerce_chain(items):
    """Coerce the operands of a series connection (``items[0]`` first): a number is ``k I`` sized by
    the previous operand's outputs (or, first, the next one's inputs)."""
    out = []
    for i, x in enumerate(items):
        if _is_number(x):
            if out:
                size = out[-1].C1.shape[0]
            else:
                nxt = next((coerce(y) for y in items[i + 1:] if not _is_number(y)), None)
                size = nxt.B1.shape[1] if nxt is not None else 1
            out.append(coerce(x, size=size))
        else:
            out.append(coerce(x))
    return out


def coerce_sum(items):
    """Coerce the operands of a sum: a number is ``k I`` sized by the first system's outputs."""
    first = next((coerce(y) for y in items if not _is_number(y)), None)
    size = first.C1.shape[0] if first is not None else 1
    return [coerce(x, size=size) for x in items]


def transfer(g, s):
    """``G(s)`` ``(p, m, F)`` at complex points ``s (F,)`` (singular exactly at a characteristic root); see
    :func:`transfer_at`, whose evaluator keeps its factorization for further points."""
    return transfer_at(g)(s)


def transfer_at(g):
    """An evaluator ``s (F,) -> G(s) (p, m, F)`` of ``g``'s transfer matrix, factorized once: that of
    :func:`schur_at`, and for tiny systems (``n + q <= SMALL``, or no state) the dense solve of
    :func:`_dense_at` at every point, which keeps their realization's exact zeros to the last digit (the Schur
    path leaves up to ``eps / CANCEL`` of them where ``C Q Y`` cancels)."""
    n, q = g.A.shape[0], g.tau.size
    if n + q <= SMALL or n == 0:
        dense = _dense_at(g)
        return lambda s: dense(np.asarray(s, dtype=complex).reshape(-1))
    return schur_at(g)


def schur_at(g, dense=None):
    """The evaluator of :func:`transfer_at` through the Schur form of ``A`` (``n >= 1``), at any size.

    The state part is eliminated through the Schur form ``A = Q T Q^H`` (one ``O(n^3)`` factorization,
    then ``O(n^2)`` back substitutions per point): ``X = (sI - A)^{-1} [B1, B2]``, and the channels solve
    ``(I - E D22 - E C2 X_2) W = E (C2 X_1 + D21)``, ``E = diag(e^{-s tau})``; ``G = C1 (X_1 + X_2 W) +
    D12 W + D11``. Many points are solved together, row by row in blocks that stay in cache (each row's
    update one real matrix-vector product over the real and imaginary parts), on the columns of ``Q^H [B1,
    B2]`` that are not zero (a zero column's ``X`` is zero exactly). A few points at a time (up to
    ``FEW_POINTS``: a root refinement's, whose digits are the result) and points within rounding of an
    eigenvalue of ``A`` (where ``sI - A`` is singular but the whole loop need not be) take one dense solve
    of ``[[sI - A, -B2], [-E C2, I - E D22]]`` per point instead (``dense``, default :func:`_dense_at`).
    The dense solve keeps the exact zeros of the realization (``C B = 0`` of a relative degree above one),
    which the Schur basis turns into rounding that ``s^k`` amplifies at high frequency: points where some
    entry of ``[C1; C2] Q Y`` (the direct path, the delay channels' outputs and inputs) cancels below
    ``CANCEL`` times ``|C Q| |Y|`` are solved densely too."""
    from scipy.linalg import schur

    n, q, m, p = g.A.shape[0], g.tau.size, g.B1.shape[1], g.C1.shape[0]
    dense = _dense_at(g) if dense is None else dense
    T, Q = schur(g.A.astype(complex), output="complex")
    d = np.diag(T)
    tol = 1e-10 * (1.0 + np.abs(d).max())                         # a point this close to an eigenvalue: dense
    k = m + q
    R0 = Q.conj().T @ np.hstack([g.B1, g.B2])                     # (n, k)
    live = np.flatnonzero(np.any(R0 != 0, axis=0))                 # a zero column of [B1, B2] has X = 0 exactly
    R0 = np.ascontiguousarray(R0[:, live])
    kl = live.size
    CQ = np.vstack([g.C1, g.C2]) @ Q                               # (p + q, n)
    absCQ = np.abs(CQ)
    rows = [np.ascontiguousarray(np.stack([T[r, r + 1:].real, T[r, r + 1:].imag])) for r in range(n)]
    chunk = max(256, _CHUNK_BYTES // (16 * n * max(kl, 1)))

    def channels(CY, z):
        """``G (p, m, F)`` from ``CY = [C1; C2] Q Y`` ``(p + q, k, F)`` at the points ``z (F,)``."""
        G = CY[:p, :m]
        if q == 1:                                     # the same sums as below, without the axis of length one
            e = np.exp(-g.tau[0] * z)                                              # (F,)
            den = 1.0 - e * (g.D22[0, 0] + CY[p, m])
            if not den.all():
                raise np.linalg.LinAlgError("Singular matrix")
            W = e * (CY[p, :m] + g.D21[0][:, None]) / den                          # (m, F)
            G = G + (CY[:p, m] + g.D12[:, :1])[:, None, :] * W[None]
        elif q:
            E = np.exp(-np.multiply.outer(g.tau, z))                              # (q, F)
            Mq = -E[:, None, :] * (g.D22[:, :, None] + CY[p:, m:])               # (q, q, F)
            Mq[np.arange(q), np.arange(q)] += 1.0
            rhs = E[:, None, :] * (CY[p:, :m] + g.D21[:, :, None])               # (q, m, F)
            W = np.moveaxis(np.linalg.solve(np.moveaxis(Mq, -1, 0), np.moveaxis(rhs, -1, 0)), 0, -1)
            CW = CY[:p, m:] + g.D12[:, :, None]                                   # (p, q, F)
            G = G + (CW[:, :, None, :] * W[None, :, :, :]).sum(axis=1)
        return G + g.D11[:, :, None]

    def block(z):
        """``G`` at many points ``z (F,)`` away from the eigenvalues: back substitution row by row, on the
        live columns of ``Q^H [B1, B2]`` only."""
        F = z.size
        inv = 1.0 / (z[None, :] - d[:, None])                                       # (n, F)
        Y = np.empty((n, kl, F), complex)
        Yf = Y.reshape(n, kl * F)
        Yv = Yf.view(float)                                                        # (n, 2 kl F): re, im pairs
        Y[n - 1] = R0[n - 1][:, None] * inv[n - 1]
        for r in range(n - 2, -1, -1):
            P = (rows[r] @ Yv[r + 1:]).view(complex)        # (2, kl F): Re T[r, r+1:] Y, Im T[r, r+1:] Y
            P[1] *= 1j
            P[0] += P[1]
            Y[r] = (R0[r][:, None] + P[0].reshape(kl, F)) * inv[r]
        CYl = (CQ @ Yf).reshape(p + q, kl, F)
        if kl == k:
            CY = CYl
        else:
            CY = np.zeros((p + q, k, F), complex)
            CY[:, live] = CYl
        # cancellation: where C Q Y is far below |C Q| |Y| the Schur basis left rounding only (the exact
        # zeros of C B of a high relative degree, on the direct path or through a delay channel); those
        # points take the dense solve
        size = (absCQ @ np.abs(Yf)).reshape(p + q, kl, F)
        lost = (np.abs(CYl) < CANCEL * size).any(axis=(0, 1))
        G = channels(CY, z)
        if lost.any():
            G[:, :, lost] = dense(z[lost])
        return G

    def near_eigenvalue(s):
        """Whether ``|s - d_j| <= tol`` for some eigenvalue ``d_j``, checked for the eigenvalues whose real
        part is within ``tol`` of the points' range (on the imaginary axis: those on it)."""
        near = np.zeros(s.size, bool)
        re = s.real
        for dj in d[(d.real >= re.min() - tol) & (d.real <= re.max() + tol)]:
            near |= np.abs(s - dj) <= tol
        return near

    def evaluate(s):
        s = np.asarray(s, dtype=complex).reshape(-1)
        if s.size <= FEW_POINTS:              # a root refinement's points: the dense solve, one at a time
            return dense(s)
        out = np.empty((p, m, s.size), complex)
        near = near_eigenvalue(s)
        idx = np.flatnonzero(~near)
        for i in range(0, idx.size, chunk):
            sel = idx[i:i + chunk]
            out[:, :, sel] = block(s[sel])
        if near.any():
            out[:, :, near] = dense(s[near])
        return out

    return evaluate


def transfer_and_derivative(g, s):
    """``L(s)`` and ``L'(s)`` of a SISO ``IOData`` at the points ``s`` (:func:`derivative_at`)."""
    return derivative_at(g)(np.asarray(s, complex).reshape(-1))


def derivative_at(g):
    """An evaluator ``s (F,) -> (L(s), L'(s))`` of a SISO ``IOData``, its constant blocks set up once: with
    ``K [X; W] = R`` the linear system of :meth:`ddesys.DelayIOSystem.transfer` and ``L = c^T [X; W] + D11``,
    ``c = [C1, D12]^T``, the adjoint ``K^T y = c`` gives ``L' = y^T (R' - K' [X; W])`` (``E' = -diag(tau) E``):
    both systems in one batched solve."""
    n, q = g.A.shape[0], g.tau.size
    N = n + q
    K0 = np.zeros((N, N), complex)
    K0[:n, :n] = -g.A
    K0[:n, n:] = -g.B2
    K0[n:, n:] = np.eye(q)
    Cq = np.hstack([g.C2, g.D22])                                   # (q, N): the rows that E scales
    b = np.zeros(N, complex)
    b[:n] = g.B1[:, 0]
    c = np.concatenate([g.C1[0], g.D12[0]]).astype(complex)
    d21, tau, d11 = g.D21[:, 0], g.tau, g.D11[0, 0]
    diag = np.arange(n) * (N + 1)                                   # K.flat: the diagonal of the state block

    def evaluate(s):
        F = s.size
        if N == 0 or F == 0:
            return np.full(F, d11, complex), np.zeros(F, complex)
        E = np.exp(-np.multiply.outer(s, tau))                                       # (F, q)
        K = np.empty((2 * F, N, N), complex)                                         # K, then K^T
        K[:F] = K0
        K[:F].reshape(F, N * N)[:, diag] += s[:, None]
        K[:F, n:] -= E[:, :, None] * Cq
        K[F:] = K[:F].transpose(0, 2, 1)
        R = np.empty((2 * F, N), complex)                                            # R, then c
        R[:F] = b
        R[:F, n:] = E * d21
        R[F:] = c
        X = np.linalg.solve(K, R[..., None])[..., 0]
        xw, y = X[:F], X[F:]
        dR = np.empty((F, N), complex)                                               # R' - K' [X; W]
        dR[:, :n] = -xw[:, :n]
        dR[:, n:] = -(E * tau) * (d21 + xw @ Cq.T)
        return (xw * c).sum(axis=1) + d11, (y * dR).sum(axis=1)

    return evaluate


def _transfer_dense(g, s):
    """``G(s)`` by one solve per point of ``[[sI - A, -B2], [-E C2, I - E D22]] [X; W] = [B1; E D21]``."""
    return _dense_at(g)(np.asarray(s, dtype=complex).reshape(-1))


def _dense_at(g):
    """An evaluator ``s (F,) -> G(s) (p, m, F)`` by the dense solve of :func:`_transfer_dense`: a few points
    one 2-D solve each (its constant blocks set up once), more in batches."""
    n, q, m, p = g.A.shape[0], g.tau.size, g.B1.shape[1], g.C1.shape[0]
    N = n + q
    CD = np.hstack([g.C1, g.D12])
    K0 = np.zeros((N, N), complex)
    K0[:n, :n] = -g.A
    K0[:n, n:] = -g.B2
    K0[n:, n:] = np.eye(q)
    diag = slice(0, n * (N + 1), N + 1)                   # K0.flat: the diagonal of the state block

    def few(s):
        out = np.empty((p, m, s.size), complex)
        for i, z in enumerate(s):
            E = np.exp(-z * g.tau)                                                    # (q,)
            K = K0.copy()
            K.flat[diag] += z
            K[n:, :n] = -E[:, None] * g.C2
            K[n:, n:] -= E[:, None] * g.D22
            R = np.empty((N, m), complex)
            R[:n] = g.B1
            R[n:] = E[:, None] * g.D21
            out[:, :, i] = np.einsum("pk,km->pm", CD, np.linalg.solve(K, R)) + g.D11   # as the batches sum
        return out

    def evaluate(s):
        if N and s.size <= FEW_POINTS:
            return few(s)
        out = np.empty((p, m, s.size), complex)
        step = max(1, 2**22 // max(1, N ** 2 + N * m))
        for i in range(0, s.size, step):
            z = s[i:i + step]
            E = np.exp(-np.multiply.outer(z, g.tau))                                   # (F, q)
            R = np.zeros((z.size, N, m), complex)
            R[:, :n] = g.B1
            R[:, n:] = E[:, :, None] * g.D21
            if N:
                K = np.zeros((z.size, N, N), complex)
                K[:, :n, :n] = z[:, None, None] * np.eye(n) - g.A
                K[:, :n, n:] = -g.B2
                K[:, n:, :n] = -E[:, :, None] * g.C2
                K[:, n:, n:] = np.eye(q) - E[:, :, None] * g.D22
                R = np.linalg.solve(K, R)
            out[:, :, i:i + step] = np.moveaxis(np.einsum("pk,fkm->fpm", CD, R) + g.D11, 0, -1)
        return out

    return evaluate


def append(*systems):
    """Systems side by side: inputs, outputs, states and channels stacked."""
    from scipy.linalg import block_diag

    bd = lambda i: block_diag(*[g[i] for g in systems])          # noqa: E731
    return IOData(*(bd(i) for i in range(9)), np.concatenate([g.tau for g in systems]))


def connect(g, F, G, H):
    """Close ``g`` under ``u = F y + G r``; the result maps ``r`` to ``H y`` (``AlgebraicLoopError`` when
    ``I - D11 F`` is singular: a loop without dynamics or delay)."""
    F, G, H = (np.atleast_2d(np.asarray(v, dtype=float)) for v in (F, G, H))
    p = g.C1.shape[0]
    L = np.eye(p) - g.D11 @ F
    if p and np.linalg.matrix_rank(L) < p:
        raise AlgebraicLoopError("the interconnection closes an algebraic loop: I - D F is singular (the "
                                 "loop's feedthrough gain is exactly 1 at every frequency); add dynamics or a delay")
    E = np.linalg.solve(L, np.eye(p)) if p else np.zeros((0, 0))          # y = E (C1 x + D11 u_r + D12 w)
    FE = F @ E
    Gu = FE @ g.D11 @ G + G                                                 # u = FE (C1 x + D12 w) + Gu r
    return IOData(g.A + g.B1 @ FE @ g.C1, g.B1 @ Gu, H @ E @ g.C1, H @ E @ g.D11 @ G,
                  g.B2 + g.B1 @ FE @ g.D12, g.C2 + g.D21 @ FE @ g.C1, H @ E @ g.D12, g.D21 @ Gu,
                  g.D22 + g.D21 @ FE @ g.D12, g.tau)


def series(*systems):
    """``systems[0]`` first: each one's outputs feed the next one's inputs."""
    out = systems[0]
    for nxt in systems[1:]:
        m1, p1, m2, p2 = out.B1.shape[1], out.C1.shape[0], nxt.B1.shape[1], nxt.C1.shape[0]
        if m2 != p1:
            raise ValueError(f"series: a system with {p1} outputs cannot feed one with {m2} inputs")
        F = np.zeros((m1 + m2, p1 + p2))
        F[m1:, :p1] = np.eye(p1)
        out = connect(append(out, nxt), F, np.vstack([np.eye(m1), np.zeros((m2, m1))]),
                      np.hstack([np.zeros((p2, p1)), np.eye(p2)]))
    return out


def parallel(*systems):
    """The sum: one input fed to all, outputs added."""
    m, p = systems[0].B1.shape[1], systems[0].C1.shape[0]
    for g in systems:
        if (g.B1.shape[1], g.C1.shape[0]) != (m, p):
            raise ValueError(f"parallel: shapes differ ({g.C1.shape[0]}x{g.B1.shape[1]} against {p}x{m})")
    k = len(systems)
    return connect(append(*systems), np.zeros((k * m, k * p)), np.tile(np.eye(m), (k, 1)),
                   np.tile(np.eye(p), (1, k)))


def feedback(g1, g2, sign=-1):
    """``y = g1 u1``, ``u1 = r + sign g2 y``."""
    m1, p1, m2, p2 = g1.B1.shape[1], g1.C1.shape[0], g2.B1.shape[1], g2.C1.shape[0]
    if m2 != p1 or p2 != m1:
        raise ValueError(f"feedback: sys2 must map {p1} outputs to {m1} inputs, got {p2}x{m2}")
    F = np.zeros((m1 + m2, p1 + p2))
    F[:m1, p1:] = sign * np.eye(m1)
    F[m1:, :p1] = np.eye(p1)
    return connect(append(g1, g2), F, np.vstack([np.eye(m1), np.zeros((m2, m1))]),
                   np.hstack([np.eye(p1), np.zeros((p1, p2))]))


def pade(g, order):
    """``(A, B, C, D)`` of ``g`` with each delay replaced by its Pade approximation of ``order``
    (python-control's ``pade``)."""
    import control

    q = g.tau.size
    if not q:
        return g.A, g.B1, g.C1, g.D11
    blocks = []
    for tau in g.tau:
        s = control.ss(control.tf(*control.pade(float(tau), int(order))))
        blocks.append(make(*(np.asarray(v, float) for v in (s.A, s.B, s.C, s.D))))
    m, p = g.B1.shape[1], g.C1.shape[0]
    open_ = make(g.A, np.hstack([g.B1, g.B2]), np.vstack([g.C1, g.C2]), np.block([[g.D11, g.D12], [g.D21, g.D22]]))
    F = np.zeros((m + 2 * q, p + 2 * q))          # inputs [u, w, pade in], outputs [y, z, pade out]
    F[m:m + q, p + q:] = np.eye(q)                # w = pade out
    F[m + q:, p:p + q] = np.eye(q)                # pade in = z
    r = connect(append(open_, *blocks), F, np.vstack([np.eye(m), np.zeros((2 * q, m))]),
                np.hstack([np.eye(p), np.zeros((p, 2 * q))]))
    return r.A, r.B1, r.C1, r.D11


def to_control(g, pade_order=None):
    """A python-control ``StateSpace`` of ``g``, each delay replaced by its Pade approximation of
    ``pade_order`` (``ValueError`` when ``g`` has delays and no order; ``ImportError`` naming the package
    when python-control is missing)."""
    try:
        import control
    except ImportError as exc:
        raise ImportError("this conversion needs python-control: pip install control (or "
                          "pip install 'ddesys[control]')") from exc
    q = g.tau.size
    if q and pade_order is None:
        raise ValueError(f"this system has {q} delay channel(s): give pade_order >= 1 to approximate them")
    if pade_order is not None:
        if isinstance(pade_order, bool) or not isinstance(pade_order, (numbers.Integral, np.integer)):
            raise TypeError(f"pade_order must be an integer, got {pade_order!r}")
        if not 1 <= int(pade_order) <= MAX_PADE_ORDER:
            raise ValueError(f"pade_order must be in [1, {MAX_PADE_ORDER}], got {pade_order}: higher orders give "
                             "realizations whose coefficients span more than float64 resolves")
    return control.ss(*pade(g, pade_order))


__all__ = ["MAX_PADE_ORDER", "IOData", "append", "coerce", "connect", "delay_block", "derivative_at", "feedback",
           "from_control", "from_neutral", "from_statespace", "gain", "make", "pade", "parallel", "schur_at", "series",
           "to_control", "transfer", "transfer_and_derivative", "transfer_at"]
