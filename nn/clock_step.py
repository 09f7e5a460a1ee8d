"""The decode engines of :class:`nn.clock.Clocked` (given clock): one per cache, chosen at allocation.

``"fused"`` (the CPU default for a DS4D inner layer): each ticking row is one call of the fused decode
step (:func:`ddesys.cpu.step.bind_step`, the loop of ``DS4D.step``) on that row's ring at its own write
position ``w``; a pausing row keeps its state and outputs ``2 Re(c . h_prev) + d x``. The position in
the ring replaces the tick count in the step's "read before the start is zero" test: a clocked ring's
slots before a row's first tick hold zero states (a fresh or reset ring is zero, and a prefill writes
the compacted run, whose left padding has zero inputs), so both tests read the same numbers.
``"reference"``: the torch update (every device; S4D inner layers, whose ring has one slot).
``DDESYS_REFERENCE=1`` at allocation, or ``engine="reference"``, selects it.
"""
from __future__ import annotations

import torch

from ddesys.backend import force_reference
from ddesys.recurrence import readout
from ddesys.cpu.step import bind_step, step_available

from .cache import channel_major

__all__ = ["CLOCK_ENGINES", "ClockedFused", "select_clock_engine"]

CLOCK_ENGINES = ("fused", "reference")


class ClockedReference:
    """The torch update of :meth:`nn.clock.Clocked.step` (any device, DS4D or S4D inner layer)."""
    name = "reference"


class ClockedFused:
    """Per ticking row, the fused CPU step on that row's ring (see the module docstring)."""
    name = "fused"

    @staticmethod
    def bind(cache, consts):
        """One bound step per row for the inner layer's :class:`nn.engine.DS4DConstants` ``consts`` (its
        NumPy views ``consts.host``: lam, m1, m2, bbar, c, d, k)."""
        host = consts.host
        cache.buf = channel_major(cache.buf, per_row=True)              # a ring made elsewhere: copied once
        ring = cache.buf.numpy()                                        # (B, R, H, N2), taken once
        cache._ring = ring
        cache._host = host
        cache._runs = [bind_step(ring[b:b + 1], *host) for b in range(ring.shape[0])]
        cache._bound = consts

    @staticmethod
    def step(cache, x_t, tick, consts):
        """``x_t`` ``(B, H)``, ``tick`` ``(B,)`` bool -> ``y`` ``(B, H)`` in the cache's real dtype; moves the
        ticking rows' write positions (the caller advances ``w``, ``n`` and ``t``)."""
        if cache.__dict__.get("_bound") is not consts:
            ClockedFused.bind(cache, consts)
        rdt = cache.real_dtype
        xn = (x_t if x_t.dtype == rdt else x_t.to(rdt)).detach().numpy()  # (B, H)
        y = torch.empty(x_t.shape, dtype=rdt)                           # (B, H), returned
        yn = y.numpy()
        ring, runs, R = cache._ring, cache._runs, cache.n_slots
        c, d = cache._host[4], cache._host[5]
        ticks, ws = tick.tolist(), cache.w.tolist()
        for b in range(len(ticks)):
            if ticks[b]:
                runs[b](xn[b:b + 1], ws[b], yn[b:b + 1])                  # the row's step at its position
            elif ws[b] > 0:                                             # held: the previous state's readout
                yn[b] = readout(ring[b, (ws[b] - 1) % R], c, d, xn[b])   # (H,)
            else:                                                       # nothing written yet: the feedthrough
                yn[b] = d * xn[b]
        return y


def select_clock_engine(inner, buf, engine=None):
    """The engine for a new clocked ring ``buf``: ``engine`` or the default (fused on the CPU for a DS4D
    inner layer with Numba, unless ``DDESYS_REFERENCE=1``; else the reference)."""
    if engine is not None and engine not in CLOCK_ENGINES:
        raise ValueError(f"engine must be None or one of {CLOCK_ENGINES}, got {engine!r}")
    ok = buf.device.type == "cpu" and step_available() and hasattr(inner, "nu_tau") and buf.shape[1] >= 2
    if engine == "fused" and not ok:
        raise ValueError("engine='fused' needs a CPU cache, Numba and a DS4D inner layer (an S4D ring has one slot)")
    if engine is None:
        engine = "fused" if ok and not force_reference() else "reference"
    return ClockedFused() if engine == "fused" else ClockedReference()
