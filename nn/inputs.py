"""The checks a :class:`nn.SequenceModel` runs on its inputs and caches before any work: shapes and dtypes,
token ids inside the vocabulary (at valid positions; the padding of a right-padded batch is replaced, never
looked up), and caches that belong to the model's own layers."""
from __future__ import annotations

import warnings

import torch
from torch import nn

from .base import DiagonalSSM
from .clocked_layer import ClockedLayer
from .decode.cache import describe_layer
from .lengths import check_lengths, valid_mask, zero_padding

__all__ = ["check_carry", "check_token_ids", "checked_input", "check_owned_caches", "warn_dropout"]

DROPOUTS = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)


def check_token_ids(ids, vocab, what, valid=None):
    """``ValueError`` unless every id of ``ids`` (``(B, L)``, or ``(B,)`` for a step) lies in ``[0, vocab)``;
    ``valid`` ``(B, L)`` bool: only those positions are checked (the padding of a padded batch is not).
    The message names the vocabulary size, the first offending id and its position."""
    if ids.numel() == 0:
        return
    if valid is None:
        lo, hi = torch.aminmax(ids)
        if int(lo) >= 0 and int(hi) < vocab:                        # the common case: one reduction
            return
    bad = (ids < 0) | (ids >= vocab)
    if valid is not None:
        bad &= valid
    if not bool(bad.any()):
        return
    first = bad.nonzero()[0]
    where = f"batch {int(first[0])}" if ids.dim() == 1 else f"(batch, position) = {tuple(int(i) for i in first)}"
    raise ValueError(f"SequenceModel.{what}: token ids must lie in the vocabulary [0, {vocab}) (d_input = {vocab} "
                     f"with embedding=True), got {int(ids[tuple(first)])} at {where}; {int(bad.sum())} id(s) out "
                     "of range" + ("" if valid is None else " at valid positions (the padding is not read)"))


def checked_input(model, x, what, step=False, lengths=None):
    """``x`` checked against ``model`` (shape, dtype, token ids: named on error) and made safe to read.

    Returns ``(x, seq_axis, n)``: ``x`` with a step's length axis dropped, and for a right-padded batch
    (``lengths``) its padding replaced (ids by 0, a valid id; inputs by zeros), so nothing it held can
    be looked up or reach a valid position; ``seq_axis`` whether a step's input had the length axis;
    ``n`` the lengths as an int64 tensor ``(B,)`` or None."""
    tokens = isinstance(model.encoder, nn.Embedding)
    if tokens:
        want, base = ("token ids of shape (B,) or (B, 1)", 1) if step else ("token ids of shape (B, L)", 2)
        kind = "integer token ids (embedding=True)"
        ok_dtype = torch.is_tensor(x) and not (x.is_floating_point() or x.is_complex() or x.dtype == torch.bool)
    else:
        d = model.encoder.in_features
        want, base = (f"inputs of shape (B, {d}) or (B, 1, {d})", 2) if step else (f"inputs of shape (B, L, {d})", 3)
        kind = "floating-point inputs (embedding=False)"
        ok_dtype = torch.is_tensor(x) and x.is_floating_point()
    if not torch.is_tensor(x):
        raise TypeError(f"SequenceModel.{what} expects {want}, got {type(x).__name__}")
    if not ok_dtype:
        raise TypeError(f"SequenceModel.{what} expects {kind}, got dtype {x.dtype}")
    seq_axis = step and x.dim() == base + 1 and x.shape[1] == 1
    ok_shape = x.dim() == base or seq_axis
    if not ok_shape or (not tokens and x.shape[-1] != model.encoder.in_features):
        raise ValueError(f"SequenceModel.{what} expects {want}, got shape {tuple(x.shape)}")
    if seq_axis:
        x = x[:, 0]
    n = None if lengths is None else check_lengths(lengths, x.shape[0], x.shape[1], device=x.device)
    valid = None if n is None else valid_mask(n, x.shape[1])       # (B, L)
    if tokens:
        check_token_ids(x, model.encoder.num_embeddings, what, valid)
        if valid is not None:
            x = torch.where(valid, x, torch.zeros((), dtype=x.dtype, device=x.device))
    elif n is not None:
        x = zero_padding(x, n)
    return x, seq_axis, n


def check_owned_caches(layers, caches, what):
    """Each cache of ``caches`` was allocated by the layer at its place in ``layers`` (``RuntimeError``
    naming both, before anything is touched)."""
    for i, (layer, cache) in enumerate(zip(layers, caches)):
        if getattr(cache, "owner", None) is not layer:
            how = cache.binding() if callable(getattr(cache, "binding", None)) else \
                f"is a {type(cache).__name__}, not a decode cache"
            raise RuntimeError(f"SequenceModel.{what}: cache {i} {how}, not by this model's layer {i}, "
                               f"{describe_layer(layer)}: a model takes only the caches of its own "
                               "allocate_inference_cache, one per layer in order (nothing was changed)")


def check_carry(model):
    """``forward(state=, return_state=)`` needs layers that carry state: DS4D / S4D, or clocked layers
    (:class:`nn.clocked_layer.ClockedLayer`: their decode state, without gradients)."""
    bad = [type(blk.layer).__name__ for blk in model.blocks if not isinstance(blk.layer, (DiagonalSSM, ClockedLayer))]
    if bad:
        raise ValueError(f"state= and return_state= carry the states of DS4D / S4D layers and clocked layers; "
                         f"this model's {', '.join(sorted(set(bad)))} carry none (use prefill and step)")


def warn_dropout(model, what):
    """Warn when ``model`` is in training mode with an active dropout: decoding then draws new masks."""
    if model.training and any(isinstance(m, DROPOUTS) and m.p > 0 for m in model.modules()):
        warnings.warn(f"SequenceModel.{what} with the model in training mode: dropout is active, so identical "
                      "steps give different outputs (call model.eval())", UserWarning, stacklevel=3)
