"""DS4D and S4D continued from a carried state: ``prefill`` into a used cache and
``forward(x, state=..., return_state=True)``.

The mathematics is :mod:`ddesys.history`: the future from a history is the zero-history response (the
layer's FFT forward of the chunk alone) plus the zero-input response, the per-mode unit-input state
kernel convolved with the history's *injection* (``lam h_{t0-1}`` at the chunk's first step and the
delayed reads ``m1 h_{t-k} + m2 h_{t-k-1}`` that fall before it). The chunk's states are the same
kernels convolved with ``bbar x + injection``. These are the SSM branch's terms; an optional branch (the
tap) adds its own (:meth:`nn.branch.Branch.history`, :mod:`nn.decode.carry`).

Everything here is torch and differentiable (parameters, inputs and a carried state that requires
grad); the layers run it under ``torch.no_grad()`` for ``prefill``.
"""
from __future__ import annotations

import torch

from ddesys.history import forced_response, history_injection
from ddesys.transfer import synthesize_kernel, vandermonde_kernel

__all__ = ["ring_past", "check_ring", "ds4d_chunk", "s4d_chunk"]

BLOCK = 2**24           # complex elements of one (batch, H, modes, FFT) block (as nn.ds4d.PREFILL_BLOCK)


def ring_past(cache, cdt, k=None):
    """The ring's ``R`` states in time order, ``(B, H, N2, R)`` complex ``cdt``: ``[..., R - 1] = h_{t-1}``;
    positions before the sequence's start are zero (whatever their slots hold). A 16-bit history is
    widened exactly. With the integer delays ``k`` ``(H,)``: also zero where a channel's position is older
    than ``t - k - 1``, the states no later step reads (a prefill leaves those slots unspecified), so
    that the result depends on the sequence only: two caches of the same tokens give the same array."""
    buf, t0, R = cache.buf, cache.t, cache.n_slots
    pos = torch.arange(t0 - R, t0, device=buf.device)                              # (R,)
    ring = torch.view_as_complex(buf.float()) if cache.history16 else buf           # (B, R, H, N2)
    h = ring.index_select(1, pos % R).to(cdt)                                       # (B, R, H, N2)
    keep = (pos >= 0)[:, None]                                                      # (R, 1)
    if k is not None:
        keep = keep & (pos[:, None] >= t0 - 1 - torch.as_tensor(k, device=buf.device)[None, :])   # (R, H)
    h = torch.where(keep[None, :, :, None], h, torch.zeros((), dtype=cdt, device=buf.device))
    return h.permute(0, 2, 3, 1)                                                    # (B, H, N2, R)


def check_ring(cache, k_max):
    """``RuntimeError`` when the layer's delays (up to ``k_max``) no longer fit the ring of ``cache``."""
    if cache is not None and k_max >= cache.n_slots:
        raise RuntimeError(f"the layer's delays now reach {k_max} steps, past the cache's {cache.n_slots - 1}: "
                           "allocate a new cache (delays changed since allocation)")


def ds4d_chunk(layer, xb, cache, keep, dtype):
    """A DS4D chunk ``xb`` ``(B, H, L)`` after the state in ``cache`` (None: zero history).

    Returns ``(y_hist, states)``: the SSM branch's history term ``(B, H, L)`` real ``dtype`` (None for a zero
    history) and the states at the chunk's last ``keep`` steps ``(B, H, N2, keep)`` complex (None for
    ``keep = 0``). ``dtype``: the working precision of the kernel synthesis (``kernel_dtype``)."""
    d = layer.discrete(dtype)
    cdt = d.lam.dtype
    B, H, L = xb.shape
    check_ring(cache, int(d.k.max()))
    live = cache is not None and cache.t > 0
    al = d.alpha[:, None]
    u = history_injection(ring_past(cache, cdt), d.lam, d.mu * (1 - al), d.mu * al, d.k, length=L) if live else None
    M, rho = layer.contour(L, dtype)
    rho_t = torch.full(d.k.shape, rho, dtype=dtype, device=d.k.device)
    ones = torch.ones_like(d.lam)
    xc = xb.to(dtype).to(cdt)[:, :, None, :]                                        # (B, H, 1, L)
    y_hist, states = None, []
    n_modes = max(1, min(layer.N2, BLOCK // max(1, B * H * 2 * M)))
    for s in range(0, layer.N2, n_modes):
        sl = slice(s, s + n_modes)
        G = synthesize_kernel(d.lam[:, sl], d.mu[:, sl], ones[:, sl], d.k, d.alpha, L, M, rho_t,
                              per_mode=True)                                        # (H, n, L) unit-input
        if live:
            yb = forced_response(G, u[:, :, sl], L, c=d.c[:, sl])                   # (B, H, L)
            y_hist = yb if y_hist is None else y_hist + yb
        if keep:
            f = d.bbar[:, sl, None] * xc                                            # (B, H, n, L)
            if live:
                f = f + torch.nn.functional.pad(u[:, :, sl], (0, L - u.shape[-1]))
            states.append(forced_response(G, f, L, keep=keep))                      # (B, H, n, keep)
    return y_hist, (torch.cat(states, 2) if keep else None)


def s4d_chunk(layer, xb, cache, keep, dtype):
    """An S4D chunk after the state in ``cache`` (None: zero history): ``(y_hist, h_last)``, the history
    term ``(B, H, L)`` (None for a zero history) and, with ``keep``, the state after the chunk ``(B, H, N2)``."""
    d = layer.discrete(dtype)
    cdt = d.lam.dtype
    L = xb.shape[-1]
    live = cache is not None and cache.t > 0
    G = vandermonde_kernel(d.lam, torch.ones_like(d.lam), L, per_mode=True)         # (H, N2, L): lam^tau
    u = history_injection(cache.h.to(cdt)[..., None], d.lam) if live else None      # (B, H, N2, 1)
    y_hist = forced_response(G, u, L, c=d.c) if live else None
    h = None
    if keep:
        h = torch.einsum("bhl,hnl->bhn", xb.to(dtype).flip(-1).to(cdt), d.bbar[..., None] * G)   # zero history
        if live:
            h = h + forced_response(G, u, L, keep=1)[..., 0]                        # lam^L h_{t0-1}
    return y_hist, h
