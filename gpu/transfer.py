"""Fused transfer construction (Triton): ``S_m = sum_n cb_n / den_{n,m}`` and its gradient.

One program per (channel, block of frequencies) builds the contour points ``w^-m``, ``w^-mk``,
``w^-m(k+1)`` from the integers ``(m k) mod M`` in registers, loops over the modes, and accumulates
``cb_n / den_{n,m}``: memory ``O(C M)`` for the output only, never the ``(C, N2, M)`` tensor of the
unfused path. The backward runs one program per (channel, mode) and reduces over the frequencies.

Why Triton: one source runs on CUDA (``nn`` on torch tensors; ``ddesys`` on CuPy arrays through DLPack)
and, with ``TRITON_INTERPRET=1``, on CPU tensors, so CI checks the very kernels that run on a GPU. (Numba
CUDA's simulator costs ~0.2 ms per simulated thread: far too slow for meaningful shapes.)

Complex numbers travel as trailing real pairs (``torch.view_as_real``).
"""
from __future__ import annotations


import torch

from . import OPTIONS, triton_available

if triton_available():
    import triton
    import triton.language as tl

    @triton.jit
    def _points(m, k, M, DT: tl.constexpr):
        """cos/sin of the angles of w^-m, w^-mk, w^-m(k+1) from integer indices (exact reduction mod M).

        The angle is ``-2 pi i / M`` in float64 with ``2 pi`` an in-kernel literal: a Python float
        *argument* would reach compiled code as float32 (Triton's launch convention; the interpreter
        keeps float64), an angle error of ~1e-7 rad."""
        Mf = M.to(tl.float64)
        a1 = (-6.283185307179586 * m.to(tl.float64)) / Mf
        ak = (-6.283185307179586 * ((m * k) % M).to(tl.float64)) / Mf
        al = (-6.283185307179586 * ((m * (k + 1)) % M).to(tl.float64)) / Mf
        return (tl.cos(a1).to(DT), tl.sin(a1).to(DT), tl.cos(ak).to(DT), tl.sin(ak).to(DT),
                tl.cos(al).to(DT), tl.sin(al).to(DT))

    @triton.jit
    def _load_mode(A, CB, base, cbase, DT: tl.constexpr):
        """The three contour-shifted coefficients of one (channel, mode) and its ``c bbar``."""
        return (tl.load(A + base + 0).to(DT), tl.load(A + base + 1).to(DT), tl.load(A + base + 2).to(DT),
                tl.load(A + base + 3).to(DT), tl.load(A + base + 4).to(DT), tl.load(A + base + 5).to(DT),
                tl.load(CB + cbase).to(DT), tl.load(CB + cbase + 1).to(DT))

    @triton.jit
    def _inv_den(a1r, a1i, a2r, a2i, a3r, a3i, z1r, z1i, zkr, zki, zlr, zli):
        """``1 / den``, ``den = 1 - a1 z1 - a2 zk - a3 zl`` (real arithmetic)."""
        dr = 1.0 - (a1r * z1r - a1i * z1i) - (a2r * zkr - a2i * zki) - (a3r * zlr - a3i * zli)
        di = -(a1r * z1i + a1i * z1r) - (a2r * zki + a2i * zkr) - (a3r * zli + a3i * zlr)
        q = 1.0 / (dr * dr + di * di)
        return dr * q, -di * q

    @triton.jit
    def _fwd_kernel(A, CB, K, S, N2, M, BLOCK_M: tl.constexpr, DT: tl.constexpr):
        c = tl.program_id(0).to(tl.int64)              # int64 offsets: C M can pass 2^31
        m = tl.program_id(1).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
        mask = m < M
        kc = tl.load(K + c).to(tl.int64)
        z1r, z1i, zkr, zki, zlr, zli = _points(m, kc, M.to(tl.int64), DT)
        sr = tl.zeros([BLOCK_M], dtype=DT)
        si = tl.zeros([BLOCK_M], dtype=DT)
        for n in range(N2):
            base = (c * N2 + n) * 6                       # A: (C, N2, 3, 2)
            a1r, a1i, a2r, a2i, a3r, a3i, cr, ci = _load_mode(A, CB, base, (c * N2 + n) * 2, DT)
            ir, ii = _inv_den(a1r, a1i, a2r, a2i, a3r, a3i, z1r, z1i, zkr, zki, zlr, zli)
            sr += cr * ir - ci * ii
            si += cr * ii + ci * ir
        out = S + (c * M + m) * 2
        tl.store(out, sr.to(S.dtype.element_ty), mask=mask)
        tl.store(out + 1, si.to(S.dtype.element_ty), mask=mask)

    @triton.jit
    def _bwd_kernel(A, CB, K, G, GA, GCB, N2, M, BLOCK_M: tl.constexpr, DT: tl.constexpr):
        c = tl.program_id(0).to(tl.int64)
        n = tl.program_id(1).to(tl.int64)
        base = (c * N2 + n) * 6
        a1r, a1i, a2r, a2i, a3r, a3i, cr, ci = _load_mode(A, CB, base, (c * N2 + n) * 2, DT)
        kc = tl.load(K + c).to(tl.int64)
        acc = tl.zeros([8, BLOCK_M], dtype=DT)      # rows: gcb r/i, gA1 r/i, gA2 r/i, gA3 r/i
        rows = tl.arange(0, 8)[:, None]
        for m0 in range(0, M, BLOCK_M):
            m = m0 + tl.arange(0, BLOCK_M).to(tl.int64)
            mask = m < M
            z1r, z1i, zkr, zki, zlr, zli = _points(m, kc, M.to(tl.int64), DT)
            gr = tl.load(G + (c * M + m) * 2, mask=mask, other=0.0).to(DT)
            gi = tl.load(G + (c * M + m) * 2 + 1, mask=mask, other=0.0).to(DT)
            ir, ii = _inv_den(a1r, a1i, a2r, a2i, a3r, a3i, z1r, z1i, zkr, zki, zlr, zli)
            wr = ir * ir - ii * ii
            wi = 2.0 * ir * ii
            vr = cr * wr - ci * wi                         # cb inv^2
            vi = cr * wi + ci * wr
            ur = gr * vr + gi * vi                         # G conj(cb inv^2)
            ui = gi * vr - gr * vi
            vals = tl.where(rows == 0, gr * ir + gi * ii,
                   tl.where(rows == 1, gi * ir - gr * ii,
                   tl.where(rows == 2, ur * z1r + ui * z1i,
                   tl.where(rows == 3, ui * z1r - ur * z1i,
                   tl.where(rows == 4, ur * zkr + ui * zki,
                   tl.where(rows == 5, ui * zkr - ur * zki,
                   tl.where(rows == 6, ur * zlr + ui * zli, ui * zlr - ur * zli)))))))
            acc += vals
        tot = tl.sum(acc, axis=1)                          # (8,)
        r = tl.arange(0, 8)
        tl.store(GCB + (c * N2 + n) * 2 + r, tot.to(GCB.dtype.element_ty), mask=r < 2)
        tl.store(GA + base + r - 2, tot.to(GA.dtype.element_ty), mask=r >= 2)


BLOCK_M = 128


def _dt(x):
    """Compute precision = the data's (float32 data: float32 arithmetic; angles always in float64)."""
    return tl.float64 if x.dtype == torch.float64 else tl.float32


def forward_launch(A, cb, k, M, out=None):
    """``(kernel, grid, args, meta, S)`` of the forward: the one place its arguments are formed, shared
    by :func:`sample_forward` and the ahead-of-time compile check (:mod:`gpu.aot`)."""
    C, N2 = cb.shape
    A_r = torch.view_as_real(A.contiguous()).contiguous()
    cb_r = torch.view_as_real(cb.contiguous()).contiguous()
    S = torch.view_as_real(out) if out is not None else torch.empty(C, M, 2, dtype=A_r.dtype, device=A.device)
    args = (A_r, cb_r, k.contiguous(), S, N2, M)
    return _fwd_kernel, (C, triton.cdiv(M, BLOCK_M)), args, dict(BLOCK_M=BLOCK_M, DT=_dt(A_r), **OPTIONS), S


def backward_launch(A, cb, k, M, G):
    """``(kernel, grid, args, meta, (gA, gcb))`` of the backward (see :func:`forward_launch`)."""
    C, N2 = cb.shape
    A_r = torch.view_as_real(A.contiguous()).contiguous()
    cb_r = torch.view_as_real(cb.contiguous()).contiguous()
    G_r = torch.view_as_real(G.contiguous().to(A.dtype)).contiguous()
    gA = torch.empty_like(A_r)
    gcb = torch.empty_like(cb_r)
    args = (A_r, cb_r, k.contiguous(), G_r, gA, gcb, N2, M)
    return _bwd_kernel, (C, N2), args, dict(BLOCK_M=BLOCK_M, DT=_dt(A_r), **OPTIONS), (gA, gcb)


def sample_forward(A, cb, k, M, out=None):
    """Triton forward: ``A`` complex ``(C, N2, 3)``, ``cb`` ``(C, N2)``, ``k`` int ``(C,)`` -> ``(C, M)``
    (written into ``out`` when given, e.g. a poisoned buffer in the checks)."""
    kernel, grid, args, meta, S = forward_launch(A, cb, k, M, out)
    kernel[grid](*args, **meta)
    return torch.view_as_complex(S)


def sample_backward(A, cb, k, M, G):
    """Triton backward: gradients ``(grad_A, grad_cb)`` for upstream ``G`` ``(C, M)`` (torch convention)."""
    kernel, grid, args, meta, (gA, gcb) = backward_launch(A, cb, k, M, G)
    kernel[grid](*args, **meta)
    return torch.view_as_complex(gA), torch.view_as_complex(gcb)
