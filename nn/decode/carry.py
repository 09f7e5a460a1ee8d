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
from .select import select_engine
from ..autograd import chunk_scan_available, scan_chunk
from ..common import compute_dtype, fft_conv
from .history import check_ring, ds4d_chunk, ring_past, s4d_chunk

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
        engine = cache.engine if cache is not None else select_engine("ds4d", ring.device)
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


def _ds4d_scan(layer, x, state, return_state, wide):
    """The SSM branch over the chunk ``x`` ``(B, H, L)`` (``wide`` dtype) by the compiled scan
    (:func:`nn.autograd.scan_chunk`): its outputs ``(B, H, L)`` from the state in ``state`` (None: a zero
    history) and, with ``return_state``, the new cache's ring ``(B, R, H, N2)`` (else None)."""
    d = layer.discrete(wide)
    cdt = d.lam.dtype
    B, H, L = x.shape
    k_max = int(d.k.max())
    check_ring(state, k_max)
    if state is None or state.t == 0:
        R = state.n_slots if state is not None else k_max + 1
        ring, t0 = torch.zeros(B, R, H, layer.N2, dtype=cdt), 0
    else:
        ring, t0 = state.ring(), state.t
        if state.history16 is not None:                                             # widened exactly
            ring = torch.view_as_complex(ring.float())
        ring = ring.to(cdt)
    al = d.alpha.to(wide)[:, None]
    y, new = scan_chunk(x, ring, t0, d.lam, d.mu * (1 - al), d.mu * al, d.bbar, d.c, d.k, return_state)
    return y, (new if return_state else None)


def _ds4d_cache(layer, x, state, ring, wide):
    """The cache after the chunk ``x`` from the scan's new ``ring`` ``(B, R, H, N2)`` (channel-major):
    the cache's history dtype and engine, the branches' states carried."""
    t0 = 0 if state is None else state.t
    engine = state.engine if state is not None else select_engine("ds4d", ring.device)
    ring = engine.carry_layout(ring)
    if state is not None and state.history16 is not None:
        ring = torch.view_as_real(ring.to(torch.complex64)).to(state.history16)      # (B, R, H, N2, 2)
    else:
        ring = ring.to(state.buf.dtype if state is not None else layer.cache_dtype(wide))
    xdt = torch.float64 if ring.dtype == torch.complex128 else torch.float32
    old = (None,) * len(layer.branches()) if state is None else state.branch_states
    states = tuple(b.carry(x, st, t0, xdt) for b, st in zip(layer.branches(), old))   # the branches' states
    new = DS4DCache(ring, t=t0 + x.shape[-1], branch_states=states)
    return new.bind(layer, engine, None if state is None else state.max_seqlen)


def ds4d_forward_state(layer, xin, state, return_state):
    """DS4D ``forward``'s state path: the outputs ``(B, H, L)`` of the chunk ``xin`` ``(B, H, L)`` continued
    from ``state`` (None: a zero history) in the compute dtype, and, with ``return_state``, the state after
    the chunk as a new cache of ``layer`` (else None).

    On the CPU (with Numba) the SSM branch runs as the compiled scan and its adjoint
    (:mod:`ddesys.cpu.chunk_scan`: ``O(B H N2 L)``, no per-mode FFT); elsewhere as the zero-history FFT
    forward plus the history's per-mode FFT response (:mod:`nn.decode.history`). The branches (the tap)
    add their kernels' FFT terms and their history terms either way."""
    B, H, L = xin.shape
    wide = torch.float64 if xin.dtype == torch.float64 else torch.float32
    x = xin.to(compute_dtype(xin))
    scan = chunk_scan_available(x)
    if scan:
        y, ring = _ds4d_scan(layer, x.to(wide), state, return_state, wide)
        y = y.to(x.dtype) + layer.D.to(x.dtype)[:, None] * x
        Kb = layer.branch_kernel(L)
        if Kb is not None:
            y = y + fft_conv(x, Kb.to(x.dtype))                                     # the branches' zero-history terms
    else:
        R = state.n_slots if state is not None else int(layer.discrete(torch.float64).k.max()) + 1
        y = layer.chunk_forward(x)
        y_hist, states = ds4d_chunk(layer, x, state, min(L, R) if return_state else 0, layer.kernel_dtype)
        if y_hist is not None:
            y = y + y_hist.to(y.dtype)
    if state is not None and state.t > 0:                                           # the branches' history terms
        dt = layer.kernel_dtype
        for branch, bc, st in zip(layer.branches(), layer.branch_constants(dt), state.branch_states):
            y = y + branch.history(st, state.t, L, bc, dt).to(y.dtype)
    if not return_state:
        return y, None
    if scan:
        return y, _ds4d_cache(layer, x, state, ring, wide)
    if state is None:
        states = states.to(layer.cache_dtype(wide))
    return y, ds4d_carry(layer, x, state, states, R)


def s4d_forward_state(layer, xin, state, return_state):
    """As :func:`ds4d_forward_state` for S4D (a state ``h`` ``(B, H, N2)``, no delay)."""
    B, H, L = xin.shape
    wide = torch.float64 if xin.dtype == torch.float64 else torch.float32
    x = xin.to(compute_dtype(xin))
    if chunk_scan_available(x):
        d = layer.discrete(wide)
        live = state is not None and state.t > 0
        ring = state.ring().to(d.lam.dtype) if live else torch.zeros(B, 1, H, layer.N2, dtype=d.lam.dtype)
        t0 = state.t if live else 0
        y, h = scan_chunk(x.to(wide), ring, t0, d.lam, None, None, d.bbar, d.c, None, return_state, delayed=False)
        y = y.to(x.dtype) + layer.D.to(x.dtype)[:, None] * x
        h = h[:, 0].contiguous() if return_state else None                          # (B, H, N2)
    else:
        y = layer.chunk_forward(x)
        y_hist, h = s4d_chunk(layer, x, state, return_state, wide)
        if y_hist is not None:
            y = y + y_hist.to(y.dtype)
    if not return_state:
        return y, None
    cdt = state.h.dtype if state is not None else layer.cache_dtype(wide)
    t0 = 0 if state is None else state.t
    h = h.to(cdt)
    engine = state.engine if state is not None else select_engine("s4d", h.device)
    new = S4DCache(h, t=t0 + L)
    return y, new.bind(layer, engine, None if state is None else state.max_seqlen)
