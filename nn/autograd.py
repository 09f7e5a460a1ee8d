"""Autograd Functions around the fused kernels: the layers' training paths (docs/theory.md §5).

:mod:`ddesys` owns the formulas (array API, NumPy / CuPy); here they get their torch gradients.
:func:`kernel_sampler` returns what :func:`ddesys.transfer.synthesize_kernel` calls as ``sample=``,
and :func:`vandermonde` the S4D kernel, for the path :func:`ddesys.backend.choose` picks:

* ``numba`` (CPU tensors): the fused Numba sampling and a SciPy FFT in one node, analytic backward;
* ``triton`` (CUDA tensors): the Triton forward and backward kernels of ``gpu/``;
* ``reference``: the array-API definition blockwise, with a backward that recomputes each block
  instead of storing ``(C, N2, M)`` intermediates.

Gradient conventions: for ``S = sum_n cb_n inv_n``, ``inv = 1 / den``, ``dS/dcb_n = inv_n`` and
``dS/dA_nj = cb_n inv_n^2 Z_j``; torch's complex convention gives ``grad_x = sum_m grad_S_m
conj(dS_m/dx)``. Through the FFT, the gradient of ``S`` for an upstream ``G`` on ``2 Re(IFFT_M S)[:L]``
is ``(2/M) FFT_M(G)``.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.fft as sfft
import torch

from ddesys.cpu import chunk_scan, fused
from ddesys.cpu.ring import new_ring
from ddesys.backend import NUMBA, TRITON, choose
from ddesys.cpu.threads import thread_budget
from ddesys.transfer import CHUNK_ELEMENTS, contour_points, sample_transfer, vandermonde_kernel

__all__ = ["kernel_sampler", "vandermonde", "ChunkScan", "chunk_scan_available", "scan_chunk"]


# The NumPy/Numba work of the CPU path runs inside torch custom ops: opaque to torch.compile (Dynamo
# must not trace into the Numba dispatcher, which compiles on a kernel's first call and whose bytecode
# Dynamo cannot rewrite), with fake (meta) implementations giving the output shapes. Registering them
# imports neither torch._dynamo nor Triton.
def _real(dtype):
    return torch.float64 if dtype == torch.complex128 else torch.float32


@torch.library.custom_op("ddesys::fused_kernel_fwd", mutates_args=())
def _fused_fwd(A: torch.Tensor, cb: torch.Tensor, k: torch.Tensor, M: int, L: int) -> torch.Tensor:
    S = fused.sample_forward(A.detach().numpy(), cb.detach().numpy(), k.numpy(), M)   # (C, M)
    # 2 Re(IFFT_M S) = IFFT_M of S + conj(S_{-m}), Hermitian: one real inverse FFT of half the spectrum
    n = M // 2 + 1
    Hs = S[..., :n].copy()                                                             # (C, M/2 + 1)
    Hs[..., 0] += np.conj(S[..., 0])
    Hs[..., 1:] += np.conj(S[..., M - 1:M - n:-1])                                     # S_{M-m}, m = 1 .. n-1
    K = sfft.irfft(Hs, n=M, axis=-1, workers=thread_budget())[..., :L]                 # (C, L)
    return torch.from_numpy(np.ascontiguousarray(K))


@_fused_fwd.register_fake
def _(A, cb, k, M, L):
    return A.new_empty(A.shape[:-2] + (L,), dtype=_real(A.dtype))


@torch.library.custom_op("ddesys::fused_kernel_bwd", mutates_args=())
def _fused_bwd(A: torch.Tensor, cb: torch.Tensor, k: torch.Tensor, M: int,
               G: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    R = sfft.rfft(G.detach().numpy(), n=M, axis=-1, workers=thread_budget())          # (C, M/2 + 1): G is real
    V = np.empty(R.shape[:-1] + (M,), R.dtype)                                         # (C, M) = FFT_M G, Hermitian
    V[..., :R.shape[-1]] = R
    V[..., R.shape[-1]:] = np.conj(R[..., 1:M - R.shape[-1] + 1][..., ::-1])
    V *= 2.0 / M
    gA, gcb = fused.sample_backward(A.numpy(), cb.numpy(), k.numpy(), M, V)
    return torch.from_numpy(gA), torch.from_numpy(gcb)


@_fused_bwd.register_fake
def _(A, cb, k, M, G):
    return torch.empty_like(A), torch.empty_like(cb)


@torch.library.custom_op("ddesys::vandermonde_fwd", mutates_args=())
def _vander_fwd(lam: torch.Tensor, cb: torch.Tensor, L: int) -> torch.Tensor:
    return torch.from_numpy(fused.vandermonde_forward(lam.detach().numpy(), cb.detach().numpy(), L))


@_vander_fwd.register_fake
def _(lam, cb, L):
    return lam.new_empty(lam.shape[:-1] + (L,), dtype=_real(lam.dtype))


@torch.library.custom_op("ddesys::vandermonde_bwd", mutates_args=())
def _vander_bwd(lam: torch.Tensor, cb: torch.Tensor, G: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    gl, gc = fused.vandermonde_backward(lam.numpy(), cb.numpy(), G.contiguous().numpy())
    return torch.from_numpy(gl), torch.from_numpy(gc)


@_vander_bwd.register_fake
def _(lam, cb, G):
    return torch.empty_like(lam), torch.empty_like(cb)


class FusedKernel(torch.autograd.Function):
    """CPU: ``(A, cb, k, M, L) -> 2 Re(IFFT_M S)[:L]``, fused Numba sampling + SciPy FFT, one node."""

    @staticmethod
    def forward(ctx, A, cb, k, M, L):
        ctx.save_for_backward(A, cb, k)
        ctx.M = M
        return _fused_fwd(A.detach(), cb.detach(), k, M, L)                 # (C, L)

    @staticmethod
    def backward(ctx, G):
        A, cb, k = ctx.saved_tensors
        gA, gcb = _fused_bwd(A, cb, k, ctx.M, G.detach().contiguous())
        return gA, gcb, None, None, None


class TritonSample(torch.autograd.Function):
    """CUDA: ``S`` ``(..., M)`` from the Triton forward kernel, gradients from the backward kernel."""

    @staticmethod
    def forward(ctx, A, cb, k, M):
        from ddesys.gpu import transfer as gt
        ctx.save_for_backward(A, cb, k)
        ctx.M = M
        n2 = A.shape[-2]
        S = gt.sample_forward(A.reshape(-1, n2, 3), cb.reshape(-1, n2), k.reshape(-1), M)   # (C, M)
        return S.reshape(A.shape[:-2] + (M,))

    @staticmethod
    def backward(ctx, G):
        from ddesys.gpu import transfer as gt
        A, cb, k = ctx.saved_tensors
        n2 = A.shape[-2]
        gA, gcb = gt.sample_backward(A.reshape(-1, n2, 3), cb.reshape(-1, n2), k.reshape(-1), ctx.M,
                                     G.reshape(-1, ctx.M))
        return gA.reshape(A.shape), gcb.reshape(cb.shape), None, None


class ReferenceSample(torch.autograd.Function):
    """Any device: :func:`ddesys.transfer.sample_transfer`'s reference path, blockwise backward."""

    @staticmethod
    def forward(ctx, A, cb, k, M):
        ctx.save_for_backward(A, cb, k)
        ctx.M = M
        with torch.no_grad():
            return sample_transfer(A, cb, k, M, backend="reference")          # (..., M)

    @staticmethod
    def backward(ctx, G):
        A, cb, k = ctx.saved_tensors
        Z = contour_points(k, ctx.M, A.dtype)                                 # (..., 3, M)
        batch = A.shape[:-2]
        n2, M = A.shape[-2], Z.shape[-1]
        B = math.prod(batch)
        A_, cb_, Z_, G_ = (v.reshape((B,) + v.shape[len(batch):]) for v in (A, cb, Z, G))
        gA, gcb = torch.empty_like(A_), torch.empty_like(cb_)
        step = max(1, CHUNK_ELEMENTS // max(1, n2 * M))
        for s in range(0, B, step):
            sl = slice(s, s + step)
            inv = 1 / (1 - A_[sl] @ Z_[sl])                                   # (b, N2, M) = 1 / Q
            g = G_[sl][..., None]                                             # (b, M, 1)
            gcb[sl] = (inv.conj() @ g)[..., 0]                                # (b, N2)
            W = inv.mul_(inv).mul_(cb_[sl][..., None]).conj()                 # (b, N2, M) conj(cb inv^2)
            gA[sl] = W @ (g * Z_[sl].conj().transpose(-1, -2))               # (b, N2, 3)
        return gA.reshape(A.shape), gcb.reshape(cb.shape), None, None


def _via(sample_fn):
    def sample(A, cb, k, M, L):
        return 2 * torch.fft.ifft(sample_fn(A, cb, k, M), dim=-1)[..., :L].real   # (..., L)
    return sample


def kernel_sampler(x):
    """The ``sample=`` callable of :func:`ddesys.transfer.synthesize_kernel` for tensors like ``x``."""
    path = choose(x)
    if path == NUMBA:
        return FusedKernel.apply
    if path == TRITON:
        return _via(TritonSample.apply)
    return _via(ReferenceSample.apply)


class Vandermonde(torch.autograd.Function):
    """CPU: ``K_t = 2 Re sum_n cb_n lam_n^t`` by the fused Numba loop and its own backward."""

    @staticmethod
    def forward(ctx, lam, cb, L):
        ctx.save_for_backward(lam, cb)
        return _vander_fwd(lam.detach(), cb.detach(), L)

    @staticmethod
    def backward(ctx, G):
        lam, cb = ctx.saved_tensors
        gl, gc = _vander_bwd(lam, cb, G.detach().contiguous())
        return gl, gc, None


def vandermonde(lam, cb, L):
    """The S4D kernel ``(..., L)`` of :func:`ddesys.transfer.vandermonde_kernel`, differentiable: the
    fused loop on the CPU, the reference product (torch autograd) elsewhere."""
    if choose(lam) == NUMBA:
        return Vandermonde.apply(lam, cb, L)
    return vandermonde_kernel(lam, cb, L)


class ChunkScan(torch.autograd.Function):
    """:func:`ddesys.cpu.chunk_scan.scan_forward` with its adjoint as the backward (CPU tensors): a chunk's
    outputs ``(B, H, L)`` after the history in a decode ring ``(B, R, H, N2)`` at position ``t0`` and, with
    ``carry``, the ring after it (a new channel-major ring, :func:`ddesys.cpu.step.new_ring`),
    differentiable in ``x``, the ring and the coefficients ``(H, N2)``."""

    @staticmethod
    def forward(ctx, x, ring, t0, lam, m1, m2, bbar, c, k, carry, delayed):
        arrs = _host_arrays(x, ring, lam, m1, m2, bbar, c, k)
        new = new_ring(tuple(ring.shape), arrs[1].dtype, zero=False) if carry else None   # every slot written
        y = chunk_scan.scan_forward(arrs[0], arrs[1], t0, *arrs[2:], new=new, delayed=delayed)
        ctx.save_for_backward(x, ring, lam, m1, m2, bbar, c, k)
        ctx.t0, ctx.delayed = t0, delayed
        return torch.from_numpy(y), (torch.from_numpy(new) if carry else ring.new_zeros(0))

    @staticmethod
    def backward(ctx, gy, gnew):
        x, ring, lam, m1, m2, bbar, c, k = ctx.saved_tensors
        arrs = _host_arrays(x, ring, lam, m1, m2, bbar, c, k)
        gy = torch.zeros_like(x) if gy is None else gy
        gn = None if gnew is None or gnew.numel() == 0 else gnew.detach().to(ring.dtype).contiguous().numpy()
        grads = chunk_scan.scan_backward(arrs[0], arrs[1], ctx.t0, *arrs[2:],
                                         gy.detach().to(x.dtype).contiguous().numpy(), gn, ctx.delayed,
                                         ring_grad=ctx.needs_input_grad[1])
        gx, gring, glam, gm1, gm2, gbbar, gc = (None if g is None else torch.from_numpy(g) for g in grads)
        return gx, gring, None, glam, gm1, gm2, gbbar, gc, None, None, None


def _host_arrays(x, ring, lam, m1, m2, bbar, c, k):
    """NumPy views for the scan: the ring in its own strides, the rest contiguous, ``k`` int64."""
    rest = [t.detach().contiguous().numpy() for t in (x, lam, m1, m2, bbar, c)]
    return [rest[0], ring.detach().numpy(), *rest[1:], k.detach().to(torch.int64).contiguous().numpy()]


def chunk_scan_available(x):
    """Whether :func:`scan_chunk` runs for tensors like ``x`` (CPU tensors, Numba present)."""
    return x.device.type == "cpu" and chunk_scan.available()


def scan_chunk(x, ring, t0, lam, m1, m2, bbar, c, k, carry, delayed=True):
    """A chunk continued from the history in a decode ring, by the compiled scan (:class:`ChunkScan`):
    ``(y, new)``, ``y`` ``(B, H, L)`` real (``x``'s dtype, no feedthrough), ``new`` the ring
    ``(B, R, H, N2)`` after the chunk (with ``carry``; else an empty tensor). ``x`` real ``(B, H, L)``;
    ``ring`` complex ``(B, R, H, N2)`` at position ``t0`` (slots of times before 0 are read as zero);
    ``lam, m1, m2, bbar, c`` complex ``(H, N2)`` of the ring's dtype; ``k`` ``(H,)`` integer delays
    (``m1``, ``m2``, ``k``: None and ``delayed=False`` for S4D, whose ring has one slot)."""
    if not delayed:
        m1 = m2 = torch.zeros_like(lam)
        k = torch.ones(lam.shape[0], dtype=torch.int64)
    return ChunkScan.apply(x, ring, int(t0), lam, m1, m2, bbar, c, k, bool(carry), bool(delayed))
