"""Clocked layers: DS4D (or S4D) whose time advances only at the steps the input marks as ticks.

The mathematics is :mod:`ddesys.clock` (docs/theory.md §10): between ticks the state and history are
frozen and the output is the held state's readout plus ``D x``; a delay of ``s`` steps is ``s`` ticks.
With the clock of a token model set to "every token but padding and pauses", a fixed delay in ticks
follows a lag that varies from sequence to sequence in real steps.

Three parts, composed (none of them changes :class:`nn.DS4D`):

* :class:`TokenClock`: the clock of a token model, ``ticks = token not in pause_tokens``;
* :class:`Clocked`: any decodable DS4D / S4D layer run in ticks. Training: :func:`ddesys.clock.compact`
  the inputs at the ticks, the inner layer's FFT path on the compacted sequence (exact: the compacted
  system is the layer's LTI system), :func:`ddesys.clock.expand` back. Decoding: :class:`ClockedCache`,
  a ring per row written at the row's own tick count, O(1) per token (the torch update of
  :mod:`ddesys.recurrence`, one implementation with the reference engine);
* :class:`nn.SequenceModel` ``(clock=TokenClock(...))``: computes the ticks once per call and passes them
  to every block.

Shapes: ``forward`` ``x (B, L, H)``, ``ticks (B, L)`` bool ``-> (B, L, H)``; ``step`` ``x_t (B, H)``,
``tick (B,)`` bool ``-> (B, H)``.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch
from torch import nn

from ddesys.clock import clock_index, compact, expand
from ddesys.recurrence import delay_update, readout

from .cache import _Bound, cpu_ring
from .clock_step import ClockedFused, select_clock_engine
from .delay_range import as_prompt

__all__ = ["TokenClock", "Clocked", "ClockedCache", "check_ticks"]


def check_ticks(ticks, B, L, device=None):
    """``ticks`` as a bool tensor ``(B, L)`` (``TypeError`` / ``ValueError`` naming the misfit)."""
    if not torch.is_tensor(ticks) or ticks.dtype != torch.bool:
        raise TypeError(f"ticks must be a bool tensor (True where the clock ticks), got "
                        f"{getattr(ticks, 'dtype', type(ticks).__name__)}")
    if tuple(ticks.shape) != (B, L):
        raise ValueError(f"ticks must have shape (B, L) = ({B}, {L}), one flag per position, got {tuple(ticks.shape)}")
    return ticks if device is None else ticks.to(device)


class TokenClock(nn.Module):
    """The clock of a token model: it ticks at every token except ``pause_tokens`` (padding, fillers).

    Parameters
    ----------
    pause_tokens : sequence of int
        Token ids on which every clocked layer's time stands still (non-empty, non-negative).

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


class _RingCache(_Bound):
    """What the clocked layers' caches share: a complex state buffer ``buf`` ``(B, ...)`` and its views."""
    _DERIVED = _Bound._DERIVED + ("_host", "_runs")

    @property
    def state(self):
        return self.buf

    @property
    def batch_size(self):
        return self.buf.shape[0]

    @property
    def real_dtype(self):
        """Precision of the update: float64 for a complex128 buffer, else float32."""
        return torch.float64 if self.buf.dtype == torch.complex128 else torch.float32

    @property
    def nbytes(self):
        return sum(v.numel() * v.element_size() for v in self._tensors())

    def detach(self):
        new = copy.copy(self)
        new.buf = self.buf.detach()
        return new


@dataclass(eq=False)
class ClockedCache(_RingCache):
    """Decode state of a :class:`Clocked` layer: a ring ``buf`` ``(B, R, H, N2)`` complex per row, the
    row's write position ``w`` ``(B,)`` (its tick ``j`` lives in slot ``(w - n + j) mod R``), its tick
    count ``n`` ``(B,)`` and the number ``t`` of tokens consumed. ``R = k_max + 1`` (1 for S4D). Copies,
    pickling and :meth:`reset` behave as the other caches' (:mod:`nn.cache`)."""
    buf: torch.Tensor
    w: torch.Tensor
    n: torch.Tensor
    t: int = 0
    max_seqlen: int | None = field(default=None, repr=False)

    def _tensors(self):
        return [self.buf, self.w, self.n]

    @property
    def n_slots(self):
        return self.buf.shape[1]


class Clocked(nn.Module):
    """A DS4D / S4D layer run in its own time: the clock's ticks advance it, other steps hold it.

    Parameters
    ----------
    inner : nn.DS4D or nn.S4D
        The layer (``transposed=False``). Its delays count ticks: build it with ``l_max`` the longest
        *tick count* a sequence has (``None``: from the first compacted batch).

    The layer's training path is exact (the inner FFT path on the compacted sequence); ``mode=
    "recurrent"`` runs the inner recurrence on it. Decoding (``allocate_inference_cache``, ``step``,
    ``prefill``) needs a decodable inner layer without the input tap (refused by name otherwise).
    """

    def __init__(self, inner, gate=None):
        super().__init__()
        if getattr(inner, "transposed", False):
            raise ValueError("Clocked needs an inner layer with transposed=False (inputs (B, L, H))")
        self.inner = inner
        self.H, self.N2 = inner.H, inner.N2
        self.gate = gate
        from .engine import StepMemo
        self._soft_memo = StepMemo()

    @property
    def cache_type(self):
        return ClockedCache

    # ------------------------------------------------------------------ training path
    def forward(self, x, ticks=None, mode="fft", lengths=None):
        """``x`` ``(B, L, H)``, ``ticks`` ``(B, L)`` bool (None: every step ticks, the inner layer itself)
        -> ``(B, L, H)``. ``lengths`` (a right-padded batch) is refused with a clock: mark the padding as
        pauses instead (``ticks`` False), which is what the clock is for."""
        if lengths is not None:
            raise ValueError("Clocked: pass the padding as pauses in ticks (False), not lengths=")
        if not torch.is_tensor(x) or x.dim() != 3 or x.shape[-1] != self.H:
            raise ValueError(f"Clocked expects x of shape (B, L, {self.H}), got "
                             f"{tuple(x.shape) if torch.is_tensor(x) else type(x).__name__}")
        if self.gate is not None:                                       # the learned clock: a scan
            from .selective import soft_forward
            c = self.gate(x)                                            # (B, L) in (0, 1)
            if ticks is not None:
                c = c * check_ticks(ticks, x.shape[0], x.shape[1], x.device).to(c.dtype)
            return soft_forward(self.inner, x.transpose(1, 2), c).transpose(1, 2)
        if ticks is None:
            return self.inner(x, mode=mode)
        idx = clock_index(check_ticks(ticks, x.shape[0], x.shape[1], x.device))
        xt = x.transpose(1, 2)                                          # (B, H, L)
        xc = compact(xt, idx)                                           # (B, H, Lc), left-padded
        yc = self.inner(xc.transpose(1, 2), mode=mode).transpose(1, 2)  # (B, H, Lc)
        D = self.inner.D[:, None].to(xt.dtype)                          # (H, 1)
        return expand(yc, xt, D, idx).transpose(1, 2)                   # (B, L, H)

    # ------------------------------------------------------------------ decoding
    def _check_decode(self):
        self.inner._check_decodable()
        if getattr(self.inner, "has_tap", False):
            raise NotImplementedError("decoding a Clocked layer with the input tap is not implemented (the tap's "
                                      "input ring would have to be clocked too); build the inner DS4D without tap")

    def _constants(self, rdt):
        """``(lam, m1, m2, bbar, c, d, k)`` of the inner layer in ``rdt`` (S4D: no delayed branch, ``k = 1``)."""
        inner = self.inner
        consts = inner._step_memo.get(inner, rdt, inner._step_constants)
        if hasattr(consts, "m1"):
            return consts.lam, consts.m1, consts.m2, consts.bbar, consts.c, consts.d, consts.k
        zero = torch.zeros_like(consts.lam)
        return (consts.lam, zero, zero, consts.bbar, consts.c, consts.d,
                torch.ones(self.H, dtype=torch.int64, device=consts.lam.device))

    def allocate_inference_cache(self, batch_size, max_seqlen=None, dtype=None, *, engine=None, **kwargs):
        """A fresh :class:`ClockedCache` (complex128 for ``dtype=torch.float64``, else complex64), bound to a
        decode engine (:mod:`nn.clock_step`: ``"fused"`` on the CPU for a DS4D inner layer, else
        ``"reference"``; ``engine=`` or ``DDESYS_REFERENCE=1`` choose)."""
        self._check_decode()
        if kwargs:
            raise TypeError(f"Clocked.allocate_inference_cache got unexpected keyword argument(s) {sorted(kwargs)}")
        max_seqlen, rdt = self.inner._alloc_args(self.inner, batch_size, max_seqlen, dtype)
        if getattr(self.inner, "s_max", 0) is None and max_seqlen is not None:
            self.inner._set_range(max_seqlen)
        if hasattr(self.inner, "_require_range"):
            self.inner._require_range("allocate_inference_cache")
        rdt = torch.float64 if rdt == torch.float64 else torch.float32
        if self.gate is not None:
            from .selective import soft_allocate
            return soft_allocate(self, batch_size, max_seqlen, rdt)
        k = self._constants(rdt)[-1]
        R = int(k.max()) + 1 if hasattr(self.inner, "nu_tau") else 1
        dev = self.inner.D.device
        shape, cdt = (batch_size, R, self.H, self.inner.N2), self.inner._cache_dtype(rdt)
        # on the CPU each row's ring channel-major on its own (the fused engine steps rows one at a time)
        buf = cpu_ring(shape, cdt, per_row=True) if dev.type == "cpu" else torch.zeros(shape, dtype=cdt, device=dev)
        z = torch.zeros(batch_size, dtype=torch.int64, device=dev)
        return ClockedCache(buf, z, z.clone())._bind(self, select_clock_engine(self.inner, buf, engine), max_seqlen)

    def _check_cache(self, cache, B):
        if not isinstance(cache, _RingCache) or cache.owner is not self:
            raise ValueError("this cache was not allocated by this Clocked layer (allocate_inference_cache)")
        if cache.batch_size != B:
            raise ValueError(f"the cache holds {cache.batch_size} sequences, the input {B}")

    @torch.no_grad()
    def step(self, x_t, cache, tick=None):
        """``x_t`` ``(B, H)``, ``tick`` ``(B,)`` bool (None: all tick) -> ``(B, H)``; updates ``cache``."""
        if not torch.is_tensor(x_t) or x_t.dim() != 2 or x_t.shape[1] != self.H or not x_t.is_floating_point():
            raise ValueError(f"step expects a float x_t of shape (B, {self.H}), got "
                             f"{tuple(x_t.shape) if torch.is_tensor(x_t) else type(x_t).__name__}")
        B = x_t.shape[0]
        self._check_cache(cache, B)
        if tick is None:
            tick = torch.ones(B, dtype=torch.bool, device=x_t.device)
        elif not torch.is_tensor(tick) or tick.dtype != torch.bool:
            raise TypeError(f"tick must be a bool tensor (True where the clock ticks), got "
                            f"{getattr(tick, 'dtype', type(tick).__name__)}")
        elif tuple(tick.shape) != (B,):
            raise ValueError(f"tick must have shape (B,) = ({B},), got {tuple(tick.shape)}")
        if self.gate is not None:
            from .selective import soft_step
            if not bool(tick.all()):
                raise NotImplementedError("a gated layer sets its own clock: forced pauses (tick=False) in decoding "
                                          "are not supported")
            return soft_step(self, x_t, cache, self._soft_memo)
        lam, m1, m2, bbar, c, d, k = self._constants(cache.real_dtype)
        if int(k.max()) >= cache.n_slots and hasattr(self.inner, "nu_tau"):
            raise RuntimeError(f"the layer's delays now reach {int(k.max())} ticks, past the cache's "
                               f"{cache.n_slots - 1}: allocate a new cache")
        if cache.engine == "fused":                                  # nn.clock_step: the fused step per row
            y = ClockedFused.step(cache, x_t, tick, self.inner._step_memo.value)   # the memo's DS4DConstants
            cache.w += tick
            cache.n += tick
            cache.t += 1
            return y.to(x_t.dtype)
        buf, R = cache.buf, cache.n_slots
        xt = x_t.to(cache.real_dtype)
        zero = torch.zeros((), dtype=buf.dtype, device=buf.device)

        def read(back):                                             # state `back` ticks ago (B, H, N2), 0 before
            back = torch.as_tensor(back, device=buf.device).expand(self.H)               # (H,)
            slot = (cache.w[:, None] - back[None, :]) % R                                 # (B, H)
            h = buf.gather(1, slot[:, None, :, None].expand(B, 1, self.H, buf.shape[-1]))[:, 0]
            return torch.where((cache.n[:, None] >= back[None, :])[..., None], h, zero)

        prev = read(1)                                              # h_{n-1}
        h = delay_update(prev, read(k), read(k + 1), xt[..., None], lam, m1, m2, bbar)   # (B, H, N2)
        h = torch.where(tick[:, None, None], h, prev)
        slot = (cache.w % R)[:, None, None, None].expand(B, 1, self.H, buf.shape[-1])
        buf.scatter_(1, slot, torch.where(tick[:, None, None], h, buf.gather(1, slot)[:, 0])[:, None])
        cache.w += tick
        cache.n += tick
        cache.t += 1
        return readout(h, c, d, xt).to(x_t.dtype)

    @torch.no_grad()
    def prefill(self, x, cache, ticks=None):
        """Consume a prompt ``x`` ``(B, L, H)`` with its ``ticks`` ``(B, L)`` -> outputs ``(B, L, H)``.

        A fresh cache runs the compacted FFT path once (the inner layer's ``return_state``): its final
        ring is every row's state after its own last tick. A cache that holds tokens steps through the
        prompt (O(1) per token)."""
        B, L = x.shape[0], x.shape[1]
        self._check_cache(cache, B)
        ticks = torch.ones(B, L, dtype=torch.bool, device=x.device) if ticks is None else \
            check_ticks(ticks, B, L, x.device)
        if self.gate is not None and cache.t == 0 and L and bool(ticks.all()):
            from .selective import soft_prefill
            return soft_prefill(self, x, cache)
        if cache.t != 0 or L == 0:
            return torch.stack([self.step(x[:, t], cache, ticks[:, t]) for t in range(L)], dim=1) if L else x.clone()
        idx = clock_index(ticks)
        xt = x.transpose(1, 2)                                          # (B, H, L)
        xc = compact(xt, idx)                                           # (B, H, Lc)
        with as_prompt(self.inner):                                     # a prompt is no training length
            yc, new = self.inner(xc.transpose(1, 2), return_state=True)
        yc = yc.transpose(1, 2)                                         # (B, H, Lc)
        ring = new.buf if hasattr(new, "buf") else new.h[:, None]       # (B, R', H, N2)
        R, Lc = cache.n_slots, idx.Lc
        if ring.shape[1] != R:
            raise RuntimeError(f"the layer's delays changed since the cache was allocated ({ring.shape[1] - 1} "
                               f"ticks now, {R - 1} then): allocate a new cache")
        pos = torch.arange(Lc - R, Lc, device=x.device)                 # the last R compacted times
        h = ring.index_select(1, pos % R)                               # (B, R, H, N2), slot = time mod R
        h = torch.where((pos >= 0)[None, :, None, None], h, torch.zeros((), dtype=h.dtype, device=h.device))
        cache.buf.index_copy_(1, pos % R, h.to(cache.buf.dtype))
        cache.w.fill_(Lc)
        cache.n.copy_(idx.counts)
        cache.t = L
        D = self.inner.D[:, None].to(xt.dtype)
        return expand(yc, xt, D, idx).transpose(1, 2)
