"""Design probe: how the ring buffer's memory layout alone sets the cost of a decode step.

    python -m ddesys.experiments.bench.ring_layout [--quick] [--slots R]

The decode cache keeps ``R`` past states per channel in a ring. Slot-major, ``(B, R, H, N2)`` in memory
(the Triton kernel's layout, and the CPU's before the channel-major ring), one token's states are contiguous, and each
channel's two delayed rows (slots ``t - k`` and ``t - k - 1``, ``N2`` complex numbers each) sit in two
different places of a multi-gigabyte buffer, for every batch row. Channel-major, ``(H, R, B, N2)`` (the
CPU's fused step now, :func:`ddesys.cpu.step.new_ring`), puts one channel's history in one place: its two
delayed rows are adjacent, and so are all batch rows' copies.

Both columns run the same plain update loop (one thread, no prefetching, no interpolation weights:
``h_t = lam h_{t-1} + mu (h_{t-k} + h_{t-k-1}) + x_t``), H = 256, N2 = 32, complex64, delays spread over
``[1, R - 2]`` as the default grid does, past the longest delay. The figure to read is the ratio, printed
per batch size; the real step (``ddesys.cpu.step``) adds prefetching and the readout to the first column.
Memory: one ring at a time, ``B R H N2 x 8`` bytes (batch 8, R = 8192: 4.3 GB).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from ddesys.recurrence import numba_available


def _loops():
    import numba as _nb                                        # present: numba_available() was checked

    @_nb.njit(fastmath=True)
    def slot_major(buf, t, k, lam, mu, x):                     # buf (B, R, H, N2)
        B, R, H, N2 = buf.shape
        w, p = t % R, (t - 1) % R
        for b in range(B):
            for h in range(H):
                s1, s2 = (t - k[h]) % R, (t - k[h] - 1) % R
                for n in range(N2):
                    buf[b, w, h, n] = lam[h, n] * buf[b, p, h, n] + mu[h, n] * (buf[b, s1, h, n] + buf[b, s2, h, n]) \
                        + x[b, h]

    @_nb.njit(fastmath=True)
    def channel_major(buf, t, k, lam, mu, x):                  # buf (H, R, B, N2)
        H, R, B, N2 = buf.shape
        w, p = t % R, (t - 1) % R
        for h in range(H):
            s1, s2 = (t - k[h]) % R, (t - k[h] - 1) % R
            for b in range(B):
                for n in range(N2):
                    buf[h, w, b, n] = lam[h, n] * buf[h, p, b, n] + mu[h, n] * (buf[h, s1, b, n] + buf[h, s2, b, n]) \
                        + x[b, h]
    return slot_major, channel_major


def time_layouts(batch, R, H=256, N2=32, n_tok=64, reps=5):
    """Seconds per token of the plain update loop in each layout: ``{"slot-major": s, "channel-major": s}``."""
    slot_major, channel_major = _loops()
    rng = np.random.default_rng(0)
    k = rng.permutation(np.linspace(1, R - 2, H).astype(np.int64))        # (H,)
    lam = np.full((H, N2), 0.9 + 0.01j, np.complex64)                   # (H, N2)
    mu = np.full((H, N2), 0.05, np.complex64)                           # (H, N2)
    x = np.ones((batch, H), np.float32)                                 # (B, H)
    out = {}
    for name, shape, loop in (("slot-major", (batch, R, H, N2), slot_major),
                              ("channel-major", (H, R, batch, N2), channel_major)):
        buf = np.zeros(shape, np.complex64)                             # np.zeros: huge pages where offered
        buf[...] = 1e-3                                                 # touch every page before timing
        t = R + 1
        loop(buf, t, k, lam, mu, x)                                     # compile
        per = []
        for _ in range(reps):
            t0 = time.perf_counter()
            for _ in range(n_tok):
                t += 1
                loop(buf, t, k, lam, mu, x)
            per.append((time.perf_counter() - t0) / n_tok)
        out[name] = float(np.median(per))
        del buf
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m ddesys.experiments.bench.ring_layout",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="R = 1024, batches 1 and 8")
    ap.add_argument("--slots", type=int, default=None, help="ring slots R (default 8192, quick 1024)")
    args = ap.parse_args(argv)
    if not numba_available():
        ap.error("this probe needs Numba (missing, or disabled by DDESYS_DISABLE_NUMBA)")
    R = args.slots or (1024 if args.quick else 8192)
    if R < 4:
        ap.error(f"--slots must be >= 4, got {R}")
    print(f"plain update loop, one thread, H=256, N2=32, R={R}, past the longest delay; microseconds per token")
    print(f"{'batch':>5s} {'slot-major':>11s} {'channel-major':>14s} {'speed-up':>9s}")
    for batch in ((1, 8) if args.quick else (1, 4, 8)):
        t = time_layouts(batch, R)
        print(f"{batch:5d} {t['slot-major'] * 1e6:11.0f} {t['channel-major'] * 1e6:14.0f} "
              f"{t['slot-major'] / t['channel-major']:9.2f}")


if __name__ == "__main__":
    main()
