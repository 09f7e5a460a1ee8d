"""Prefill on the CPU in one compiled pass (:func:`ddesys.prefill.run_ring`): a prompt costs one run of
the recurrence over it, not one FFT per mode (DS4D) or a Vandermonde matrix per mode (S4D).

Used by ``DS4D.prefill`` for caches of the ``"fused"`` engine and by ``S4D.prefill`` for CPU caches
when Numba is present (``DDESYS_REFERENCE=1`` at the call turns it off for S4D; a DS4D cache keeps the
engine chosen at allocation). The pass runs the decode step's recurrence with the decode step's
constants and precision, so a prefilled cache holds what stepping through the prompt leaves there (to
float rounding) and its outputs are the stepping outputs. Elsewhere (CUDA, no Numba, the reference
engine) the layers keep their spectral prefill.
"""
from __future__ import annotations

import numpy as np
import torch

from ddesys.backend import force_reference
from ddesys.prefill import NO_DELAY, prefill_available, run_ring

__all__ = ["fused_ds4d", "fused_s4d", "s4d_uses_fused"]


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
