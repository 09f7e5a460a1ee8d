"""DS4D's delayed input tap (``DS4D(tap=True)``) and its coarse-to-fine window schedule.

The mathematics is :mod:`ddesys.tap` (docs/theory.md §8): each channel adds ``e * x(t - s_tap)`` to its
output, read through a hat window of half-width ``tap_width`` (1: linear interpolation). The tap is a
pure delay (no echoes, no response before its delay) whose gradient sees ``2 tap_width`` samples, so
a wide start lets the delay travel to a lag it did not start near; :class:`TapWidthSchedule` shrinks
the width to 1 over the first part of training.
"""
from __future__ import annotations

import torch
from torch import nn

from ddesys.parameterization import delay_steps
from ddesys.tap import check_width, tap_filter, tap_kernel, tap_support

from .optim import register_optim

__all__ = ["DelayedTap", "TapWidthSchedule", "set_tap_width"]


def _bits(w):
    return torch.tensor([w], dtype=torch.float64).view(torch.int64).clone()


class DelayedTap:
    """Mixin of :class:`nn.DS4D`: parameters ``tap_e`` and ``nu_tap`` ``(C,)`` when ``tap=True``; the tap
    delay is ``s_min + (s_max - s_min) sigmoid(nu_tap)`` (the feedback delay's range). The window's
    half-width :attr:`tap_width` is saved in the state dict (float64 bits in the int64 buffer
    ``tap_width_bits``, untouched by ``.half()``)."""

    def _init_tap(self, C, g, tap_lr):
        """Create the tap's parameters (after the feedback branch's: seeded layers stay reproducible)."""
        self.tap_e = nn.Parameter(0.5 * torch.randn(C, generator=g))                      # (C,)
        self.nu_tap = nn.Parameter(torch.zeros(C))                                         # (C,)
        self._tap_order = torch.randperm(C, generator=g) if self.delay_init == "grid" else None
        self.register_buffer("tap_width_bits", _bits(self._tap_width))
        register_optim(self, "nu_tap", {"weight_decay": 0.0, **({"lr": tap_lr} if tap_lr is not None else {})})
        register_optim(self, "tap_e", {"weight_decay": 0.0})

    @property
    def has_tap(self):
        return "nu_tap" in self._parameters

    @property
    def tap_width(self):
        """Half-width of the tap's read window in steps (``>= 1``; 1: linear interpolation). Settable."""
        return self._tap_width

    @tap_width.setter
    def tap_width(self, width):
        if not self.has_tap:
            raise AttributeError(f"{type(self).__name__} has no tap: build it with tap=True")
        self._tap_width = check_width(width)
        self.tap_width_bits.copy_(_bits(self._tap_width))
        self._step_memo.clear()

    def _place_tap(self, s_min, s_max):
        """Initial tap delays: the grid of the feedback delays in another random order, or ``tau0``."""
        if not self.has_tap:
            return
        C = self.nu_tap.shape[0]
        if self._tap_order is not None:
            s0 = torch.linspace(s_min, s_max, C + 2, dtype=torch.float64)[1:-1][self._tap_order]
        else:
            s0 = torch.full((C,), float(self.tau0), dtype=torch.float64)
        with torch.no_grad():
            self.nu_tap.copy_(torch.logit((s0 - s_min) / (s_max - s_min)).to(self.nu_tap))

    def tap_delay(self, dtype=torch.float64):
        """The tap delays in steps, ``(C,)`` (differentiable)."""
        if not self.has_tap:
            raise AttributeError(f"{type(self).__name__} has no tap: build it with tap=True")
        self._require_range("reading the tap delays")
        return delay_steps(self.nu_tap, self.s_min, self.s_max, dtype)

    def _tap_kernel(self, L, dtype):
        """The tap's kernel ``e_c w_{c,t}`` ``(C, L)`` in ``dtype`` (:func:`ddesys.tap.tap_kernel`)."""
        return tap_kernel(self.tap_e.to(dtype), self.tap_delay(dtype), self._tap_width, L)

    def _tap_filter(self, x):
        """Time-domain tap output for ``x`` ``(B, H, L)`` float64 (the recurrent path)."""
        return tap_filter(self.tap_e.double(), self.tap_delay(), self._tap_width, x)

    def _tap_constants(self, rdt):
        """Decode constants: offsets ``j`` int64 ``(H, J)``, weights times gain ``(H, J)`` with the
        non-causal offsets zeroed, and the ring size ``Rx = max j + 1``."""
        j, w = tap_support(self.tap_delay(), self._tap_width)                           # (H, J)
        we = torch.where(j >= 0, w * self.tap_e.double()[:, None], torch.zeros_like(w)).to(rdt)
        return j, we, max(1, int(j.max()) + 1)

    def _tap_slots(self):
        return self._tap_constants(torch.float64)[2]

    def _tap_step(self, x_t, xbuf, t, consts):
        """Write ``x_t`` ``(B, H)`` to the input ring and return the tap's output ``(B, H)``."""
        j, we, need = consts
        Rx = xbuf.shape[1]
        if need > Rx:
            raise RuntimeError(f"the layer's tap now reads {need - 1} steps back (delay or tap_width changed since "
                               f"allocation), past the cache's {Rx - 1}: allocate a new cache")
        xbuf[:, t % Rx] = x_t.to(xbuf.dtype)
        src = t - j                                                                     # (H, J)
        ok = (src >= 0) & (j >= 0)
        ar = torch.arange(j.shape[0], device=j.device)[:, None]                         # (H, 1)
        vals = xbuf[:, src.clamp_min(0) % Rx, ar]                                       # (B, H, J)
        return (vals * torch.where(ok, we, torch.zeros_like(we))).sum(-1)                # (B, H)

    def _tap_prefill(self, xb, xbuf):
        """Keep the prompt's last inputs ``(B, H, L)`` in the ring, at the slots the steps will read."""
        L, Rx = xb.shape[-1], xbuf.shape[1]
        n = min(L, Rx)
        slots = torch.arange(L - n, L, device=xb.device) % Rx
        xbuf[:, slots] = xb[..., L - n:].transpose(1, 2).to(xbuf.dtype)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        if self.has_tap and prefix + "tap_width_bits" in state_dict:
            w = state_dict[prefix + "tap_width_bits"].detach().cpu().clone().view(torch.float64).item()
            self._tap_width = check_width(w)
            self._step_memo.clear()


def set_tap_width(model, width):
    """Set :attr:`DelayedTap.tap_width` on every layer of ``model`` with a tap; returns how many."""
    width = check_width(width)
    n = 0
    for m in model.modules():
        if isinstance(m, DelayedTap) and m.has_tap:
            m.tap_width = width
            n += 1
    return n


class TapWidthSchedule:
    """Coarse-to-fine tap windows, stepped like a learning-rate scheduler.

    At optimizer step ``i`` the width is ``max(1, w0 ** (1 - min(1, i / (frac * steps))))``: ``w0`` at the
    start, shrinking geometrically to 1 (linear interpolation) at ``frac * steps``, then 1. The width is
    set on construction (``i = 0``) and by every :meth:`step`. ``state_dict`` / ``load_state_dict`` carry
    ``i``, so a resumed run continues the same schedule.

    Examples
    --------
    >>> import torch, nn
    >>> model = nn.SequenceModel(1, 1, d_model=8, n_layers=1, layer_kw={"l_max": 64, "tap": True})
    >>> sched = TapWidthSchedule(model, w0=16.0, steps=100)
    >>> sched.width, [sched.step() for _ in range(30)][-1], sched.width
    (16.0, None, 4.0)
    """

    def __init__(self, model, w0=64.0, steps=1000, frac=0.6):
        self.model, self.w0, self.steps, self.frac = model, check_width(w0), int(steps), float(frac)
        if self.steps < 1 or not 0 < self.frac <= 1:
            raise ValueError(f"TapWidthSchedule needs steps >= 1 and 0 < frac <= 1, got {steps}, {frac}")
        self.i = 0
        self._apply()

    @property
    def width(self):
        u = min(1.0, self.i / (self.frac * self.steps))
        return max(1.0, self.w0 ** (1.0 - u))

    def _apply(self):
        if set_tap_width(self.model, self.width) == 0:
            raise ValueError("TapWidthSchedule: the model has no DS4D layer with tap=True")

    def step(self):
        self.i += 1
        self._apply()

    def state_dict(self):
        return {"i": self.i}

    def load_state_dict(self, state):
        self.i = int(state["i"])
        self._apply()

