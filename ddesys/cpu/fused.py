"""Fused CPU kernels (Numba) for the sampled transfer function and its gradient.

The reference definition is :func:`ddesys.transfer.sample_points` (array API, any library). These
loops compute the same ``S_m = sum_n cb_n / (1 - A_n1 Z_1m - A_n2 Z_2m - A_n3 Z_3m)`` in one pass over
``(channel, mode, frequency)`` with nothing materialized but the output: memory ``O(batch M)``, work
``O(batch N2 M)``, SIMD over the frequency axis, threads over channels. The tests check them against the
reference path. They serve NumPy arrays and CPU torch tensors (zero-copy views); GPU arrays take the
array-API path or the Triton kernels of ``gpu/``.
"""
from __future__ import annotations

import numpy as np

from ._numba import nb as _nb
from .options import loop
from .threads import numba_threads

AVAILABLE = _nb is not None

if AVAILABLE:

    @loop("transfer.points")
    def _points(w, kb):  # pragma: no cover - jitted
        """Real and imaginary parts of ``w^-m``, ``w^-mk``, ``w^-m(k+1)`` from the table ``w`` by the
        integer index ``(m k) mod M`` (kept incrementally)."""
        M = w.shape[0]
        z1r, z1i = w.real.copy(), w.imag.copy()
        zkr, zki = np.empty_like(z1r), np.empty_like(z1r)
        zlr, zli = np.empty_like(z1r), np.empty_like(z1r)
        s1, s2 = kb % M, (kb + 1) % M
        i1 = i2 = 0
        for m in range(M):
            zkr[m], zki[m] = z1r[i1], z1i[i1]
            zlr[m], zli[m] = z1r[i2], z1i[i2]
            i1 += s1
            i2 += s2
            if i1 >= M:
                i1 -= M
            if i2 >= M:
                i2 -= M
        return z1r, z1i, zkr, zki, zlr, zli

    @loop("transfer.inv_den")
    def _inv_den(a1r, a1i, a2r, a2i, a3r, a3i, z1r, z1i, zkr, zki, zlr, zli):  # pragma: no cover - jitted
        """``1 / den`` with ``den = 1 - a1 z1 - a2 zk - a3 zl`` in real arithmetic (docs/theory.md §5.5)."""
        dr = 1.0 - (a1r * z1r - a1i * z1i) - (a2r * zkr - a2i * zki) - (a3r * zlr - a3i * zli)
        di = -(a1r * z1i + a1i * z1r) - (a2r * zki + a2i * zkr) - (a3r * zli + a3i * zlr)
        q = 1.0 / (dr * dr + di * di)
        return dr * q, -di * q

    @loop("transfer.sample")
    def _forward_nb(A, cb, k, w, S):  # pragma: no cover - jitted
        B, N2 = cb.shape
        M = w.shape[0]
        for b in _nb.prange(B):
            sr = np.zeros(M, dtype=S.real.dtype)
            si = np.zeros(M, dtype=S.real.dtype)
            z1r, z1i, zkr, zki, zlr, zli = _points(w, k[b])
            for n in range(N2):
                a1r, a1i, a2r, a2i, a3r, a3i = A[b, n, 0].real, A[b, n, 0].imag, A[b, n, 1].real, \
                    A[b, n, 1].imag, A[b, n, 2].real, A[b, n, 2].imag
                cr, ci = cb[b, n].real, cb[b, n].imag
                for m in range(M):
                    ir, ii = _inv_den(a1r, a1i, a2r, a2i, a3r, a3i, z1r[m], z1i[m], zkr[m], zki[m],
                                      zlr[m], zli[m])                               # 1 / den
                    sr[m] += cr * ir - ci * ii
                    si[m] += cr * ii + ci * ir
            for m in range(M):
                S[b, m] = sr[m] + 1j * si[m]

    @loop("transfer.sample")
    def _backward_nb(A, cb, k, w, G, gA, gcb):  # pragma: no cover - jitted
        B, N2 = cb.shape
        M = w.shape[0]
        for b in _nb.prange(B):
            z1r, z1i, zkr, zki, zlr, zli = _points(w, k[b])
            gr, gi = G[b].real.copy(), G[b].imag.copy()
            for n in range(N2):
                a1r, a1i, a2r, a2i, a3r, a3i = A[b, n, 0].real, A[b, n, 0].imag, A[b, n, 1].real, \
                    A[b, n, 1].imag, A[b, n, 2].real, A[b, n, 2].imag
                cr, ci = cb[b, n].real, cb[b, n].imag
                c0r = c0i = g1r = g1i = g2r = g2i = g3r = g3i = 0.0
                for m in range(M):
                    ir, ii = _inv_den(a1r, a1i, a2r, a2i, a3r, a3i, z1r[m], z1i[m], zkr[m], zki[m],
                                      zlr[m], zli[m])                               # inv = 1/den
                    # grad_cb += G conj(inv)
                    c0r += gr[m] * ir + gi[m] * ii
                    c0i += gi[m] * ir - gr[m] * ii
                    # u = G conj(inv^2); conj(cb) is factored out of the sum over m
                    wr = ir * ir - ii * ii
                    wi = 2.0 * ir * ii
                    ur = gr[m] * wr + gi[m] * wi
                    ui = gi[m] * wr - gr[m] * wi
                    # grad_A_j += u conj(Z_j)
                    g1r += ur * z1r[m] + ui * z1i[m]
                    g1i += ui * z1r[m] - ur * z1i[m]
                    g2r += ur * zkr[m] + ui * zki[m]
                    g2i += ui * zkr[m] - ur * zki[m]
                    g3r += ur * zlr[m] + ui * zli[m]
                    g3i += ui * zlr[m] - ur * zli[m]
                gcb[b, n] = c0r + 1j * c0i
                ccb = cr - 1j * ci                                         # conj(cb)
                gA[b, n, 0] = ccb * (g1r + 1j * g1i)
                gA[b, n, 1] = ccb * (g2r + 1j * g2i)
                gA[b, n, 2] = ccb * (g3r + 1j * g3i)


def _table(M, dtype):
    """``w^-j = exp(-2 pi i j / M)``, ``j = 0 .. M-1``, in the complex dtype of the data."""
    return np.exp(-2j * np.pi * np.arange(M) / M).astype(dtype)


def _prep(A, cb, k):
    batch = A.shape[:-2]
    B = int(np.prod(batch, dtype=np.int64))
    n2 = A.shape[-2]
    ct = np.result_type(A.dtype, cb.dtype)
    A = np.ascontiguousarray(A.reshape(B, n2, 3), ct)
    cb = np.ascontiguousarray(np.broadcast_to(cb, batch + (n2,)).reshape(B, n2), ct)
    k = np.ascontiguousarray(np.broadcast_to(k, batch).reshape(B), np.int64)
    return A, cb, k


def sample_forward(A, cb, k, M):
    """NumPy ``A (..., N2, 3), cb (..., N2), k (...)`` -> ``S (..., M)`` (see module docstring)."""
    batch = A.shape[:-2]
    A2, cb2, k2 = _prep(A, cb, k)
    S = np.empty((A2.shape[0], M), A2.dtype)
    with numba_threads():
        _forward_nb(A2, cb2, k2, _table(M, A2.dtype), S)
    return S.reshape(batch + (M,))


def sample_backward(A, cb, k, M, G):
    """Gradients ``(grad_A, grad_cb)`` for upstream ``G`` ``(..., M)`` (torch's complex convention)."""
    A2, cb2, k2 = _prep(A, cb, k)
    G2 = np.ascontiguousarray(G.reshape(A2.shape[0], M), A2.dtype)
    gA, gcb = np.empty_like(A2), np.empty_like(cb2)
    with numba_threads():
        _backward_nb(A2, cb2, k2, _table(M, A2.dtype), G2, gA, gcb)
    return gA.reshape(A.shape), gcb.reshape(cb.shape)


if AVAILABLE:

    @loop("transfer.sample")
    def _vander_nb(lam, cb, L, K, G, gl, gc, backward):  # pragma: no cover - jitted
        """K_t = 2 Re sum_n cb_n lam_n^t (forward) or its gradients for upstream G (backward).
        Powers in blocks of 64: lam^(t0 + j) = exp(t0 log lam) * lam^j, so rounding does not grow
        with t."""
        B, N2 = cb.shape
        blk = 64
        for b in _nb.prange(B):
            for n in range(N2):
                ll = np.log(lam[b, n])
                pw = np.empty(blk, dtype=lam.dtype)
                for j in range(blk):
                    pw[j] = np.exp(j * ll)
                c = cb[b, n]
                acc_c = 0j
                acc_l = 0j
                for t0 in range(0, L, blk):
                    base = np.exp(t0 * ll)
                    for j in range(min(blk, L - t0)):
                        p = base * pw[j]
                        if backward:
                            g = G[b, t0 + j]
                            acc_c += g * p.conjugate()
                            acc_l += g * (t0 + j) * (c * p).conjugate()
                        else:
                            K[b, t0 + j] += 2.0 * (c.real * p.real - c.imag * p.imag)
                if backward:
                    gc[b, n] = 2.0 * acc_c
                    gl[b, n] = 2.0 * acc_l / lam[b, n].conjugate()


def vandermonde_forward(lam, cb, L):
    """``K_t = 2 Re sum_n cb_n lam_n^t``: ``(..., N2), (..., N2) -> (..., L)`` real."""
    batch = lam.shape[:-1]
    B = int(np.prod(batch, dtype=np.int64))
    lam2 = np.ascontiguousarray(lam.reshape(B, -1))
    cb2 = np.ascontiguousarray(cb.reshape(B, -1), lam2.dtype)
    K = np.zeros((B, L), lam2.real.dtype)
    dummy = np.zeros((1, 1), lam2.dtype)
    with numba_threads():
        _vander_nb(lam2, cb2, L, K, K, dummy, dummy, False)
    return K.reshape(batch + (L,))


def vandermonde_backward(lam, cb, G):
    """Gradients ``(grad_lam, grad_cb)`` of ``sum_t G_t K_t`` (torch's complex convention)."""
    batch = lam.shape[:-1]
    B = int(np.prod(batch, dtype=np.int64))
    lam2 = np.ascontiguousarray(lam.reshape(B, -1))
    cb2 = np.ascontiguousarray(cb.reshape(B, -1), lam2.dtype)
    G2 = np.ascontiguousarray(G.reshape(B, -1), lam2.real.dtype)
    gl, gc = np.empty_like(lam2), np.empty_like(cb2)
    with numba_threads():
        _vander_nb(lam2, cb2, G2.shape[1], G2, G2, gl, gc, True)
    return gl.reshape(lam.shape), gc.reshape(cb.shape)
