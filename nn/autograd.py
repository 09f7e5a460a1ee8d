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

from ddesys import fused
from ddesys.backend import NUMBA, TRITON, choose
from ddesys.threads import thread_budget
from ddesys.transfer import CHUNK_ELEMENTS, contour_points, sample_transfer, vandermonde_kernel

__all__ = ["kernel_sampler", "vandermonde"]


class FusedKernel(torch.autograd.Function):
    """CPU: ``(A, cb, k, M, L) -> 2 Re(IFFT_M S)[:L]``, fused Numba sampling + SciPy FFT, one node."""

    @staticmethod
    def forward(ctx, A, cb, k, M, L):
        ctx.save_for_backward(A, cb, k)
        ctx.M = M
        S = fused.sample_forward(A.detach().numpy(), cb.detach().numpy(), k.numpy(), M)   # (C, M)
        K = 2 * sfft.ifft(S, axis=-1, workers=thread_budget())[..., :L].real              # (C, L)
        return torch.from_numpy(np.ascontiguousarray(K))

    @staticmethod
    def backward(ctx, G):
        A, cb, k = ctx.saved_tensors
        V = (2.0 / ctx.M) * sfft.fft(G.detach().numpy(), n=ctx.M, axis=-1, workers=thread_budget())   # (C, M)
        gA, gcb = fused.sample_backward(A.numpy(), cb.numpy(), k.numpy(), ctx.M, V)
        return torch.from_numpy(gA), torch.from_numpy(gcb), None, None, None


class TritonSample(torch.autograd.Function):
    """CUDA: ``S`` ``(..., M)`` from the Triton forward kernel, gradients from the backward kernel."""

    @staticmethod
    def forward(ctx, A, cb, k, M):
        from gpu import transfer as gt
        ctx.save_for_backward(A, cb, k)
        ctx.M = M
        n2 = A.shape[-2]
        S = gt.sample_forward(A.reshape(-1, n2, 3), cb.reshape(-1, n2), k.reshape(-1), M)   # (C, M)
        return S.reshape(A.shape[:-2] + (M,))

    @staticmethod
    def backward(ctx, G):
        from gpu import transfer as gt
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
        return _fused_kernel
    if path == TRITON:
        return _via(TritonSample.apply)
    return _via(ReferenceSample.apply)


class Vandermonde(torch.autograd.Function):
    """CPU: ``K_t = 2 Re sum_n cb_n lam_n^t`` by the fused Numba loop and its own backward."""

    @staticmethod
    def forward(ctx, lam, cb, L):
        ctx.save_for_backward(lam, cb)
        return torch.from_numpy(fused.vandermonde_forward(lam.detach().numpy(), cb.detach().numpy(), L))

    @staticmethod
    def backward(ctx, G):
        lam, cb = ctx.saved_tensors
        gl, gc = fused.vandermonde_backward(lam.numpy(), cb.numpy(), G.contiguous().numpy())
        return torch.from_numpy(gl), torch.from_numpy(gc), None


def vandermonde(lam, cb, L):
    """The S4D kernel ``(..., L)`` of :func:`ddesys.transfer.vandermonde_kernel`, differentiable: the
    fused loop on the CPU, the reference product (torch autograd) elsewhere."""
    if choose(lam) == NUMBA:
        return _vandermonde(lam, cb, L)
    return vandermonde_kernel(lam, cb, L)


# torch.compile: Dynamo must not trace into the Numba kernels (their dispatcher compiles on first call,
# and Dynamo's bytecode rewrite of it fails); the autograd Functions run as opaque calls in the graph.
_fused_kernel = torch.compiler.disable(FusedKernel.apply)
_vandermonde = torch.compiler.disable(Vandermonde.apply)
