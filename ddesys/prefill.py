"""A prompt through the decode ring in one compiled pass (CPU, Numba): ``L`` decode steps at once.

:func:`run_ring` does what ``L`` calls of :func:`ddesys.step.decode_step` at positions ``t0 .. t0+L-1``
do, in the same precision (float32 for a complex64 or 16-bit ring, float64 for complex128), with the
same recurrence (:func:`ddesys.recurrence.run_recurrence`'s compiled channel loop)::

    h_t = lam h_{t-1} + m1 h_{t-k} + m2 h_{t-k-1} + bbar x_t,     y_t = 2 Re(sum_n c_n h_{n,t}) + d x_t

but in a memory order that suits a whole prompt: each (batch row, channel) item copies the states it
needs from the ring (the last ``k + 1`` positions before ``t0``; zero before position 0) into a
contiguous history of ``(k + 1 + L, N2)`` rows, runs the ``L`` steps there (time outer, modes inner:
the three reads stream, the modes vectorize), and writes the last ``min(R, L)`` states back to their
ring slots (``s mod R``), as stepping would have left them. The ring may have any strides; in the
decode step's channel-major layout (:func:`ddesys.step.new_ring`) a channel's slots follow each other in
memory and the write-back streams. Work ``O(B H N2 L)``, one pass: the
per-token dispatch of stepping and the ``O(N2 M log M)`` per-mode FFTs of a spectral prefill are gone.

Threads and determinism: items are split over Numba's threads inside :func:`ddesys.threads.numba_threads`
(torch's budget); an item's arithmetic does not depend on the thread running it, so the outputs and
the ring are bitwise equal at any thread count. Delays ``k`` are those of the ring's contract,
``1 <= k <= R - 1``; a delay that no position of the run reaches (``k > t0 + L - 1``, e.g. S4D's "no
delay" with ``R = 1``) drops the delayed terms.
"""
from __future__ import annotations

import numpy as np

from ._numba import nb as _nb
from .ring import _memory_view

__all__ = ["run_ring", "prefill_available"]

_C64, _C128, _U16 = np.dtype(np.complex64), np.dtype(np.complex128), np.dtype(np.uint16)
NO_DELAY = 2 ** 62              #: a delay no run reaches: the delayed terms drop (S4D's ring of one slot)


def prefill_available() -> bool:
    """True when the compiled pass can run (Numba present and not disabled by ``DDESYS_DISABLE_NUMBA``)."""
    return _nb is not None


if _nb is not None:
    from numba import types as _types
    from numba.extending import overload as _overload

    from ._step_loops import _pack16, _unpack16
    from .recurrence import _channel_nb

    _G = 8                                        # channels per work item (their slot rows are written together)

    _FM = {"contract", "reassoc", "nsz"}         # the decode step's flags: FMA, reordered sums (no NaN/inf change)

    @_nb.njit(inline="always")
    def _plan(kb, t0, L):                          # pragma: no cover - jitted
        """``(live, P)``: whether the delayed terms reach a position of the run, and the history rows."""
        live = kb <= t0 + L - 1
        return live, (kb + 1 if live else 1)

    @_nb.njit(inline="always")
    def _rows(k, t0, L):                           # pragma: no cover - jitted
        """The most history rows any channel needs."""
        m = 1
        for h in range(k.shape[0]):
            m = max(m, _plan(k[h], t0, L)[1])
        return m

    def _load(v, fmt):                             # pragma: no cover - typed below
        """A stored state -> (real, imaginary) in the working precision."""

    def _store(ring, vr, vi, fmt):                 # pragma: no cover - typed below
        """(real, imaginary) -> the value to store in ``ring``."""

    @_overload(_load, inline="always")
    def _load_typed(v, fmt):                       # pragma: no cover - typing
        if isinstance(v, _types.Complex):
            return lambda v, fmt: (v.real, v.imag)
        return lambda v, fmt: _unpack16(v, fmt)

    @_overload(_store, inline="always")
    def _store_typed(ring, vr, vi, fmt):           # pragma: no cover - typing
        if isinstance(ring.dtype, _types.Complex):
            return lambda ring, vr, vi, fmt: complex(vr, vi)
        return lambda ring, vr, vi, fmt: _pack16(vr, vi, fmt)

    @_nb.njit(parallel=True, cache=True, fastmath=_FM)
    def _ring_run(ring, fmt, t0, x, cs, k, d, y, nw):   # pragma: no cover - jitted
        """The pass. ``ring`` in memory order, ``(H, R, B, N2)``: complex, or a 16-bit history's packed pairs
        as uint32 (``fmt`` 0 float16, 1 bfloat16: loads widen exactly, stores round to nearest
        even, :mod:`ddesys.step`); ``x``, ``y`` ``(B, H, L)``; ``cs`` ``(10, H, N2)`` real: the real and
        imaginary parts of lam, m1, m2, bbar, c; ``nw`` workers (the thread budget).

        Work items: a block of ``_G`` channels and a batch row (fixed, whatever ``nw``; consecutive items
        are the batch rows of one block, so a worker fills one channels' region of the ring). Each channel's
        history is its own rows of the worker's scratch; each channel's states go back in time order
        (consecutive slots: consecutive memory in the channel-major ring)."""
        H, R, B, N2 = ring.shape
        L = x.shape[2]
        first = L - min(R, L)
        nblk = (H + _G - 1) // _G
        n_items = B * nblk
        nw = max(1, min(nw, n_items))
        rows = _rows(k, t0, L) + L
        for w in _nb.prange(nw):                  # one scratch per worker; an item's arithmetic is its own
            hr = np.empty((_G, rows, N2), x.dtype)
            hi = np.empty((_G, rows, N2), x.dtype)
            for it in range(w * n_items // nw, (w + 1) * n_items // nw):
                hb = it // B
                b = it - hb * B
                h0 = hb * _G
                h1 = min(h0 + _G, H)
                for h in range(h0, h1):
                    g = h - h0
                    live, P = _plan(k[h], t0, L)
                    for r in range(P):            # the states before t0 (zero before position 0)
                        pos = t0 - P + r
                        if pos < 0:
                            hr[g, r] = 0
                            hi[g, r] = 0
                        else:
                            s = pos % R
                            for n in range(N2):
                                hr[g, r, n], hi[g, r, n] = _load(ring[h, s, b, n], fmt)
                    _channel_nb(cs[0, h], cs[1, h], cs[2, h], cs[3, h], cs[4, h], cs[5, h], cs[6, h], cs[7, h],
                                cs[8, h], cs[9, h], k[h], d[h], x[b, h], y[b, h], hr[g], hi[g], P, live)
                for h in range(h0, h1):           # the last min(R, L) states, channel by channel
                    g = h - h0
                    r0 = _plan(k[h], t0, L)[1]
                    for j in range(first, L):
                        s = (t0 + j) % R
                        for n in range(N2):
                            ring[h, s, b, n] = _store(ring, hr[g, r0 + j, n], hi[g, r0 + j, n], fmt)

def _split(consts, rdt):
    """``(10, H, N2)`` real: real and imaginary parts of lam, m1, m2, bbar, c, C-contiguous rows."""
    return np.ascontiguousarray(np.stack([p for z in consts for p in (z.real, z.imag)]), rdt)


def run_ring(ring, x, lam, m1, m2, bbar, c, d, k, t0, y_out=None, fmt16=None):
    """Consume ``x`` ``(B, H, L)`` (tokens ``t0 .. t0 + L - 1``) through the ring, in place; returns the
    outputs ``y`` ``(B, H, L)`` (``y_out``, or a new array).

    Args:
        ring: writeable, any strides (fastest channel-major, :func:`ddesys.step.new_ring`): complex64 /
            complex128 ``(B, R, H, N2)``, or uint16 ``(B, R, H, N2, 2)`` with ``fmt16`` ``"float16"`` /
            ``"bfloat16"`` (a 16-bit history).
        x: real ``(B, H, L)``; lam, m1, m2, bbar, c: complex ``(H, N2)`` (``m1 = mu (1 - alpha)``,
            ``m2 = mu alpha``); d: real ``(H,)``; k: int ``(H,)``, each in ``[1, R - 1]`` or
            :data:`NO_DELAY`.
        t0: the position of ``x``'s first token (the ring holds the states before it).

    Precision: float64 for a complex128 ring, float32 otherwise (the decode step's). Raises
    ``ValueError`` / ``TypeError`` on a wrong shape, dtype or delay before touching the ring.
    """
    if _nb is None:
        raise RuntimeError("run_ring needs Numba (missing, or disabled by DDESYS_DISABLE_NUMBA)")
    if not isinstance(ring, np.ndarray) or ring.dtype not in (_C64, _C128, _U16):
        raise TypeError(f"run_ring: ring must be a complex64/complex128 or uint16 numpy array, got "
                        f"{getattr(ring, 'dtype', type(ring).__name__)}")
    if not ring.flags.writeable:
        raise ValueError("run_ring: ring must be writeable (it is updated in place)")
    if ring.ndim >= 4 and ring.strides[3] != ring.itemsize * (2 if ring.dtype == _U16 else 1):
        raise ValueError(f"run_ring: a ring's modes must be contiguous (ring[b, s, h] a row), got strides "
                         f"{ring.strides}")
    if ring.dtype == _U16:
        if ring.ndim != 5 or ring.shape[4] != 2 or fmt16 not in ("float16", "bfloat16"):
            raise ValueError(f"run_ring: a 16-bit ring is uint16 (B, R, H, N2, 2) with fmt16 'float16' or "
                             f"'bfloat16', got {ring.shape} and fmt16={fmt16!r}")
        rdt = np.float32
    else:
        if ring.ndim != 4 or fmt16 is not None:
            raise ValueError(f"run_ring: a complex ring is (B, R, H, N2) without fmt16, got {ring.shape}, "
                             f"fmt16={fmt16!r}")
        rdt = np.float64 if ring.dtype == _C128 else np.float32
    B, R, H, N2 = ring.shape[:4]
    x = np.asarray(x)
    if x.ndim != 3 or x.shape[:2] != (B, H):
        raise ValueError(f"run_ring: x must be (B, H, L) = ({B}, {H}, L), got {x.shape}")
    for name, z in (("lam", lam), ("m1", m1), ("m2", m2), ("bbar", bbar), ("c", c)):
        if np.shape(z) != (H, N2):
            raise ValueError(f"run_ring: {name} must be (H, N2) = ({H}, {N2}), got {np.shape(z)}")
    k = np.ascontiguousarray(k, np.int64)
    if k.shape != (H,) or np.shape(d) != (H,):
        raise ValueError(f"run_ring: k and d must be ({H},), got {k.shape} and {np.shape(d)}")
    bad = (k < 1) | ((k > R - 1) & (k != NO_DELAY))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"run_ring: every delay must lie in [1, R - 1] = [1, {R - 1}] (or be NO_DELAY); "
                         f"k[{i}] = {int(k[i])}")
    if isinstance(t0, bool) or not isinstance(t0, (int, np.integer)) or t0 < 0:
        raise ValueError(f"run_ring: t0 must be a position >= 0, got {t0!r}")
    L = x.shape[2]
    xs = np.ascontiguousarray(x, rdt)
    y = np.empty((B, H, L), rdt) if y_out is None else y_out
    if y.shape != (B, H, L) or y.dtype != rdt or not y.flags.c_contiguous:
        raise ValueError(f"run_ring: y_out must be C-contiguous {np.dtype(rdt)} {(B, H, L)}, got {y.dtype} {y.shape}")
    if B == 0 or H == 0 or L == 0:
        return y
    cs = _split((lam, m1, m2, bbar, c), rdt)
    dd = np.ascontiguousarray(d, rdt)
    from .threads import numba_threads
    with numba_threads() as nw:
        mem = _memory_view(ring)                                               # (H, R, B, N2[, 2])
        if ring.dtype == _U16:
            _ring_run(mem.view(np.uint32)[..., 0], 0 if fmt16 == "float16" else 1, int(t0), xs, cs, k, dd, y, nw)
        else:
            _ring_run(mem, 0, int(t0), xs, cs, k, dd, y, nw)
    return y
