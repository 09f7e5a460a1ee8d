"""The decode ring's memory layout on the CPU: indexed ``buf[b, s, h, n]`` ``(B, R, H, N2)``, stored
channel-major, ``(H, R, B, N2)`` (docs/theory.md §6.2). One channel's history lies in one place: its two
delayed slots are adjacent and hold every batch row side by side, so a step's delayed reads are one
contiguous run per channel (``python -m ddesys.experiments.bench.ring_layout`` measures the difference).
:mod:`ddesys.cpu.step` and :mod:`ddesys.cpu.prefill` read rings made here."""
from __future__ import annotations

import numpy as np

__all__ = ["new_ring", "is_channel_major", "memory_view"]

_MEMORY_ORDER = {4: (2, 1, 0, 3), 5: (2, 1, 0, 3, 4)}      # (B, R, H, N2[, 2]) -> (H, R, B, N2[, 2]) and back
_ROW_ORDER = {4: (0, 2, 1, 3), 5: (0, 2, 1, 3, 4)}         # (B, R, H, N2[, 2]) <-> (B, H, R, N2[, 2])


def new_ring(shape, dtype, per_row=False, zero=True):
    """A zero ring buffer of ``shape`` ``(B, R, H, N2)`` (or ``(B, R, H, N2, 2)`` for a 16-bit history's
    uint16 pairs), indexed ``buf[b, s, h, n]``, channel-major in memory: ``(H, R, B, N2)``, the layout the
    compiled step and prefill read fast (:mod:`ddesys.cpu.step`, Memory). ``per_row=True``: each batch row
    channel-major on its own (memory ``(B, H, R, N2)``), so that every ``buf[b:b + 1]`` is a ring of its own
    (the clocked layers step their rows one at a time). Every page is touched here, so no step stalls on
    a first-touch fault; NumPy asks for huge pages. Wrap it with ``torch.from_numpy`` for a torch cache.
    ``zero=False``: left uninitialized, for a caller that writes every slot at once."""
    shape = tuple(int(n) for n in shape)
    if len(shape) not in _MEMORY_ORDER:
        raise ValueError(f"new_ring: shape must be (B, R, H, N2) or (B, R, H, N2, 2), got {shape}")
    order = (_ROW_ORDER if per_row else _MEMORY_ORDER)[len(shape)]
    mem = np.empty(tuple(shape[i] for i in order), dtype)
    if zero:
        mem.fill(0)                                                # touch every page now
    return mem.transpose(order)                                    # order is its own inverse


def is_channel_major(buf, per_row=False):
    """Whether ``buf`` ``(B, R, H, N2[, 2])`` is laid out as :func:`new_ring` makes it (every row at once,
    ``buf.transpose(2, 1, 0, 3)`` C-contiguous), as :func:`ddesys.cpu.step.decode_step` and
    :func:`ddesys.cpu.step.bind_step` need; ``per_row``: every row ``buf[b:b + 1]`` on its own."""
    order = _MEMORY_ORDER.get(getattr(buf, "ndim", 0))
    if order is None:
        return False
    if per_row:
        return all(buf[b:b + 1].transpose(order).flags.c_contiguous for b in range(buf.shape[0]))
    return buf.transpose(order).flags.c_contiguous


def memory_view(buf):
    """The ring in memory order, ``(H, R, B, N2[, 2])``, for the compiled loops (``buf`` as given when it is
    not an array of a ring's rank: the dispatcher then refuses it and :func:`check_step_args` explains)."""
    order = _MEMORY_ORDER.get(getattr(buf, "ndim", 0)) if type(buf) is np.ndarray else None
    return buf if order is None else buf.transpose(order)
