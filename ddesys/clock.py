"""The selective clock: a delay system whose time advances only at the steps the input marks as ticks.

A discrete delay system (docs/theory.md §2) counts its delay in steps. Given a boolean clock
``tick_t`` per step, the *clocked* system runs its recurrence in its own time ``n``, the number of ticks
so far: at a tick it takes one step of the recurrence with the step's input; between ticks its state
and history are frozen (the input is not read), and its output is the held state's readout plus the
feedthrough of the current input::

    tick_t = 1:  h_n = lam h_{n-1} + mu ((1 - alpha) h_{n-k} + alpha h_{n-k-1}) + bbar x_t,  n <- n + 1
    tick_t = 0:  h unchanged                                                                   (1)
    y_t = 2 Re(sum_m c_m h_{m,n-1}) + d x_t          (n - 1: the last tick at or before t; h = 0 before it)

A delay of ``s`` steps is a delay of ``s`` *ticks*: the system reads the state of ``s`` ticks ago,
however many frozen steps lie between. A fixed delay in the system's time therefore follows a lag
that varies, in real steps, with the number of frozen steps (padding, pauses) the input holds.

What stays exact. For a given clock, (1) is the unclocked system run on the *compacted* input (the
inputs at the ticks, in order), its outputs held between ticks. The compacted system is the same
linear time-invariant system (in its own time), so everything about it carries over unchanged:

* the transfer function, kernel and FFT convolution act on the compacted sequence (training runs the
  layer's FFT path on it: :func:`compact`, then :func:`expand`);
* stability: a frozen step maps (state, history) to themselves, so the states are the unclocked
  system's states on a shorter input; every bound of docs/theory.md §3 and §7.3 holds in ticks;
* decoding is O(1) per step: a tick is one step of the ring buffer (written at the row's own tick
  count), a frozen step one readout.

The system as a map from real-time inputs to outputs is not time-invariant (the clock depends on the
input); it is linear in ``x`` for a fixed clock. Where the clock is a function of the input (a token
that carries no time), the map is piecewise linear.

Index convention (shared by NumPy, CuPy and torch, :func:`clock_index`): a row with ``n_b`` ticks is
compacted *left-padded* into ``Lc = max_b n_b`` positions, tick ``j`` at position ``Lc - n_b + j``, zeros
before. Zero inputs before the first tick leave a linear system's state at zero, so the compacted
sequence's final state is each row's own state after its last tick (what decoding continues from).
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ._array import get_namespace, is_numpy, to_numpy

__all__ = ["ClockIndex", "clock_index", "compact", "expand", "clocked_simulate"]


class ClockIndex(NamedTuple):
    """Where every real step sits in the compacted sequence of :func:`clock_index`."""
    src: Any        #: int64 ``(B, Lc)``: the real step of each compacted position (0 where not ``valid``)
    valid: Any      #: bool ``(B, Lc)``: the compacted position holds a tick (False: left padding)
    pos: Any        #: int64 ``(B, L)``: compacted position of the last tick at or before each step
    seen: Any       #: bool ``(B, L)``: some tick at or before the step (False: output is ``d x`` only)
    counts: Any     #: int64 ``(B,)``: ticks per row
    Lc: int         #: compacted length, ``max(1, max counts)``


def clock_index(ticks):
    """The compaction index of a clock.

    Parameters
    ----------
    ticks : array, bool ``(B, L)``
        True where the system's time advances (NumPy, CuPy or torch).

    Returns
    -------
    ClockIndex
        Arrays of the same library and device.

    Raises
    ------
    TypeError
        ``ticks`` not boolean.
    ValueError
        ``ticks`` not two-dimensional.

    Examples
    --------
    >>> import numpy as np
    >>> idx = clock_index(np.array([[True, False, True, True], [False, True, False, False]]))
    >>> idx.Lc, idx.src.tolist(), idx.pos.tolist(), idx.seen.tolist()
    (3, [[0, 2, 3], [0, 0, 1]], [[0, 0, 1, 2], [0, 2, 2, 2]], [[True, True, True, True], [False, True, True, True]])
    """
    xp = get_namespace(ticks)
    if "bool" not in str(getattr(ticks, "dtype", "")):
        raise TypeError(f"ticks must be a boolean array (True where the clock ticks), got dtype "
                        f"{getattr(ticks, 'dtype', type(ticks).__name__)}")
    if ticks.ndim != 2:
        raise ValueError(f"ticks must have shape (B, L), got {tuple(ticks.shape)}")
    B, L = ticks.shape
    ti = xp.astype(ticks, xp.int64)
    counts = xp.sum(ti, axis=1)                                         # (B,)
    Lc = max(1, int(xp.max(counts))) if B and L else 1
    s = xp.cumulative_sum(ti, axis=1)                                   # (B, L): ticks up to t, inclusive
    seen = s >= 1
    pos = xp.where(seen, Lc - counts[:, None] + s - 1, xp.zeros_like(s))            # (B, L)
    order = xp.argsort(xp.astype(~ticks, xp.int64), axis=1, stable=True)            # ticks first, in order
    order = order[:, :Lc] if L >= Lc else xp.concat([order, xp.zeros_like(order[:, :Lc - L])], axis=1)
    p = xp.arange(Lc, dtype=xp.int64, **_dev(xp, ticks))[None, :]                    # (1, Lc)
    j = p - (Lc - counts[:, None])                                                   # (B, Lc): tick number
    valid = j >= 0
    src = xp.take_along_axis(order, xp.where(valid, j, xp.zeros_like(j)), axis=1)    # (B, Lc)
    src = xp.where(valid, src, xp.zeros_like(src))
    return ClockIndex(src, valid, pos, seen, counts, Lc)


def _dev(xp, a):
    return {} if is_numpy(xp) else {"device": a.device}


def _along(xp, x, index):
    """``out[b, ..., i] = x[b, ..., index[b, i]]`` (``index`` broadcast over the middle axes of ``x``)."""
    shape = (index.shape[0],) + (1,) * (x.ndim - 2) + (index.shape[1],)
    ind = xp.broadcast_to(xp.reshape(index, shape), tuple(x.shape[:-1]) + (index.shape[1],))
    return xp.take_along_axis(x, ind, axis=-1)


def _mask(xp, m, x):
    shape = (m.shape[0],) + (1,) * (x.ndim - 2) + (m.shape[1],)
    return xp.astype(xp.reshape(m, shape), x.dtype)


def compact(x, index):
    """The inputs at the ticks, left-padded: ``x`` ``(B, ..., L)`` -> ``(B, ..., Lc)`` (zeros before each
    row's first tick). Differentiable for torch tensors (a gather)."""
    xp = get_namespace(x)
    return _along(xp, x, index.src) * _mask(xp, index.valid, x)


def expand(yc, x, d, index):
    """Outputs in real time from the compacted run ``yc`` ``(B, ..., Lc)`` (which includes the feedthrough
    ``d xc``): the held state's part at every step plus ``d x_t`` ``(B, ..., L)``. ``d`` broadcasts against
    ``x``'s middle axes (``(..., 1)`` or a scalar)."""
    xp = get_namespace(yc, x)
    xc = compact(x, index)
    state = _along(xp, yc - d * xc, index.pos) * _mask(xp, index.seen, x)
    return state + d * x


def clocked_simulate(system, x, ticks):
    """Outputs of the clocked system (1) of a :class:`~ddesys.DiscreteDelaySystem`.

    Parameters
    ----------
    system : DiscreteDelaySystem
        Batch shape ``(H,)`` or ``()``.
    x : array_like, real ``(B, H, L)`` (or ``(B, L)`` for a system with batch shape ``()``)
    ticks : array_like, bool ``(B, L)``
        The clock of each row.

    Returns
    -------
    ndarray, real, ``x``'s shape
        ``system.simulate`` of the compacted inputs, held between ticks, plus ``d x``.

    Examples
    --------
    >>> import numpy as np
    >>> from ddesys import DiscreteDelaySystem
    >>> sys = DiscreteDelaySystem(lam=[0.0], mu=[0.5], bbar=[1.0], c=[0.5], delay=1.0)   # h_n = x + h_{n-1}/2
    >>> y = clocked_simulate(sys, np.array([[1.0, 0.0, 0.0, 0.0]]), np.array([[True, False, True, False]]))
    >>> y.tolist()                                     # the zero at step 1 is not a tick: time stands still
    [[1.0, 1.0, 0.5, 0.5]]
    """
    xp = system.xp
    x = xp.asarray(x)
    ticks = xp.asarray(ticks)
    if ticks.ndim != 2 or x.ndim < 2 or x.shape[0] != ticks.shape[0] or x.shape[-1] != ticks.shape[1]:
        raise ValueError(f"x must be (B, ..., L) and ticks (B, L) with the same B and L, got {tuple(x.shape)} "
                         f"and {tuple(ticks.shape)}")
    idx = clock_index(ticks)
    d = xp.reshape(xp.asarray(system.d, dtype=x.dtype), tuple(np.shape(to_numpy(system.d))) + (1,)) \
        if x.ndim > 2 else xp.asarray(system.d, dtype=x.dtype)
    return expand(system.simulate(compact(x, idx)), x, d, idx)
