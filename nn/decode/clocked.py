"""The decode engines of the clocked layers (:class:`nn.clock.Clocked`, given clock; :class:`nn.selective.SoftClocked`,
learned clock): one per cache, chosen at allocation, implementing :class:`nn.decode.engine.DecodeEngine`
with the ticks (given clock) or the gate's values (learned clock) as the ``clock`` argument of ``step`` /
``prefill``.

Given clock. ``ClockedFused`` (the CPU default): each ticking row is one call of
the fused decode step (:func:`ddesys.cpu.step.bind_step`, the loop of ``DS4D.step``) on that row's ring
at its own write position ``w``; a pausing row keeps its state and outputs ``2 Re(c . h_prev) + d x``.
The position in the ring replaces the tick count in the step's "read before the start is zero" test: a
clocked ring's slots before a row's first tick hold zero states (a fresh or reset ring is zero, and a
prefill writes the compacted run, whose left padding has zero inputs), so both tests read the same
numbers. An S4D inner layer runs the same step without delayed terms on a ring of two slots
(:func:`ring_slots`). ``ClockedReference``: the torch update :func:`ddesys.recurrence.delay_update` (every
device). ``DDESYS_REFERENCE=1`` at allocation, or ``engine="reference"``, selects it
(:func:`nn.decode.select.select_engine`). Both prefill a fresh cache by the compacted FFT path (the inner
layer's ``forward(..., return_state=True)``) and a used one by stepping (the layer's ``advance``).

Learned clock. :class:`SoftEngine`: the recurrence of :mod:`ddesys.selective` one token at a time
(``O(H N)`` per token plus a binary search of the internal times per delayed read) and its scan for a
prompt.

The inner layer is used through its public decoding interface only: ``decode_constants(rdt)`` (its
constants; ``.recurrence()`` the update's terms, ``.slots`` the ring it needs, ``.host`` NumPy views on
the CPU), ``delay_form(dtype)``, ``D``, ``forward(..., return_state=True)`` and ``cache.ring()``
(:class:`nn.clocked_layer.InnerLayer` declares them).
"""
from __future__ import annotations

import numpy as np
import torch

from ddesys.clock import clock_index, compact, expand
from ddesys.cpu.step import bind_step, step_available
from ddesys.recurrence import delay_update, readout
from ddesys.selective import soft_scan

from .cache import channel_major, cpu_ring
from .engine import DecodeEngine, Handle

__all__ = ["ClockedFused", "ClockedReference", "SoftEngine", "ring_slots", "soft_constants"]


class _GivenClock(DecodeEngine):
    """What both engines of the given clock share: the ring (each row's own, channel-major on the CPU)
    and the prefill (module docstring)."""

    def allocate(self, shape, dtype, device):
        """A zero ring ``(B, R, H, N2)``; on the CPU each row's ring channel-major on its own (the fused
        engine steps rows one at a time)."""
        if device.type == "cpu":
            return cpu_ring(shape, dtype, per_row=True)
        return torch.zeros(shape, dtype=dtype, device=device)

    @staticmethod
    def prefill(clocked, cache, x, clock):
        """A prompt ``x`` ``(B, L, H)`` with its ``ticks`` ``(B, L)`` -> outputs ``(B, L, H)``; moves ``w``,
        ``n`` and ``t`` (``clock``: the ticks). A fresh cache runs the compacted FFT path once (the inner layer's
        ``return_state``): its final ring is every row's state after its own last tick. A cache that
        holds tokens steps through the prompt (O(1) per token)."""
        L, ticks = x.shape[1], clock
        if cache.t != 0 or L == 0:
            return torch.stack([clocked.advance(x[:, t], cache, ticks[:, t]) for t in range(L)], dim=1) if L \
                else x.clone()
        inner = clocked.inner
        idx = clock_index(ticks)
        xt = x.transpose(1, 2)                                          # (B, H, L)
        xc = compact(xt, idx)                                           # (B, H, Lc)
        with inner.as_prompt():                                         # a prompt is no training length
            yc, new = inner(xc.transpose(1, 2), return_state=True)
        yc = yc.transpose(1, 2)                                         # (B, H, Lc)
        ring = new.ring()                                               # (B, R', H, N2)
        R, Lc, Rp = cache.n_slots, idx.Lc, ring.shape[1]
        if ring_slots(Rp) != R:
            raise RuntimeError(f"the layer's delays changed since the cache was allocated ({Rp - 1} "
                               f"ticks now, {R - 1} then): allocate a new cache")
        pos = torch.arange(Lc - R, Lc, device=x.device)                 # the last R compacted times
        h = ring.index_select(1, pos % Rp)                              # (B, R, H, N2), slot = time mod R'
        held = (pos >= 0) & (pos >= Lc - Rp)                            # times the inner ring holds (else 0)
        h = torch.where(held[None, :, None, None], h, torch.zeros((), dtype=h.dtype, device=h.device))
        cache.buf.index_copy_(1, pos % R, h.to(cache.buf.dtype))
        cache.w.fill_(Lc)
        cache.n.copy_(idx.counts)
        cache.t = L
        D = inner.D[:, None].to(xt.dtype)
        return expand(yc, xt, D, idx).transpose(1, 2)


def ring_slots(inner_slots):
    """Slots of a clocked ring for an inner layer whose delays need ``inner_slots`` (``k_max + 1``; S4D 1):
    at least two, the fused step's ring (S4D's delayed terms are zero)."""
    return max(int(inner_slots), 2)


class ClockedReference(_GivenClock):
    """The torch update (any device, DS4D or S4D inner layer)."""
    name = "reference"

    def bind(self, cache, consts):
        return Handle(consts)

    @staticmethod
    def step(cache, x_t, consts, clock):
        """``x_t`` ``(B, H)``, ``clock`` ``(B,)`` bool (the ticks) -> ``y`` ``(B, H)`` in the cache's real
        dtype; writes the ticking rows' states (the caller advances ``w``, ``n`` and ``t``)."""
        tick = clock
        lam, m1, m2, bbar, c, d, k = consts.recurrence()
        buf, R = cache.buf, cache.n_slots
        B, H, N2 = buf.shape[0], buf.shape[2], buf.shape[-1]
        xt = x_t.to(cache.real_dtype)
        zero = torch.zeros((), dtype=buf.dtype, device=buf.device)

        def read(back):                                             # state `back` ticks ago (B, H, N2), 0 before
            back = torch.as_tensor(back, device=buf.device).expand(H)                    # (H,)
            slot = (cache.w[:, None] - back[None, :]) % R                                 # (B, H)
            h = buf.gather(1, slot[:, None, :, None].expand(B, 1, H, N2))[:, 0]
            return torch.where((cache.n[:, None] >= back[None, :])[..., None], h, zero)

        prev = read(1)                                              # h_{n-1}
        h = delay_update(prev, read(k), read(k + 1), xt[..., None], lam, m1, m2, bbar)   # (B, H, N2)
        h = torch.where(tick[:, None, None], h, prev)
        slot = (cache.w % R)[:, None, None, None].expand(B, 1, H, N2)
        buf.scatter_(1, slot, torch.where(tick[:, None, None], h, buf.gather(1, slot)[:, 0])[:, None])
        return readout(h, c, d, xt)


class ClockedHandle(Handle):
    """The fused clocked engine's binding: ``ring`` (NumPy view of the cache's ring), ``host`` (the
    constants' NumPy views) and ``runs`` (one bound fused step per row)."""

    def __init__(self, consts, ring, host, runs):
        super().__init__(consts)
        self.ring, self.host, self.runs = ring, host, runs


class ClockedFused(_GivenClock):
    """Per ticking row, the fused CPU step on that row's ring (see the module docstring)."""
    name = "fused"
    needs = "a CPU cache and Numba"

    @staticmethod
    def usable(device):
        return device.type == "cpu" and step_available()

    @staticmethod
    def layout(buf):
        """Each row's ring channel-major on its own (the engine steps rows one at a time)."""
        return channel_major(buf, per_row=True)

    def bind(self, cache, consts):
        """One bound step per row for the inner layer's :class:`nn.decode.engine.DS4DConstants` ``consts``
        (its NumPy views ``consts.host``: lam, m1, m2, bbar, c, d, k)."""
        host = consts.host
        cache.buf = self.layout(cache.buf)                              # a ring made elsewhere: copied once
        ring = cache.buf.numpy()                                        # (B, R, H, N2), taken once
        return ClockedHandle(consts, ring, host, [bind_step(ring[b:b + 1], *host) for b in range(ring.shape[0])])

    @staticmethod
    def step(cache, x_t, consts, clock):
        """As :meth:`ClockedReference.step`, by the fused step per ticking row."""
        tick = clock
        rdt = cache.real_dtype
        xn = (x_t if x_t.dtype == rdt else x_t.to(rdt)).detach().numpy()  # (B, H)
        y = torch.empty(x_t.shape, dtype=rdt)                           # (B, H), returned
        yn = y.numpy()
        hd, R = cache.handle, cache.n_slots
        ring, runs = hd.ring, hd.runs
        c, d = hd.host[4], hd.host[5]
        ticks, ws = tick.tolist(), cache.w.tolist()
        for b in range(len(ticks)):
            if ticks[b]:
                runs[b](xn[b:b + 1], ws[b], yn[b:b + 1])                  # the row's step at its position
            elif ws[b] > 0:                                             # held: the previous state's readout
                yn[b] = readout(ring[b, (ws[b] - 1) % R], c, d, xn[b])   # (H,)
            else:                                                       # nothing written yet: the feedthrough
                yn[b] = d * xn[b]
        return y


# ---------------------------------------------------------------------------------------------- learned clock
def soft_constants(layer, rdt):
    """``(loglam, mu, bbar, c)`` complex ``(H, N2)``, ``d`` ``(H,)`` and the delays ``s`` float64 ``(H,)`` of a
    DS4D or S4D ``layer`` (``layer.delay_form``: an S4D has ``mu = 0``, ``s = 1``), detached."""
    cdt = torch.complex128 if rdt == torch.float64 else torch.complex64
    lam, mu, bbar, c, s = layer.delay_form(torch.float64)
    return tuple(v.detach().to(cdt) for v in (torch.log(lam), mu, bbar, c)) + \
        (layer.D.detach().to(rdt), s.detach().double())


class SoftEngine(DecodeEngine):
    """The learned clock's engine (module docstring); ``consts``: :func:`soft_constants`."""
    name = "reference"

    def bind(self, cache, consts):
        if consts[0].device != cache.buf.device:
            raise RuntimeError(f"the layer's parameters are on {consts[0].device} but this cache is on "
                               f"{cache.buf.device}: allocate a new cache after moving the layer")
        return Handle(consts)

    @staticmethod
    def step(cache, x_t, consts, clock):
        """One token ``x_t`` ``(B, H)`` with its clock ``c`` ``(B,)`` float64 -> ``(B, H)`` in the cache's
        real dtype; appends its state and internal time (the caller advances ``t``)."""
        c = clock
        loglam, mu, bbar, c_out, d, s = consts
        rdt = cache.real_dtype
        B, t, buf = x_t.shape[0], cache.t, cache.buf
        H = buf.shape[2]
        xt = x_t.to(rdt)
        tau = (cache.tau[:, t - 1] if t else torch.zeros_like(c)) + c             # (B,)
        r = tau[:, None] - s[None, :]                                             # (B, H): the reads' times
        prev = buf[:, t - 1] if t else torch.zeros_like(buf[:, 0])                # (B, H, N2)
        hd = torch.zeros_like(prev)
        if t:
            hist = cache.tau[:, :t].contiguous()                                  # (B, t), nondecreasing
            q = torch.searchsorted(hist, r.contiguous(), side="left").clamp_(max=t - 1)   # first tau >= r
            lo = torch.where(q > 0, hist.gather(1, (q - 1).clamp(min=0)), torch.zeros_like(r))
            w = ((r - lo) / (hist.gather(1, q) - lo)).to(rdt)                     # (B, H)
            idx = lambda j: j[:, None, :, None].expand(B, 1, H, buf.shape[-1])   # noqa: E731
            right = buf.gather(1, idx(q))[:, 0]                                   # (B, H, N2)
            left = torch.where((q > 0)[..., None], buf.gather(1, idx((q - 1).clamp(min=0)))[:, 0], 0)
            hd = torch.where((r > 0)[..., None], (1 - w)[..., None] * left + w[..., None] * right, 0)
        cr = c.to(rdt)[:, None, None]
        h = torch.exp(cr * loglam) * prev + cr * (mu * hd + bbar * xt[..., None])  # (B, H, N2)
        buf[:, t] = h
        cache.tau[:, t] = tau
        return 2 * (c_out * h).real.sum(-1) + d * xt

    @staticmethod
    def prefill(layer, cache, x, clock):
        """A prompt ``x`` ``(B, L, H)`` with its clock ``c`` ``(B, L)`` into a fresh cache: one scan, its
        states kept; returns ``(B, L, H)`` in the cache's real dtype (the caller sets ``t``)."""
        L, c = x.shape[1], clock
        rdt = cache.real_dtype
        consts = layer.bind_cache(cache)
        loglam, mu, bbar, c_out, d, s = consts
        xt = x.transpose(1, 2).to(rdt)                                            # (B, H, L)
        y, (h, tau, *_) = soft_scan(*(a.cpu().numpy() for a in (loglam, mu, bbar, c_out, s, xt, c.to(rdt))),
                                    dtype=np.float32 if rdt == torch.float32 else np.float64)
        cache.buf[:, :L] = torch.from_numpy(h).to(cache.buf.device).permute(0, 2, 1, 3)   # (B, L, H, N2)
        cache.tau[:, :L] = torch.from_numpy(tau).to(cache.tau.device)
        y = torch.from_numpy(y).to(xt.device) + d[:, None] * xt                   # (B, H, L)
        return y.transpose(1, 2)
