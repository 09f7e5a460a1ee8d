"""The base of every clocked layer, and what a clock may call on the layer it runs.

A *clocked layer* runs an inner DS4D / S4D layer in a time of its own (docs/theory.md §10): the given
clock of :class:`nn.clock.Clocked`, the soft clock of :class:`nn.selective.SoftClocked`, the binary one of
:class:`nn.learned_clock.HardClocked`, or a clock written elsewhere. :class:`ClockedLayer` owns what they
share: the inner layer's checks, the input checks of ``forward``, cache allocation (the decode options,
the branch policy, the clock's own state), binding a cache to the current decode constants, and the state
carry of ``forward(state=, return_state=)``. A clock implements four methods:

* ``run(x, ticks, mode)``: the training path, ``x`` ``(B, L, H)`` -> ``(B, L, H)`` (``ticks`` ``(B, L)``
  bool: pauses forced from outside, or None);
* ``new_cache(batch_size, max_seqlen, rdt, **options)``: a fresh, bound decode cache;
* ``step(x_t, cache, tick=None)`` and ``prefill(x, cache, ticks=None)``: decoding.

and may give ``decode_constants(rdt)`` (default: the inner layer's) and ``clock_state(batch_size, device)``
(tensors of its own recurrent state, kept in the cache beside the layer's: reset, copied and carried with
it). :class:`InnerLayer` declares what a clock and its decode engine may call on the inner layer; any
module with these members can be clocked (DS4D and S4D are).

A clock given to a model is a *part*: an object whose ``wrap(layer, index)`` returns the clocked layer of
block ``index`` (:class:`nn.selective.SoftClock`, :class:`nn.learned_clock.BinaryClock`), or a given clock
(:class:`nn.clock.TokenClock`, any callable from the model's input to ticks) whose blocks run in
:class:`nn.clock.Clocked` (:func:`nn.block.clock_parts`).

Shapes: ``forward`` ``x (B, L, H)``, ``ticks (B, L)`` bool ``-> (B, L, H)``; ``step`` ``x_t (B, H)``,
``tick (B,)`` bool ``-> (B, H)``.
"""
from __future__ import annotations

import copy
import inspect
from typing import Protocol, runtime_checkable

import torch
from torch import nn

from .common import check_clocked_cache, check_clocked_input, check_ticks

__all__ = ["ClockPart", "ClockedLayer", "InnerLayer"]


@runtime_checkable
class InnerLayer(Protocol):
    """What a clocked layer and its decode engine call on the layer they run (DS4D and S4D have it all).

    Attributes ``H`` (channels), ``N2`` (complex modes per channel), ``D`` ``(H,)`` (the feedthrough) and
    ``transposed`` (False: inputs ``(B, L, H)``); the layer itself is called as ``inner(x, mode=...)``
    and ``inner(x, return_state=True)`` (a state whose ``ring()`` is ``(B, R, H, N2)``)."""

    H: int
    N2: int
    D: torch.Tensor
    transposed: bool

    def branches(self):
        """The optional branches beside the SSM (a clocked layer refuses to decode with any)."""

    def prepare(self, L):
        """Fix what a forward pass of length ``L`` fixes (a delay range left open)."""

    def prepare_decode(self, batch_size, max_seqlen, dtype):
        """Validate the allocation's arguments: ``(max_seqlen, rdt)``."""

    def decode_constants(self, rdt):
        """The memoized decode constants in real precision ``rdt`` (``.recurrence()``, ``.slots``, ``.host``)."""

    def cache_dtype(self, rdt):
        """The complex dtype of a decode state in real precision ``rdt``."""

    def delay_form(self, dtype):
        """``(lam, mu, bbar, c, s)``: the discrete modes and the delays (the soft clock's scan)."""

    def time_kernel(self, L, dtype=torch.float64):
        """The kernel and its derivative in the layer's time, or None (the binary clock's gradient)."""

    def as_prompt(self):
        """A context in which forward passes read their inputs as prompts."""


#: members an inner layer must have (checked when a clocked layer is built)
INNER_MEMBERS = ("H", "N2", "D", "transposed", "branches", "prepare", "prepare_decode", "decode_constants",
                 "cache_dtype", "delay_form", "time_kernel", "as_prompt")


class ClockPart(Protocol):
    """A clock handed to :class:`nn.SequenceModel` / :class:`nn.SequenceBlock`: ``wrap(layer, index)``
    returns block ``index``'s ``layer`` run in this clock's time (a :class:`ClockedLayer`)."""

    def wrap(self, layer, index):
        """The clocked layer of block ``index`` around ``layer``."""


class ClockedLayer(nn.Module):
    """Base of a layer run in its own time around an inner layer (module docstring).

    Parameters
    ----------
    inner : InnerLayer
        The layer (``transposed=False``): :class:`nn.DS4D`, :class:`nn.S4D` or any module with the
        members of :class:`InnerLayer`.

    Notes
    -----
    Subclasses implement ``run``, ``new_cache``, ``step`` and ``prefill``; ``cache_type`` names their
    cache class. ``forward(state=, return_state=)`` carries the decode state across chunks by
    :meth:`carry` (default: exact, through ``prefill`` on a copy of the state, without gradients).
    """

    cache_type = None
    #: forward / prefill take ``ticks`` (B, L) and step a ``tick`` (B,): pauses forced from outside (a
    #: model marks a right-padded batch's padding so)
    takes_ticks = True

    def __init__(self, inner):
        super().__init__()
        missing = [m for m in INNER_MEMBERS if not hasattr(inner, m)]
        if missing:
            raise TypeError(f"{type(self).__name__} needs an inner layer with {', '.join(missing)} "
                            f"(nn.clocked_layer.InnerLayer), got {type(inner).__name__}")
        if inner.transposed:
            raise ValueError(f"{type(self).__name__} needs an inner layer with transposed=False (inputs (B, L, H))")
        self.inner = inner
        self.H, self.N2 = inner.H, inner.N2

    # ------------------------------------------------------------------ what a clock implements
    def run(self, x, ticks, mode):
        """The training path (implemented by a clock).

        Parameters
        ----------
        x : Tensor ``(B, L, H)``
        ticks : Tensor ``(B, L)`` bool or None
            Pauses forced from outside (False), or None.
        mode : {"fft", "recurrent"}
            The inner layer's path, where the clock has a choice.

        Returns
        -------
        Tensor ``(B, L, H)``
        """
        raise NotImplementedError

    def new_cache(self, batch_size, max_seqlen, rdt, **options):
        """A fresh decode cache of this layer, bound (:meth:`nn.decode.cache.Cache.bind`); implemented by a
        clock.

        Parameters
        ----------
        batch_size : int
        max_seqlen : int or None
        rdt : torch.dtype
            Real precision of the update, ``torch.float32`` or ``torch.float64``.
        **options
            The clock's own (e.g. the given clock's ``engine=``).

        Returns
        -------
        Cache
            An instance of ``cache_type``.
        """
        raise NotImplementedError

    def clock_state(self, batch_size, device):
        """The clock's own recurrent state, kept in the cache beside the layer's (none here).

        Parameters
        ----------
        batch_size : int
        device : torch.device

        Returns
        -------
        dict
            ``{cache field: zero tensor with the batch first}``.
        """
        return {}

    def decode_constants(self, rdt):
        """What the cache's engine reads: the inner layer's decode constants.

        Parameters
        ----------
        rdt : torch.dtype
            Real precision, ``torch.float32`` or ``torch.float64``.

        Returns
        -------
        object
            The inner layer's ``decode_constants(rdt)``.
        """
        return self.inner.decode_constants(rdt)

    # ------------------------------------------------------------------ shared
    def forward(self, x, ticks=None, mode="fft", lengths=None, state=None, return_state=False):
        """The layer over a whole sequence, in its own time.

        Parameters
        ----------
        x : Tensor ``(B, L, H)``
        ticks : Tensor ``(B, L)`` bool, optional
            Pauses forced from outside (False); None: none forced. Float values 0.0 / 1.0: a learned
            clock's (:class:`nn.LearnedTokenClock`), given its gradient by :meth:`run` (not with a state).
        mode : {"fft", "recurrent"}, default "fft"
            The inner layer's path (see :meth:`run`).
        lengths : optional
            Refused unless None: mark a right-padded batch's padding as pauses (``ticks`` False), which is what a
            clock is for.
        state : cache of this layer, optional
            A decode state to continue from (read, never modified; :meth:`carry`).
        return_state : bool, default False
            Also return the state after the chunk.

        Returns
        -------
        Tensor ``(B, L, H)``, or ``(y, state)`` with ``return_state``

        Raises
        ------
        ValueError
            ``lengths``, ``x`` or ``ticks`` of another shape, a state of another layer or batch.
        TypeError
            ``ticks`` that are neither bool nor (without a state) float.
        RuntimeError
            A state carried under autograd (:meth:`carry`).
        """
        check_clocked_input(self, x, lengths)
        if ticks is not None:
            ticks = check_ticks(ticks, x.shape[0], x.shape[1], x.device, learned=state is None and not return_state)
        if state is None and not return_state:
            return self.run(x, ticks, mode)
        y, new = self.carry(x, ticks, state, mode)
        return (y, new) if return_state else y

    def carry(self, x, ticks, state, mode):
        """A chunk's outputs and the state after it, continuing ``state`` (not modified). Default:
        ``prefill`` on a copy, exact and without gradients.

        Parameters
        ----------
        x : Tensor ``(B, L, H)``
        ticks : Tensor ``(B, L)`` bool or None
        state : cache of this layer or None
            None: from a fresh cache (complex128 for a float64 ``x``).
        mode : {"fft"}
            The decode path; another mode is refused.

        Returns
        -------
        y : Tensor ``(B, L, H)``
            In ``x``'s dtype.
        new_state : cache of this layer

        Raises
        ------
        ValueError
            ``mode`` other than ``"fft"``; a state of another layer or batch.
        RuntimeError
            Under autograd with ``x`` or parameters requiring gradients: train on whole sequences, or
            carry under ``torch.no_grad()``.
        """
        if mode != "fft":
            raise ValueError("state= and return_state= run the decode path: use mode='fft'")
        if torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in self.parameters())):
            raise RuntimeError(f"{type(self).__name__} carries its state without gradients (through its decode "
                               "path): train on whole sequences, or carry the state under torch.no_grad()")
        if state is None:
            new = self.allocate_inference_cache(x.shape[0], dtype=torch.float64 if x.dtype == torch.float64
                                                else None)
        else:
            check_clocked_cache(self, state, x.shape[0])
            new = copy.deepcopy(state)                              # the state is read, never modified
        y = self.prefill(x, new, ticks)
        return y.to(x.dtype), new

    def allocate_inference_cache(self, batch_size, max_seqlen=None, dtype=None, **options):
        """A fresh decode cache (Mamba's signature).

        Parameters
        ----------
        batch_size : int
        max_seqlen : int, optional
            The longest sequence (required by the soft clock, whose cache keeps every state).
        dtype : torch.dtype, optional
            ``torch.float64``: complex128 states; else complex64.
        **options
            The clock's (the given clock's ``engine=``).

        Returns
        -------
        Cache
            An instance of ``cache_type``, bound to this layer.

        Raises
        ------
        NotImplementedError
            An inner layer with branches (their states would have to run in the layer's time).
        TypeError
            An option the clock does not take; bad sizes or dtype (as the inner layer's
            ``prepare_decode``).
        ValueError
            A bidirectional inner layer.
        """
        branches = self.inner.branches()
        if branches:
            names = ", ".join(type(b).__name__ for b in branches)
            raise NotImplementedError(f"decoding a clocked layer whose inner layer has branches ({names}) is not "
                                      "implemented: each branch's state would have to run in the layer's time; "
                                      "build the inner layer without them")
        params = inspect.signature(self.new_cache).parameters
        takes = set(params) - {"batch_size", "max_seqlen", "rdt"}                # the clock's own options
        unknown = sorted(set(options) - takes)
        if unknown and not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            raise TypeError(f"{type(self).__name__}.allocate_inference_cache got unexpected keyword argument(s) "
                            f"{unknown}")
        max_seqlen, rdt = self.inner.prepare_decode(batch_size, max_seqlen, dtype)
        return self.new_cache(batch_size, max_seqlen, rdt, **options)

    def bind_cache(self, cache):
        """The decode constants for ``cache``'s precision, bound to it (the engine's ``bind`` runs when they
        are new to the cache: :meth:`nn.decode.cache.Cache.bound`).

        Parameters
        ----------
        cache : Cache
            This layer's.

        Returns
        -------
        object
            :meth:`decode_constants` at the cache's real dtype.
        """
        consts = self.decode_constants(cache.real_dtype)
        cache.bound(consts)
        return consts
