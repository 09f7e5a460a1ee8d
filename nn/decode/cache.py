"""Decode caches: the state a layer carries from token to token.

A cache is made by its layer's ``allocate_inference_cache`` and stays bound to that layer (another
layer, even of the same shape, refuses it: its state means nothing there) and to one decode engine
(:mod:`nn.decode.engine`), chosen at allocation. Every cache has the same public fields (:class:`Cache`):
its state tensors, ``t`` (the tokens consumed), ``engine`` (the engine object), ``handle`` (what
``engine.bind`` returned for the layer's current constants: views, bound compiled steps; None until bound),
``owner`` (the layer) and ``max_seqlen``. :meth:`Cache.reset` empties the cache for a new sequence.
Pickling or copying keeps the tensors and the engine, never the handle; a pickled cache loses its
binding to the layer (a weak reference) and is refused by every layer after loading.
"""
from __future__ import annotations

import copy
import inspect
import numbers
import warnings
import weakref
from dataclasses import dataclass, field

import numpy as np
import torch

from ddesys.cpu.step import is_channel_major, new_ring

__all__ = ["Cache", "RingCache", "DS4DCache", "S4DCache", "allocate_caches", "check_count", "cpu_ring",
           "describe_layer", "channel_major", "check_history16", "refuse_dtype_as_max_seqlen",
           "reset_caches"]

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


class Cache:
    """What every decode cache shares: the owning layer, the engine and its handle, copies, pickling, reset.

    Public fields (besides the subclass's state tensors and ``t``): ``engine`` (the decode engine
    object, chosen at allocation; ``engine.name`` for display), ``handle`` (``engine.bind``'s result for
    the constants the cache was last bound to, or None), ``owner_name`` (the allocating layer, described),
    ``max_seqlen``, ``warned`` (a float16 history's overflow warning was given) and ``plan`` (the compiled
    model step :meth:`nn.SequenceModel.step` made over the list of caches this one heads, or None; never
    copied or pickled)."""

    engine = None
    handle = None
    plan = None
    owner_name = None
    warned = False

    def bound(self, consts):
        """``self.handle`` bound to the decode constants ``consts``: the engine's ``bind`` runs when the handle
        is missing (first use, a reset, a copy), was bound to other constants (a parameter changed) or to a
        state tensor since replaced (``cache.buf = ...``). The one place a handle is made.

        Parameters
        ----------
        consts : object
            The owning layer's decode constants (``layer.decode_constants(rdt)``).

        Returns
        -------
        object
            The handle (what ``engine.bind`` returned), also ``self.handle``.
        """
        hd = self.handle
        if hd is None or hd.consts is not consts or self.__dict__.get("_bound_to") is not self.state:
            self.handle = None
            self.handle = self.engine.bind(self, consts)
            self._bound_to = self.state
        return self.handle

    def bind(self, layer, engine, max_seqlen=None):
        """Bind this cache to ``layer`` (held weakly) and ``engine``; the handle is cleared.

        Parameters
        ----------
        layer : torch.nn.Module
            The allocating layer.
        engine : DecodeEngine
            The decode engine (:func:`nn.decode.select.select_engine`).
        max_seqlen : int, optional
            Recorded as ``self.max_seqlen``.

        Returns
        -------
        Cache
            This cache.
        """
        self._owner_ref = weakref.ref(layer)
        self.owner_name = describe_layer(layer)
        self.engine = engine
        self.handle = None
        self.max_seqlen = max_seqlen
        return self

    @property
    def owner(self):
        """The layer that allocated this cache (None: unbound, e.g. built by hand or unpickled)."""
        ref = self.__dict__.get("_owner_ref")
        return ref() if ref is not None else None

    def binding(self):
        """How the cache is bound, for error messages: ``"is bound to no layer (...)"``, ``"was allocated by
        <layer>"`` or ``"was allocated by <layer>, which no longer exists"``."""
        owner = self.owner_name
        if self.__dict__.get("_owner_ref") is None:
            return "is bound to no layer (built by hand, or unpickled" + (f" from one of {owner})" if owner else ")")
        return f"was allocated by {owner}" + ("" if self.owner is not None else ", which no longer exists")

    @property
    def device(self):
        return self.state.device

    def tensors(self):
        """The cache's state tensors (zeroed by :meth:`reset`)."""
        return [self.state]

    @torch.no_grad()
    def reset(self):
        """Empty the cache for a new sequence (state zeroed, ``t = 0``), in place; returns the cache."""
        for v in self.tensors():
            if v is not None:
                v.zero_()
        self.t = 0
        self.handle = None
        self.warned = False
        return self

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k not in ("handle", "plan", "_bound_to", "_owner_ref")}

    def __setstate__(self, state):
        self.__dict__.update(state)

    def __copy__(self):
        new = object.__new__(type(self))
        new.__dict__.update({k: v for k, v in self.__dict__.items() if k not in ("handle", "plan", "_bound_to")})
        return new

    def __deepcopy__(self, memo):
        new = object.__new__(type(self))
        memo[id(self)] = new
        for k, v in self.__dict__.items():
            if k in ("handle", "plan", "_bound_to"):
                continue
            new.__dict__[k] = v if k in ("_owner_ref", "engine") else copy.deepcopy(v, memo)
        return new


class RingCache(Cache):
    """A cache whose state is one complex buffer ``buf`` ``(B, ...)`` (the clocked layers' caches)."""

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
        return sum(v.numel() * v.element_size() for v in self.tensors())

    def detach(self):
        """A copy whose ring is detached from autograd (the other fields shared, the handle not copied).

        Returns
        -------
        RingCache
            Of the same class.
        """
        new = copy.copy(self)
        new.buf = self.buf.detach()
        return new


@dataclass(eq=False)
class DS4DCache(Cache):
    """Decode state of one DS4D layer: ring buffer ``buf`` of the last ``R = k_max + 1`` states of every
    mode (``h_s`` lives in slot ``s mod R``; on the CPU channel-major in memory, ``(H, R, B, N2)``, one
    channel's history in one place: :func:`cpu_ring`) and the number ``t`` of tokens consumed.

    ``buf`` is complex ``(B, R, H, N2)``, or, for a 16-bit history, float16 / bfloat16 ``(B, R, H, N2, 2)``
    (real and imaginary parts; the update itself runs in float32). ``branch_states``: the decode state of
    each of the layer's optional branches, in ``layer.branches()`` order (:mod:`nn.branch`; the tap's is
    its input ring ``(B, Rx, H)``, input ``s`` in slot ``s mod Rx``)."""
    buf: torch.Tensor
    t: int = 0
    branch_states: tuple = ()
    max_seqlen: int | None = field(default=None, repr=False)

    @property
    def state(self):
        return self.buf

    def tensors(self):
        return [self.buf, *self.branch_states]

    @property
    def modes(self):
        """``(H, N2)``: the channels and modes the cache holds."""
        return tuple(self.buf.shape[2:4])

    def ring(self):
        """The states as a ring ``(B, R, H, N2)`` (the buffer itself)."""
        return self.buf

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
        return sum(v.numel() * v.element_size() for v in self.tensors())

    def detach(self):
        """A cache with the same binding whose tensors are detached from autograd (for truncated
        backpropagation through a carried state, or before decoding from a training state)."""
        new = copy.copy(self)
        new.buf = self.buf.detach()
        new.branch_states = tuple(v.detach() for v in self.branch_states)
        return new


@dataclass(eq=False)
class S4DCache(Cache):
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

    def ring(self):
        """The state as a ring of one slot ``(B, 1, H, N2)`` (a view)."""
        return self.h[:, None]

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


def check_history16(cache, y, x_t):
    """A float16 history (range 65504) whose output is no longer finite while its input is: warn once per
    cache (bfloat16 has float32's range). ``step`` runs this for float16 caches until it warned."""
    if bool(torch.isfinite(y).all()) or not bool(torch.isfinite(x_t).all()):
        return
    cache.warned = True
    warnings.warn("DS4D: a float16 decode history overflowed (a state passed 65504, float16's largest value, and "
                  "became infinite), so outputs are inf or NaN from here on; use history_dtype=torch.bfloat16 "
                  "(float32's range), a complex cache, or smaller inputs", RuntimeWarning, stacklevel=3)


# ---------------------------------------------------------------------------------------------- a model's caches
def refuse_dtype_as_max_seqlen(max_seqlen, owner):
    """``TypeError`` naming the fix for a torch dtype given second, where Mamba's signature
    ``allocate_inference_cache(batch_size, max_seqlen=None, dtype=None, **kwargs)`` has ``max_seqlen``."""
    if isinstance(max_seqlen, torch.dtype):
        raise TypeError(f"{owner}.allocate_inference_cache got the dtype {max_seqlen} as max_seqlen: the signature "
                        "is allocate_inference_cache(batch_size, max_seqlen=None, dtype=None, **kwargs), as "
                        f"Mamba's; pass the dtype by keyword, allocate_inference_cache(batch_size, dtype={max_seqlen})")


def check_count(name, value, lo, owner, optional=False):
    """``ValueError`` unless ``value`` is an integer ``>= lo`` (or None with ``optional``), naming it."""
    if optional and value is None:
        return
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < lo:
        raise ValueError(f"{owner}: {name} must be an integer >= {lo}{' or None' if optional else ''}, "
                         f"got {value!r}")


def allocate_caches(layers, batch_size, max_seqlen, dtype, kwargs):
    """One fresh cache per layer: ``layer.allocate_inference_cache(batch_size, dtype=dtype, **kwargs)``,
    plus ``max_seqlen`` for layers whose method takes it (a layer's method may or may not take it)."""
    owner = "allocate_inference_cache"
    check_count("batch_size", batch_size, 0, owner)
    check_count("max_seqlen", max_seqlen, 1, owner, optional=True)
    if dtype is not None and not (isinstance(dtype, torch.dtype) and (dtype.is_floating_point or dtype.is_complex)):
        raise ValueError(f"{owner}: dtype must be a torch floating dtype (torch.float64 for complex128 states) "
                         f"or None, got {dtype!r}")
    caches = []
    for i, layer in enumerate(layers):
        fn = layer.allocate_inference_cache
        params = inspect.signature(fn).parameters
        var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        for k in kwargs:
            if k not in params and not var_kw:
                takes = [n for n in params if n != "batch_size"]
                raise TypeError(f"{type(layer).__name__}.allocate_inference_cache (layer {i}) does not take "
                                f"{k!r}; it takes {takes}")
        kw = dict(kwargs, dtype=dtype)
        if "max_seqlen" in params:
            kw["max_seqlen"] = max_seqlen
        caches.append(fn(batch_size, **kw))
    return caches


def reset_caches(caches):
    """Each cache back to its empty state, in place: its own ``reset()`` when it has one, else every
    tensor it holds zeroed and its position ``t`` set to 0."""
    for c in caches:
        reset = getattr(c, "reset", None)
        if callable(reset):
            reset()
            continue
        for v in vars(c).values():
            if torch.is_tensor(v):
                v.zero_()
        c.t = 0
