"""DS4D's delayed input tap as a branch of its own (``DS4D(tap=True)`` -> ``layer.tap``), and its
coarse-to-fine window schedule.

The mathematics is :mod:`ddesys.tap` (docs/theory.md §8): each channel adds ``e * x(t - s_tap)`` to its
output, read through a hat window of half-width ``width`` (1: linear interpolation). The tap is a
pure delay (no echoes, no response before its delay) whose gradient sees ``2 width`` samples, so a
wide start lets the delay travel to a lag it did not start near; :class:`TapWidthSchedule` shrinks
the width to 1 over the first part of training.

:class:`TapBranch` holds the tap's parameters, window, kernel, time-domain filter, its part of a
decode step (the input ring: allocation, step, prefill), its optimizer hints and its
:class:`ddesys.DelayTap` system; :class:`nn.DS4D` composes it (``layer.tap``, ``None`` without a tap).
"""
from __future__ import annotations

import numbers

import torch

import ddesys
from ddesys.parameterization import delay_steps
from ddesys.tap import check_width, offset_fir, tap_filter, tap_kernel, tap_support

from .delay_range import RangeBranch, place_delays
from .optim import register

__all__ = ["MAX_WIDTH_PER_HORIZON", "TapBranch", "TapWidthSchedule", "max_tap_width", "set_tap_width"]

# the window's half-width is at most this many history horizons l_max: wider windows are flat over the whole
# history (the delay's gradient vanishes) and their decode ring (s_max + width + 1 inputs) outgrows the history
MAX_WIDTH_PER_HORIZON = 4


def max_tap_width(l_max):
    """The largest tap window half-width a layer with history horizon ``l_max`` accepts:
    ``MAX_WIDTH_PER_HORIZON * l_max``."""
    return float(MAX_WIDTH_PER_HORIZON * l_max)


def _bits(w):
    return torch.tensor([w], dtype=torch.float64).view(torch.int64).clone()


def _unbits(t):
    return t.detach().cpu().clone().view(torch.float64).item()


class TapBranch(RangeBranch):
    """The delayed input tap of a DS4D layer: ``y_t += e sum_{j >= 0} w_j x_{t-j}`` per channel.

    Parameters
    ----------
    channels : int
        Kernels ``C`` (``2H`` for a bidirectional layer).
    width : float, default 1.0
        Half-width of the hat window, ``>= 1`` and at most :func:`max_tap_width` of the layer's ``l_max``.
    lr : float or None
        Learning-rate hint of the tap delay (``None``: the optimizer's base rate, docs/theory.md §8.4).
    delay_init : {"grid", "constant"}
        Initial delays: the layer's grid in another random order, or every channel at ``tau0``.
    tau0 : float or None
    generator : torch.Generator or None
        Draws ``e ~ N(0, 0.25)`` and the grid order (in that order, after the feedback branch's draws).

    Attributes
    ----------
    e, nu : Parameter ``(C,)``
        Gain, and delay parameter ``s = s_min + (s_max - s_min) sigmoid(nu)`` on the layer's range; both
        without weight decay, outside S4's SSM set (``nn.optim.register(..., ssm=False)``).
    width_bits : int64 buffer ``(1,)``
        The width's float64 bits (saved in the state dict, untouched by ``.half()``).
    """

    def __init__(self, channels, width=1.0, *, lr=None, delay_init="grid", tau0=None, generator=None):
        super().__init__(channels)
        register(self, "e", 0.5 * torch.randn(channels, generator=generator), wd=0.0, ssm=False)   # (C,)
        register(self, "nu", torch.zeros(channels), lr=lr, wd=0.0, ssm=False)                    # (C,)
        self.order = torch.randperm(channels, generator=generator) if delay_init == "grid" else None
        self.tau0 = tau0
        self._width = check_width(width)
        self.register_buffer("width_bits", _bits(self._width))

    def extra_repr(self):
        return f"channels={self.e.shape[0]}, width={self._width:g}"

    # ------------------------------------------------------------------ window and range
    @property
    def width(self):
        """Half-width of the read window in steps (``>= 1``; 1: linear interpolation). Settable."""
        return self._width

    @width.setter
    def width(self, width):
        self._width = self._check_width(width)
        self.width_bits.copy_(_bits(self._width))

    def _check_width(self, width):
        w = check_width(width)
        if self.l_max is not None and w > max_tap_width(self.l_max):
            raise ValueError(f"tap_width must be <= {MAX_WIDTH_PER_HORIZON} * l_max = {max_tap_width(self.l_max):g} "
                             f"(the layer's history horizon l_max={self.l_max}), got {width!r}: a wider window is "
                             "flat over the whole history and its decode ring outgrows it")
        return w

    def place(self, s_min, s_max):
        place_delays(self.nu, s_min, s_max, self.order, self.tau0)

    def adopt_range(self, s_min, s_max, l_max, check=True):
        super().adopt_range(s_min, s_max, l_max)
        if check:
            self._check_width(self._width)

    def delay(self, dtype=torch.float64):
        """The tap delays in steps, ``(C,)`` (differentiable)."""
        self.require_range("reading the tap delays")
        return delay_steps(self.nu, self.s_min, self.s_max, dtype)

    def memo_key(self):
        """What a layer's decode constants read from the branch: the width and its parameters' versions."""
        return self._width, tuple((id(p), getattr(p, "_version", None), p.device, p.dtype) for p in (self.e, self.nu))

    def check_finite(self, any_device=False):
        """``FloatingPointError`` naming ``tap.e`` / ``tap.nu`` if they hold NaN or inf (on CPU, or on any
        device with ``any_device``: one synchronization)."""
        if self.e.device.type != "cpu" and not any_device:
            return
        bad = [f"tap.{n}" for n, p in (("e", self.e), ("nu", self.nu)) if not bool(torch.isfinite(p).all())]
        if bad:
            raise FloatingPointError(f"DS4D: parameter(s) {', '.join(bad)} contain NaN or inf (the training step "
                                     "diverged: lower the learning rate, clip gradients, or reload the last good "
                                     "checkpoint)")

    # ------------------------------------------------------------------ training and verification paths
    def kernel(self, L, dtype):
        """The tap's kernel ``e_c w_{c,t}`` ``(C, L)`` in ``dtype`` (exact, :func:`ddesys.tap.tap_kernel`)."""
        self.check_finite()
        return tap_kernel(self.e.to(dtype), self.delay(dtype), self._width, L)

    def filter(self, x):
        """Time-domain tap output for ``x`` ``(B, C, L)``, float64 (the recurrent path)."""
        self.check_finite()
        return tap_filter(self.e.double(), self.delay(), self._width, x.double())

    # ------------------------------------------------------------------ decoding: the input ring
    def step_constants(self, rdt, zero=False):
        """Offsets ``j`` int64 ``(C, J)``, weights times gain ``(C, J)`` in ``rdt`` with the non-causal
        offsets zeroed (all zero with ``zero``: the ``"tap_zero"`` ablation), ring size ``Rx = max j + 1``.
        Names non-finite parameters on every device (this runs once per parameter change, not per token)."""
        self.check_finite(any_device=True)
        j, w = tap_support(self.delay(), self._width)                                   # (C, J)
        gain = torch.zeros_like(self.e, dtype=torch.float64) if zero else self.e.double()
        we = torch.where(j >= 0, w * gain[:, None], torch.zeros_like(w)).to(rdt)
        return j, we, max(1, int(j.max()) + 1)

    def slots(self):
        """``Rx``: the inputs per channel the decode ring must keep."""
        j, _ = tap_support(self.delay(), self._width)
        return max(1, int(j.max()) + 1)

    def allocate(self, batch_size, dtype, device):
        """A zero input ring ``(B, Rx, C)`` (real, ``dtype``)."""
        return torch.zeros((batch_size, self.slots(), self.e.shape[0]), dtype=dtype, device=device)

    def step(self, x_t, xbuf, t, consts):
        """Write ``x_t`` ``(B, C)`` (token ``t``) to the ring ``xbuf`` and return the tap's output ``(B, C)``."""
        j, we, need = consts
        Rx = xbuf.shape[1]
        if need > Rx:
            raise RuntimeError(f"the layer's tap now reads {need - 1} steps back (delay or tap_width changed since "
                               f"allocation), past the cache's {Rx - 1}: allocate a new cache")
        xbuf[:, t % Rx] = x_t.to(xbuf.dtype)
        src = t - j                                                                     # (C, J)
        ok = (src >= 0) & (j >= 0)
        ar = torch.arange(j.shape[0], device=j.device)[:, None]                         # (C, 1)
        vals = xbuf[:, src.clamp_min(0) % Rx, ar]                                       # (B, C, J)
        return (vals * torch.where(ok, we, torch.zeros_like(we))).sum(-1)                # (B, C)

    def chunk_output(self, xb, xbuf, t0, consts):
        """The tap's output ``(B, C, L)`` for a chunk ``xb`` ``(B, C, L)`` (tokens ``t0 ..``), the inputs
        before ``t0`` read from the ring ``xbuf`` ``(B, Rx, C)`` (call before :meth:`prefill` moves it):
        ``sum_j we_j x_{t - j}`` over the step's offsets, as ``step`` computes it token by token.
        ``consts``: :meth:`step_constants`' ``(j, we, need)``. Work ``O(B C L J)``."""
        j, we, need = consts
        B, Rx, C = xbuf.shape
        L = xb.shape[-1]
        if need > Rx:
            raise RuntimeError(f"the layer's tap now reads {need - 1} steps back (delay or tap_width changed since "
                               f"allocation), past the cache's {Rx - 1}: allocate a new cache")
        P = 0 if t0 == 0 else Rx                  # inputs kept before the chunk (a fresh ring holds none)
        t = torch.arange(L, device=xb.device)
        xw = xb.to(we.dtype)                                                            # (B, C, L)
        if P:
            pos = torch.arange(t0 - Rx, t0, device=xb.device)                          # (Rx,) positions before t0
            past = xbuf[:, pos.clamp_min(0) % Rx].transpose(1, 2).to(we.dtype)         # (B, C, Rx)
            past = torch.where(pos >= 0, past, torch.zeros((), dtype=we.dtype, device=xb.device))
            xw = torch.cat([past, xw], -1)                                              # (B, C, Rx + L)
        if xw.device.type == "cpu" and not (torch.is_grad_enabled() and (xw.requires_grad or we.requires_grad)):
            return torch.from_numpy(offset_fir(xw.detach().numpy(), j.numpy(), we.detach().numpy(), P))   # compiled
        y = torch.zeros((B, C, L), dtype=we.dtype, device=xb.device)
        zero = torch.zeros((), dtype=we.dtype, device=xb.device)
        for i in range(j.shape[1]):                                                     # J offsets, few
            src = P + t[None, :] - j[:, i, None]                                        # (C, L); < 0: before 0
            wi = torch.where(src >= 0, we[:, i, None], zero)                            # (C, L)
            y += wi * xw.gather(-1, src.clamp(0, P + L - 1).expand(B, C, L))
        return y

    def prefill(self, xb, xbuf, t0=0):
        """Keep a prompt's last inputs ``xb`` ``(B, C, L)`` (tokens ``t0 .. t0 + L - 1``) in the ring, at the
        slots the steps will read (``(t0 + t) % Rx``; ``t0 > 0``: a chunk after earlier tokens)."""
        L, Rx = xb.shape[-1], xbuf.shape[1]
        n = min(L, Rx)
        slots = (int(t0) + torch.arange(L - n, L, device=xb.device)) % Rx
        xbuf[:, slots] = xb[..., L - n:].transpose(1, 2).to(xbuf.dtype)

    # ------------------------------------------------------------------ analysis
    @torch.no_grad()
    def to_ddesys(self, batch_shape=None, dt=True):
        """The tap as a :class:`ddesys.DelayTap` (float64, batch ``batch_shape``, default ``(C,)``)."""
        self.check_finite(any_device=True)
        e, s = self.e.double().cpu().numpy(), self.delay().cpu().numpy()
        if batch_shape is not None:
            e, s = e.reshape(batch_shape), s.reshape(batch_shape)
        return ddesys.DelayTap(e, s, self._width, dt=dt)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)
        key = prefix + "width_bits"
        if key in state_dict:
            try:
                self._width = self._check_width(_unbits(state_dict[key]))
            except ValueError as exc:
                error_msgs.append(f"{key}: {exc}")


OLD_KEYS = {"tap_e": "tap.e", "nu_tap": "tap.nu", "tap_width_bits": "tap.width_bits"}


def tap_args(tap, width, lr):
    """DS4D's ``tap``, ``tap_width`` and ``tap_lr`` checked: ``(on, width, lr)``. A width or a rate given
    without ``tap=True`` is a ``ValueError`` (it would build no tap); ``width`` None is 1."""
    if not tap:
        given = [f"{n}={v!r}" for n, v in (("tap_width", width), ("tap_lr", lr)) if v is not None]
        if given:
            raise ValueError(f"DS4D: {', '.join(given)} given without tap=True: these set the delayed input tap, "
                             "which is off by default; pass tap=True to build it, or drop them")
        return False, 1.0, None
    return True, check_width(1.0 if width is None else width), lr


def require_tap(layer):
    """``layer.tap``, or ``AttributeError`` for a layer built without one."""
    if layer.tap is None:
        raise AttributeError(f"{type(layer).__name__} has no tap: build it with tap=True")
    return layer.tap


def rename_old_tap_keys(state_dict, prefix):
    """Map a checkpoint saved before the tap was a branch (keys ``tap_e``, ``nu_tap``, ``tap_width_bits``)
    to the branch's keys (``tap.e``, ``tap.nu``, ``tap.width_bits``), in place."""
    for old, new in OLD_KEYS.items():
        if prefix + old in state_dict and prefix + new not in state_dict:
            state_dict[prefix + new] = state_dict.pop(prefix + old)


def set_tap_width(model, width):
    """Set the window half-width of every DS4D tap in ``model``; returns how many."""
    width = check_width(width)
    n = 0
    for m in model.modules():
        if isinstance(m, TapBranch):
            m.width = width
            n += 1
    return n


def _check_step(i):
    if isinstance(i, bool) or not isinstance(i, numbers.Integral) or i < 0:
        raise ValueError(f"TapWidthSchedule: the step count must be a non-negative integer, got {i!r}")
    return int(i)


class TapWidthSchedule:
    """Coarse-to-fine tap windows, stepped like a learning-rate scheduler.

    At optimizer step ``i`` the width is ``max(1, w0 ** (1 - min(1, i / (frac * steps))))``: ``w0`` at the
    start, shrinking geometrically to 1 (linear interpolation) at ``frac * steps``, then 1. The width is
    set on construction (``i = 0``) and by every :meth:`step`. ``state_dict`` / ``load_state_dict`` carry
    ``i`` (a non-negative integer, else ``ValueError``), so a resumed run continues the same schedule.

    Examples
    --------
    >>> import torch
    >>> from ddesys import nn
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
        u = min(1.0, _check_step(self.i) / (self.frac * self.steps))
        return max(1.0, self.w0 ** (1.0 - u))

    def _apply(self):
        if set_tap_width(self.model, self.width) == 0:
            raise ValueError("TapWidthSchedule: the model has no DS4D layer with tap=True")

    def step(self):
        """Advance one optimizer step and set the width there on every tap of the model."""
        self.i = _check_step(self.i) + 1
        self._apply()

    def state_dict(self):
        """The schedule's position, for a checkpoint.

        Returns
        -------
        dict
            ``{"i": int}``: the optimizer steps taken.
        """
        return {"i": self.i}

    def load_state_dict(self, state):
        """Resume the schedule at the saved step and set the width there.

        Parameters
        ----------
        state : dict
            ``{"i": int}``, from :meth:`state_dict`.

        Raises
        ------
        ValueError
            A step that is not a non-negative integer; a model without a DS4D layer with ``tap=True``.
        KeyError
            No ``"i"``.
        """
        self.i = _check_step(state["i"])
        self._apply()
