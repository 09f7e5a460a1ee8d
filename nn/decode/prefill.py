"""Prefill: a chunk of a prompt through a decode cache, for the engines of :mod:`nn.decode.engine`.

* :func:`fused_ds4d` / :func:`fused_s4d` (the fused engines, CPU with Numba): one compiled pass of the
  decode recurrence over the chunk (:func:`ddesys.cpu.prefill.run_ring`), with the decode step's
  constants and precision, so a prefilled cache holds every state that later steps read as stepping
  through the prompt leaves it (to float rounding: each channel's last ``k + 1``; older slots are
  unspecified, :mod:`ddesys.cpu.prefill`) and its outputs are the stepping outputs. A prompt costs one
  run of the recurrence, not one FFT per mode (DS4D) or a Vandermonde matrix per mode (S4D).
* :func:`spectral_ds4d` / :func:`spectral_s4d` (the other engines: CUDA, the reference): the layer's FFT
  outputs of the chunk plus, from a cache holding tokens, the history's term (:mod:`nn.decode.history`);
  the states from the per-mode state kernels (FFT) or the Vandermonde product.

Each returns the chunk's outputs ``(B, H, L)`` of the SSM branch (with the skip ``D`` and the history's
term, without optional branches such as the tap) and leaves ``cache.t`` to the caller.
"""
from __future__ import annotations

import numpy as np
import torch

from ddesys.cpu.prefill import NO_DELAY, run_ring
from ddesys.transfer import synthesize_kernel, vandermonde_kernel

from .history import ds4d_chunk, s4d_chunk

__all__ = ["fused_ds4d", "fused_s4d", "spectral_ds4d", "spectral_s4d", "ring_format", "PREFILL_BLOCK"]

PREFILL_BLOCK = 2**24        # complex128 elements of one (batch, H, modes, M) block of spectral prefill (256 MiB)


def _x_host(xb, rdt):
    """The prompt ``(B, H, L)`` as a C-contiguous NumPy array in the update's precision."""
    return np.ascontiguousarray(xb.detach().to(rdt).numpy())


def fused_ds4d(ring, fmt16, host, xb, cache):
    """Run the prompt ``xb`` ``(B, H, L)`` through ``ring`` (the NumPy view of ``cache.buf``, 16-bit format
    ``fmt16``; positions ``cache.t ..``) with the constants' NumPy views ``host`` (lam, m1, m2, bbar, c, d,
    k); returns the outputs ``(B, H, L)`` in the cache's real dtype."""
    y = run_ring(ring, _x_host(xb, cache.real_dtype), *host, cache.t, fmt16=fmt16)
    return torch.from_numpy(y)


def fused_s4d(host, xb, cache):
    """As :func:`fused_ds4d` for an S4D cache: its state ``h`` ``(B, H, N2)`` is a ring of one slot and
    the delayed terms are absent. ``host``: NumPy views of the layer's ``(lam, bbar, c, d)``."""
    lam, bbar, c, d = host
    zero = np.zeros_like(lam)
    k = np.full(lam.shape[0], NO_DELAY, np.int64)
    ring = cache.h.detach().numpy()[:, None]                                     # (B, 1, H, N2) view
    y = run_ring(ring, _x_host(xb, cache.real_dtype), lam, zero, zero, bbar, c, d, k, cache.t)
    return torch.from_numpy(y)


def ring_format(hs, cache):
    """States ``(B, H, N2, n)`` complex as ring entries ``(B, n, H, N2)`` in ``cache.buf``'s storage
    (16-bit: ``(B, n, H, N2, 2)``)."""
    hs = hs.permute(0, 3, 1, 2)                                                     # (B, n, H, N2)
    if cache.history16:
        return torch.view_as_real(hs.to(torch.complex64)).to(cache.buf.dtype)
    return hs.to(cache.buf.dtype)


def spectral_ds4d(layer, xb, cache):
    """DS4D's spectral prefill of ``xb`` ``(B, H, L)`` into ``cache`` (fresh or holding tokens): outputs
    ``(B, H, L)`` in ``xb``'s dtype; the ring's slots of the chunk's last ``min(L, R)`` positions written."""
    t0 = cache.t
    Bsz, H, L = xb.shape
    y = layer.ssm_forward(xb)                                    # (B, H, L), zero history
    if Bsz == 0:
        return y
    R = cache.n_slots
    n_keep = min(R, L)
    slots = (t0 + torch.arange(L - n_keep, L, device=xb.device)) % R   # (n_keep,)
    if t0 > 0:                                                   # continue from the cache's state
        y_hist, hs = ds4d_chunk(layer, xb, cache, n_keep, torch.float64)   # (B, H, L), (B, H, N2, keep)
        cache.buf[:, slots] = ring_format(hs, cache)
        return y + y_hist.to(y.dtype)
    _fresh_ring(layer, xb, cache, slots, n_keep)
    return y


def _fresh_ring(layer, xb, cache, slots, n_keep):
    """The ring of a fresh cache from the state kernels: the last ``n_keep`` states of every mode,
    ``h = G_n * x`` with the per-mode state kernels ``G_n`` (FFT), written at ``slots``. Blocks of at most
    :data:`PREFILL_BLOCK` complex128 elements."""
    Bsz, H, L = xb.shape
    d = layer.discrete(torch.float64)
    M, rho = layer.contour(L, torch.float64)
    rho_t = torch.full(d.k.shape, rho, dtype=torch.float64, device=d.k.device)
    Xf = torch.fft.fft(xb.double(), n=M)                         # (B, H, M)
    n_modes = max(1, min(layer.N2, PREFILL_BLOCK // (Bsz * H * M)))
    n_rows = max(1, min(Bsz, PREFILL_BLOCK // (H * M * n_modes)))
    for s in range(0, layer.N2, n_modes):
        sl = slice(s, s + n_modes)
        G = synthesize_kernel(d.lam[:, sl], d.mu[:, sl], d.bbar[:, sl], d.k, d.alpha, L, M, rho_t,
                              per_mode=True)                   # (H, n, L) state kernels
        Gf = torch.fft.fft(G, n=M)                               # (H, n, M)
        for b in range(0, Bsz, n_rows):
            hs = torch.fft.ifft(Xf[b:b + n_rows, :, None, :] * Gf, n=M)[..., L - n_keep:L]   # (b, H, n, keep)
            hs = hs.permute(0, 3, 1, 2)                          # (b, keep, H, n)
            if cache.history16:
                hs = torch.view_as_real(hs.to(torch.complex64))  # (b, keep, H, n, 2)
            cache.buf[b:b + n_rows, slots, :, sl] = hs.to(cache.buf.dtype)


def spectral_s4d(layer, xb, cache):
    """S4D's prefill without the compiled pass: outputs ``(B, H, L)`` in ``xb``'s dtype; the state set to
    ``h_n = sum_j bbar_n lam_n^(L-1-j) x_j`` (plus ``lam_n^L h_n`` from a cache holding tokens)."""
    y = layer.ssm_forward(xb)                                    # (B, H, L), zero history
    L = xb.shape[-1]
    if cache.t > 0:                                              # continue from the cache's state
        y_hist, h = s4d_chunk(layer, xb, cache, True, torch.float64)
        cache.h.copy_(h.to(cache.h.dtype))
        return y + y_hist.to(y.dtype)
    d = layer.discrete(torch.float64)
    V = vandermonde_kernel(d.lam, d.bbar, L, per_mode=True)      # (H, N2, L): bbar lam^t
    cache.h.copy_(torch.einsum("bhl,hnl->bhn", xb.double().flip(-1).to(V.dtype), V).to(cache.h.dtype))
    return y
