"""Fused transfer construction (Triton): ``S_m = sum_n cb_n / den_{n,m}`` and its gradient.

The contour points ``w^-m``, ``w^-mk``, ``w^-m(k+1)`` are all unit roots ``w^-j`` with the integer
``j = m``, ``(m k) mod M``, ``(m (k+1)) mod M``: each launch builds the table ``T_j = w^-j`` (``(M, 2)``
reals, float64 angles ``j (-2 pi / M)`` as in :func:`ddesys.transfer._unit_roots`, rounded to the working
precision) once on the data's device, and the kernels gather from it: no ``cos``/``sin`` and no
division in any kernel, memory ``O(M)`` for the table.

Forward: one program per (channel, block of frequencies) gathers its points, loops over the modes and
accumulates ``cb_n / den_{n,m}``: memory ``O(C M)`` for the output only, never the ``(C, N2, M)`` tensor
of the unfused path. Backward: one program per (channel, block of modes) loops over blocks of
frequencies on a ``(modes, frequencies)`` tile (the points and ``G`` of a frequency block read once for
all the block's modes) and reduces over the frequencies at the end.

Why Triton: one source runs on CUDA (``nn`` on torch tensors; ``ddesys`` on CuPy arrays through DLPack)
and, with ``TRITON_INTERPRET=1``, on CPU tensors, so CI checks the very kernels that run on a GPU. (Numba
CUDA's simulator runs Python per simulated thread: far too slow for meaningful shapes.)

Complex numbers travel as trailing real pairs (``torch.view_as_real``). Launches run under
:func:`gpu.device_guard` (the data's CUDA device, not the current one).
"""
from __future__ import annotations

import math

import torch

from . import OPTIONS, device_guard, triton_available

if triton_available():
    import triton
    import triton.language as tl

    @triton.jit
    def _points(T, m, k, M, mask):
        """``w^-m``, ``w^-mk``, ``w^-m(k+1)`` (real, imaginary parts) gathered from the unit-root table
        ``T`` ``(M, 2)`` at the exact integer indices (``m``, ``k``, ``M`` int64)."""
        jk = ((m * k) % M) * 2
        jl = ((m * (k + 1)) % M) * 2
        return (tl.load(T + m * 2, mask=mask, other=1.0), tl.load(T + m * 2 + 1, mask=mask, other=0.0),
                tl.load(T + jk, mask=mask, other=1.0), tl.load(T + jk + 1, mask=mask, other=0.0),
                tl.load(T + jl, mask=mask, other=1.0), tl.load(T + jl + 1, mask=mask, other=0.0))

    @triton.jit
    def _load_mode(A, CB, base, cbase, DT: tl.constexpr):
        """The three contour-shifted coefficients of one (channel, mode) and its ``c bbar``."""
        return (tl.load(A + base + 0).to(DT), tl.load(A + base + 1).to(DT), tl.load(A + base + 2).to(DT),
                tl.load(A + base + 3).to(DT), tl.load(A + base + 4).to(DT), tl.load(A + base + 5).to(DT),
                tl.load(CB + cbase).to(DT), tl.load(CB + cbase + 1).to(DT))

    @triton.jit
    def _load_modes(A, CB, row, mask, DT: tl.constexpr):
        """:func:`_load_mode` for a vector ``row = c N2 + n`` of modes, as ``(modes, 1)`` columns."""
        a = A + row * 6
        cb = CB + row * 2
        return (tl.load(a + 0, mask=mask, other=0.0).to(DT)[:, None],
                tl.load(a + 1, mask=mask, other=0.0).to(DT)[:, None],
                tl.load(a + 2, mask=mask, other=0.0).to(DT)[:, None],
                tl.load(a + 3, mask=mask, other=0.0).to(DT)[:, None],
                tl.load(a + 4, mask=mask, other=0.0).to(DT)[:, None],
                tl.load(a + 5, mask=mask, other=0.0).to(DT)[:, None],
                tl.load(cb, mask=mask, other=0.0).to(DT)[:, None],
                tl.load(cb + 1, mask=mask, other=0.0).to(DT)[:, None])

    @triton.jit
    def _inv_den(a1r, a1i, a2r, a2i, a3r, a3i, z1r, z1i, zkr, zki, zlr, zli):
        """``1 / den``, ``den = 1 - a1 z1 - a2 zk - a3 zl`` (real arithmetic)."""
        dr = 1.0 - (a1r * z1r - a1i * z1i) - (a2r * zkr - a2i * zki) - (a3r * zlr - a3i * zli)
        di = -(a1r * z1i + a1i * z1r) - (a2r * zki + a2i * zkr) - (a3r * zli + a3i * zlr)
        q = 1.0 / (dr * dr + di * di)
        return dr * q, -di * q

    @triton.jit
    def _fwd_kernel(A, CB, K, T, S, N2, M, BLOCK_M: tl.constexpr, DT: tl.constexpr):
        c = tl.program_id(0).to(tl.int64)              # int64 offsets: C M can pass 2^31
        m = tl.program_id(1).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
        mask = m < M
        kc = tl.load(K + c).to(tl.int64)
        z1r, z1i, zkr, zki, zlr, zli = _points(T, m, kc, M.to(tl.int64), mask)    # (BLOCK_M,) each
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
    def _bwd_kernel(A, CB, K, T, G, GA, GCB, N2, M, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr,
                    DT: tl.constexpr):
        """``gcb_n = sum_m G_m conj(inv_nm)``, ``gA_nj = sum_m G_m conj(cb_n inv_nm^2 Z_jm)`` for a block of
        ``BLOCK_N`` modes of one channel on ``(BLOCK_N, BLOCK_M)`` tiles."""
        c = tl.program_id(0).to(tl.int64)
        n = tl.program_id(1).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)   # (BLOCK_N,) modes
        nmask = n < N2
        row = c * N2 + n                                                    # (BLOCK_N,)
        a1r, a1i, a2r, a2i, a3r, a3i, cr, ci = _load_modes(A, CB, row, nmask, DT)   # (BLOCK_N, 1) each
        kc = tl.load(K + c).to(tl.int64)
        Mi = M.to(tl.int64)
        # accumulators (BLOCK_N, BLOCK_M): gcb r/i, gA1 r/i, gA2 r/i, gA3 r/i
        s0 = tl.zeros([BLOCK_N, BLOCK_M], dtype=DT)
        s1 = tl.zeros([BLOCK_N, BLOCK_M], dtype=DT)
        s2 = tl.zeros([BLOCK_N, BLOCK_M], dtype=DT)
        s3 = tl.zeros([BLOCK_N, BLOCK_M], dtype=DT)
        s4 = tl.zeros([BLOCK_N, BLOCK_M], dtype=DT)
        s5 = tl.zeros([BLOCK_N, BLOCK_M], dtype=DT)
        s6 = tl.zeros([BLOCK_N, BLOCK_M], dtype=DT)
        s7 = tl.zeros([BLOCK_N, BLOCK_M], dtype=DT)
        for m0 in range(0, M, BLOCK_M):
            m = m0 + tl.arange(0, BLOCK_M).to(tl.int64)                     # (BLOCK_M,)
            mask = m < M
            z1r, z1i, zkr, zki, zlr, zli = _points(T, m, kc, Mi, mask)     # (BLOCK_M,) each
            z1r, z1i, zkr, zki = z1r[None, :], z1i[None, :], zkr[None, :], zki[None, :]
            zlr, zli = zlr[None, :], zli[None, :]
            # G = 0 past M: those lanes add nothing
            gr = tl.load(G + (c * M + m) * 2, mask=mask, other=0.0).to(DT)[None, :]       # (1, BLOCK_M)
            gi = tl.load(G + (c * M + m) * 2 + 1, mask=mask, other=0.0).to(DT)[None, :]
            ir, ii = _inv_den(a1r, a1i, a2r, a2i, a3r, a3i, z1r, z1i, zkr, zki, zlr, zli)  # (BLOCK_N, BLOCK_M)
            wr = ir * ir - ii * ii
            wi = 2.0 * ir * ii
            vr = cr * wr - ci * wi                                          # cb inv^2
            vi = cr * wi + ci * wr
            ur = gr * vr + gi * vi                                          # G conj(cb inv^2)
            ui = gi * vr - gr * vi
            s0 += gr * ir + gi * ii
            s1 += gi * ir - gr * ii
            s2 += ur * z1r + ui * z1i
            s3 += ui * z1r - ur * z1i
            s4 += ur * zkr + ui * zki
            s5 += ui * zkr - ur * zki
            s6 += ur * zlr + ui * zli
            s7 += ui * zlr - ur * zli
        gcb = GCB + row * 2                                                 # gcb: (C, N2, 2)
        tl.store(gcb, tl.sum(s0, axis=1).to(GCB.dtype.element_ty), mask=nmask)
        tl.store(gcb + 1, tl.sum(s1, axis=1).to(GCB.dtype.element_ty), mask=nmask)
        ga = GA + row * 6                                                   # gA: (C, N2, 3, 2)
        tl.store(ga + 0, tl.sum(s2, axis=1).to(GA.dtype.element_ty), mask=nmask)
        tl.store(ga + 1, tl.sum(s3, axis=1).to(GA.dtype.element_ty), mask=nmask)
        tl.store(ga + 2, tl.sum(s4, axis=1).to(GA.dtype.element_ty), mask=nmask)
        tl.store(ga + 3, tl.sum(s5, axis=1).to(GA.dtype.element_ty), mask=nmask)
        tl.store(ga + 4, tl.sum(s6, axis=1).to(GA.dtype.element_ty), mask=nmask)
        tl.store(ga + 5, tl.sum(s7, axis=1).to(GA.dtype.element_ty), mask=nmask)

BLOCK_M = 128               # forward: frequencies per program
BWD_BLOCK_N = 16            # backward: modes per program (the points of a frequency block are shared)
BWD_BLOCK_M = 32            # backward: frequencies per tile (BLOCK_N x BLOCK_M accumulators, no spills)
BWD_WARPS = 8               # 2 tile elements per thread


def _dt(x):
    """Compute precision = the data's (float32 data: float32 arithmetic; angles always in float64)."""
    return tl.float64 if x.dtype == torch.float64 else tl.float32


def unit_roots(M, dtype, device):
    """Table ``T_j = w^-j = exp(-2 pi i j / M)``, ``j = 0 .. M-1``, as real pairs ``(M, 2)`` in ``dtype``,
    built on ``device``: angles ``j (-2 pi / M)`` in float64 (one rounding; ``j`` exact), then ``cos``
    and ``sin``, then one rounding to ``dtype`` (the reference's own formula)."""
    ang = torch.arange(M, dtype=torch.float64, device=device) * (-2.0 * math.pi / M)      # (M,)
    return torch.stack([torch.cos(ang), torch.sin(ang)], dim=-1).to(dtype)                # (M, 2)


def check_inputs(A, cb, k, M):
    """Shapes, dtypes and devices of a transfer launch: ``A`` complex ``(C, N2, 3)``, ``cb`` ``(C, N2)`` of
    ``A``'s dtype, ``k`` integer ``(C,)``, all on one device; ``M >= 1``. Raises ``TypeError`` /
    ``ValueError`` naming the argument (a kernel would otherwise read or write out of bounds)."""
    if A.dtype not in (torch.complex64, torch.complex128):
        raise TypeError(f"A must be complex64 or complex128, got {A.dtype}")
    if A.dim() != 3 or A.shape[-1] != 3:
        raise ValueError(f"A must have shape (C, N2, 3), got {tuple(A.shape)}")
    if cb.dtype != A.dtype or tuple(cb.shape) != tuple(A.shape[:2]):
        raise ValueError(f"cb must be {A.dtype} of shape {tuple(A.shape[:2])}, got {cb.dtype} {tuple(cb.shape)}")
    if k.dtype.is_floating_point or k.dtype.is_complex or tuple(k.shape) != (A.shape[0],):
        raise ValueError(f"k must be an integer tensor of shape ({A.shape[0]},), got {k.dtype} {tuple(k.shape)}")
    for name, t in (("cb", cb), ("k", k)):
        if t.device != A.device:
            raise ValueError(f"{name} is on {t.device} but A is on {A.device}")
    if int(M) < 1:
        raise ValueError(f"M must be >= 1, got {M}")


def check_out(out, shape, dtype, device, name="out"):
    """An ``out=`` buffer the kernel writes in place: a tensor of exactly ``shape``, ``dtype`` and
    ``device``, and contiguous (the kernel indexes it densely; a strided view would be overwritten in the
    wrong places). Raises ``TypeError`` / ``ValueError`` with what was expected."""
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(out).__name__}")
    if out.dtype != dtype:
        raise TypeError(f"{name} has dtype {out.dtype}, expected {dtype} (the dtype of the inputs)")
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(out.shape)}, expected {tuple(shape)}")
    if out.device != device:
        raise ValueError(f"{name} is on {out.device}, expected {device} (the device of the inputs)")
    if not out.is_contiguous():
        raise ValueError(f"{name} must be contiguous (the kernel writes it densely, in place), got strides "
                         f"{tuple(out.stride())}")


def forward_launch(A, cb, k, M, out=None):
    """``(kernel, grid, args, meta, S)`` of the forward: the one place its arguments are formed, shared
    by :func:`sample_forward` and the ahead-of-time compile check (:mod:`gpu.aot`)."""
    check_inputs(A, cb, k, M)
    C, N2 = cb.shape
    if out is not None:
        check_out(out, (C, M), A.dtype, A.device)
    A_r = torch.view_as_real(A.contiguous()).contiguous()                    # (C, N2, 3, 2)
    cb_r = torch.view_as_real(cb.contiguous()).contiguous()                  # (C, N2, 2)
    S = torch.view_as_real(out) if out is not None else torch.empty(C, M, 2, dtype=A_r.dtype, device=A.device)
    T = unit_roots(M, A_r.dtype, A.device)                                   # (M, 2)
    args = (A_r, cb_r, k.contiguous(), T, S, N2, M)
    return _fwd_kernel, (C, triton.cdiv(M, BLOCK_M)), args, dict(BLOCK_M=BLOCK_M, DT=_dt(A_r), **OPTIONS), S


def backward_launch(A, cb, k, M, G):
    """``(kernel, grid, args, meta, (gA, gcb))`` of the backward (see :func:`forward_launch`)."""
    check_inputs(A, cb, k, M)
    C, N2 = cb.shape
    if tuple(G.shape) != (C, M) or G.device != A.device:
        raise ValueError(f"G must have shape ({C}, {M}) on {A.device}, got {tuple(G.shape)} on {G.device}")
    A_r = torch.view_as_real(A.contiguous()).contiguous()                    # (C, N2, 3, 2)
    cb_r = torch.view_as_real(cb.contiguous()).contiguous()                  # (C, N2, 2)
    G_r = torch.view_as_real(G.to(A.dtype).contiguous()).contiguous()        # (C, M, 2)
    gA = torch.empty_like(A_r)
    gcb = torch.empty_like(cb_r)
    block_n = min(BWD_BLOCK_N, triton.next_power_of_2(N2))
    T = unit_roots(M, A_r.dtype, A.device)                                   # (M, 2)
    args = (A_r, cb_r, k.contiguous(), T, G_r, gA, gcb, N2, M)
    meta = dict(BLOCK_N=block_n, BLOCK_M=BWD_BLOCK_M, DT=_dt(A_r), num_warps=BWD_WARPS, **OPTIONS)
    return _bwd_kernel, (C, triton.cdiv(N2, block_n)), args, meta, (gA, gcb)


def sample_forward(A, cb, k, M, out=None):
    """Triton forward: ``A`` complex ``(C, N2, 3)``, ``cb`` ``(C, N2)``, ``k`` int ``(C,)`` -> ``(C, M)``
    (written into ``out`` when given, e.g. a poisoned buffer in the checks: contiguous, ``A``'s dtype
    and device, else ``ValueError``/``TypeError``)."""
    kernel, grid, args, meta, S = forward_launch(A, cb, k, M, out)
    with device_guard(A):
        kernel[grid](*args, **meta)
    return torch.view_as_complex(S)


def sample_backward(A, cb, k, M, G):
    """Triton backward: gradients ``(grad_A, grad_cb)`` for upstream ``G`` ``(C, M)`` (torch convention)."""
    kernel, grid, args, meta, (gA, gcb) = backward_launch(A, cb, k, M, G)
    with device_guard(A):
        kernel[grid](*args, **meta)
    return torch.view_as_complex(gA), torch.view_as_complex(gcb)
