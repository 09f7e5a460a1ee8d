"""Exact Z-domain transfer function and contour-shifted kernel synthesis (SPEC sections 4-5).

The two functions here are the only implementation of these formulas in the project: the analysis
class :class:`ddesys.DiscreteDelaySystem` and the PyTorch layers in :mod:`nn` both call them. They are
written against the array API (``array-api-compat``), so they run on NumPy, CuPy and torch arrays, and
torch autograd flows through every parameter, the fractional delay ``alpha`` included.
"""
from __future__ import annotations

import math

from ._array import get_namespace


def transfer_function(lam, mu, bbar, c, k, alpha, d, z):
    """Exact ``K(z)`` of the discrete delayed system at complex points ``z`` (SPEC section 4).

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


def _unit_roots(xp, idx, M, cdtype, device):
    """``w^{-j} = exp(-2 pi i j / M)`` for integer ``j`` (any shape), from the integer, not a power."""
    ang = xp.astype(idx, xp.float64) * (-2.0 * math.pi / M)
    re, im = xp.cos(ang), xp.sin(ang)
    out = xp.astype(re, cdtype) + 1j * xp.astype(im, cdtype)
    return out if device is None else xp.asarray(out, device=device)


def synthesize_kernel(lam, mu, cb, k, alpha, L, M, rho, mode_chunk=None, per_mode=False):
    """Length-``L`` real kernel by the contour-shifted inverse FFT (SPEC section 5).

    Samples ``S_m = sum_n cb_n / den_{n,m}`` on the circle ``|z| = 1/rho`` at ``M`` points, inverts with
    one FFT per channel and restores with ``rho^{-t}``::

        den_{n,m} = 1 - (rho lam_n) w^-m - (rho^k (1-alpha) mu_n) w^-mk - (rho^(k+1) alpha mu_n) w^-m(k+1)
        K_t       = rho^-t 2 Re(IFFT_M[S]_t),   t = 0 .. L-1

    ``w^-mk`` comes from the integer ``(m k) mod M``. Work and memory are ``O(M N2)`` and ``O(M)`` per
    channel: modes are accumulated ``mode_chunk`` at a time, never as a ``(..., N2, M)`` tensor unless
    ``mode_chunk >= N2``.

    Args:
        lam, mu, cb: complex ``(..., N2)``, ``cb = c * bbar``; their dtype is the working precision.
        k: integer ``(...)``; alpha: real ``(...)``; rho: real ``(...)`` in ``(0, 1]``.
        L: kernel length; M: FFT length (``>= L``; ``>= 2L`` for linear convolution).
        mode_chunk: modes per accumulation step (default: all when the batch is small, else 8).
        per_mode: return the complex per-mode responses ``cb_n g_{n,t}`` ``(..., N2, L)`` instead of the
            real kernel (pass ``cb = bbar`` for the state kernels used by prefill). Memory ``O(N2 M)``.
    Returns:
        real ``(..., L)`` in the real dtype of ``lam`` (complex ``(..., N2, L)`` with ``per_mode``).
    """
    xp = get_namespace(lam, mu, cb)
    cdtype = lam.dtype
    rdtype = xp.float32 if cdtype == xp.complex64 else xp.float64
    dev = getattr(lam, "device", None)
    dev = None if "numpy" in type(lam).__module__ else dev
    m = xp.arange(M, dtype=xp.int64)                                # (M,)
    if dev is not None:
        m = xp.asarray(m, device=dev)
    kk = k[..., None]                                               # (..., 1)
    zk = _unit_roots(xp, (m * kk) % M, M, cdtype, dev)              # (..., M)   w^{-mk}
    zk1 = _unit_roots(xp, (m * (kk + 1)) % M, M, cdtype, dev)       # (..., M)   w^{-m(k+1)}
    z1 = _unit_roots(xp, m, M, cdtype, dev)                         # (M,)       w^{-m}

    rho = xp.astype(rho, rdtype)
    logr = xp.log(rho)[..., None]                                   # (..., 1)
    rk = xp.exp(xp.astype(k, rdtype)[..., None] * logr)             # (..., 1)   rho^k
    al = xp.astype(alpha, rdtype)[..., None]                        # (..., 1)
    a1 = lam * xp.astype(rho[..., None], cdtype)                    # (..., N2)
    a2 = mu * xp.astype(rk * (1 - al), cdtype)                      # (..., N2)
    a3 = mu * xp.astype(rk * xp.exp(logr) * al, cdtype)             # (..., N2)

    n2 = lam.shape[-1]
    batch = math.prod(lam.shape[:-1])
    chunk = mode_chunk or (n2 if batch * n2 * M <= 2**22 else max(1, 2**22 // max(1, batch * M)))
    S = None
    for s in range(0, n2, chunk):
        sl = slice(s, min(n2, s + chunk))
        den = (1 - a1[..., sl, None] * z1
               - a2[..., sl, None] * zk[..., None, :]
               - a3[..., sl, None] * zk1[..., None, :])             # (..., chunk, M)
        if per_mode:
            S = [] if S is None else S
            S.append(cb[..., sl, None] / den)                       # (..., chunk, M)
            continue
        part = xp.sum(cb[..., sl, None] / den, axis=-2)             # (..., M)
        S = part if S is None else S + part

    t = xp.astype(xp.arange(L), rdtype)                             # (L,)
    if dev is not None:
        t = xp.asarray(t, device=dev)
    restore = xp.exp(-t * logr)                                     # (..., L)   rho^{-t}
    if per_mode:
        G = xp.fft.ifft(xp.concat(S, axis=-2), axis=-1)[..., :L]    # (..., N2, L)
        return G * xp.astype(restore[..., None, :], cdtype)         # (..., N2, L)
    Kc = xp.fft.ifft(S, axis=-1)[..., :L]                           # (..., L) complex
    return 2 * xp.real(Kc) * restore                                # (..., L)
