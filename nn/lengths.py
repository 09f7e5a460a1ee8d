"""Variable-length (padded) batches: each sequence gets the outputs it would get alone.

A batch ``(B, L, ...)`` holds sequences of lengths ``lengths (B,)``, right-padded to ``L``. What each
path needs:

* every path: the padding is replaced by zeros before anything reads it (:func:`zero_padding`; token
  ids by a valid id before the embedding, its output then zeroed), so a NaN, an inf or an id outside the
  vocabulary there never reaches a valid position, an output or a gradient;
* causal FFT / recurrent forward: nothing more (an output at ``t < len_b`` reads inputs ``<= t`` only);
  the outputs at padded positions are zeroed;
* bidirectional forward: the reverse kernel at ``t`` reads the inputs after ``t``, so the padding is
  zeroed first (then it reads exactly the sequence's own later tokens);
* prefill and the decoding after it: a sequence of zero inputs before the first token leaves a linear
  system's state at zero, so a right-padded batch is turned into a left-padded one (:func:`left_align`):
  after ``L`` steps each sequence's state is its state after its own ``len_b`` tokens, and decoding
  continues in lockstep. At model level the padded positions are masked to zero before every layer
  (norms and biases would otherwise feed non-zero values into the states).
"""
from __future__ import annotations

import torch

__all__ = ["check_lengths", "valid_mask", "left_align", "right_align", "zero_padding"]


def check_lengths(lengths, batch, L, device=None):
    """``lengths`` as an int64 tensor ``(B,)`` with ``1 <= len_b <= L`` (``ValueError`` naming the misfit).

    Parameters
    ----------
    lengths : sequence of int or tensor ``(B,)``
        ``[]`` for an empty batch (``B = 0``).
    batch, L : int
        Batch size and padded length of the input.
    """
    try:
        n = torch.as_tensor(lengths, device=device)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise TypeError(f"lengths must be a sequence of ints, got {type(lengths).__name__}") from exc
    if n.numel() == 0 and not torch.is_tensor(lengths):      # [] or (): no element to give it a dtype
        n = n.to(torch.int64)
    if n.dtype.is_floating_point or n.dtype.is_complex or n.dtype == torch.bool:
        raise TypeError(f"lengths must hold integers, got dtype {n.dtype}")
    if n.shape != (batch,):
        raise ValueError(f"lengths must have shape (B,) = ({batch},), one length per sequence, got "
                         f"{tuple(n.shape)}")
    n = n.to(torch.int64)
    if batch and (int(n.min()) < 1 or int(n.max()) > L):
        raise ValueError(f"lengths must lie in [1, L] = [1, {L}] (L the padded length), got min "
                         f"{int(n.min())}, max {int(n.max())}")
    return n


def valid_mask(lengths, L):
    """``(B, L)`` bool: True at the valid (right-padded) positions ``t < len_b``."""
    return torch.arange(L, device=lengths.device)[None, :] < lengths[:, None]


def _shift_index(lengths, L, sign):
    t = torch.arange(L, device=lengths.device)[None, :]                 # (1, L)
    return (t - sign * (L - lengths[:, None])) % L                      # (B, L)


def left_align(x, lengths, dim=1):
    """Right-padded ``x`` (``dim`` the time axis) -> left-padded: sequence ``b``'s tokens end at ``L - 1``,
    zeros before them."""
    L = x.shape[dim]
    idx = _shift_index(lengths, L, +1)                                  # source position of each target
    keep = torch.arange(L, device=x.device)[None, :] >= (L - lengths[:, None])    # (B, L)
    return _gather(x, idx, keep, dim)


def right_align(y, lengths, dim=1):
    """Inverse of :func:`left_align`: left-padded ``y`` -> right-padded, zeros after each sequence."""
    L = y.shape[dim]
    idx = _shift_index(lengths, L, -1)
    return _gather(y, idx, valid_mask(lengths, L), dim)


def _gather(x, idx, keep, dim):
    """``out[b, t] = x[b, idx[b, t]]`` where ``keep[b, t]``, else 0, along the time axis ``dim``. Selected,
    not multiplied: a NaN or inf in the dropped positions never reaches the output (``0 * inf`` is NaN)."""
    dim = dim % x.ndim
    shape = [1] * x.ndim
    shape[0], shape[dim] = idx.shape
    full = list(x.shape)
    index = idx.reshape(shape).expand(full)
    out = torch.gather(x, dim, index)
    return torch.where(keep.reshape(shape), out, torch.zeros((), dtype=out.dtype, device=out.device))


def zero_padding(x, lengths, dim=1):
    """Right-padded ``x`` with its padding (``t >= len_b`` along ``dim``) replaced by zeros: selected, so
    whatever the padding held (NaN, inf) is gone, and no gradient flows to it."""
    dim = dim % x.ndim
    shape = [1] * x.ndim
    shape[0], shape[dim] = lengths.shape[0], x.shape[dim]
    keep = valid_mask(lengths, x.shape[dim]).reshape(shape)
    return torch.where(keep, x, torch.zeros((), dtype=x.dtype, device=x.device))
