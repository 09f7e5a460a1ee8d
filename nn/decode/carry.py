"""State carry: ``forward(x, state=..., return_state=True)`` of DS4D and S4D, the training path that
continues from a cache and returns the state after the chunk as a new cache.

The history's terms come from :mod:`nn.decode.history` (the SSM branch) and from the layer's optional
branches (:mod:`nn.branch`; the tap: its FIR filter over the inputs kept in its state). The new cache's ring is laid
out by its engine (``engine.carry_layout``: the cache's own engine, or the default one for a fresh
state). Everything here is torch and differentiable (parameters, inputs and a carried state that
requires grad).
"""
from __future__ import annotations

import torch

from .cache import DS4DCache, S4DCache
from .engine import select_engine, select_s4d_engine
from .history import ds4d_chunk, ring_past, s4d_chunk

__all__ = ["ds4d_forward_state", "s4d_forward_state", "ds4d_carry"]


def ds4d_carry(layer, xb, cache, states, R, engine=None):
    """The state after the chunk ``xb`` ``(B, H, L)`` as a new :class:`DS4DCache` of ``R`` slots (out of
    place: autograd flows through it): ``states`` ``(B, H, N2, min(L, R))`` from
    :func:`nn.decode.history.ds4d_chunk`, older states from ``cache`` (None: a zero history)."""
    B, H, L = xb.shape
    t0 = 0 if cache is None else cache.t
    if L < R:                                                                       # older states stay
        old = ring_past(cache, states.dtype) if cache is not None else states.new_zeros(B, H, layer.N2, R)
        past = torch.cat([old[..., L:], states], -1)                                # (B, H, N2, R) time order
    else:
        past = states
    perm = (torch.arange(R, device=xb.device) - t0 - L) % R                         # slot s holds past[..., perm[s]]
    ring = past.index_select(-1, perm).permute(0, 3, 1, 2)                          # (B, R, H, N2)
    if engine is None:
        engine = cache.engine if cache is not None else select_engine(ring.detach())
    ring = engine.carry_layout(ring)
    h16 = None if cache is None else cache.history16
    if h16 is not None:
        ring = torch.view_as_real(ring.to(torch.complex64)).to(h16)                # (B, R, H, N2, 2)
    elif cache is not None:
        ring = ring.to(cache.buf.dtype)
    xdt = torch.float64 if ring.dtype == torch.complex128 else torch.float32
    old = (None,) * len(layer.branches()) if cache is None else cache.branch_states
    states = tuple(b.carry(xb, st, t0, xdt) for b, st in zip(layer.branches(), old))   # the branches' states
    new = DS4DCache(ring, t=t0 + L, branch_states=states)
    return new.bind(layer, engine, None if cache is None else cache.max_seqlen)


def ds4d_forward_state(layer, xin, state, return_state):
    """DS4D ``forward``'s state path: the history term of the outputs ``(B, H, L)`` (None from a zero
    history) and, with ``return_state``, the state after the chunk as a new cache of ``layer`` (else None)."""
    B, H, L = xin.shape
    wide = torch.float64 if xin.dtype == torch.float64 else torch.float32
    R = state.n_slots if state is not None else int(layer.discrete(torch.float64).k.max()) + 1
    y_hist, states = ds4d_chunk(layer, xin, state, min(L, R) if return_state else 0, layer.kernel_dtype)
    if y_hist is not None:                                                          # the branches' history terms
        dt = layer.kernel_dtype
        for branch, bc, st in zip(layer.branches(), layer.branch_constants(dt), state.branch_states):
            y_hist = y_hist + branch.history(st, state.t, L, bc, dt)
    if not return_state:
        return y_hist, None
    if state is None:
        states = states.to(layer.cache_dtype(wide))
    return y_hist, ds4d_carry(layer, xin, state, states, R)


def s4d_forward_state(layer, xin, state, return_state):
    """As :func:`ds4d_forward_state` for S4D (a state ``h`` ``(B, H, N2)``, no delay)."""
    B, H, L = xin.shape
    wide = torch.float64 if xin.dtype == torch.float64 else torch.float32
    y_hist, h = s4d_chunk(layer, xin, state, return_state, wide)
    if not return_state:
        return y_hist, None
    cdt = state.h.dtype if state is not None else layer.cache_dtype(wide)
    t0 = 0 if state is None else state.t
    h = h.to(cdt)
    engine = state.engine if state is not None else select_s4d_engine(h.detach())
    new = S4DCache(h, t=t0 + L)
    return y_hist, new.bind(layer, engine, None if state is None else state.max_seqlen)
