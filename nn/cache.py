"""Decode caches of :class:`nn.DS4D` and :class:`nn.S4D`: the state a layer carries from token to token.

A cache is made by its layer's ``allocate_inference_cache`` and stays bound to that layer (another
layer, even of the same shape, refuses it: its state means nothing there) and to one decode engine
(:mod:`nn.engine`), chosen at allocation. ``t`` counts the tokens consumed; :meth:`reset` empties the
cache for a new sequence. Pickling or copying keeps the tensors; a pickled cache loses its binding (a
weak reference) and is refused by every layer after loading.
"""
from __future__ import annotations

import copy
import weakref
from dataclasses import dataclass, field

import numpy as np
import torch

from ddesys.cpu.step import is_channel_major, new_ring

__all__ = ["DS4DCache", "S4DCache", "cpu_ring", "describe_layer", "channel_major"]

_NP = {torch.complex64: np.complex64, torch.complex128: np.complex128}


def cpu_ring(shape, dtype, per_row=False):
    """A zero CPU ring ``(B, R, H, N2)`` (``(..., 2)`` for a 16-bit ``dtype``) in the fused step's
    channel-major memory (:func:`ddesys.cpu.step.new_ring`; ``per_row``: each batch row on its own)."""
    ring = new_ring(shape, _NP.get(dtype, np.uint16), per_row=per_row)
    return torch.from_numpy(ring).view(dtype)


def channel_major(buf, per_row=False):
    """``buf`` itself when it is a channel-major CPU ring (``per_row``: each row on its own; or on another
    device), else a channel-major copy."""
    if buf.device.type != "cpu":
        return buf
    ok = is_channel_major((buf.view(torch.uint16) if not buf.is_complex() else buf).detach().numpy(), per_row)
    if ok:
        return buf
    new = cpu_ring(tuple(buf.shape), buf.dtype, per_row=per_row)
    new.copy_(buf.detach())
    return new


def describe_layer(layer):
    """A short name for error messages: ``DS4D(d_model=8, d_state=16) at 0x7f...``."""
    return f"{type(layer).__name__}(d_model={layer.H}, d_state={2 * layer.N2}) at {hex(id(layer))}"


class _Bound:
    """What DS4DCache and S4DCache share: the owning layer, the engine, copies, pickling, reset."""

    # fields of the dataclasses below that are derived from the rest and rebuilt on demand
    _DERIVED = ("_bound", "_ring", "_fmt16", "_warned", "_run")

    def _bind(self, layer, engine, max_seqlen=None):
        self._owner = weakref.ref(layer)
        self._owner_name = describe_layer(layer)
        self._engine = engine
        self.max_seqlen = max_seqlen
        return self

    @property
    def owner(self):
        """The layer that allocated this cache (None: unbound, e.g. built by hand or unpickled)."""
        ref = self.__dict__.get("_owner")
        return ref() if ref is not None else None

    @property
    def engine(self):
        """Name of the decode engine recorded at allocation: ``"fused"``, ``"triton"`` or ``"reference"``."""
        eng = self.__dict__.get("_engine")
        return eng.name if eng is not None else None

    @property
    def device(self):
        return self.state.device

    def _tensors(self):
        return [self.state]

    @torch.no_grad()
    def reset(self):
        """Empty the cache for a new sequence (state zeroed, ``t = 0``), in place; returns the cache."""
        for v in self._tensors():
            if v is not None:
                v.zero_()
        self.t = 0
        for name in self._DERIVED:
            self.__dict__.pop(name, None)
        return self

    def __getstate__(self):
        state = {k: v for k, v in self.__dict__.items() if k not in self._DERIVED and k != "_owner"}
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)

    def __copy__(self):
        new = object.__new__(type(self))
        new.__dict__.update({k: v for k, v in self.__dict__.items() if k not in self._DERIVED})
        return new

    def __deepcopy__(self, memo):
        new = object.__new__(type(self))
        memo[id(self)] = new
        for k, v in self.__dict__.items():
            if k in self._DERIVED:
                continue
            new.__dict__[k] = v if k in ("_owner", "_engine") else copy.deepcopy(v, memo)
        return new


@dataclass(eq=False)
class DS4DCache(_Bound):
    """Decode state of one DS4D layer: ring buffer ``buf`` of the last ``R = k_max + 1`` states of every
    mode (``h_s`` lives in slot ``s mod R``; on the CPU channel-major in memory, ``(H, R, B, N2)``, one
    channel's history in one place: :func:`cpu_ring`) and the number ``t`` of tokens consumed.

    ``buf`` is complex ``(B, R, H, N2)``, or, for a 16-bit history, float16 / bfloat16 ``(B, R, H, N2, 2)``
    (real and imaginary parts; the update itself runs in float32). ``xbuf`` ``(B, Rx, H)``: the tap's
    input ring (layers with a tap), input ``s`` in slot ``s mod Rx``."""
    buf: torch.Tensor
    t: int = 0
    xbuf: torch.Tensor | None = None
    max_seqlen: int | None = field(default=None, repr=False)

    @property
    def state(self):
        return self.buf

    def _tensors(self):
        return [self.buf, self.xbuf]

    @property
    def modes(self):
        """``(H, N2)``: the channels and modes the cache holds."""
        return tuple(self.buf.shape[2:4])

    @property
    def history16(self):
        """The 16-bit storage dtype, or None for a complex history."""
        return None if self.buf.is_complex() else self.buf.dtype

    @property
    def real_dtype(self):
        """Precision of the update: float64 for a complex128 ring, else float32."""
        return torch.float64 if self.buf.dtype == torch.complex128 else torch.float32

    @property
    def batch_size(self):
        return self.buf.shape[0]

    @property
    def n_slots(self):
        return self.buf.shape[1]

    @property
    def nbytes(self):
        extra = 0 if self.xbuf is None else self.xbuf.numel() * self.xbuf.element_size()
        return self.buf.numel() * self.buf.element_size() + extra

    def detach(self):
        """A cache with the same binding whose tensors are detached from autograd (for truncated
        backpropagation through a carried state, or before decoding from a training state)."""
        new = copy.copy(self)
        new.buf = self.buf.detach()
        new.xbuf = None if self.xbuf is None else self.xbuf.detach()
        return new


@dataclass(eq=False)
class S4DCache(_Bound):
    """Decode state of one S4D layer: ``h`` ``(B, H, N2)`` complex and the number ``t`` of tokens consumed."""
    h: torch.Tensor
    t: int = 0
    max_seqlen: int | None = field(default=None, repr=False)

    @property
    def state(self):
        return self.h

    @property
    def modes(self):
        """``(H, N2)``: the channels and modes the cache holds."""
        return tuple(self.h.shape[1:3])

    @property
    def real_dtype(self):
        return torch.float64 if self.h.dtype == torch.complex128 else torch.float32

    @property
    def batch_size(self):
        return self.h.shape[0]

    @property
    def nbytes(self):
        return self.h.numel() * self.h.element_size()

    def detach(self):
        """A cache with the same binding whose state is detached from autograd."""
        new = copy.copy(self)
        new.h = self.h.detach()
        return new
