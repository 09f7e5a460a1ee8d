"""The delay range of a DS4D layer: fixed at construction or from the first sequence, saved with the
state dict, checked when a checkpoint loads (docs/theory.md §7).

Branches of the layer that read their own delays on the same range (the input tap,
:class:`nn.tap.TapBranch`) derive from :class:`RangeBranch`: when the range is fixed the layer places
their initial delays (:meth:`RangeBranch.place`) and hands them the range (:meth:`RangeBranch.adopt_range`).
"""
from __future__ import annotations

import math
import struct
import warnings
from contextlib import contextmanager

import torch

from .branch import Branch


def encode_range(s_min, s_max):
    """``(s_min, s_max)`` as an int64 tensor ``(2,)`` holding their float64 bit patterns (``s_max`` None ->
    NaN): exact in a state dict and untouched by ``module.half()`` / ``.to(dtype)``."""
    v = torch.tensor([s_min, math.nan if s_max is None else s_max], dtype=torch.float64)
    return v.view(torch.int64).clone()


def decode_range(t):
    """Inverse of :func:`encode_range`: ``(s_min, s_max or None)``."""
    s_min, s_max = t.detach().cpu().clone().view(torch.float64).tolist()
    return s_min, (None if math.isnan(s_max) else s_max)


def delay_range_mismatch(layer, saved):
    """Why a checkpoint with delay range ``saved`` = ``(s_min, s_max)`` (None: saved before ranges were
    stored) cannot load into ``layer``, or None. Equal ranges load; a layer whose range is not fixed yet
    (``l_max=None``) adopts the checkpoint's."""
    name = type(layer).__name__
    if saved is None:
        if layer.s_max is None:
            return (f"{name}: this checkpoint does not record its delay range (saved by an older ddesys) and the "
                    "layer has l_max=None: build the layer with the l_max it was trained with")
        return None
    s_min, s_max = saved
    if s_max is None or layer.s_max is None:
        return None if s_max is not None or layer.s_max is None else (
            f"{name}: the checkpoint's delay range was not fixed yet (l_max=None, saved before any forward) but "
            f"this layer's is (l_max={layer.l_max}); build the layer with l_max=None")
    if (s_min, s_max) != (layer.s_min, layer.s_max):
        l_ck = int(math.floor(s_max)) + 1
        return (f"{name}: the checkpoint's delays are relative to s_min={s_min:g}, s_max={s_max:g} (l_max={l_ck}) "
                f"but this layer has s_min={layer.s_min:g}, s_max={layer.s_max:g} (l_max={layer.l_max}): loading "
                f"would move every delay. Build the layer with l_max={l_ck}"
                f"{'' if s_min == layer.s_min else f', s_min={s_min:g}'}, or with l_max=None to adopt the "
                "checkpoint's range")
    return None


def place_delays(nu, s_min, s_max, order, tau0):
    """Initial delays written into ``nu`` ``(C,)`` in place: a uniform grid over ``[s_min, s_max]`` taken in
    the random channel ``order`` ``(C,)`` (grid init), or every channel at ``tau0`` steps (``order`` None);
    ``nu = logit((s - s_min) / (s_max - s_min))``."""
    C = nu.shape[0]
    if order is not None:
        s0 = torch.linspace(s_min, s_max, C + 2, dtype=torch.float64)[1:-1][order]    # (C,)
    else:
        s0 = torch.full((C,), float(tau0), dtype=torch.float64)
    with torch.no_grad():
        nu.copy_(torch.logit((s0 - s_min) / (s_max - s_min)).to(nu))                # (C,)


class RangeBranch(Branch):
    """Base of a layer's branch whose delays live on the layer's range ``[s_min, s_max]``
    (``s = s_min + (s_max - s_min) sigmoid(nu)``). The layer (:class:`DelayRange`) calls
    :meth:`place` once, when the range is fixed, and :meth:`adopt_range` whenever it adopts one."""

    s_min = s_max = l_max = None

    def place(self, s_min, s_max):
        """Write the branch's initial delays for the range ``[s_min, s_max]``."""
        raise NotImplementedError

    def adopt_range(self, s_min, s_max, l_max, check=True):
        """Take the layer's range (``check``: validate the branch's settings against it)."""
        self.s_min, self.s_max, self.l_max = float(s_min), float(s_max), int(l_max)

    def require_range(self, what):
        if self.s_max is None:
            raise RuntimeError(f"DS4D(l_max=None) fixes its delay range at the first forward; run one forward "
                               f"pass, build the layer with l_max, or pass max_seqlen= to allocate_inference_cache "
                               f"(the range then comes from it) before {what}")


class DelayRange:
    """Base of :class:`nn.DS4D`: the range ``[s_min, s_max]`` that gives ``nu_tau`` its meaning
    (``s = s_min + (s_max - s_min) sigmoid(nu_tau)``). Needs ``s_min``, ``delay_init``, ``tau0``,
    ``_grid_order`` and the parameter ``nu_tau``; registers the ``delay_range`` buffer. Child modules
    that are :class:`RangeBranch` es share the range. Loading a checkpoint checks the range through
    :func:`check_loaded_range` and :func:`adopt_loaded_range` (called by the layer's one
    ``_load_from_state_dict``)."""

    def _init_range(self, s_min, l_max, s_max):
        if not (math.isfinite(s_min) and s_min >= 1.0):
            raise ValueError(f"DS4D needs 1 <= s_min < s_max (delays of at least one step), got s_min={s_min}")
        self.s_min, self.s_max, self.l_max = float(s_min), None, None
        self._length_checked = False
        # (s_min, s_max) as float64 bit patterns in an int64 buffer: saved in the state dict, never cast by
        # .half() / .to(dtype); s_max NaN until the range is fixed (l_max=None, before the first sequence)
        self.register_buffer("delay_range", encode_range(self.s_min, None))
        if l_max is not None or s_max is not None:
            self._set_range(l_max, s_max)

    def _set_range(self, l_max, s_max=None):
        """Fix the delay range ``[s_min, s_max]`` (``s_max = l_max - 1`` unless given) and place the
        initial delays in it (grid or constant). Called once: at construction, or at the first
        sequence when ``l_max=None``."""
        s_max = float(l_max - 1) if s_max is None else float(s_max)
        if not (1.0 <= self.s_min < s_max) or not math.isfinite(s_max):
            raise ValueError(f"DS4D needs 1 <= s_min < s_max, got s_min={self.s_min}, s_max={s_max} (l_max={l_max}); "
                             "pass a larger l_max (or s_max)")
        if self.delay_init == "constant" and not self.s_min < self.tau0 < s_max:
            raise ValueError(f"delay_init='constant' needs tau0 strictly inside (s_min, s_max) = ({self.s_min}, "
                             f"{s_max}), got tau0={self.tau0} (raise l_max or lower tau0)")
        order = self._grid_order if self.delay_init == "grid" else None
        place_delays(self.nu_tau, self.s_min, s_max, order, self.tau0)
        for branch in self._range_branches():
            branch.place(self.s_min, s_max)
        self.adopt_range(s_max, l_max if l_max is not None else int(math.floor(s_max)) + 1)

    def _range_branches(self):
        return [b for b in self.branches() if isinstance(b, RangeBranch)]

    def adopt_range(self, s_max, l_max, check=True):
        """Fix the delay range at ``[s_min, s_max]`` with horizon ``l_max`` (the branches too); clears the
        decode memo. The initial delays are not placed again (a loaded checkpoint's stay).

        Parameters
        ----------
        s_max : float
            Upper end of the range, in steps.
        l_max : int
            History horizon (``floor(s_max) + 1`` for a range from a sequence length).
        check : bool, default True
            Validate the branches' settings against the range (False while a checkpoint loads).
        """
        self.s_max, self.l_max = float(s_max), int(l_max)
        for i, v in enumerate((self.s_min, self.s_max)):             # in place, on the buffer's device
            self.delay_range[i].fill_(struct.unpack("<q", struct.pack("<d", v))[0])   # encode_range's bits
        for branch in self._range_branches():
            branch.adopt_range(self.s_min, self.s_max, self.l_max, check=check)
        self._step_memo.clear()

    def _prepare(self, L):
        """At the first sequence: fix the range from its length (``l_max=None``), or warn once when the
        given range is much longer than the sequences, so most delays would never act."""
        if self.s_max is None:
            self._set_range(L)
        elif not self._length_checked and self.s_max > 2 * L:
            warnings.warn(f"DS4D: delays are spread over [{self.s_min:g}, {self.s_max:g}] steps (l_max={self.l_max}) "
                          f"but the sequence has {L} steps: channels with delays >= {L} never act. Pass "
                          f"l_max={L} (or leave l_max=None: the range then comes from the first sequence).",
                          UserWarning, stacklevel=5)
        self._length_checked = True

    def prepare_decode(self, batch_size, max_seqlen, dtype):
        """As :meth:`nn.base.DiagonalSSM.prepare_decode`; a layer built with ``l_max=None`` that has seen no
        sequence takes its delay range from ``max_seqlen`` (as from a first forward of that length).

        Parameters
        ----------
        batch_size : int
        max_seqlen : int or None
        dtype : torch.dtype or None
            As :meth:`nn.base.DiagonalSSM.prepare_decode`.

        Returns
        -------
        max_seqlen : int or None
        rdt : torch.dtype
            ``torch.float32`` or ``torch.float64``.

        Raises
        ------
        ValueError, TypeError
            As :meth:`nn.base.DiagonalSSM.prepare_decode`; a ``max_seqlen`` too short for the range.
        RuntimeError
            No delay range yet (``l_max=None``, no sequence seen, no ``max_seqlen``).
        """
        max_seqlen, rdt = super().prepare_decode(batch_size, max_seqlen, dtype)
        if self.s_max is None and max_seqlen is not None:           # l_max=None: the range from max_seqlen
            self._set_range(max_seqlen)
        self._require_range("allocate_inference_cache")
        return max_seqlen, rdt

    @contextmanager
    def as_prompt(self):
        """Inside this context the layer's forward passes read their inputs as prompts, not as training
        lengths: no "delays never act" warning for a short one (prefill through the FFT path). Restores
        the layer's check afterwards."""
        before = self._length_checked
        self._length_checked = True
        try:
            yield
        finally:
            self._length_checked = before

    def _require_range(self, what):
        if self.s_max is None:
            raise RuntimeError(f"DS4D(l_max=None) fixes its delay range at the first forward; run one forward "
                               f"pass, build the layer with l_max, or pass max_seqlen= to allocate_inference_cache "
                               f"(the range then comes from it) before {what}")


def check_loaded_range(layer, state_dict, prefix, error_msgs):
    """Before a checkpoint loads into ``layer``: its ``delay_range`` must equal the layer's (a layer whose
    range is not fixed yet adopts it). Returns the saved range, ``None`` for a checkpoint saved before
    ranges were stored (the layer's own is filled in), or ``False`` after appending the reason to
    ``error_msgs`` (do not load)."""
    key = prefix + "delay_range"
    saved = decode_range(state_dict[key]) if key in state_dict else None
    err = delay_range_mismatch(layer, saved)
    if err:
        error_msgs.append(err)
        return False
    if saved is None:                                # checkpoint from before the range was saved
        state_dict[key] = layer.delay_range.clone()
    return saved


def adopt_loaded_range(layer, saved):
    """After the checkpoint's tensors loaded: a layer whose range was not fixed takes the saved one."""
    if saved and saved[1] is not None and layer.s_max is None:
        layer.s_min = saved[0]
        layer.adopt_range(saved[1], int(math.floor(saved[1])) + 1, check=False)
