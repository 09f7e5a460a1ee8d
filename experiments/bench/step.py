"""Benchmark: the fused CPU decode step (ddesys.cpu.step) against the torch step of nn.DS4D and nn.S4D.

    python -m ddesys.experiments.bench.step [--quick] [--l-max L] [--threads T] [--no-accuracy]

1. Seconds per token at H=256, N=64 (N2 = 32), batch 1 and 8, of

   * ``fused``: :func:`ddesys.cpu.step.decode_step` on a complex64 ring from :func:`ddesys.cpu.step.new_ring`,
     constants from ``layer.discrete(torch.float32)`` (``m1 = mu (1 - alpha)``, ``m2 = mu alpha``);
   * ``fused f16`` / ``fused bf16``: the same with a 16-bit history (uint16 bit patterns, half the bytes);
   * ``fused cache``: the fused step on the layer cache's own ring (``allocate_inference_cache``: it should
     match ``fused``, the same channel-major layout and pages);
   * ``torch``: ``DS4D.step``'s torch path (advanced indexing; a cache of the reference engine);
   * ``layer``: ``nn.DS4D.step`` as it runs by default (on the CPU it calls the fused step itself; this
     column adds the layer's checks and tensor<->NumPy plumbing to the ``fused cache`` column);
   * ``S4D``: ``nn.S4D.step`` (no delay: the throughput to match),

   at an early position (t = 32: most channels have not reached their delay) and past the longest delay
   (t = k_max + 32 on: every channel reads its two delayed states). Ratios: fused throughput / S4D's (goals:
   >= 1 at batch 1, >= 0.5 at batch 8), fused / torch step, and fused late / early (goal <= 1.1).
2. Accuracy of the decode caches on a DS4D layer's own parameters (l_max 256, 3 x R tokens): max |dy| /
   max |y| against the float64 recurrence (``layer(x, mode="recurrent")`` on float64 input, an independent
   compiled loop) for the complex64 cache (fused step alone, through nn.DS4D.step, and the layer's torch
   path) and the float16 / bfloat16 history.

Times are medians of runs interleaved between the variants and both positions
(ddesys.nn.timing.interleaved), with an
untimed 3 ms busy pause after the torch steps (their OpenMP threads spin a while after each op and
would otherwise take the next variant's core): on a shared machine read the ratios, not the absolutes.
Positions advance as in real decoding (every token writes a slot last written R tokens ago); the early
runs wrap back to t=32 before reaching k_max / 2, so they stay before the longest delay.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

from ddesys import nn as dnn
from ddesys.cpu import step as fstep
from ddesys.nn.timing import interleaved


def constants(layer):
    """``lam, m1, m2, bbar, c`` complex64 ``(H, N2)``, ``d`` float32 ``(H,)``, ``k`` int64 ``(H,)``: NumPy."""
    with torch.no_grad():
        lam, mu, bbar, c, k, alpha, _ = layer.discrete(torch.float32)
        al = alpha[:, None]
        out = [z.contiguous().numpy() for z in (lam, mu * (1 - al), mu * al, bbar, c)]
        return (*out, layer.D.detach().float().contiguous().numpy(), k.contiguous().numpy())


def positions(start, n, wrap):
    """Callable giving the first position of each call: ``start``, ``start + n``, ...; back to ``start``
    when the next call would pass ``wrap`` (None: never)."""
    state = [start]

    def next_pos():
        p = state[0]
        if wrap is not None and p + n > wrap:
            p = start
        state[0] = p + n
        return p
    return next_pos


def fused_runner(buf, consts, xs, n, pos, fmt16=None):
    """Callable decoding ``n`` tokens with the fused step from the position ``pos()`` gives."""
    y = np.zeros(xs.shape[1:], np.float32)

    def run():
        p = pos()
        for i in range(n):
            fstep.decode_step(buf, xs[i], *consts, p + i, y, fmt16=fmt16)
    return run



def torch_runner(layer, cache, xs, n, pos, reference=False):
    """Callable decoding ``n`` tokens with ``layer.step``; ``reference``: on a cache of the reference
    engine (the torch gather path of DS4D.step: the engine is chosen when a cache is allocated; S4D has
    one path)."""
    if reference:
        cache = layer.allocate_inference_cache(cache.batch_size, engine="reference")

    def run():
        with torch.no_grad():
            cache.t = pos()
            for i in range(n):
                layer.step(xs[i], cache)
    return run


def settle():
    """Pause after the torch steps (its time is not reported): torch's OpenMP threads spin for a while after
    each op and, on a small machine, would take the core of whichever variant runs next. Busy-waiting
    (not sleeping) keeps this process on its core, so other processes do not evict its caches meanwhile."""
    end = time.perf_counter() + 0.003
    while time.perf_counter() < end:
        pass


def speed_section(H, N, l_max, batches, reps, n_tok):
    print(f"1. seconds per token, H={H}, N={N} (N2={N // 2}), l_max={l_max}; torch {torch.__version__}, "
          f"{torch.get_num_threads()} torch threads, Numba budget {fstep.thread_budget()}")
    torch.manual_seed(0)
    ds = dnn.DS4D(H, N, l_max=l_max)
    s4 = dnn.S4D(H, N)
    consts = constants(ds)
    k = consts[-1]
    k_max = int(k.max())
    early, late = 32, k_max + 32
    print(f"   delays k in [{int(k.min())}, {k_max}] (R = {k_max + 1} slots); early position t={early} "
          f"({int((k < early).sum())} of {H} channels past their delay), late t={late} (all)")
    hdr = (f"{'batch':>5s} {'position':>9s} {'fused':>10s} {'f16':>10s} {'bf16':>10s} {'torch':>10s} {'S4D':>10s}"
           f" {'fused cache':>11s} {'layer':>10s}")
    print(hdr + f" {'S4D/fused':>10s} {'torch/fused':>12s}")
    summary = {}
    for B in batches:
        cache = ds.allocate_inference_cache(B)                # the torch step's own
        buf = fstep.new_ring(cache.buf.shape, np.complex64)  # channel-major, huge pages, touched (new_ring)
        buf16 = fstep.new_ring(buf.shape + (2,), np.uint16)
        buf16b = fstep.new_ring(buf.shape + (2,), np.uint16)
        s4cache = s4.allocate_inference_cache(B)
        xs_t = torch.randn(n_tok, B, H)
        xs = xs_t.numpy()
        n = n_tok
        fns, names = [], (("early", early, k_max // 2), ("late", late, None))
        for name, pos, wrap in names:                     # both positions in one interleaved round
            P = lambda: positions(pos, n, wrap)          # noqa: E731 - one position counter per variant
            fns += [fused_runner(buf, consts, xs, n, P()), fused_runner(buf16, consts, xs, n, P(), "float16"),
                    fused_runner(buf16b, consts, xs, n, P(), "bfloat16"),
                    fused_runner(cache.buf.numpy(), consts, xs, n, P()), torch_runner(ds, cache, xs_t, n, P()),
                    torch_runner(ds, cache, xs_t, n, P(), reference=True),
                    torch_runner(s4, s4cache, xs_t, n, P()), settle]
        times = [v / n for v in interleaved(fns, reps)]
        res = {}
        for j, (name, pos, _) in enumerate(names):
            t = times[8 * j:8 * j + 7]
            t = t[:3] + [t[5], t[6], t[3], t[4]]        # fused f16 bf16 torch S4D "fused cache" layer
            res[name] = t
            print(f"{B:5d} {name + ' ' + str(pos):>9s} " + " ".join(f"{v * 1e6:8.1f}us" for v in t)
                  + f" {t[4] / t[0]:10.2f} {t[3] / t[0]:12.2f}")
        summary[B] = res
        del cache, buf, buf16, buf16b
    print()
    for B, res in summary.items():
        goal = 1.0 if B == 1 else 0.5
        thr = min(res["early"][4] / res["early"][0], res["late"][4] / res["late"][0])
        print(f"   batch {B}: fused throughput / S4D's (worst position) {thr:.2f} (goal >= {goal}); "
              f"fused late / early {res['late'][0] / res['early'][0]:.2f} (goal <= 1.1); "
              f"f16 late / early {res['late'][1] / res['early'][1]:.2f}; "
              f"fused vs torch step x{min(res['early'][3] / res['early'][0], res['late'][3] / res['late'][0]):.1f}")
    return summary


def accuracy_section(H, N):
    l_max = 256
    print(f"\n2. decode error, max |dy| / max |y| against the float64 recurrence (H={H}, N={N}, l_max={l_max})")
    torch.manual_seed(1)
    ds = dnn.DS4D(H, N, l_max=l_max)
    consts = constants(ds)
    R = int(consts[-1].max()) + 1
    B, L = 2, 3 * R
    x = torch.randn(B, L, H)
    with torch.no_grad():
        y64 = ds(x.double(), mode="recurrent").numpy()        # (B, L, H), float64 compiled recurrence
    scale = np.abs(y64).max()
    xs = np.ascontiguousarray(x.numpy().transpose(1, 0, 2))   # (L, B, H)
    out = {}
    for name, fmt16 in (("complex64 cache, fused", None), ("float16 history", "float16"),
                        ("bfloat16 history", "bfloat16")):
        buf = fstep.new_ring((B, R, H, N // 2) + ((2,) if fmt16 else ()), np.uint16 if fmt16 else np.complex64)
        y = np.zeros((B, L, H), np.float32)
        y_t = np.zeros((B, H), np.float32)
        for t in range(L):
            y[:, t] = fstep.decode_step(buf, xs[t], *consts, t, y_t, fmt16=fmt16)
        out[name] = np.abs(y - y64).max() / scale
    for name, ref in (("complex64 cache, layer step", False), ("complex64 cache, torch step", True)):
        cache = ds.allocate_inference_cache(B, engine="reference" if ref else None)
        with torch.no_grad():
            ys = torch.stack([ds.step(x[:, t], cache) for t in range(L)], 1).numpy()
        out[name] = np.abs(ys - y64).max() / scale
    for name, e in out.items():
        print(f"   {name:30s} {e:9.2e}")
    base = out["complex64 cache, fused"]
    print(f"   float16 / complex64: x{out['float16 history'] / base:.0f}; bfloat16 / complex64: "
          f"x{out['bfloat16 history'] / base:.0f} (storage rounding 2^-11, 2^-8 against 2^-24); memory: "
          f"16-bit = half of complex64")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m ddesys.experiments.bench.step",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="H=64, fewer repeats")
    ap.add_argument("--l-max", type=int, default=1024, help="delay range of the layer (R ~ l_max slots)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (the Numba budget follows)")
    ap.add_argument("--no-accuracy", action="store_true")
    args = ap.parse_args(argv)
    if os.environ.get("DDESYS_REFERENCE", "0") not in ("", "0"):
        print("note: DDESYS_REFERENCE is set: the 'layer' column then times the torch path too")
    if args.threads:
        torch.set_num_threads(args.threads)
    H, N = (64, 64) if args.quick else (256, 64)
    reps, n_tok = (5, 8) if args.quick else (11, 16)
    speed_section(H, N, args.l_max, (1, 8), reps, n_tok)
    if not args.no_accuracy:
        accuracy_section(H, N)


if __name__ == "__main__":
    main()
