"""Exact Z-domain transfer function and contour-shifted kernel synthesis (docs/theory.md §4-§5).

The formulas' one implementation: the analysis class :class:`ddesys.DiscreteDelaySystem` and the
layers of :mod:`nn` both call these functions. They are written against the array API
(``array-api-compat``) and run on NumPy, CuPy and torch arrays (torch autograd flows through the
reference code). The path is chosen by :func:`ddesys.backend.choose`: fused Numba loops for NumPy, the
Triton kernels of ``gpu/`` for CuPy, the array-API reference otherwise. The torch autograd Functions
around the fused paths live in :mod:`nn.autograd`, which passes them in through ``sample=``.
"""
from __future__ import annotations

import math

from .cpu import fused
from ._array import get_namespace, is_cupy, is_numpy
from .backend import NUMBA, REFERENCE, TRITON, choose
from .charpoly import coefficients, q_eval

__all__ = ["CHUNK_ELEMENTS", "contour_points", "sample_points", "sample_transfer", "sampled_kernel",
           "scaled_coefficients", "synthesize_kernel", "transfer_function", "vandermonde_kernel"]


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

    c1, c2, c3 = coefficients(lam[..., None], mu[..., None], al)    # (..., N2, 1) each

    def half(zz):                                                   # sum_n c_n G_n(zz) -> (..., F)
        zi = 1 / zz                                                 # (1, F)
        zk = xp.exp(-kf * xp.log(zz))                               # (..., 1, F)  z^{-k}
        den = q_eval(c1, c2, c3, zi, zk, zk * zi)                   # (..., N2, F)  Q(zz)
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


def scaled_coefficients(lam, mu, k, alpha, rho):
    """The coefficients of ``Q`` on the circle ``|z| = 1/rho``: ``A = (rho lam, rho^k (1-alpha) mu,
    rho^(k+1) alpha mu)`` complex ``(..., N2, 3)``, so that ``den_{n,m} = q_eval(A_n, Z_m)`` with the
    unit-circle points ``Z`` of :func:`contour_points`. ``rho`` real ``(...)`` in ``(0, 1]``."""
    xp = get_namespace(lam, mu)
    cdtype = lam.dtype
    rdtype = xp.float32 if cdtype == xp.complex64 else xp.float64
    logr = xp.log(xp.astype(rho, rdtype))[..., None]                # (..., 1)
    rk = xp.exp(xp.astype(k, rdtype)[..., None] * logr)             # (..., 1)   rho^k
    c1, c2, c3 = coefficients(lam, mu, xp.astype(alpha, rdtype)[..., None])      # (..., N2) each
    scale = (xp.exp(logr), rk, rk * xp.exp(logr))                   # rho, rho^k, rho^(k+1)
    return xp.stack([c * xp.astype(f, cdtype) for c, f in zip((c1, c2, c3), scale)], axis=-1)


def synthesize_kernel(lam, mu, cb, k, alpha, L, M, rho, per_mode=False, sample=None):
    """Length-``L`` real kernel by the contour-shifted inverse FFT (docs/theory.md §5).

    Samples ``S_m = sum_n cb_n / den_{n,m}`` on the circle ``|z| = 1/rho`` at ``M`` points, inverts with
    one FFT per channel and restores with ``rho^{-t}``::

        den_{n,m} = 1 - (rho lam_n) w^-m - (rho^k (1-alpha) mu_n) w^-mk - (rho^(k+1) alpha mu_n) w^-m(k+1)
        K_t       = rho^-t 2 Re(IFFT_M[S]_t),   t = 0 .. L-1

    ``w^-mk`` comes from the integer ``(m k) mod M``. Work ``O(M N2)`` per channel.

    Parameters
    ----------
    lam, mu, cb : complex ``(..., N2)``, ``cb = c * bbar``; their dtype is the working precision.
    k : integer ``(...)``; alpha : real ``(...)``; rho : real ``(...)`` in ``(0, 1]``.
    L, M : kernel length and FFT length (``M >= L``: the contour, not the length, suppresses aliasing).
    per_mode : return the complex per-mode responses ``cb_n g_{n,t}`` ``(..., N2, L)`` instead of the
        real kernel (pass ``cb = bbar`` for the state kernels used by prefill). Memory ``O(N2 M)``.
    sample : ``(A, cb, k, M, L) -> 2 Re(IFFT_M S)[..., :L]``, default :func:`sampled_kernel`; the layers
        pass their autograd Functions here (:mod:`nn.autograd`).

    Returns
    -------
    real ``(..., L)`` in the real dtype of ``lam`` (complex ``(..., N2, L)`` with ``per_mode``).

    Examples
    --------
    >>> import numpy as np
    >>> lam, mu, cb = np.array([[0.9]], complex), np.array([[0.05]], complex), np.ones((1, 1), complex)
    >>> K = synthesize_kernel(lam, mu, cb, np.array([3]), np.array([0.0]), 8, 16, np.array([0.5]))
    >>> np.round(K, 4)[0, :4]            # 2 Re(0.9^t) before the delayed branch acts
    array([2.   , 1.8  , 1.62 , 1.558])
    """
    xp = get_namespace(lam, mu, cb)
    cdtype = lam.dtype
    rdtype = xp.float32 if cdtype == xp.complex64 else xp.float64
    A = scaled_coefficients(lam, mu, k, alpha, rho)                 # (..., N2, 3)
    logr = xp.log(xp.astype(rho, rdtype))[..., None]                # (..., 1)
    t = xp.arange(L, dtype=rdtype, device=_device(xp, lam))         # (L,) on the data's device
    restore = xp.exp(-t * logr)                                     # (..., L)   rho^{-t}
    if per_mode:
        S = cb[..., None] / _den(A, contour_points(k, M, cdtype))    # (..., N2, M)
        G = xp.fft.ifft(S, axis=-1)[..., :L]                        # (..., N2, L)
        return G * xp.astype(restore[..., None, :], cdtype)         # (..., N2, L)
    K2 = (sample or sampled_kernel)(A, cb, k, M, L)                 # (..., L) = 2 Re(IFFT S)[:L]
    return K2 * restore                                             # (..., L)


def sampled_kernel(A, cb, k, M, L):
    """``2 Re(IFFT_M S)[..., :L]`` with ``S`` from :func:`sample_transfer`: the unrestored kernel."""
    xp = get_namespace(A, cb)
    return 2 * xp.real(xp.fft.ifft(sample_transfer(A, cb, k, M), axis=-1)[..., :L])


CHUNK_ELEMENTS = 2**22      # complex elements of one (channels, N2, M) block in sample_transfer


def _den(A, Z):
    """``den_{n,m} = Q`` at the points ``Z``: ``A`` ``(..., N2, 3)``, ``Z`` ``(..., 3, M)`` -> ``(..., N2, M)``."""
    return q_eval(A[..., 0, None], A[..., 1, None], A[..., 2, None],
                  Z[..., None, 0, :], Z[..., None, 1, :], Z[..., None, 2, :])


def sample_points(A, cb, Z):
    """``S = sum_n cb_n / den_n`` for one block: ``A`` ``(b, N2, 3)``, ``cb`` ``(b, N2)``, ``Z``
    ``(b, 3, M)`` -> ``(b, M)``. The reference definition of the sampled transfer function."""
    inv = 1 / _den(A, Z)                                            # (b, N2, M)
    return (cb[..., None, :] @ inv)[..., 0, :]                      # (b, M)


def sample_transfer(A, cb, k, M, backend=None):
    """Sampled contour-shifted transfer function ``S_m = sum_n cb_n / den_{n,m}`` (docs/theory.md §5).

    ``den_{n,m} = Q`` with the coefficients ``A`` of :func:`scaled_coefficients` at the points ``Z =
    (w^-m, w^-mk, w^-m(k+1))`` of :func:`contour_points`, ``CHUNK_ELEMENTS`` at a time so memory stays
    ``O(batch M)`` plus one block on the reference path.

    Parameters
    ----------
    A : complex ``(..., N2, 3)``; cb : complex ``(..., N2)``; k : integer ``(...)``; M : int.
    backend : None (:func:`ddesys.backend.choose`), or ``"reference"`` to force the array-API
        definition (what the fused paths are tested against; differentiable on torch).

    Returns
    -------
    complex ``(..., M)``.
    """
    xp = get_namespace(A, cb, k)
    path = backend or choose(A, xp)
    if path == NUMBA and is_numpy(xp):
        return fused.sample_forward(A, cb, k, M)
    if path == TRITON and is_cupy(xp):
        S = _cupy_via_gpu(A, cb, k, M)
        if S is not None:
            return S
    elif path not in (NUMBA, TRITON, REFERENCE):
        raise ValueError(f"backend must be None or 'reference', got {backend!r}")
    return _sample_blocks(xp, A, cb, contour_points(k, M, A.dtype))


def _cupy_via_gpu(A, cb, k, M):
    """CuPy arrays through the same Triton kernel, zero-copy by DLPack (needs torch with CUDA). ``None``
    (the caller takes the reference path) whenever the fused path is not usable: no torch, Triton or
    CUDA-enabled torch, the reference forced, or a DLPack exchange torch refuses (checked in that order,
    so a CPU-only torch never sees the CuPy arrays)."""
    try:
        import cupy
        from ddesys import gpu
        import torch
    except ImportError:
        return None
    if not gpu.cuda_usable():
        return None
    try:
        At, cbt, kt = (torch.from_dlpack(v) for v in (A, cb, k))
    except (RuntimeError, TypeError, ValueError, BufferError):   # e.g. memory this torch cannot address
        return None
    if not gpu.usable_for(At):
        return None
    from ddesys.gpu import transfer as gt
    batch = A.shape[:-2]
    S = gt.sample_forward(At.reshape(-1, A.shape[-2], 3), cbt.reshape(-1, A.shape[-2]), kt.reshape(-1), M)
    return cupy.from_dlpack(S).reshape(batch + (M,))


def _sample_blocks(xp, A, cb, Z):
    batch = A.shape[:-2]
    n2, M = A.shape[-2], Z.shape[-1]
    B = math.prod(batch)
    A, cb, Z = (xp.reshape(v, (B,) + v.shape[len(batch):]) for v in (A, cb, Z))
    step = max(1, CHUNK_ELEMENTS // max(1, n2 * M))
    out = [sample_points(A[s:s + step], cb[s:s + step], Z[s:s + step]) for s in range(0, B, step)]
    S = out[0] if len(out) == 1 else xp.concat(out, axis=0)
    return xp.reshape(S, batch + (M,))


def vandermonde_kernel(lam, cb, L, per_mode=False):
    """Kernel of a diagonal SSM without delay, ``K_t = 2 Re sum_n cb_n lam_n^t`` (``mu = 0``).

    The S4D kernel (Vandermonde product). NumPy arrays use a fused Numba loop (:mod:`ddesys.cpu.fused`; the
    layers wrap it with its own backward in :mod:`nn.autograd`); other arrays the reference
    ``exp(t log lam)`` product, ``O(N2 L)`` memory per channel.

    Args: ``lam``, ``cb`` complex ``(..., N2)`` (``|lam| > 0``); ``per_mode``: return the complex
    per-mode responses ``cb_n lam_n^t`` ``(..., N2, L)`` instead (state kernels, reference path).
    Returns: real ``(..., L)``, or complex ``(..., N2, L)`` with ``per_mode``.
    """
    xp = get_namespace(lam, cb)
    if not per_mode and is_numpy(xp) and choose(lam, xp) == NUMBA:
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
