"""A learned binary clock: the layer decides from its input at which steps its time advances, and runs the
exact clocked system of docs/theory.md §10.1 with it.

The soft clock of :mod:`nn.selective` (§10.4) lets a gate ``c_t`` in ``(0, 1)`` set how far time advances;
its decoding keeps every state, since a slow clock lets a delayed read reach back any number of real steps.
Here the clock is binary, ``tick_t = [w . x_t + b > 0]``: the system is the given clock's (:mod:`nn.clock`)
with ticks chosen by the layer, so everything of §10.2-§10.3 holds (LTI in ticks, DS4D's stability for
every clock, an O(1) ring per row for decoding). Only the training signal is relaxed:

* forward (training): the soft scan of :mod:`ddesys.selective` at ``c`` in ``{0, 1}``, which *is* the binary
  clocked system (§10.4), so the loss is the binary system's;
* backward: the scan's exact derivative with respect to each ``c_t`` at that binary point, carried to the
  gate by the sigmoid's slope (a straight-through estimator: ``c = tick + sigma(z) - stop_grad(sigma(z))``,
  ``z = (w . x_t + b) / temperature``);
* without gradients (validation, inference): the given clock's exact path, the inner layer's FFT on the
  compacted ticks (:class:`nn.clock.Clocked`); decoding: :class:`nn.clock.ClockedCache`, ``k_max + 1`` ticks
  per row, the tick decided by the gate on the token's own input.

Parts: :class:`HardGateClock` (the gate, ``(B, L, H) -> (B, L)`` in ``{0, 1}``) and :class:`HardClocked`
(a DS4D / S4D layer run in the ticks its gate sets).
"""
from __future__ import annotations

import torch
from torch import nn

from .clock import Clocked
from .common import check_clocked_input, check_ticks
from .selective import GateClock, soft_forward

__all__ = ["HardClocked", "HardGateClock"]


class HardGateClock(nn.Module):
    """``tick_t = [w . x_t + b > 0]`` in ``{0, 1}``, trained through ``sigma((w . x_t + b) / temperature)``.

    Parameters
    ----------
    d_model : int
        Channels ``H`` of the layer input.
    init : float, default 0.9
        ``sigma(b / temperature)`` at the start (``> 0.5``: every step ticks, the paper's DS4D).
    temperature : float, default 1.0
        Scale of the surrogate's slope (the forward value does not depend on it).
    seed : int or None
        Seeds ``w`` (the global RNG is untouched when given).

    Shapes: ``x (B, L, H) -> c (B, L)``; ``x_t (B, H) -> (B,)``; values exactly 0.0 or 1.0.
    """

    def __init__(self, d_model, init=0.9, temperature=1.0, seed=None):
        super().__init__()
        if not temperature > 0:
            raise ValueError(f"temperature must be positive, got {temperature}")
        soft = GateClock(d_model, init=init, seed=seed)          # the same initialization as the soft gate
        self.w = nn.Parameter(soft.w.detach().clone())           # (H,)
        self.b = nn.Parameter(soft.b.detach().clone() * temperature)
        self.temperature = float(temperature)

    @classmethod
    def from_soft(cls, gate, temperature=1.0):
        """The binary clock ``[w . x + b > 0]`` of a trained :class:`nn.selective.GateClock` (``c > 1/2``)."""
        out = cls(gate.w.shape[0], temperature=temperature, seed=0)   # w, b overwritten below
        with torch.no_grad():
            out.w.copy_(gate.w)
            out.b.copy_(gate.b)
        return out

    def logits(self, x):
        """``w . x + b`` ``(B, L)`` (or ``(B,)``)."""
        return x @ self.w.to(x.dtype) + self.b.to(x.dtype)

    def ticks(self, x):
        """The clock as bool: ``logits(x) > 0``."""
        return self.logits(x) > 0

    def forward(self, x):
        z = self.logits(x)
        hard = (z > 0).to(z.dtype)
        if not torch.is_grad_enabled():
            return hard
        soft = torch.sigmoid(z / self.temperature)
        return hard + (soft - soft.detach())                     # value exactly hard; slope sigma'

    def extra_repr(self):
        return f"d_model={self.w.shape[0]}, temperature={self.temperature:g}"


class HardClocked(Clocked):
    """A DS4D / S4D layer run in the ticks its own binary gate sets (module docstring).

    Parameters
    ----------
    inner : nn.DS4D or nn.S4D
        The layer (``transposed=False``); its delays count ticks.
    gate : HardGateClock
        The clock, ``(B, L, H) -> (B, L)`` in ``{0, 1}``, with ``ticks(x)`` its bool form.

    ``forward`` with gradients enabled runs the soft scan at the binary clock (gradients for the layer,
    the input and, through the gate's surrogate, the clock); without, the compacted FFT path. A given
    clock's ``ticks`` (``forward`` / ``step`` / ``prefill``) pause on top of the gate's. Decoding is
    :class:`nn.clock.Clocked`'s, O(1) per token.
    """

    def __init__(self, inner, gate):
        super().__init__(inner)
        self.gate = gate

    def forward(self, x, ticks=None, mode="fft", lengths=None):
        """``x`` ``(B, L, H)`` -> ``(B, L, H)``; ``mode`` selects the inner path of the compacted run (no
        gradients) and is ignored by the scan."""
        check_clocked_input(self, x, lengths)
        c = self.gate(x)                                                # (B, L) in {0, 1}
        if ticks is not None:
            c = c * check_ticks(ticks, x.shape[0], x.shape[1], x.device).to(c.dtype)
        if torch.is_grad_enabled():
            return soft_forward(self.inner, x.transpose(1, 2), c).transpose(1, 2)
        return super().forward(x, ticks=c > 0.5, mode=mode)

    def _ticks(self, x, ticks):
        own = self.gate.ticks(x)
        return own if ticks is None else own & ticks

    @torch.no_grad()
    def step(self, x_t, cache, tick=None):
        """One token ``x_t`` ``(B, H)`` -> ``(B, H)``: it ticks where the gate (and ``tick``, if given) says so."""
        return super().step(x_t, cache, self._ticks(x_t, tick))

    @torch.no_grad()
    def prefill(self, x, cache, ticks=None):
        """A prompt ``x`` ``(B, L, H)`` -> ``(B, L, H)``, in the ticks the gate sets."""
        return super().prefill(x, cache, self._ticks(x, ticks))
