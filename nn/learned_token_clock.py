"""A clock learned per token id: the model learns which of its input ids carry no time.

:class:`nn.clock.TokenClock` is told the ids at which time stands still (padding, fillers).
:class:`LearnedTokenClock` learns them: one logit per id of the vocabulary, ``tick_t = [z[id_t] > 0]``,
the same ticks for every clocked layer of the model. The system is the given clock's (docs/theory.md
§10.1-§10.3): exact between ticks, LTI in ticks, DS4D's stability for every clock, O(1) decoding per token
with a ring per row, and a parallel training path equal to the recurrence. Only the training signal is
relaxed, as for the binary gate of :mod:`nn.learned_clock`: the forward value is the binary clock, its
slope the surrogate's ``sigma(z / temperature)`` (straight-through), and every clocked layer gives the clock
its exact derivative at the binary point (:meth:`nn.clock.Clocked.run`).

Why per id, not per layer on the layer's input: a gate ``w . x + b`` shares ``w`` and ``b`` between every
token, so the time cost's push moves every token's logit together; padding drawn from several ids pushes
each id's own direction by only its share, and the shared push pauses data tokens too
(docs/experiments/clock-pads-cpu). Here each id owns its logit: the cost moves an id's logit by its own
frequency, the task's loss holds the ids it reads.

Limits: the ticks depend on the id alone, so a filler that is also a data id elsewhere (data-like noise
inside a gap) cannot pause; the model's input must be token ids.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .learned_clock import straight_through

__all__ = ["LearnedTokenClock", "TokenLogits"]


class TokenLogits(nn.Module):
    """One learned logit per token id, ``z = gain * u``: the parameter of a clock learned per id
    (:class:`LearnedTokenClock`, :class:`nn.FlipTokenClock`), which decides from it how the id ticks.

    Parameters
    ----------
    vocab_size : int
        Ids ``0 .. vocab_size - 1``.
    z0 : float
        Every id's logit at the start.
    gain : float
        ``z = gain * u`` for the parameter ``u`` ``(vocab_size,)``: an optimizer that moves each parameter
        by about its learning rate per step (Adam) moves a logit by ``gain`` times it.
    """

    def __init__(self, vocab_size, z0, gain):
        super().__init__()
        if isinstance(vocab_size, bool) or not (isinstance(vocab_size, int) and vocab_size > 0):
            raise ValueError(f"vocab_size must be a whole number > 0, got {vocab_size!r}")
        if not gain > 0:
            raise ValueError(f"gain must be positive, got {gain!r}")
        self.gain = float(gain)
        self.u = nn.Parameter(torch.full((vocab_size,), float(z0) / self.gain))      # (V,)

    @property
    def vocab_size(self):
        return self.u.shape[0]

    def logits(self, tokens=None):
        """The clock's logits ``z = gain * u``: per id, or at ``tokens``.

        Parameters
        ----------
        tokens : Tensor ``(B, L)`` or ``(B,)``, integer, optional

        Returns
        -------
        Tensor ``(V,)``, or the shape of ``tokens``
            Above 0: the id leans towards ticking (each clock says how it decides).

        Raises
        ------
        TypeError
            ``tokens`` that are not integer ids.
        ValueError
            Ids outside ``[0, vocab_size)``.
        """
        z = self.gain * self.u
        if tokens is None:
            return z
        return z[self.check_ids(tokens)]

    def check_ids(self, tokens):
        """``tokens`` if they are integer ids in ``[0, vocab_size)``.

        Parameters
        ----------
        tokens : Tensor, integer

        Returns
        -------
        Tensor
            ``tokens`` itself.

        Raises
        ------
        TypeError
            ``tokens`` that are not integer ids.
        ValueError
            Ids outside ``[0, vocab_size)``.
        """
        if not torch.is_tensor(tokens) or tokens.is_floating_point() or tokens.dtype == torch.bool:
            raise TypeError(f"{type(self).__name__} needs integer token ids (a model with embedding=True)")
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= self.vocab_size):
            raise ValueError(f"{type(self).__name__}: token ids must lie in [0, {self.vocab_size}), got "
                             f"{int(tokens.min())} .. {int(tokens.max())}")
        return tokens


class LearnedTokenClock(TokenLogits):
    """``tick_t = [z[id_t] > 0]``, one learned logit per token id, shared by every clocked layer; pass it as
    a model's clock (``SequenceModel(..., clock=LearnedTokenClock(vocab_size))``) and train it with
    :class:`nn.TimeCost`.

    Parameters
    ----------
    vocab_size : int
        Ids ``0 .. vocab_size - 1`` (the model's ``d_input`` with ``embedding=True``).
    init : float, default 0.9
        ``sigma(z / temperature)`` at the start, the same for every id (``> 0.5``: every token ticks).
    temperature : float, default 1.0
        Scale of the surrogate's slope (the forward value does not depend on it).
    gain : float, default 16.0
        ``z = gain * u`` for the parameter ``u`` ``(vocab_size,)``: an id's logit is one number, so with an
        optimizer that moves each parameter by about its learning rate per step (Adam) it would take
        ``logit(init) / lr`` steps to change sign; ``gain`` makes that ``logit(init) / (gain * lr)``.
    noise : float, default 0.0
        In training (``module.training`` under autograd) each row of a batch decides each id by
        ``z + noise * e`` with ``e`` logistic noise drawn once per row and id (from the global RNG, as
        dropout does): an id near its threshold pauses in some rows and ticks in others, so the layers
        learn under both clocks and the loss can tell which it prefers. ``0``: the threshold itself.
        Validation, inference and decoding never sample.

    Notes
    -----
    Shapes: ``tokens (B, L)`` or ``(B,)`` int -> ``(B, L)`` or ``(B,)``: under autograd float values exactly
    0.0 or 1.0 whose slope is the surrogate's (every clocked layer passes the clock its gradient), else bool
    ticks (what a given clock returns: decoding, ``torch.no_grad()``).
    """

    #: its output is a learned clock (a time cost watches it: :class:`nn.TimeCost`)
    learned_clock = True

    def __init__(self, vocab_size, init=0.9, temperature=1.0, gain=16.0, noise=0.0):
        if not 0.0 < init < 1.0:
            raise ValueError(f"init must lie in (0, 1), got {init!r}")
        if not temperature > 0:
            raise ValueError(f"temperature must be positive, got {temperature!r}")
        if not noise >= 0:
            raise ValueError(f"noise must be >= 0, got {noise!r}")
        super().__init__(vocab_size, math.log(init / (1.0 - init)) * temperature, gain)
        self.temperature, self.noise = float(temperature), float(noise)

    def pauses(self):
        """The ids at which the clock stands still now (logit <= 0).

        Returns
        -------
        list of int
        """
        return torch.nonzero(self.logits() <= 0).flatten().tolist()

    def ticks(self, tokens):
        """The clock as bool: ``logits(tokens) > 0``.

        Parameters
        ----------
        tokens : Tensor ``(B, L)`` or ``(B,)``, integer

        Returns
        -------
        Tensor, bool, the shape of ``tokens``
        """
        return self.logits(tokens) > 0

    def forward(self, tokens):
        """The clock at ``tokens``: bool ticks, or under autograd the straight-through float clock.

        Parameters
        ----------
        tokens : Tensor ``(B, L)`` or ``(B,)``, integer

        Returns
        -------
        Tensor, the shape of ``tokens``
            Bool without gradients; under autograd float (the parameter's dtype) with values exactly 0.0
            or 1.0 and the sigmoid's slope (in training with ``noise``: of the row's noisy logit).
        """
        z = self.logits(tokens)
        if not torch.is_grad_enabled():
            return z > 0
        if self.noise and self.training:
            rows = tokens.reshape(tokens.shape[0], -1) if tokens.dim() > 1 else tokens[:, None]      # (B, L)
            u = torch.rand(rows.shape[0], self.vocab_size, device=z.device, dtype=z.dtype).clamp_(1e-6, 1 - 1e-6)
            e = torch.log(u) - torch.log1p(-u)                                      # (B, V) logistic
            z = z + self.noise * e.gather(1, rows).reshape(z.shape)
        return straight_through(z, self.temperature)

    def extra_repr(self):
        return f"vocab_size={self.vocab_size}, temperature={self.temperature:g}, gain={self.gain:g}" + \
            (f", noise={self.noise:g}" if self.noise else "")
