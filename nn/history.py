"""DS4D and S4D continued from a carried state: ``prefill`` into a used cache and
``forward(x, state=..., return_state=True)``.

The mathematics is :mod:`ddesys.history`: the future from a history is the zero-history response (the
layer's FFT forward of the chunk alone) plus the zero-input response, the per-mode unit-input state
kernel convolved with the history's *injection* (``lam h_{t0-1}`` at the chunk's first step and the
delayed reads ``m1 h_{t-k} + m2 h_{t-k-1}`` that fall before it). The chunk's states are the same
kernels convolved with ``bbar x + injection``. The tap's term from the history is its FIR filter over
the inputs kept in the cache's input ring (``cache.xbuf``).

Everything here is torch and differentiable (parameters, inputs and a carried state that requires
grad); the layers run it under ``torch.no_grad()`` for ``prefill``.
"""
from __future__ import annotations

import torch

from ddesys.history import forced_response, history_injection
from ddesys.transfer import synthesize_kernel, vandermonde_kernel

__all__ = ["ring_past", "ds4d_chunk", "ds4d_carry", "s4d_chunk", "chunk_forward", "prefill_history"]

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


def _check_ring(cache, k_max):
    if cache is not None and k_max >= cache.n_slots:
        raise RuntimeError(f"the layer's delays now reach {k_max} steps, past the cache's {cache.n_slots - 1}: "
                           "allocate a new cache (delays changed since allocation)")


def _tap_history(layer, cache, L, dtype):
    """The tap's output at chunk steps ``tau < L`` from the inputs before ``t0`` in ``cache.xbuf``
    ``(B, Rx, H)``: its FIR filter over [history inputs, a zero chunk] (``TapBranch.chunk_output``, the
    one implementation of the ring's FIR), ``(B, H, L)``."""
    B, _, H = cache.xbuf.shape
    zero = torch.zeros((B, H, L), dtype=dtype, device=cache.xbuf.device)
    return layer.tap.chunk_output(zero, cache.xbuf, cache.t, layer._tap_constants(dtype))


def ds4d_chunk(layer, xb, cache, keep, dtype):
    """A DS4D chunk ``xb`` ``(B, H, L)`` after the state in ``cache`` (None: zero history).

    Returns ``(y_hist, states)``: the outputs' history term ``(B, H, L)`` real ``dtype`` (None for a zero
    history) and the states at the chunk's last ``keep`` steps ``(B, H, N2, keep)`` complex (None for
    ``keep = 0``). ``dtype``: the working precision of the kernel synthesis (``kernel_dtype``)."""
    d = layer.discrete(dtype)
    cdt = d.lam.dtype
    B, H, L = xb.shape
    _check_ring(cache, int(d.k.max()))
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
    if live and layer.has_tap:
        y_hist = y_hist + _tap_history(layer, cache, L, dtype)
    return y_hist, (torch.cat(states, 2) if keep else None)


def ds4d_carry(layer, xb, cache, states, R, engine=None):
    """The state after the chunk as a new :class:`nn.DS4DCache` of ``R`` slots (out of place: autograd flows
    through it): ``states`` ``(B, H, N2, min(L, R))`` from :func:`ds4d_chunk`, older states from ``cache``."""
    from .cache import DS4DCache
    from .engine import select_engine
    B, H, L = xb.shape
    t0 = 0 if cache is None else cache.t
    if L < R:                                                                       # older states stay
        old = ring_past(cache, states.dtype) if cache is not None else states.new_zeros(B, H, layer.N2, R)
        past = torch.cat([old[..., L:], states], -1)                                # (B, H, N2, R) time order
    else:
        past = states
    perm = (torch.arange(R, device=xb.device) - t0 - L) % R                         # slot s holds past[..., perm[s]]
    ring = past.index_select(-1, perm)                                              # (B, H, N2, R)
    if ring.device.type == "cpu":                  # channel-major in memory, as the fused step reads it
        ring = ring.permute(1, 3, 0, 2).contiguous().permute(2, 1, 0, 3)            # (B, R, H, N2) view
    else:
        ring = ring.permute(0, 3, 1, 2).contiguous()                                # (B, R, H, N2)
    h16 = None if cache is None else cache.history16
    if h16 is not None:
        ring = torch.view_as_real(ring.to(torch.complex64)).to(h16)                # (B, R, H, N2, 2)
    elif cache is not None:
        ring = ring.to(cache.buf.dtype)
    xbuf = None
    if layer.has_tap:
        if cache is not None:
            xbuf = cache.xbuf.clone()
        else:
            xdt = torch.float64 if ring.dtype == torch.complex128 else torch.float32
            xbuf = torch.zeros((B, layer._tap_slots(), H), dtype=xdt, device=xb.device)
        Rx = xbuf.shape[1]
        n = min(L, Rx)
        xbuf[:, (t0 + torch.arange(L - n, L, device=xb.device)) % Rx] = xb[..., L - n:].transpose(1, 2).to(xbuf.dtype)
    if engine is None:
        engine = cache._engine if cache is not None else select_engine(ring.detach())
    return DS4DCache(ring, t=t0 + L, xbuf=xbuf)._bind(layer, engine, None if cache is None else cache.max_seqlen)


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


def chunk_forward(layer, xin, state, return_state):
    """``forward``'s state path: the history term of the outputs ``(B, H, L)`` (None from a zero history)
    and, with ``return_state``, the state after the chunk as a new cache of ``layer`` (else None)."""
    from .cache import S4DCache
    B, H, L = xin.shape
    wide = torch.float64 if xin.dtype == torch.float64 else torch.float32
    if layer.cache_type is S4DCache:
        y_hist, h = s4d_chunk(layer, xin, state, return_state, wide)
        if not return_state:
            return y_hist, None
        cdt = state.h.dtype if state is not None else layer._cache_dtype(wide)
        t0 = 0 if state is None else state.t
        new = S4DCache(h.to(cdt), t=t0 + L)._bind(layer, None, None if state is None else state.max_seqlen)
        return y_hist, new
    R = state.n_slots if state is not None else int(layer.discrete(torch.float64).k.max()) + 1
    y_hist, states = ds4d_chunk(layer, xin, state, min(L, R) if return_state else 0, layer.kernel_dtype)
    if not return_state:
        return y_hist, None
    if state is None:
        states = states.to(layer._cache_dtype(wide))
    return y_hist, ds4d_carry(layer, xin, state, states, R)


def prefill_history(layer, xb, y, cache, keep):
    """DS4D ``prefill`` from a used cache: ``y`` (the zero-history outputs, caller's layout) plus the
    history's term, and the chunk's last ``keep`` states in the ring's storage format ``(B, keep, H, N2)``
    (16-bit: ``(B, keep, H, N2, 2)``). Runs before the rings move."""
    y_hist, hs = ds4d_chunk(layer, xb, cache, keep, torch.float64)                  # (B, H, L), (B, H, N2, keep)
    y = y + (y_hist if layer.transposed else y_hist.transpose(-1, -2)).to(y.dtype)
    hs = hs.permute(0, 3, 1, 2)                                                     # (B, keep, H, N2)
    if cache.history16:
        return y, torch.view_as_real(hs.to(torch.complex64)).to(cache.buf.dtype)
    return y, hs.to(cache.buf.dtype)

