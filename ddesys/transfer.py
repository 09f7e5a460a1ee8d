"""Exact Z-domain transfer function and contour-shifted kernel synthesis (docs/theory.md §4-§5).

The two functions here are the only implementation of these formulas in the project: the analysis
class :class:`ddesys.DiscreteDelaySystem` and the PyTorch layers in :mod:`nn` both call them. They are
written against the array API (``array-api-compat``), so they run on NumPy, CuPy and torch arrays, and
torch autograd flows through every parameter, the fractional delay ``alpha`` included.
"""
from __future__ import annotations

import math

import numpy as np

from . import fused
from ._array import force_reference, get_namespace, is_cupy, is_numpy, is_torch
from .threads import thread_budget


def transfer_function(lam, mu, bbar, c, k, alpha, d, z):
    """Exact ``K(z)`` of the discrete delayed system at complex points ``z`` (docs/theory.md §4).

    ``G_n(z) = bbar_n / (1 - lam_n z^-1 - mu_n (1-alpha) z^-k - mu_n alpha z^-(k+1))`` and
    ``K(z) = sum_n [c_n G_n(z) + conj(c_n) conj(G_n(conj z))] + d``.

    Args:
        lam, mu, bbar, c: complex ``(..., N2)``.
        k: integer ``(...)``; alpha, d: real ``(...)``.
        z: complex ``(F,)`` (any 1-D set of points, none at 0).
    Returns:
        complex ``(..., F)``.
    """
    xp = get_namespace(lam, z)
    z = z[None, :]                                                  # (1, F)
    kf = xp.astype(k, alpha.dtype)[..., None, None]                 # (..., 1, 1)
    al = alpha[..., None, None]                                     # (..., 1, 1)

    def half(zz):                                                   # sum_n c_n G_n(zz) -> (..., F)
        zi = 1 / zz                                                 # (1, F)
        zk = xp.exp(-kf * xp.log(zz))                               # (..., 1, F)  z^{-k}
        den = (1 - lam[..., None] * zi
               - mu[..., None] * ((1 - al) * zk + al * zk * zi))    # (..., N2, F)
        return xp.sum((c * bbar)[..., None] / den, axis=-2)         # (..., F)

    return half(z) + xp.conj(half(xp.conj(z))) + xp.astype(d, z.dtype)[..., None]


def contour_points(k, M, cdtype):
    """``Z = (w^-m, w^-mk, w^-m(k+1))`` for ``m = 0 .. M-1``: complex ``(..., 3, M)`` for integer ``k``
    ``(...)``, each power from the integer ``(m k) mod M``. Built on ``k``'s device (no host copy)."""
    xp = get_namespace(k)
    m = xp.arange(M, dtype=xp.int64, device=_device(xp, k))        # (M,)
    kk = k[..., None]                                               # (..., 1)
    zk = _unit_roots(xp, (m * kk) % M, M, cdtype)                   # (..., M)   w^{-mk}
    zk1 = _unit_roots(xp, (m * (kk + 1)) % M, M, cdtype)            # (..., M)   w^{-m(k+1)}
    z1 = _unit_roots(xp, m, M, cdtype)                              # (M,)       w^{-m}
    return xp.stack([xp.broadcast_to(z1, zk.shape), zk, zk1], axis=-2)


def _device(xp, x):
    """The device to build new arrays on for data ``x``: ``None`` for NumPy (its only device)."""
    return None if is_numpy(xp) else x.device


def _unit_roots(xp, idx, M, cdtype):
    """``w^{-j} = exp(-2 pi i j / M)`` for integer ``j`` (any shape), from the integer, not a power; on
    ``idx``'s device."""
    ang = xp.astype(idx, xp.float64) * (-2.0 * math.pi / M)
    re, im = xp.cos(ang), xp.sin(ang)
    return xp.astype(re, cdtype) + 1j * xp.astype(im, cdtype)


def synthesize_kernel(lam, mu, cb, k, alpha, L, M, rho, per_mode=False):
    """Length-``L`` real kernel by the contour-shifted inverse FFT (docs/theory.md §5).

    Samples ``S_m = sum_n cb_n / den_{n,m}`` on the circle ``|z| = 1/rho`` at ``M`` points, inverts with
    one FFT per channel and restores with ``rho^{-t}``::

        den_{n,m} = 1 - (rho lam_n) w^-m - (rho^k (1-alpha) mu_n) w^-mk - (rho^(k+1) alpha mu_n) w^-m(k+1)
        K_t       = rho^-t 2 Re(IFFT_M[S]_t),   t = 0 .. L-1

    ``w^-mk`` comes from the integer ``(m k) mod M``. Work ``O(M N2)`` per channel; the sampled
    transfer function is formed by :func:`sample_transfer`, a few channels at a time.

    Args:
        lam, mu, cb: complex ``(..., N2)``, ``cb = c * bbar``; their dtype is the working precision.
        k: integer ``(...)``; alpha: real ``(...)``; rho: real ``(...)`` in ``(0, 1]``.
        L: kernel length; M: FFT length (``>= L``; ``>= 2L`` for linear convolution).
        per_mode: return the complex per-mode responses ``cb_n g_{n,t}`` ``(..., N2, L)`` instead of the
            real kernel (pass ``cb = bbar`` for the state kernels used by prefill). Memory ``O(N2 M)``.
    Returns:
        real ``(..., L)`` in the real dtype of ``lam`` (complex ``(..., N2, L)`` with ``per_mode``).
    """
    xp = get_namespace(lam, mu, cb)
    cdtype = lam.dtype
    rdtype = xp.float32 if cdtype == xp.complex64 else xp.float64
    rho = xp.astype(rho, rdtype)
    logr = xp.log(rho)[..., None]                                   # (..., 1)
    rk = xp.exp(xp.astype(k, rdtype)[..., None] * logr)             # (..., 1)   rho^k
    al = xp.astype(alpha, rdtype)[..., None]                        # (..., 1)
    a1 = lam * xp.astype(rho[..., None], cdtype)                    # (..., N2)
    a2 = mu * xp.astype(rk * (1 - al), cdtype)                      # (..., N2)
    a3 = mu * xp.astype(rk * xp.exp(logr) * al, cdtype)             # (..., N2)

    A = xp.stack([a1, a2, a3], axis=-1)                             # (..., N2, 3)
    if per_mode:
        den = 1 - A @ contour_points(k, M, cdtype)                  # (..., N2, M)
        S = cb[..., None] / den                                     # (..., N2, M)
    elif is_torch(xp) and _use_fused(lam) and _gpu_module(lam) is None:   # CPU torch: one fused Function
        K2 = _torch_fused_kernel()(A, cb, k, M, L)                  # (..., L) = 2 Re(IFFT S)[:L]
    else:
        S = sample_transfer(A, cb, k, M)                            # (..., M)
        K2 = 2 * xp.real(xp.fft.ifft(S, axis=-1)[..., :L])          # (..., L)
    t = xp.arange(L, dtype=rdtype, device=_device(xp, lam))         # (L,) on the data's device
    restore = xp.exp(-t * logr)                                     # (..., L)   rho^{-t}
    if per_mode:
        G = xp.fft.ifft(S, axis=-1)[..., :L]                        # (..., N2, L)
        return G * xp.astype(restore[..., None, :], cdtype)         # (..., N2, L)
    return K2 * restore                                             # (..., L)


CHUNK_ELEMENTS = 2**22      # complex elements of one (channels, N2, M) block in sample_transfer


def _sample_block(A, cb, Z):
    """``S = sum_n cb_n / (1 - (A Z)_n)`` for one block: ``A`` ``(b, N2, 3)``, ``cb`` ``(b, N2)``,
    ``Z`` ``(b, 3, M)`` -> ``(b, M)``. The single definition of the sampled transfer function."""
    inv = 1 / (1 - A @ Z)                                           # (b, N2, M)
    return (cb[..., None, :] @ inv)[..., 0, :]                      # (b, M)


def sample_transfer(A, cb, k, M):
    """Sampled contour-shifted transfer function ``S_m = sum_n cb_n / den_{n,m}`` (docs/theory.md §5).

    ``den_{n,m} = 1 - A_n1 Z_1m - A_n2 Z_2m - A_n3 Z_3m`` with ``A = (rho lam, rho^k (1-alpha) mu,
    rho^(k+1) alpha mu)`` and ``Z = (w^-m, w^-mk, w^-m(k+1))`` (:func:`contour_points`): a rank-3
    product, formed by ``matmul``, ``CHUNK_ELEMENTS`` at a time so memory stays ``O(batch M)`` plus one
    block.

    Paths: NumPy arrays and CPU torch tensors use the fused Numba loops of :mod:`ddesys.fused`; CUDA
    tensors and CuPy arrays the fused Triton kernels of ``gpu/`` when Triton is installed; anything else
    the blockwise reference below. ``DDESYS_REFERENCE=1`` forces the reference everywhere. On torch this
    runs as an autograd Function whose backward recomputes each block instead of storing
    ``(..., N2, M)`` intermediates.

    Args: ``A`` complex ``(..., N2, 3)``, ``cb`` complex ``(..., N2)``, ``k`` integer ``(...)``, ``M``.
    Returns: complex ``(..., M)``.
    """
    xp = get_namespace(A, cb, k)
    if is_torch(xp):
        return _torch_sample_transfer()(A, cb, k, M)
    if is_numpy(xp) and fused.AVAILABLE and not force_reference():
        return fused.sample_forward(A, cb, k, M)
    if is_cupy(xp) and not force_reference():
        S = _cupy_via_gpu(A, cb, k, M)
        if S is not None:
            return S
    return _sample_blocks(xp, A, cb, contour_points(k, M, A.dtype))


def _gpu_module(t):
    """``gpu.transfer`` when the fused Triton kernels apply to torch tensor ``t``, else None."""
    try:
        import gpu
    except ImportError:
        return None
    if not gpu.enabled(t):
        return None
    from gpu import transfer as gt
    return gt


def _cupy_via_gpu(A, cb, k, M):
    """CuPy arrays through the same Triton kernel, zero-copy by DLPack (needs torch with CUDA). ``None``
    (the caller takes the reference path) whenever the fused path is not usable: no torch, Triton or
    CUDA-enabled torch, the reference forced, or a DLPack exchange torch refuses (checked in that order,
    so a CPU-only torch never sees the CuPy arrays)."""
    try:
        import cupy
        import gpu
        import torch
    except ImportError:
        return None
    if not gpu.cuda_usable():
        return None
    try:
        At, cbt, kt = (torch.from_dlpack(v) for v in (A, cb, k))
    except (RuntimeError, TypeError, ValueError, BufferError):   # e.g. memory this torch cannot address
        return None
    gt = _gpu_module(At)
    if gt is None:
        return None
    batch = A.shape[:-2]
    S = gt.sample_forward(At.reshape(-1, A.shape[-2], 3), cbt.reshape(-1, A.shape[-2]), kt.reshape(-1), M)
    return cupy.from_dlpack(S).reshape(batch + (M,))


def _sample_blocks(xp, A, cb, Z):
    batch = A.shape[:-2]
    n2, M = A.shape[-2], Z.shape[-1]
    B = math.prod(batch)
    A, cb, Z = (xp.reshape(v, (B,) + v.shape[len(batch):]) for v in (A, cb, Z))
    step = max(1, CHUNK_ELEMENTS // max(1, n2 * M))
    out = [_sample_block(A[s:s + step], cb[s:s + step], Z[s:s + step]) for s in range(0, B, step)]
    S = out[0] if len(out) == 1 else xp.concat(out, axis=0)
    return xp.reshape(S, batch + (M,))


_FN = None


def _use_fused(t):
    return fused.AVAILABLE and not force_reference() and t.device.type == "cpu"


def _torch_sample_transfer():
    """Build (once) the torch autograd Function; torch is imported only here, on first torch use."""
    global _FN
    if _FN is not None:
        return _FN
    import torch

    class _SampleTransfer(torch.autograd.Function):
        """Forward: :func:`_sample_block` blockwise. Backward, for ``S = sum_n cb_n inv_n``,
        ``inv = 1/den``: ``dS/dcb_n = inv_n`` and ``dS/dA_nj = cb_n inv_n^2 Z_j``; torch's complex
        convention gives ``grad_x = sum_m grad_S_m conj(dS_m/dx)``, i.e. two batched matmuls."""

        @staticmethod
        def forward(ctx, A, cb, k, M):
            ctx.save_for_backward(A, cb, k)
            ctx.M = M
            with torch.no_grad():
                gt = _gpu_module(A)
                if gt is not None:
                    n2 = A.shape[-2]
                    S = gt.sample_forward(A.reshape(-1, n2, 3), cb.reshape(-1, n2), k.reshape(-1), M)
                    return S.reshape(A.shape[:-2] + (M,))
                if _use_fused(A):
                    return torch.from_numpy(fused.sample_forward(A.numpy(), cb.numpy(), k.numpy(), M))
                return _sample_blocks(get_namespace(A), A, cb, contour_points(k, M, A.dtype))

        @staticmethod
        def backward(ctx, G):
            A, cb, k = ctx.saved_tensors
            gt = _gpu_module(A)
            if gt is not None:
                n2 = A.shape[-2]
                gA, gcb = gt.sample_backward(A.reshape(-1, n2, 3), cb.reshape(-1, n2), k.reshape(-1), ctx.M,
                                             G.reshape(-1, ctx.M))
                return gA.reshape(A.shape), gcb.reshape(cb.shape), None, None
            if _use_fused(A):
                gA, gcb = fused.sample_backward(A.numpy(), cb.numpy(), k.numpy(), ctx.M, G.contiguous().numpy())
                return torch.from_numpy(gA), torch.from_numpy(gcb), None, None
            Z = contour_points(k, ctx.M, A.dtype)
            batch = A.shape[:-2]
            n2, M = A.shape[-2], Z.shape[-1]
            B = math.prod(batch)
            A_, cb_, Z_, G_ = (v.reshape((B,) + v.shape[len(batch):]) for v in (A, cb, Z, G))
            gA = torch.empty_like(A_)
            gcb = torch.empty_like(cb_)
            step = max(1, CHUNK_ELEMENTS // max(1, n2 * M))
            for s in range(0, B, step):
                sl = slice(s, s + step)
                inv = 1 / (1 - A_[sl] @ Z_[sl])                         # (b, N2, M)
                g = G_[sl][..., None]                                    # (b, M, 1)
                gcb[sl] = (inv.conj() @ g)[..., 0]                       # (b, N2)
                W = inv.mul_(inv).mul_(cb_[sl][..., None]).conj()        # (b, N2, M) conj(cb inv^2)
                gA[sl] = W @ (g * Z_[sl].conj().transpose(-1, -2))      # (b, N2, 3)
            return gA.reshape(A.shape), gcb.reshape(cb.shape), None, None

    _FN = _SampleTransfer.apply
    return _FN


def vandermonde_kernel(lam, cb, L, per_mode=False):
    """Kernel of a diagonal SSM without delay, ``K_t = 2 Re sum_n cb_n lam_n^t`` (``mu = 0``).

    The S4D kernel (Vandermonde product). NumPy arrays and CPU torch tensors use a fused Numba loop
    (:mod:`ddesys.fused`, with its own backward on torch); other arrays the reference
    ``exp(t log lam)`` product, ``O(N2 L)`` memory per channel.

    Args: ``lam``, ``cb`` complex ``(..., N2)`` (``|lam| > 0``); ``per_mode``: return the complex
    per-mode responses ``cb_n lam_n^t`` ``(..., N2, L)`` instead (state kernels, reference path).
    Returns: real ``(..., L)``, or complex ``(..., N2, L)`` with ``per_mode``.
    """
    xp = get_namespace(lam, cb)
    if not per_mode and is_torch(xp) and _use_fused(lam):
        return _torch_vandermonde()(lam, cb, L)
    if not per_mode and is_numpy(xp) and fused.AVAILABLE and not force_reference():
        return fused.vandermonde_forward(lam, cb, L)
    rdt = xp.float32 if lam.dtype == xp.complex64 else xp.float64
    t = xp.arange(L, dtype=rdt, device=_device(xp, lam))            # (L,) on the data's device
    ll = xp.log(lam)[..., None]                                     # (..., N2, 1)
    # exp(t log lam) as polar(exp(t Re), t Im): several times faster than complex exp on torch
    mag = xp.exp(t * xp.real(ll))                                   # (..., N2, L)
    ph = t * xp.imag(ll)
    V = xp.astype(mag * xp.cos(ph), lam.dtype) + 1j * xp.astype(mag * xp.sin(ph), lam.dtype)
    if per_mode:
        return cb[..., None] * V                                    # (..., N2, L)
    return 2 * xp.real(xp.sum(cb[..., None] * V, axis=-2))          # (..., L)


_VF = None


def _torch_vandermonde():
    global _VF
    if _VF is not None:
        return _VF
    import torch

    class _Vandermonde(torch.autograd.Function):
        @staticmethod
        def forward(ctx, lam, cb, L):
            ctx.save_for_backward(lam, cb)
            return torch.from_numpy(fused.vandermonde_forward(lam.detach().numpy(), cb.detach().numpy(), L))

        @staticmethod
        def backward(ctx, G):
            lam, cb = ctx.saved_tensors
            gl, gc = fused.vandermonde_backward(lam.numpy(), cb.numpy(), G.contiguous().numpy())
            return torch.from_numpy(gl), torch.from_numpy(gc), None

    _VF = _Vandermonde.apply
    return _VF


_KF = None


def _torch_fused_kernel():
    """Torch Function ``(A, cb, k, M, L) -> 2 Re(IFFT_M S)[:L]`` on the CPU: the fused Numba sampling and a
    SciPy FFT in one node, no ``(..., M)`` autograd intermediates. Backward: with ``G`` the gradient of
    the output, the gradient of ``S`` is ``V = (2/M) FFT_M(G)`` (``dL = Re sum_m conj(V_m) dS_m``), then
    the fused sampling backward."""
    global _KF
    if _KF is not None:
        return _KF
    import scipy.fft as sfft
    import torch

    class _FusedKernel(torch.autograd.Function):
        @staticmethod
        def forward(ctx, A, cb, k, M, L):
            ctx.save_for_backward(A, cb, k)
            ctx.M = M
            S = fused.sample_forward(A.detach().numpy(), cb.detach().numpy(), k.numpy(), M)
            K = 2 * sfft.ifft(S, axis=-1, workers=thread_budget())[..., :L].real
            return torch.from_numpy(np.ascontiguousarray(K))

        @staticmethod
        def backward(ctx, G):
            A, cb, k = ctx.saved_tensors
            M = ctx.M
            V = (2.0 / M) * sfft.fft(G.detach().numpy(), n=M, axis=-1, workers=thread_budget())
            gA, gcb = fused.sample_backward(A.numpy(), cb.numpy(), k.numpy(), M, V)
            return torch.from_numpy(gA), torch.from_numpy(gcb), None, None, None

    _KF = _FusedKernel.apply
    return _KF
