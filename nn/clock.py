"""Clocked layers: DS4D (or S4D) whose time advances only at the steps the input marks as ticks.

The mathematics is :mod:`ddesys.clock` (docs/theory.md §10): between ticks the state and history are
frozen and the output is the held state's readout plus ``D x``; a delay of ``s`` steps is ``s`` ticks.
With the clock of a token model set to "every token but padding and pauses", a fixed delay in ticks
follows a lag that varies from sequence to sequence in real steps.

Three parts, composed (none of them changes :class:`nn.DS4D`; the learned clock is its own layer,
:class:`nn.selective.SoftClocked`):

* :class:`TokenClock`: the clock of a token model, ``ticks = token not in pause_tokens``;
* :class:`Clocked`: any decodable DS4D / S4D layer run in ticks. Training: :func:`ddesys.clock.compact`
  the inputs at the ticks, the inner layer's FFT path on the compacted sequence (exact: the compacted
  system is the layer's LTI system), :func:`ddesys.clock.expand` back. Decoding: :class:`ClockedCache`,
  a ring per row written at the row's own tick count, O(1) per token, by the cache's engine
  (:mod:`nn.decode.clocked`: the fused CPU step per row, or the torch update of :mod:`ddesys.recurrence`);
* :class:`nn.SequenceModel` ``(clock=TokenClock(...))``: computes the ticks once per call and passes them
  to every block.

Shapes: ``forward`` ``x (B, L, H)``, ``ticks (B, L)`` bool ``-> (B, L, H)``; ``step`` ``x_t (B, H)``,
``tick (B,)`` bool ``-> (B, H)``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from ddesys.clock import clock_index, compact, expand

from .common import check_clocked_cache, check_clocked_input, check_clocked_step, check_ticks
from .decode.cache import RingCache, cpu_ring
from .decode.clocked import ring_slots, select_clock_engine

__all__ = ["TokenClock", "Clocked", "ClockedCache", "check_ticks"]


class TokenClock(nn.Module):
    """The clock of a token model: it ticks at every token except ``pause_tokens`` (padding, fillers).

    Parameters
    ----------
    pause_tokens : sequence of int
        Token ids on which every clocked layer's time stands still (non-empty, non-negative).

    Notes
    -----
    Shapes: ``tokens (B, L)`` (or ``(B,)`` for a step) int -> bool, same shape.
    """

    def __init__(self, pause_tokens=(0,)):
        super().__init__()
        ids = sorted({int(t) for t in pause_tokens})
        if not ids or ids[0] < 0:
            raise ValueError(f"pause_tokens must hold at least one non-negative token id, got {list(pause_tokens)}")
        self.register_buffer("pause", torch.tensor(ids, dtype=torch.int64), persistent=False)

    def forward(self, tokens):
        if not torch.is_tensor(tokens) or tokens.is_floating_point() or tokens.dtype == torch.bool:
            raise TypeError("TokenClock needs integer token ids")
        return ~torch.isin(tokens, self.pause.to(tokens.device))

    def extra_repr(self):
        return f"pause_tokens={self.pause.tolist()}"


@dataclass(eq=False)
class ClockedCache(RingCache):
    """Decode state of a :class:`Clocked` layer: a ring ``buf`` ``(B, R, H, N2)`` complex per row, the
    row's write position ``w`` ``(B,)`` (its tick ``j`` lives in slot ``(w - n + j) mod R``), its tick
    count ``n`` ``(B,)`` and the number ``t`` of tokens consumed. ``R = k_max + 1``, at least 2
    (:func:`nn.decode.clocked.ring_slots`; an S4D inner layer's delayed terms are zero). Copies,
    pickling and :meth:`reset` behave as the other caches' (:mod:`nn.decode.cache`)."""
    buf: torch.Tensor
    w: torch.Tensor
    n: torch.Tensor
    t: int = 0
    max_seqlen: int | None = field(default=None, repr=False)

    def tensors(self):
        return [self.buf, self.w, self.n]

    @property
    def n_slots(self):
        return self.buf.shape[1]


class Clocked(nn.Module):
    """A DS4D / S4D layer run in its own time: the given clock's ticks advance it, other steps hold it.

    Parameters
    ----------
    inner : nn.DS4D or nn.S4D
        The layer (``transposed=False``). Its delays count ticks: build it with ``l_max`` the longest
        *tick count* a sequence has (``None``: from the first compacted batch).

    Notes
    -----
    The learned clock is its own layer, :class:`nn.selective.SoftClocked` ``(inner, gate)``.

    The layer's training path is exact (the inner FFT path on the compacted sequence);
    ``mode="recurrent"`` runs the inner recurrence on it. Decoding (``allocate_inference_cache``, ``step``,
    ``prefill``) needs a decodable inner layer without optional branches (the input tap; refused by
    name otherwise), and runs on the cache's engine (:mod:`nn.decode.clocked`).
    """

    cache_type = ClockedCache
    #: forward / prefill take ``ticks`` (B, L) and step a ``tick`` (B,): forced pauses (a model marks a
    #: right-padded batch's padding so)
    takes_ticks = True

    def __init__(self, inner):
        super().__init__()
        if inner.transposed:
            raise ValueError("Clocked needs an inner layer with transposed=False (inputs (B, L, H))")
        self.inner = inner
        self.H, self.N2 = inner.H, inner.N2

    # ------------------------------------------------------------------ training path
    def forward(self, x, ticks=None, mode="fft", lengths=None):
        """``x`` ``(B, L, H)``, ``ticks`` ``(B, L)`` bool (None: every step ticks, the inner layer itself)
        -> ``(B, L, H)``. ``lengths`` (a right-padded batch) is refused with a clock: mark the padding as
        pauses instead (``ticks`` False), which is what the clock is for."""
        check_clocked_input(self, x, lengths)
        if ticks is None:
            return self.inner(x, mode=mode)
        idx = clock_index(check_ticks(ticks, x.shape[0], x.shape[1], x.device))
        xt = x.transpose(1, 2)                                          # (B, H, L)
        xc = compact(xt, idx)                                           # (B, H, Lc), left-padded
        yc = self.inner(xc.transpose(1, 2), mode=mode).transpose(1, 2)  # (B, H, Lc)
        D = self.inner.D[:, None].to(xt.dtype)                          # (H, 1)
        return expand(yc, xt, D, idx).transpose(1, 2)                   # (B, L, H)

    # ------------------------------------------------------------------ decoding
    def allocate_inference_cache(self, batch_size, max_seqlen=None, dtype=None, *, engine=None, **kwargs):
        """A fresh :class:`ClockedCache` (complex128 for ``dtype=torch.float64``, else complex64), bound to a
        decode engine (:mod:`nn.decode.clocked`: ``"fused"`` on the CPU with Numba, else
        ``"reference"``; ``engine=`` or ``DDESYS_REFERENCE=1`` choose)."""
        if self.inner.branches():
            raise NotImplementedError("decoding a Clocked layer with the input tap is not implemented (the tap's "
                                      "input ring would have to be clocked too); build the inner DS4D without tap")
        if kwargs:
            raise TypeError(f"Clocked.allocate_inference_cache got unexpected keyword argument(s) {sorted(kwargs)}")
        max_seqlen, rdt = self.inner.prepare_decode(batch_size, max_seqlen, dtype)
        R = ring_slots(self.inner.decode_constants(rdt).slots)
        dev = self.inner.D.device
        shape, cdt = (batch_size, R, self.H, self.inner.N2), self.inner.cache_dtype(rdt)
        # on the CPU each row's ring channel-major on its own (the fused engine steps rows one at a time)
        buf = cpu_ring(shape, cdt, per_row=True) if dev.type == "cpu" else torch.zeros(shape, dtype=cdt, device=dev)
        z = torch.zeros(batch_size, dtype=torch.int64, device=dev)
        return ClockedCache(buf, z, z.clone()).bind(self, select_clock_engine(buf, engine), max_seqlen)

    @torch.no_grad()
    def step(self, x_t, cache, tick=None):
        """``x_t`` ``(B, H)``, ``tick`` ``(B,)`` bool (None: all tick) -> ``(B, H)``; updates ``cache``."""
        tick = check_clocked_step(self, x_t, cache, tick)
        consts = self.inner.decode_constants(cache.real_dtype)
        if consts.slots > cache.n_slots:
            raise RuntimeError(f"the layer's delays now reach {consts.slots - 1} ticks, past the cache's "
                               f"{cache.n_slots - 1}: allocate a new cache")
        cache.bound(consts)
        y = cache.engine.step(cache, x_t, tick, consts)                 # (B, H), the cache's real dtype
        cache.w += tick
        cache.n += tick
        cache.t += 1
        return y.to(x_t.dtype)

    @torch.no_grad()
    def prefill(self, x, cache, ticks=None):
        """Consume a prompt ``x`` ``(B, L, H)`` with its ``ticks`` ``(B, L)`` -> outputs ``(B, L, H)``.

        A fresh cache runs the compacted FFT path once (the inner layer's ``return_state``): its final
        ring is every row's state after its own last tick. A cache that holds tokens steps through the
        prompt (O(1) per token)."""
        B, L = x.shape[0], x.shape[1]
        check_clocked_cache(self, cache, B)
        ticks = torch.ones(B, L, dtype=torch.bool, device=x.device) if ticks is None else \
            check_ticks(ticks, B, L, x.device)
        return cache.engine.prefill(self, cache, x, ticks)
