"""Physical bounds printed beside the benchmarks' figures: this machine's memory bandwidth, measured in
the same run, and the bytes a decode step must move.

:func:`memory_bandwidth` times a large ``copy_`` (read + write, so twice the tensor's bytes move) and
keeps the best of a few runs: the rate a streaming kernel can hope for, on the threads torch has now.
:func:`step_bytes` counts what one token of one layer reads and writes at least: DS4D reads the
previous state and the two delayed states of every mode and writes the new one (4 state rows of
``B x H x N/2`` complex64) plus its five coefficient arrays ``(H, N/2)`` (``lam, m1, m2, bbar, c``);
S4D reads and writes its state (2 rows) plus three coefficient arrays. The bound is bytes / bandwidth:
no step can be faster while its data comes from memory (small batches fit in cache and can beat it).
"""
from __future__ import annotations

import time

import torch

__all__ = ["bound_s", "memory_bandwidth", "model_step_bytes", "step_bytes"]


def memory_bandwidth(nbytes=2 ** 28, reps=5):
    """Bytes per second of ``dst.copy_(src)`` for ``nbytes`` float32 tensors (counting read and write)."""
    src = torch.ones(nbytes // 4)
    dst = torch.empty_like(src)
    dst.copy_(src)                                   # pages touched before timing
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t0)
    return 2 * nbytes / best


def step_bytes(kind, batch, H, N2, itemsize=8):
    """Least bytes one decode step of one layer moves (module docstring); ``itemsize`` of a complex state
    (8: complex64)."""
    if kind == "ds4d":
        return (4 * batch * H * N2 + 5 * H * N2) * itemsize
    if kind == "s4d":
        return (2 * batch * H * N2 + 3 * H * N2) * itemsize
    raise ValueError(f"kind must be 'ds4d' or 's4d', got {kind!r}")


def bound_s(kind, batch, H, N2, bandwidth, itemsize=8):
    """Seconds the bytes of :func:`step_bytes` need at ``bandwidth`` bytes per second."""
    return step_bytes(kind, batch, H, N2, itemsize) / bandwidth


def model_step_bytes(model, batch):
    """Least bytes one decode step of a :class:`nn.SequenceModel` of DS4D blocks moves: its layers'
    :func:`step_bytes` (complex64 states) plus every weight of its linears, norms and decoder, read once
    per token (the encoder's row only for an embedding). At batch 1 the blocks' GLU linears ``(2H, H)``
    weigh about as much as a layer's own step: the model cannot be faster than this, however fused."""
    from torch import nn
    n = 0
    for blk in model.blocks:
        n += step_bytes("ds4d", batch, blk.layer.H, blk.layer.N2)
        n += sum(p.numel() * p.element_size() for m in (blk.norm, blk.out) for p in m.parameters())
    n += sum(p.numel() * p.element_size() for m in (model.norm, model.decoder) for p in m.parameters())
    enc = model.encoder
    n += batch * enc.weight[0].numel() * enc.weight.element_size() if isinstance(enc, nn.Embedding) else \
        sum(p.numel() * p.element_size() for p in enc.parameters())
    return n
