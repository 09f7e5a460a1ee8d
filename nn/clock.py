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

from dataclasses import dataclass, field, fields

import torch
from torch import nn

from ddesys.clock import clock_index, compact, expand

from .common import check_clocked_cache, check_clocked_step, check_ticks
from .clocked_layer import ClockedLayer
from .decode.cache import RingCache
from .decode.clocked import ring_slots
from .decode.select import select_engine
from .selective import soft_forward
from .tick_grad import TickGrad

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
        """The ticks of ``tokens``: True at every token that is not a pause token.

        Parameters
        ----------
        tokens : Tensor ``(B, L)`` or ``(B,)``, integer
            Token ids.

        Returns
        -------
        Tensor, bool, the shape of ``tokens``

        Raises
        ------
        TypeError
            Float or bool ``tokens``, or not a tensor.
        """
        if not torch.is_tensor(tokens) or tokens.is_floating_point() or tokens.dtype == torch.bool:
            raise TypeError("TokenClock needs integer token ids")
        return ~torch.isin(tokens, self.pause.to(tokens.device))

    def extra_repr(self):
        return f"pause_tokens={self.pause.tolist()}"


@dataclass(eq=False)
class ClockedCache(RingCache):
    """Decode state of a :class:`Clocked` layer: a ring ``buf`` ``(B, R, H, N2)`` complex per row, the
    row's write position ``w`` ``(B,)`` (its tick ``j`` lives in slot ``(w - n + j) mod R``), its tick
    count ``n`` ``(B,)``, the number ``t`` of tokens consumed and ``last_tick`` ``(B,)`` bool, the given clock's
    tick at the last token (:class:`Clocked` keeps it; a clock that reads context continues from it,
    :class:`nn.FlipRunClock`; None in a cache of another clocked layer). ``R = k_max + 1``, at least 2
    (:func:`nn.decode.clocked.ring_slots`; an S4D inner layer's delayed terms are zero). Copies,
    pickling and :meth:`reset` behave as the other caches' (:mod:`nn.decode.cache`)."""
    buf: torch.Tensor
    w: torch.Tensor
    n: torch.Tensor
    t: int = 0
    max_seqlen: int | None = field(default=None, repr=False)
    last_tick: torch.Tensor | None = field(default=None, repr=False)

    def tensors(self):
        """The ring, the positions and any tensor a subclass adds (a clock's own state)."""
        return [v for v in (getattr(self, f.name) for f in fields(self)) if torch.is_tensor(v)]

    @property
    def n_slots(self):
        return self.buf.shape[1]


class Clocked(ClockedLayer):
    """A DS4D / S4D layer run in its own time: the given clock's ticks advance it, other steps hold it.

    Parameters
    ----------
    inner : nn.DS4D or nn.S4D
        The layer (``transposed=False``; any :class:`nn.clocked_layer.InnerLayer`). Its delays count
        ticks: build it with ``l_max`` the longest *tick count* a sequence has (``None``: from the first
        compacted batch).

    Notes
    -----
    The learned clocks are their own layers, :class:`nn.selective.SoftClocked` ``(inner, gate)`` and
    :class:`nn.learned_clock.HardClocked`; all share :class:`nn.clocked_layer.ClockedLayer`.

    The layer's training path is exact (the inner FFT path on the compacted sequence);
    ``mode="recurrent"`` runs the inner recurrence on it. Decoding (``allocate_inference_cache``, ``step``,
    ``prefill``) needs a decodable inner layer without optional branches (refused by name otherwise),
    and runs on the cache's engine (:mod:`nn.decode.clocked`); ``forward(state=, return_state=)``
    carries the decode state across chunks (without gradients).
    """

    cache_type = ClockedCache

    # ------------------------------------------------------------------ training path
    def run(self, x, ticks, mode):
        """The training path: the inner layer on the compacted sequence, expanded back.

        Parameters
        ----------
        x : Tensor ``(B, L, H)``
        ticks : Tensor ``(B, L)``, bool or float, or None
            None: every step ticks (the inner layer itself). Float: a learned clock ``c`` with values
            exactly 0.0 or 1.0 whose slope is a surrogate's (straight-through): under autograd it gets
            its gradient, the soft system's exact derivative with respect to each ``c_t`` at the binary
            point (by FFT, :mod:`nn.tick_grad`; an inner layer with a delayed branch runs the soft scan
            of :mod:`ddesys.selective` at the binary clock instead, the same system).
        mode : {"fft", "recurrent"}
            The inner layer's path (of the compacted run).

        Returns
        -------
        Tensor ``(B, L, H)``
            Between ticks the held state's readout plus ``D x``.
        """
        if ticks is None:
            return self.inner(x, mode=mode)
        if ticks.dtype == torch.bool:
            return self._compacted(x, ticks, mode)
        c = ticks.to(x.dtype)                                           # (B, L) in {0, 1}
        tick = c.detach() > 0.5
        if not (torch.is_grad_enabled() and c.requires_grad):
            return self._compacted(x, tick, mode)
        kernels = self.inner.time_kernel(int(tick.sum(1).max()) + 1 if x.shape[1] else 1)
        if kernels is None:                                             # a delayed branch: the scan
            return soft_forward(self.inner, x.transpose(1, 2), c).transpose(1, 2)
        y = self._compacted(x, tick, mode)                              # the FFT on the compacted ticks
        return TickGrad.apply(y, c, *kernels, x.detach(), tick)         # and the clock's gradient by FFT

    def _compacted(self, x, ticks, mode):
        idx = clock_index(ticks)
        xt = x.transpose(1, 2)                                          # (B, H, L)
        xc = compact(xt, idx)                                           # (B, H, Lc), left-padded
        yc = self.inner(xc.transpose(1, 2), mode=mode).transpose(1, 2)  # (B, H, Lc)
        D = self.inner.D[:, None].to(xt.dtype)                          # (H, 1)
        return expand(yc, xt, D, idx).transpose(1, 2)                   # (B, L, H)

    # ------------------------------------------------------------------ decoding
    def new_cache(self, batch_size, max_seqlen, rdt, engine=None):
        """A fresh :class:`ClockedCache` bound to a decode engine (:mod:`nn.decode.clocked`).

        Parameters
        ----------
        batch_size : int
        max_seqlen : int or None
            Recorded on the cache (the ring is sized by the delays).
        rdt : torch.dtype
            Real precision of the update, ``torch.float32`` or ``torch.float64``.
        engine : {None, "fused", "reference"}
            None: ``"fused"`` on the CPU with Numba, else ``"reference"`` (or ``DDESYS_REFERENCE=1``).

        Returns
        -------
        ClockedCache
            Ring ``buf`` ``(B, R, H, N2)`` complex, ``R = k_max + 1`` (at least 2).

        Raises
        ------
        ValueError
            An unknown ``engine``, or one that cannot run on the layer's device.
        """
        R = ring_slots(self.inner.decode_constants(rdt).slots)
        dev = self.inner.D.device
        shape, cdt = (batch_size, R, self.H, self.inner.N2), self.inner.cache_dtype(rdt)
        eng = select_engine("clock", dev, engine)
        buf = eng.allocate(shape, cdt, dev)
        z = torch.zeros(batch_size, dtype=torch.int64, device=dev)
        own = self.clock_state(batch_size, dev)
        new = self.cache_type(buf, z, z.clone(), **own).bind(self, eng, max_seqlen)
        new.last_tick = torch.ones(batch_size, dtype=torch.bool, device=dev)
        return new

    @torch.no_grad()
    def step(self, x_t, cache, tick=None):
        """One token of decoding; updates ``cache`` in place.

        Parameters
        ----------
        x_t : Tensor ``(B, H)``
        cache : ClockedCache
            This layer's.
        tick : Tensor ``(B,)`` bool, optional
            Where the clock ticks (None: every row).

        Returns
        -------
        Tensor ``(B, H)``
            In ``x_t``'s dtype.

        Raises
        ------
        ValueError
            An ``x_t`` or ``tick`` of another shape, a cache of another layer or batch.
        TypeError
            A ``tick`` that is not bool.
        RuntimeError
            Delays that now reach past the cache's ring (allocate a new cache).
        """
        tick = check_clocked_step(self, x_t, cache, tick)
        y = self.advance(x_t, cache, tick)
        _keep_last(cache, tick)
        return y

    @torch.no_grad()
    def advance(self, x_t, cache, tick):
        """One token at the ticks as they are: the step of the given clock, which the engine's prefill of a
        cache that holds tokens runs per token.

        Parameters
        ----------
        x_t : Tensor ``(B, H)``
        cache : ClockedCache
            Updated in place.
        tick : Tensor ``(B,)`` bool
            Already checked (a clock of its own has already applied itself).

        Returns
        -------
        Tensor ``(B, H)``
            In ``x_t``'s dtype.

        Raises
        ------
        RuntimeError
            Delays that now reach past the cache's ring.
        """
        consts = self.decode_constants(cache.real_dtype)
        if consts.slots > cache.n_slots:
            raise RuntimeError(f"the layer's delays now reach {consts.slots - 1} ticks, past the cache's "
                               f"{cache.n_slots - 1}: allocate a new cache")
        cache.bound(consts)
        y = cache.engine.step(cache, x_t, consts, tick)                 # (B, H), the cache's real dtype
        cache.w += tick
        cache.n += tick
        cache.t += 1
        return y.to(x_t.dtype)

    @torch.no_grad()
    def prefill(self, x, cache, ticks=None):
        """Consume a prompt; moves ``cache`` on by ``L`` tokens.

        Parameters
        ----------
        x : Tensor ``(B, L, H)``
        cache : ClockedCache
            This layer's.
        ticks : Tensor ``(B, L)`` bool, optional
            Where the clock ticks (None: everywhere).

        Returns
        -------
        Tensor ``(B, L, H)``

        Raises
        ------
        ValueError
            A cache of another layer or batch, ``ticks`` of another shape.
        TypeError
            ``ticks`` that are not bool.

        Notes
        -----
        A fresh cache runs the compacted FFT path once (the inner layer's ``return_state``): its final
        ring is every row's state after its own last tick. A cache that holds tokens steps through the
        prompt (O(1) per token).
        """
        B, L = x.shape[0], x.shape[1]
        check_clocked_cache(self, cache, B)
        ticks = torch.ones(B, L, dtype=torch.bool, device=x.device) if ticks is None else \
            check_ticks(ticks, B, L, x.device)
        y = cache.engine.prefill(self, cache, x, ticks)
        if L:
            _keep_last(cache, ticks[:, -1])
        return y


def _keep_last(cache, tick):
    """Record ``tick`` ``(B,)`` bool as the cache's ``last_tick`` (in place where it has one)."""
    if isinstance(cache.last_tick, torch.Tensor) and cache.last_tick.shape == tick.shape:
        cache.last_tick.copy_(tick)
    else:
        cache.last_tick = tick.clone()
