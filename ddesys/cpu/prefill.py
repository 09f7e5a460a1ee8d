"""A prompt through the decode ring in one compiled pass (CPU, Numba): ``L`` decode steps at once.

:func:`run_ring` does what ``L`` calls of :func:`ddesys.cpu.step.decode_step` at positions ``t0 .. t0+L-1``
do, in the same precision (float32 for a complex64 or 16-bit ring, float64 for complex128), with the
same recurrence::

    h_t = lam h_{t-1} + m1 h_{t-k} + m2 h_{t-k-1} + bbar x_t,     y_t = 2 Re(sum_n c_n h_{n,t}) + d x_t

but in a memory order that suits a whole prompt. A work item is one channel and up to ``_RB`` batch
rows: it copies the states its run reads from before ``t0`` (the last ``k + 1``; zero before position
0) into a scratch of ``k + 2`` rows that its positions cycle through (position ``s`` in row
``s mod (k + 2)``: a short delay's run stays in cache), runs the ``L`` steps there (time outer, modes
inner: the three reads stream, the modes vectorize), and writes its last ``min(L, k + 1)`` states to
their ring slots (``s mod R``).

**What the ring holds afterwards**: every state a later step or chunk reads, each channel's last
``k + 1`` positions, at the slots stepping would have used. Older slots of a channel with ``k + 1 < R``
keep what they held before the call (zero in a fresh cache; stepping would have left older states
there, which no later step reads). Not writing them is the point: with the default delay grid it
halves the bytes a long prompt writes (a reader that masks those slots sees the same array however
the ring was filled). Work ``O(B H N2 L)``, one pass: the
per-token dispatch of stepping and the ``O(N2 M log M)`` per-mode FFTs of a spectral prefill are gone.

Threads and determinism: items are split over Numba's threads inside :func:`ddesys.cpu.threads.numba_threads`
(torch's budget); an item's arithmetic does not depend on the thread running it, so the outputs and
the ring are bitwise equal at any thread count. Delays ``k`` are those of the ring's contract,
``1 <= k <= R - 1``; a delay that no position of the run reaches (``k > t0 + L - 1``, e.g. S4D's "no
delay" with ``R = 1``) drops the delayed terms.
"""
from __future__ import annotations

import numpy as np

from ._numba import nb as _nb
from .options import loop
from .ring import memory_view

__all__ = ["run_ring", "prefill_available"]

_C64, _C128, _U16 = np.dtype(np.complex64), np.dtype(np.complex128), np.dtype(np.uint16)
NO_DELAY = 2 ** 62              #: a delay no run reaches: the delayed terms drop (S4D's ring of one slot)
_RB = 8                         # batch rows per work item (with one channel)


def prefill_available() -> bool:
    """True when the compiled pass can run (Numba present and not disabled by ``DDESYS_DISABLE_NUMBA``)."""
    return _nb is not None


if _nb is not None:
    from numba import types as _types
    from numba.extending import overload as _overload

    from .step_loops import pack16, unpack16

    @loop("prefill.inline")
    def _window(kb, t0, L, R):                     # pragma: no cover - jitted
        """``(live, P, keep)`` of a channel with delay ``kb``: whether its delayed terms reach a position of
        the run, the scratch rows its run cycles through, and the states it leaves in the ring (the last
        ``kb + 1``: what any later step or chunk reads)."""
        live = kb <= t0 + L - 1
        keep = min(L, kb + 1, R)
        return live, (kb + 2 if live else max(2, keep)), keep

    @loop("prefill.inline")
    def _next(s, P):                               # pragma: no cover - jitted
        s += 1
        return 0 if s == P else s

    def _load(v, fmt):                             # pragma: no cover - typed below
        """A stored state -> (real, imaginary) in the working precision."""

    def _store(ring, vr, vi, fmt):                 # pragma: no cover - typed below
        """(real, imaginary) -> the value to store in ``ring``."""

    @_overload(_load, inline="always")
    def _load_typed(v, fmt):                       # pragma: no cover - typing
        if isinstance(v, _types.Complex):
            return lambda v, fmt: (v.real, v.imag)
        return lambda v, fmt: unpack16(v, fmt)

    @_overload(_store, inline="always")
    def _store_typed(ring, vr, vi, fmt):           # pragma: no cover - typing
        if isinstance(ring.dtype, _types.Complex):
            return lambda ring, vr, vi, fmt: complex(vr, vi)
        return lambda ring, vr, vi, fmt: pack16(vr, vi, fmt)

    @loop("prefill.rows")
    def _rows_run(rr, ri, wr, wi, P, kb, live, t0, b0, nb, x, y, cs, dh, h):   # pragma: no cover - jitted
        """The run of channel ``h``, batch rows ``b0 .. b0+nb-1``, in the scratch: position ``pos`` lives in
        row ``pos % P``; ``rr``/``ri`` read and ``wr``/``wi`` write the same scratch (two handles: the mode
        loop then vectorizes). Time outer, rows, then modes inner (contiguous). The delayed terms start at
        position ``k`` (there ``h_{-1}``, the zero row of position -1, is read)."""
        N2 = rr.shape[2]
        L = x.shape[2]
        lr, li, m1r, m1i, m2r, m2i = cs[0, h], cs[1, h], cs[2, h], cs[3, h], cs[4, h], cs[5, h]
        br, bi, cr, ci = cs[6, h], cs[7, h], cs[8, h], cs[9, h]
        s = t0 % P
        sp = (t0 - 1) % P
        sk = (t0 - kb) % P if live else 0
        sk1 = (t0 - kb - 1) % P if live else 0
        for j in range(L):
            full = live and t0 + j >= kb           # before position k the delayed terms are zero
            for b in range(nb):
                xt = x[b0 + b, h, j]
                acc = xt - xt                      # zero in the working precision
                if full:
                    for n in range(N2):
                        pr = rr[sp, b, n]
                        pi = ri[sp, b, n]
                        qr = rr[sk, b, n]
                        qi = ri[sk, b, n]
                        ur = rr[sk1, b, n]
                        ui = ri[sk1, b, n]
                        vr = br[n] * xt + (lr[n] * pr - li[n] * pi) + (m1r[n] * qr - m1i[n] * qi) \
                            + (m2r[n] * ur - m2i[n] * ui)
                        vi = bi[n] * xt + (lr[n] * pi + li[n] * pr) + (m1r[n] * qi + m1i[n] * qr) \
                            + (m2r[n] * ui + m2i[n] * ur)
                        wr[s, b, n] = vr
                        wi[s, b, n] = vi
                        acc += cr[n] * vr - ci[n] * vi
                else:
                    for n in range(N2):
                        pr = rr[sp, b, n]
                        pi = ri[sp, b, n]
                        vr = br[n] * xt + (lr[n] * pr - li[n] * pi)
                        vi = bi[n] * xt + (lr[n] * pi + li[n] * pr)
                        wr[s, b, n] = vr
                        wi[s, b, n] = vi
                        acc += cr[n] * vr - ci[n] * vi
                y[b0 + b, h, j] = (acc + acc) + dh * xt
            sp = s
            s = _next(s, P)
            if live:
                sk = _next(sk, P)
                sk1 = _next(sk1, P)

    @loop("prefill.ring")
    def _ring_run(ring, fmt, t0, x, cs, k, d, y, sr, si, wr, wi):   # pragma: no cover - jitted
        """The pass. ``ring`` in memory order, ``(H, R, B, N2)``: complex, or a 16-bit history's packed pairs
        as uint32 (``fmt`` 0 float16, 1 bfloat16: loads widen exactly, stores round to nearest
        even, :mod:`ddesys.cpu.step`); ``x``, ``y`` ``(B, H, L)``; ``cs`` ``(10, H, N2)`` real: the real and
        imaginary parts of lam, m1, m2, bbar, c; ``sr``/``si`` and ``wr``/``wi``: the workers' scratch
        planes ``(nw, rows, rb, N2)`` (:func:`_scratch`; the same arrays, read and written handles), one
        worker each (``nw``: the thread budget).

        Work items: a channel and up to ``_RB`` batch rows (a fixed partition, whatever ``nw``). An item
        loads the states its run reads from before ``t0`` (position -1 as zero) into a scratch of
        ``P = k + 2`` rows that its positions cycle through (small delays: the run stays in cache), runs
        the ``L`` steps, and writes its last ``keep = min(L, k + 1)`` states to their ring slots."""
        H, R, B, N2 = ring.shape
        L = x.shape[2]
        nrb = (B + _RB - 1) // _RB
        n_items = H * nrb
        nw = sr.shape[0]
        for w in _nb.prange(nw):                  # one scratch per worker; an item's arithmetic is its own
            hr, hi = sr[w], si[w]
            for it in range(w * n_items // nw, (w + 1) * n_items // nw):
                h = it // nrb
                b0 = (it - h * nrb) * _RB
                nb = min(_RB, B - b0)
                kb = k[h]
                live, P, keep = _window(kb, t0, L, R)
                first = max(t0 - kb - 1, -1) if live else t0 - 1
                for pos in range(first, t0):      # the states the run reads before t0 (position -1: zero)
                    r = pos % P
                    for b in range(nb):
                        if pos < 0:
                            for n in range(N2):
                                hr[r, b, n] = 0
                                hi[r, b, n] = 0
                        else:
                            s = pos % R
                            for n in range(N2):
                                hr[r, b, n], hi[r, b, n] = _load(ring[h, s, b0 + b, n], fmt)
                _rows_run(hr, hi, wr[w], wi[w], P, kb, live, t0, b0, nb, x, y, cs, d[h], h)
                for pos in range(t0 + L - keep, t0 + L):   # the last keep states, in time order
                    r = pos % P
                    s = pos % R
                    for b in range(nb):
                        for n in range(N2):
                            ring[h, s, b0 + b, n] = _store(ring, hr[r, b, n], hi[r, b, n], fmt)

def _split(consts, rdt):
    """``(10, H, N2)`` real: real and imaginary parts of lam, m1, m2, bbar, c, C-contiguous rows."""
    return np.ascontiguousarray(np.stack([p for z in consts for p in (z.real, z.imag)]), rdt)


def run_ring(ring, x, lam, m1, m2, bbar, c, d, k, t0, y_out=None, fmt16=None):
    """Consume ``x`` ``(B, H, L)`` (tokens ``t0 .. t0 + L - 1``) through the ring, in place; returns the
    outputs ``y`` ``(B, H, L)`` (``y_out``, or a new array).

    Args:
        ring: writeable, any strides (fastest channel-major, :func:`ddesys.cpu.step.new_ring`): complex64 /
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
        nw = max(1, min(nw, H * -(-B // _RB)))                               # workers: at most the items
        sr, si = _scratch(nw, k, int(t0), L, R, min(B, _RB), N2, rdt)       # (nw, rows, rows of B, N2) each
        mem = memory_view(ring)                                               # (H, R, B, N2[, 2])
        args = (int(t0), xs, cs, k, dd, y, sr, si, sr, si)                    # the scratch twice: read, write
        if ring.dtype == _U16:
            _ring_run(mem.view(np.uint32)[..., 0], 0 if fmt16 == "float16" else 1, *args)
        else:
            _ring_run(mem, 0, *args)
    return y


def _scratch(nw, k, t0, L, R, rb, N2, rdt):
    """Each worker's scratch, real and imaginary planes ``(nw, rows, rb, N2)``: ``rows`` the most any
    channel's run cycles through (``k + 2`` when its delayed terms reach the run, else the states it keeps).
    Made here and passed to the loop twice (one handle read, one written: the mode loop then vectorizes)."""
    live = k <= t0 + L - 1
    rows = int(np.where(live, k + 2, np.maximum(2, np.minimum(np.minimum(L, k + 1), R))).max())
    return np.empty((nw, rows, rb, N2), rdt), np.empty((nw, rows, rb, N2), rdt)
