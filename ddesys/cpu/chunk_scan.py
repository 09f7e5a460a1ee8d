"""The compiled scan of a chunk continued from a history, and its adjoint: state passing on the CPU.

One diagonal delay recurrence per mode (docs/theory.md §2, §6), run over a chunk of ``L`` inputs after a
history of ``R`` states::

    h_t = lam h_{t-1} + m1 h_{t-k} + m2 h_{t-k-1} + bbar x_t,     t = 0 .. L-1
    y_t = 2 Re(sum_n c_n h_{n,t})                                 (no feedthrough: the caller adds d x)

The history ``h_{-R} .. h_{-1}`` is read from a decode ring of ``R`` slots (the layer cache's own, in
its memory layout, zero before the sequence's start) and the ring after the chunk is written into a new
one: the state passes from chunk to chunk without reordering. Without a delay (``delayed=False``: S4D,
a ring of one slot) only ``lam`` acts. :func:`scan_backward` returns the gradients of a real loss given
those of the outputs and of the new ring, by the adjoint recurrence run backwards (torch's convention
for complex gradients, ``g = dl/dRe + i dl/dIm``)::

    g_t = 2 gy_t conj(c) + gs_t + conj(lam) g_{t+1} + conj(m1) g_{t+k} + conj(m2) g_{t+k+1}

with ``g_{t >= L} = 0`` and ``gs_t`` the new ring's gradient at ``h_t``; then
``d lam = sum_t g_t conj(h_{t-1})``, ``d m1 = sum_t g_t conj(h_{t-k})``,
``d m2 = sum_t g_t conj(h_{t-k-1})``, ``d bbar = sum_t g_t x_t``, ``d c = sum_t 2 gy_t conj(h_t)``,
``d x_t = Re sum_n conj(bbar_n) g_{n,t}`` and a history state's gradient collects the chunk's reads of it.

Work is ``O(B H N2 (R + L))`` per call, parallel over the ``B H`` (batch row, channel) pairs, each with
its own trajectory buffer (``(R + L) N2`` states): no ``(B, H, N2, L)`` array is ever stored, the
backward recomputes its pair's trajectory. The layers' FFT path (:mod:`nn.decode.history`) computes the
same quantities by per-mode convolutions, ``O(B H N2 M log M)``, the route on other devices.
"""
from __future__ import annotations

import numpy as np

from ._numba import nb as _nb
from .options import loop, prange
from .threads import numba_threads

__all__ = ["available", "scan_forward", "scan_backward"]


def available() -> bool:
    """Whether the compiled scan exists (Numba present)."""
    return _nb is not None


if _nb is not None:
    @loop("chunk.inline")
    def _trajectory(x, ring, t0, lam, m1, m2, bbar, k, delayed, b, h, tr, c, zero, y):    # pragma: no cover
        """Fill ``tr`` ``(R + L, N2)`` with the part of pair ``(b, h)``'s history the chunk reads (the last
        ``k + 1`` states; zero before the start) and its chunk's states (rows ``R ..``); with a ``y`` of
        ``L`` positions (not ``(B, H, 0)``), also its outputs ``y[b, h, t]``, in the same pass."""
        R = ring.shape[1]
        L = x.shape[2]
        N2 = lam.shape[1]
        kk = k[h] if delayed else 0
        for j in range(R - kk - 1 if kk + 1 <= R else 0, R):
            s = t0 - R + j
            if s >= 0:
                for n in range(N2):
                    tr[j, n] = ring[b, s % R, h, n]
            else:
                for n in range(N2):
                    tr[j, n] = 0
        tmp = np.empty(N2, dtype=tr.dtype)                               # no aliasing: the loops vectorize
        out = y.shape[2] > 0
        for t in range(L):
            i = R + t
            xt = x[b, h, t]
            if delayed:
                for n in range(N2):
                    tmp[n] = lam[h, n] * tr[i - 1, n] + bbar[h, n] * xt + m1[h, n] * tr[i - kk, n] \
                        + m2[h, n] * tr[i - kk - 1, n]
            else:
                for n in range(N2):
                    tmp[n] = lam[h, n] * tr[i - 1, n] + bbar[h, n] * xt
            for n in range(N2):
                tr[i, n] = tmp[n]
            if out:
                acc = zero
                for n in range(N2):
                    v = c[h, n] * tmp[n]
                    acc += v.real
                y[b, h, t] = acc + acc

    @loop("chunk.scan")
    def _scan_fwd(x, ring, t0, lam, m1, m2, bbar, c, k, delayed, zero, y, new):    # pragma: no cover - jitted
        B, H, L = x.shape
        R = ring.shape[1]
        N2 = lam.shape[1]
        write = new.shape[1] > 0
        for bh in prange(B * H):
            b = bh // H
            h = bh - b * H
            tr = np.empty((R + L, N2), dtype=ring.dtype)
            _trajectory(x, ring, t0, lam, m1, m2, bbar, k, delayed, b, h, tr, c, zero, y)
            if write:
                for s in range(t0 + L - R, t0 + L):
                    if s >= t0:
                        for n in range(N2):
                            new[b, s % R, h, n] = tr[R + s - t0, n]
                    elif s >= 0:                                         # an older state, carried over
                        for n in range(N2):
                            new[b, s % R, h, n] = ring[b, s % R, h, n]
                    else:
                        for n in range(N2):
                            new[b, s % R, h, n] = 0

    @loop("chunk.scan")
    def _scan_bwd(x, ring, t0, lam, m1, m2, bbar, c, k, delayed, zero, gy, gnew,
                  gx, gring, glam, gm1, gm2, gbbar, gc):                       # pragma: no cover - jitted
        B, H, L = x.shape
        R = ring.shape[1]
        N2 = lam.shape[1]
        carried = gnew.shape[1] > 0
        for bh in prange(B * H):
            b = bh // H
            h = bh - b * H
            kk = k[h] if delayed else 1
            tr = np.empty((R + L, N2), dtype=ring.dtype)
            _trajectory(x, ring, t0, lam, m1, m2, bbar, k, delayed, b, h, tr, c, zero, gx[:, :, :0])
            g = np.zeros((R + L + kk + 2, N2), dtype=ring.dtype)        # adjoints; zero past the chunk
            acc = np.zeros((5, N2), dtype=ring.dtype)                   # d lam, d m1, d m2, d bbar, d c
            tmp = np.empty(N2, dtype=ring.dtype)                         # g_t, apart from g: no aliasing
            for t in range(L - 1, -1, -1):
                i = R + t
                xt = x[b, h, t]
                gyt = gy[b, h, t] + gy[b, h, t]
                slot = (t0 + t) % R
                for n in range(N2):
                    tmp[n] = gyt * np.conj(c[h, n]) + np.conj(lam[h, n]) * g[i + 1, n]
                if delayed:
                    for n in range(N2):
                        tmp[n] += np.conj(m1[h, n]) * g[i + kk, n] + np.conj(m2[h, n]) * g[i + kk + 1, n]
                if carried and t >= L - R:                               # h_t is in the new ring
                    for n in range(N2):
                        tmp[n] += gnew[b, slot, h, n]
                sx = zero
                for n in range(N2):
                    v = tmp[n]
                    g[i, n] = v
                    acc[0, n] += v * np.conj(tr[i - 1, n])
                    acc[3, n] += v * xt
                    acc[4, n] += gyt * np.conj(tr[i, n])
                    w = np.conj(bbar[h, n]) * v
                    sx += w.real
                if delayed:
                    for n in range(N2):
                        acc[1, n] += tmp[n] * np.conj(tr[i - kk, n])
                        acc[2, n] += tmp[n] * np.conj(tr[i - kk - 1, n])
                gx[b, h, t] = sx
            for n in range(N2):
                glam[b, h, n] = acc[0, n]
                gm1[b, h, n] = acc[1, n]
                gm2[b, h, n] = acc[2, n]
                gbbar[b, h, n] = acc[3, n]
                gc[b, h, n] = acc[4, n]
            for j in range(R if gring.shape[1] > 0 else 0):             # the history: read, or carried over
                s = t0 - R + j
                slot = s % R if s >= 0 else 0
                for n in range(N2):
                    v = g[R + L, n]                                      # zero
                    if s >= 0:
                        if j == R - 1:
                            v += np.conj(lam[h, n]) * g[R, n]
                        if delayed:
                            if j + kk >= R:
                                v += np.conj(m1[h, n]) * g[j + kk, n]
                            if j + kk + 1 >= R:
                                v += np.conj(m2[h, n]) * g[j + kk + 1, n]
                        if carried and s >= t0 + L - R:                  # copied into the new ring
                            v += gnew[b, slot, h, n]
                        gring[b, slot, h, n] = v


def _check(x, ring, lam, k, delayed):
    B, H, L = x.shape
    R = ring.shape[1]
    if ring.shape[0] != B or ring.shape[2:] != lam.shape or lam.shape[0] != H:
        raise ValueError(f"scan: shapes x {x.shape}, ring {ring.shape}, lam {lam.shape} do not agree")
    if delayed and (int(k.min()) < 1 or int(k.max()) + 1 > R):
        raise ValueError(f"scan: delays must lie in [1, R - 1] = [1, {R - 1}], got [{int(k.min())}, {int(k.max())}]")
    if R < 1:
        raise ValueError("scan: a ring of at least one state is needed")


def scan_forward(x, ring, t0, lam, m1, m2, bbar, c, k, new=None, delayed=True):
    """Outputs of a chunk after the history in a decode ring, and the ring after it (module docstring).

    Parameters
    ----------
    x : real ``(B, H, L)``
        The chunk's inputs (float32 or float64; the states' precision follows ``ring``).
    ring : complex ``(B, R, H, N2)``, any strides
        A decode ring at position ``t0``: the state of time ``s`` in slot ``s mod R`` for
        ``t0 - R <= s < t0``; slots of times before 0 are read as zero, whatever they hold.
    t0 : int
        Tokens before the chunk.
    lam, m1, m2, bbar, c : complex ``(H, N2)``
        The recurrence's coefficients (``m1 = mu (1 - alpha)``, ``m2 = mu alpha``; ignored without delay).
    k : int64 ``(H,)``
        Integer delays, ``1 <= k <= R - 1`` (ignored without delay).
    new : complex ``(B, R, H, N2)``, any strides, optional
        Filled with the ring at position ``t0 + L`` (the ring the next chunk continues from).
    delayed : bool
        False: no delayed term (S4D; ``R = 1``).

    Returns
    -------
    y : real ``(B, H, L)`` of ``x``'s dtype
    """
    _check(x, ring, lam, k, delayed)
    B, H, L = x.shape
    y = np.empty((B, H, L), x.dtype)
    out = new if new is not None else np.empty((B, 0, H, lam.shape[1]), ring.dtype)
    with numba_threads():
        _scan_fwd(x, ring, t0, lam, m1, m2, bbar, c, k, delayed, x.dtype.type(0), y, out)
    return y


def scan_backward(x, ring, t0, lam, m1, m2, bbar, c, k, gy, gnew=None, delayed=True, ring_grad=True):
    """Gradients of a real loss through :func:`scan_forward` (module docstring), given ``gy`` ``(B, H, L)``
    (the outputs' gradient) and ``gnew`` ``(B, R, H, N2)`` (the new ring's; None when unused).
    ``ring_grad=False``: the history's gradient is not needed (``gring`` is None).

    Returns
    -------
    gx : real ``(B, H, L)``
    gring : complex ``(B, R, H, N2)`` or None
        Zero at slots of times before 0.
    glam, gm1, gm2, gbbar, gc : complex ``(H, N2)``
        Summed over the batch (``gm1``, ``gm2`` zero without delay).
    """
    _check(x, ring, lam, k, delayed)
    B, H, L = x.shape
    cdt = ring.dtype
    gx = np.empty((B, H, L), x.dtype)
    gring = np.zeros(ring.shape if ring_grad else (B, 0) + ring.shape[2:], cdt)
    gn = gnew if gnew is not None else np.empty((B, 0, H, lam.shape[1]), cdt)
    acc = [np.zeros((B, H, lam.shape[1]), cdt) for _ in range(5)]        # per batch row: no shared writes
    with numba_threads():
        _scan_bwd(x, ring, t0, lam, m1, m2, bbar, c, k, delayed, x.dtype.type(0), gy, gn, gx, gring, *acc)
    return (gx, gring if ring_grad else None, *(a.sum(0) for a in acc))
