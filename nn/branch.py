"""Optional branches of a DS4D layer: terms added to the SSM's output, each a part with its own
parameters, kernel, decode state and step (docs/theory.md §8 for the one the project ships, the input tap).

A branch maps the layer's input ``x`` ``(B, C, L)`` to a term ``(B, C, L)`` added to the SSM's output
(``C = H`` channels; ``2H`` for a bidirectional layer's kernels). :class:`nn.DS4D` composes its
branches (``DS4D(tap=True)`` builds :class:`nn.tap.TapBranch`; ``DS4D(branches=[...])`` adds others) and
runs every path through them: training by the branch's kernel, the recurrent path by its filter,
decoding by its state, step and chunk, the state carry by its history and carry. Adding a branch is
writing one subclass of :class:`Branch`; nothing else changes.

The protocol follows S4's kernel interface (``kernel(L)``, a state, ``step``), plus what a prefilled
and carried cache needs. Decode constants are computed once per parameter change
(:meth:`step_constants`) and handed back to the per-token methods; a branch's decode state is one
tensor, allocated by :meth:`allocate` and kept by the layer's cache (``cache.branch_states``, in the
layer's ``branches()`` order).
"""
from __future__ import annotations

import torch
from torch import nn

__all__ = ["Branch", "check_branches"]


class Branch(nn.Module):
    """Base of a DS4D branch over ``channels`` channels. Subclasses implement :meth:`kernel`,
    :meth:`filter`, :meth:`step_constants`, :meth:`allocate`, :meth:`step`, :meth:`chunk_output` and
    :meth:`prefill`; :meth:`history`, :meth:`carry`, :meth:`memo_key`, :meth:`check_finite` have
    defaults; :meth:`to_ddesys` is optional (the layer's ``to_ddesys`` then says the branch has none)."""

    def __init__(self, channels):
        super().__init__()
        self.channels = int(channels)

    # ------------------------------------------------------------------ training and verification
    def kernel(self, L, dtype):
        """The branch's convolution kernel (differentiable): training by FFT.

        Parameters
        ----------
        L : int
            Kernel length.
        dtype : torch.dtype
            Real precision.

        Returns
        -------
        Tensor ``(C, L)``, real, in ``dtype``
        """
        raise NotImplementedError

    def filter(self, x):
        """The branch's term in the time domain (the recurrent path).

        Parameters
        ----------
        x : Tensor ``(B, C, L)``
            The layer's input, channels first.

        Returns
        -------
        Tensor ``(B, C, L)``, float64
        """
        raise NotImplementedError

    # ------------------------------------------------------------------ decoding
    def step_constants(self, rdt, zero=False):
        """What :meth:`step` and :meth:`chunk_output` read, computed once per parameter change.

        Parameters
        ----------
        rdt : torch.dtype
            Real precision, ``torch.float32`` or ``torch.float64``.
        zero : bool, default False
            The branch ablated: its term zero, its state still moving.

        Returns
        -------
        object
            Any object the branch's decode methods read.
        """
        raise NotImplementedError

    def allocate(self, batch_size, dtype, device):
        """A fresh (zero) decode state.

        Parameters
        ----------
        batch_size : int
        dtype : torch.dtype
            Real precision of the decode.
        device : torch.device

        Returns
        -------
        Tensor ``(B, ...)``
            One tensor whose first axis is the batch.
        """
        raise NotImplementedError

    def step(self, x_t, state, t, consts):
        """One token: the branch's term; updates ``state`` in place.

        Parameters
        ----------
        x_t : Tensor ``(B, C)``
            The layer's input at token ``t``.
        state : Tensor ``(B, ...)``
            From :meth:`allocate`.
        t : int
            The token's position.
        consts : object
            From :meth:`step_constants`.

        Returns
        -------
        Tensor ``(B, C)``
        """
        raise NotImplementedError

    def chunk_output(self, xb, state, t0, consts):
        """The branch's term over a chunk, continuing ``state`` (read only: :meth:`prefill` moves it
        afterwards).

        Parameters
        ----------
        xb : Tensor ``(B, C, L)``
            The chunk, tokens ``t0 .. t0 + L - 1``.
        state : Tensor ``(B, ...)``
        t0 : int
            The chunk's first position.
        consts : object
            From :meth:`step_constants`.

        Returns
        -------
        Tensor ``(B, C, L)``
        """
        raise NotImplementedError

    def prefill(self, xb, state, t0=0):
        """Move ``state`` in place past a chunk.

        Parameters
        ----------
        xb : Tensor ``(B, C, L)``
            The chunk, tokens ``t0 .. t0 + L - 1``.
        state : Tensor ``(B, ...)``
            Updated in place.
        t0 : int, default 0
            The chunk's first position.
        """
        raise NotImplementedError

    def history(self, state, t0, L, consts, dtype):
        """The term over a chunk's ``L`` steps due to the tokens before ``t0`` alone (those ``state``
        holds): :meth:`chunk_output` of a zero chunk.

        Parameters
        ----------
        state : Tensor ``(B, ...)``
        t0 : int
            The chunk's first position.
        L : int
            Chunk length.
        consts : object
            From :meth:`step_constants`.
        dtype : torch.dtype
            Real dtype of the zero chunk.

        Returns
        -------
        Tensor ``(B, C, L)``
        """
        zero = torch.zeros((state.shape[0], self.channels, L), dtype=dtype, device=state.device)
        return self.chunk_output(zero, state, t0, consts)

    def carry(self, xb, state, t0, dtype):
        """The state after a chunk, out of place.

        Parameters
        ----------
        xb : Tensor ``(B, C, L)``
            The chunk, tokens ``t0 ..``.
        state : Tensor ``(B, ...)`` or None
            The state before it (not modified); None: a fresh one of ``dtype``.
        t0 : int
            The chunk's first position.
        dtype : torch.dtype
            Real precision of a fresh state.

        Returns
        -------
        Tensor ``(B, ...)``
            A new state.
        """
        new = self.allocate(xb.shape[0], dtype, xb.device) if state is None else state.clone()
        self.prefill(xb, new, t0)
        return new

    def memo_key(self):
        """What the layer's decode constants read from the branch besides its parameters' versions
        (settings changed outside autograd, such as a window width)."""
        return tuple((id(p), p._version, p.data_ptr(), p.device, p.dtype) for p in self.parameters())

    def check_finite(self, any_device=False):
        """Refuse non-finite parameters.

        Parameters
        ----------
        any_device : bool, default False
            Check on any device (a device synchronization); by default only when every parameter is on
            the CPU.

        Raises
        ------
        FloatingPointError
            Naming the branch's non-finite parameters.
        """
        if not any_device and any(p.device.type != "cpu" for p in self.parameters()):
            return
        bad = [n for n, p in self.named_parameters() if not bool(torch.isfinite(p).all())]
        if bad:
            raise FloatingPointError(f"DS4D: parameter(s) {', '.join(bad)} of the branch {type(self).__name__} "
                                     "contain NaN or inf (the training step diverged: lower the learning rate, "
                                     "clip gradients, or reload the last good checkpoint)")

    # ------------------------------------------------------------------ analysis
    def to_ddesys(self, batch_shape=None):
        """The branch as a :mod:`ddesys` system to add to the layer's (float64).

        Parameters
        ----------
        batch_shape : tuple of int, optional
            The layer's batch shape (``(2, H)`` for a bidirectional layer); default ``(C,)``.

        Returns
        -------
        ddesys system
            E.g. a :class:`ddesys.DelayTap`.

        Raises
        ------
        NotImplementedError
            A branch without a ddesys system (this default).
        """
        raise NotImplementedError(f"the branch {type(self).__name__} has no ddesys system")


def check_branches(branches, channels):
    """``branches`` as an ``nn.ModuleList`` of :class:`Branch` es over ``channels`` channels (None when
    empty, so a layer without added branches has no extra state-dict entry or repr line)."""
    branches = list(branches or ())
    for i, b in enumerate(branches):
        if not isinstance(b, Branch):
            raise TypeError(f"branches[{i}] must be an nn.branch.Branch, got {type(b).__name__}")
        if b.channels != channels:
            raise ValueError(f"branches[{i}] ({type(b).__name__}) has {b.channels} channels; the layer's kernels "
                             f"have {channels}")
    return nn.ModuleList(branches) if branches else None
