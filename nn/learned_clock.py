"""A learned binary clock: the layer decides from its input at which steps its time advances, and runs the
exact clocked system of docs/theory.md §10.1 with it.

The soft clock of :mod:`nn.selective` (§10.4) lets a gate ``c_t`` in ``(0, 1)`` set how far time advances;
its decoding keeps every state, since a slow clock lets a delayed read reach back any number of real steps.
Here the clock is binary, ``tick_t = [w . x_t + b > 0]``: the system is the given clock's (:mod:`nn.clock`)
with ticks chosen by the layer, so everything of §10.2-§10.3 holds (LTI in ticks, DS4D's stability for
every clock, an O(1) ring per row for decoding). Only the training signal is relaxed:

* forward (training): the binary clocked system itself; for an inner layer without a delayed branch (S4D)
  the FFT on the compacted ticks, otherwise the soft scan of :mod:`ddesys.selective` at ``c`` in ``{0, 1}``
  (which *is* the binary clocked system, §10.4);
* backward: the soft system's exact derivative with respect to each ``c_t`` at that binary point (by FFT,
  :mod:`nn.tick_grad`, for S4D; the scan's otherwise), carried to the gate by the sigmoid's slope (a
  straight-through estimator: ``c = tick + sigma(z) - stop_grad(sigma(z))``, ``z = (w . x_t + b) /
  temperature``);
* without gradients (validation, inference): the given clock's exact path, the inner layer's FFT on the
  compacted ticks (:class:`nn.clock.Clocked`); decoding: :class:`nn.clock.ClockedCache`, ``k_max + 1`` ticks
  per row, the tick decided by the gate on the token's own input.

Parts: :class:`HardGateClock` (the gate, ``(B, L, H) -> (B, L)`` in ``{0, 1}``), :class:`HardClocked`
(a DS4D / S4D layer run in the ticks its gate sets), :class:`BinaryClock` (the same as a part of a model,
``SequenceModel(clock=BinaryClock())``) and :class:`TimeCost` (the training prior that makes a
learned clock find its pauses: internal time is spent only where the loss needs it).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .clock import Clocked
from .selective import GateClock

__all__ = ["BinaryClock", "HardClocked", "HardGateClock", "TimeCost", "straight_through"]


def straight_through(z, temperature):
    """The binary clock ``[z > 0]`` whose slope is ``sigma(z / temperature)``'s (a straight-through estimator):
    values exactly 0.0 or 1.0 in ``z``'s dtype, the shape of ``z``."""
    hard = (z > 0).to(z.dtype)
    soft = torch.sigmoid(z / temperature)
    return hard + (soft - soft.detach())                     # value exactly hard; slope sigma'


class HardGateClock(nn.Module):
    """``tick_t = [z_t > 0]`` in ``{0, 1}``, ``z_t = w . x_t + b`` (plus ``v . gelu(W x_t + a)`` with a
    hidden layer), trained through ``sigma(z_t / temperature)``.

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
    input_grad : bool, default True
        Pass the surrogate's gradient on to the gate's input (the embedding and the layers below). False:
        only ``w`` and ``b`` learn from it (the input is read detached), so a time cost cannot move the
        input towards pausing. An attribute: settable on a built model.
    hidden : int, default 0
        Width of the gate's hidden layer (``W`` ``(hidden, H)``, ``a``, ``v`` ``(hidden,)``; ``v`` starts
        small, so the clock starts at ``init`` as without it); ``0``: the linear gate, whose shared ``w``
        and ``b`` move every token's logit together. More capacity is not what padding drawn from several
        ids lacks: measured there, the hidden layer paused data tokens even more than the linear gate
        (docs/experiments/clock-pads-select).

    Notes
    -----
    Shapes: ``x (B, L, H) -> c (B, L)``; ``x_t (B, H) -> (B,)``; values exactly 0.0 or 1.0. The tick
    depends on the token's own input only, so decoding stays O(1) per token whatever ``hidden``.
    """

    def __init__(self, d_model, init=0.9, temperature=1.0, seed=None, input_grad=True, hidden=0):
        super().__init__()
        if not temperature > 0:
            raise ValueError(f"temperature must be positive, got {temperature}")
        if isinstance(hidden, bool) or not (isinstance(hidden, int) and hidden >= 0):
            raise ValueError(f"hidden must be a whole number >= 0, got {hidden!r}")
        soft = GateClock(d_model, init=init, seed=seed)          # the same initialization as the soft gate
        self.w = nn.Parameter(soft.w.detach().clone())           # (H,)
        self.b = nn.Parameter(soft.b.detach().clone() * temperature)
        self.temperature = float(temperature)
        self.input_grad = bool(input_grad)
        self.hidden = hidden
        if hidden:
            g = torch.Generator().manual_seed(seed + 1) if seed is not None else None
            self.W = nn.Parameter(torch.randn(hidden, d_model, generator=g) / d_model ** 0.5)    # (hidden, H)
            self.a = nn.Parameter(torch.zeros(hidden))                                           # (hidden,)
            self.v = nn.Parameter(torch.randn(hidden, generator=g) / hidden ** 0.5 * 0.1)         # (hidden,)

    @classmethod
    def from_soft(cls, gate, temperature=1.0):
        """The binary clock ``[w . x + b > 0]`` of a trained :class:`nn.selective.GateClock` (``c > 1/2``).

        Parameters
        ----------
        gate : nn.selective.GateClock
            Its ``w`` ``(H,)`` and ``b`` are copied.
        temperature : float, default 1.0
            The surrogate's temperature.

        Returns
        -------
        HardGateClock

        Raises
        ------
        ValueError
            A ``temperature <= 0``.
        """
        out = cls(gate.w.shape[0], temperature=temperature, seed=0)   # w, b overwritten below
        with torch.no_grad():
            out.w.copy_(gate.w)
            out.b.copy_(gate.b)
        return out

    def logits(self, x):
        """The gate's logits ``w . x + b`` (plus ``v . gelu(W x + a)`` with a hidden layer).

        Parameters
        ----------
        x : Tensor ``(B, L, H)`` or ``(B, H)``

        Returns
        -------
        Tensor ``(B, L)`` or ``(B,)``
            In ``x``'s dtype.
        """
        z = x @ self.w.to(x.dtype) + self.b.to(x.dtype)
        if self.hidden:
            z = z + F.gelu(x @ self.W.to(x.dtype).T + self.a.to(x.dtype)) @ self.v.to(x.dtype)
        return z

    def ticks(self, x):
        """The clock as bool: ``logits(x) > 0``.

        Parameters
        ----------
        x : Tensor ``(B, L, H)`` or ``(B, H)``

        Returns
        -------
        Tensor ``(B, L)`` or ``(B,)``, bool
        """
        return self.logits(x) > 0

    def forward(self, x):
        """The clock ``c`` in ``{0, 1}``; with gradients enabled its slope is the sigmoid's (straight-through).

        Parameters
        ----------
        x : Tensor ``(B, L, H)`` or ``(B, H)``
            Read detached when ``input_grad`` is False.

        Returns
        -------
        Tensor ``(B, L)`` or ``(B,)``
            Values exactly 0.0 or 1.0, in ``x``'s dtype.
        """
        z = self.logits(x if self.input_grad else x.detach())
        if not torch.is_grad_enabled():
            return (z > 0).to(z.dtype)
        return straight_through(z, self.temperature)

    def extra_repr(self):
        return f"d_model={self.w.shape[0]}, temperature={self.temperature:g}" + \
            (f", hidden={self.hidden}" if self.hidden else "") + ("" if self.input_grad else ", input_grad=False")


class HardClocked(Clocked):
    """A DS4D / S4D layer run in the ticks its own binary gate sets (module docstring).

    Parameters
    ----------
    inner : nn.DS4D or nn.S4D
        The layer (``transposed=False``); its delays count ticks.
    gate : HardGateClock
        The clock, ``(B, L, H) -> (B, L)`` in ``{0, 1}``, with ``ticks(x)`` its bool form.

    Notes
    -----
    ``forward`` runs the compacted FFT path; with gradients enabled it also gives the clock its gradient
    (:mod:`nn.tick_grad`; an inner layer with a delayed branch runs the soft scan at the binary clock
    instead), carried to the gate through its surrogate. A given
    clock's ``ticks`` (``forward`` / ``step`` / ``prefill``) pause on top of the gate's. Decoding is
    :class:`nn.clock.Clocked`'s, O(1) per token.
    """

    def __init__(self, inner, gate):
        super().__init__(inner)
        self.gate = gate

    def run(self, x, ticks, mode):
        """The training path in the gate's ticks, with the clock's gradient under autograd.

        Parameters
        ----------
        x : Tensor ``(B, L, H)``
        ticks : Tensor ``(B, L)``, bool or float, or None
            Pauses forced on top of the gate's (float: a learned given clock's, which gets its gradient
            too: :meth:`nn.clock.Clocked.run`).
        mode : {"fft", "recurrent"}
            The inner path of the compacted run (no gradients); ignored by the scan.

        Returns
        -------
        Tensor ``(B, L, H)``
        """
        c = self.gate(x)                                                # (B, L) in {0, 1}
        if ticks is not None:
            c = c * ticks.to(c.dtype)
        return super().run(x, c, mode)

    def _ticks(self, x, ticks):
        own = self.gate.ticks(x)
        return own if ticks is None else own & ticks

    @torch.no_grad()
    def step(self, x_t, cache, tick=None):
        """One token of decoding: it ticks where the gate (and ``tick``, if given) says so.

        Parameters
        ----------
        x_t : Tensor ``(B, H)``
        cache : ClockedCache
            This layer's; updated in place.
        tick : Tensor ``(B,)`` bool, optional
            Pauses forced on top of the gate's.

        Returns
        -------
        Tensor ``(B, H)``

        Raises
        ------
        ValueError, TypeError, RuntimeError
            As :meth:`nn.clock.Clocked.step`.
        """
        return super().step(x_t, cache, self._ticks(x_t, tick))

    @torch.no_grad()
    def prefill(self, x, cache, ticks=None):
        """Consume a prompt in the ticks the gate sets.

        Parameters
        ----------
        x : Tensor ``(B, L, H)``
        cache : ClockedCache
            This layer's; moved on by ``L`` tokens.
        ticks : Tensor ``(B, L)`` bool, optional
            Pauses forced on top of the gate's.

        Returns
        -------
        Tensor ``(B, L, H)``

        Raises
        ------
        ValueError, TypeError
            As :meth:`nn.clock.Clocked.prefill`.
        """
        return super().prefill(x, cache, self._ticks(x, ticks))


class BinaryClock:
    """The binary learned clock as a part of a model: ``SequenceModel(clock=BinaryClock())`` runs every
    block's layer in the ticks its own :class:`HardGateClock` sets (:class:`HardClocked`);
    ``clock="binary"`` is ``BinaryClock(seed=layer_kw["seed"])``. Train it with :class:`TimeCost`.

    Parameters
    ----------
    init, temperature, input_grad, hidden :
        Every gate's (:class:`HardGateClock`).
    seed : int or None
        Seeds every gate's ``w`` (the same seed for each block; the global RNG is untouched when given).
    """

    def __init__(self, init=0.9, temperature=1.0, seed=None, input_grad=True, hidden=0):
        self.init, self.temperature, self.seed, self.input_grad = init, temperature, seed, input_grad
        self.hidden = hidden

    def wrap(self, layer, index):
        """Block ``index``'s ``layer`` in the ticks of a new gate.

        Parameters
        ----------
        layer : nn.DS4D or nn.S4D
            ``transposed=False``.
        index : int
            The block's place in the model (unused: every gate gets the same seed).

        Returns
        -------
        HardClocked

        Raises
        ------
        TypeError, ValueError
            As :class:`HardClocked` (a layer without the inner members, a transposed one) and
            :class:`HardGateClock`.
        """
        gate = HardGateClock(layer.H, init=self.init, temperature=self.temperature, seed=self.seed,
                             input_grad=self.input_grad, hidden=self.hidden)
        return HardClocked(layer, gate)

    def __repr__(self):
        return (f"BinaryClock(init={self.init}, temperature={self.temperature}, seed={self.seed}, "
                f"input_grad={self.input_grad}, hidden={self.hidden})")


class TimeCost:
    """The time cost of a model's learned clocks: ``weight`` times the mean clock over every position and
    clocked layer of the last forward pass with gradients, for ``steps`` optimizer steps (the first ones, or
    those after ``start``).

    A learned clock starts ticking everywhere; the cost is a prior that internal time is spent only where
    the loss needs it, so the gates learn to pause where the input carries nothing the task reads (the
    padding of a variable lag), without being told where that is. Left on, it goes on to pause data
    tokens as well (a paused token is never written), so it is switched off after ``steps``: the pauses
    found by then are kept by the task's own gradient.

    Parameters
    ----------
    model : torch.nn.Module
        Its learned clocks are watched by forward hooks: the ``gate`` modules of its clocked layers
        (:class:`HardClocked`, :class:`nn.selective.SoftClocked`) and modules marked ``learned_clock``
        (:class:`nn.LearnedTokenClock`, a model's clock shared by its layers); :meth:`remove` takes them
        away. A model without one is refused (``ValueError``: its cost would be zero at every step).
    weight : float, default 0.3
        Cost per unit of mean clock, in units of the per-token loss.
    steps : int, default 100
        Optimizer steps with the cost at ``weight`` (``0``: always).
    after : float, default 0.0
        The weight after ``steps``: a small floor keeps the pauses found from drifting back.
    start : int, default 0
        Optimizer steps with no cost before the ``steps`` at ``weight`` begin: the task loss alone first,
        so that the layers learn to use the tokens the task reads before the cost pushes every clock down.

    Notes
    -----
    Use: ``loss = task_loss + cost(step)`` after the forward pass (``cost(step) * n`` for a loss summed
    over ``n`` tokens); ``cost(step)`` is a scalar tensor (``0.`` when off or when no clock ran).
    """

    def __init__(self, model, weight=0.3, steps=100, after=0.0, start=0):
        if not (weight >= 0 and after >= 0) or int(steps) != steps or steps < 0 or int(start) != start or start < 0:
            raise ValueError(f"weight and after must be >= 0, steps and start counts >= 0, got {weight!r}, {after!r}, "
                             f"{steps!r}, {start!r}")
        self.weight, self.steps, self.after, self.start = float(weight), int(steps), float(after), int(start)
        self._seen = {}
        gates = [m.gate for m in model.modules() if isinstance(getattr(m, "gate", None), nn.Module)]
        gates += [m for m in model.modules() if getattr(m, "learned_clock", False) and m not in gates]
        if not gates:
            raise ValueError(f"TimeCost: {type(model).__name__} has no learned clock (no gate, no learned_clock "
                             "module), so the cost would be 0.0 at every step; build the model with clock='binary' "
                             "(or 'learned', or nn.LearnedTokenClock), or drop the time cost (a given clock such as "
                             "TokenClock has no cost)")
        self._hooks = [g.register_forward_hook(self._record(i)) for i, g in enumerate(gates)]

    def _record(self, i):
        def hook(mod, inp, out):
            if torch.is_grad_enabled():
                self._seen[i] = out.mean()
        return hook

    @property
    def n_clocks(self):
        """How many clocked layers are watched."""
        return len(self._hooks)

    def weight_at(self, step):
        """The cost's weight at an optimizer step.

        Parameters
        ----------
        step : int
            The optimizer step, 1-based.

        Returns
        -------
        float
            ``0`` up to ``start``, then ``weight`` for ``steps`` steps (always with ``steps = 0``), then
            ``after``.
        """
        if step <= self.start:
            return 0.0
        return self.weight if self.steps == 0 or step - self.start <= self.steps else self.after

    def __call__(self, step):
        seen, self._seen = list(self._seen.values()), {}
        w = self.weight_at(step)
        if not (seen and w > 0):
            return torch.zeros(())
        return w * torch.stack(seen).mean()

    def remove(self):
        """Detach the hooks from the model."""
        for h in self._hooks:
            h.remove()
        self._hooks = []
