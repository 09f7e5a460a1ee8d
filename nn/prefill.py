"""Prefill on the CPU in one compiled pass (:func:`ddesys.cpu.prefill.run_ring`): a prompt costs one run of
the recurrence over it, not one FFT per mode (DS4D) or a Vandermonde matrix per mode (S4D).

Used by ``DS4D.prefill`` for caches of the ``"fused"`` engine and by ``S4D.prefill`` for CPU caches
when Numba is present (``DDESYS_REFERENCE=1`` at the call turns it off for S4D; a DS4D cache keeps the
engine chosen at allocation). The pass runs the decode step's recurrence with the decode step's
constants and precision, so a prefilled cache holds every state that later steps read as stepping
through the prompt leaves it (to float rounding: each channel's last ``k + 1``; older slots are
unspecified, :mod:`ddesys.cpu.prefill`) and its outputs are the stepping outputs. Elsewhere (CUDA, no Numba, the reference
engine) the layers keep their spectral prefill.
"""
from __future__ import annotations

import numpy as np
import torch

from ddesys.backend import force_reference
from ddesys.cpu.prefill import NO_DELAY, prefill_available, run_ring
from ddesys.transfer import synthesize_kernel

__all__ = ["fused_ds4d", "fused_s4d", "s4d_uses_fused", "spectral_ds4d", "PREFILL_BLOCK"]

PREFILL_BLOCK = 2**24        # complex128 elements of one (batch, H, modes, M) block of spectral prefill (256 MiB)


def _x_host(xb, rdt):
    """The prompt ``(B, H, L)`` as a C-contiguous NumPy array in the update's precision."""
    return np.ascontiguousarray(xb.detach().to(rdt).numpy())


def fused_ds4d(layer, xb, cache):
    """Run the prompt ``xb`` ``(B, H, L)`` through ``cache``'s ring (positions ``cache.t ..``); returns the
    SSM's outputs ``(B, H, L)`` (with the skip ``D`` and the ring's history; not the tap) in the cache's
    real dtype. ``cache.t`` is left to the caller."""
    consts = layer._bound_constants(cache)
    rdt = cache.real_dtype
    y = run_ring(cache._ring, _x_host(xb, rdt), *consts.host, cache.t, fmt16=cache._fmt16)
    return torch.from_numpy(y)


def s4d_uses_fused(cache):
    """Whether ``S4D.prefill`` takes the compiled pass for this cache."""
    return cache.h.device.type == "cpu" and prefill_available() and not force_reference()


def fused_s4d(layer, xb, cache, consts):
    """As :func:`fused_ds4d` for an S4D cache: its state ``h`` ``(B, H, N2)`` is a ring of one slot and
    the delayed terms are absent. ``consts``: the layer's :class:`nn.engine.S4DConstants`."""
    rdt = cache.real_dtype
    host = [v.detach().resolve_conj().contiguous().numpy() for v in consts]    # lam, bbar, c, d
    lam, bbar, c, d = host
    zero = np.zeros_like(lam)
    k = np.full(lam.shape[0], NO_DELAY, np.int64)
    ring = cache.h.detach().numpy()[:, None]                                     # (B, 1, H, N2) view
    y = run_ring(ring, _x_host(xb, rdt), lam, zero, zero, bbar, c, d, k, cache.t)
    return torch.from_numpy(y)


def spectral_ds4d(layer, xb, cache, slots, n_keep):
    """The spectral prefill of a fresh DS4D cache (CUDA, the reference engine): the last ``n_keep`` states
    of every mode, ``h = G_n * x`` with the per-mode state kernels ``G_n`` (FFT), written at ``slots``.
    Blocks of at most :data:`PREFILL_BLOCK` complex128 elements."""
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
