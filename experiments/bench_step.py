"""Benchmark: the fused CPU decode step (ddesys.step) against the torch step of nn.DS4D and nn.S4D.

    python -m experiments.bench_step [--quick] [--l-max L] [--threads T] [--no-accuracy]

1. Seconds per token at H=256, N=64 (N2 = 32), batch 1 and 8, of

   * ``fused``: :func:`ddesys.step.decode_step` on the CPU torch cache's ``.numpy()`` view, constants from
     ``layer.discrete(torch.float32)`` (``m1 = mu (1 - alpha)``, ``m2 = mu alpha``);
   * ``fused f16`` / ``fused bf16``: the same with a 16-bit history (uint16 bit patterns, half the bytes);
   * ``torch``: ``nn.DS4D.step``, the current CPU path (``DDESYS_REFERENCE`` unset);
   * ``S4D``: ``nn.S4D.step`` (no delay: the throughput to match),

   at an early position (t = 32: most channels have not reached their delay) and past the longest delay
   (t = k_max + 32: every channel reads its two delayed states). Ratios: fused throughput / S4D's (goals:
   >= 1 at batch 1, >= 0.5 at batch 8), fused / torch step, and fused late / early (goal <= 1.1).
2. Accuracy of the decode caches on a DS4D layer's own parameters (l_max 256, 3 x R tokens): max |dy| /
   max |y| against the float64 recurrence (``layer(x, mode="recurrent")`` on float64 input, an independent
   compiled loop) for the complex64 cache (fused and torch step) and the float16 / bfloat16 history.

Times are medians of runs interleaved between the variants (verification.timing.interleaved): on a
shared machine read the ratios, not the absolutes. Every call runs the same ``n`` positions again, so an
early position stays early however many repeats.
"""
from __future__ import annotations

import argparse
import os

import numpy as np
import torch

import nn as dnn
from ddesys import step as fstep
from verification.timing import interleaved


def constants(layer):
    """``lam, m1, m2, bbar, c`` complex64 ``(H, N2)``, ``d`` float32 ``(H,)``, ``k`` int64 ``(H,)``: NumPy."""
    with torch.no_grad():
        lam, mu, bbar, c, k, alpha, _ = layer.discrete(torch.float32)
        al = alpha[:, None]
        out = [z.contiguous().numpy() for z in (lam, mu * (1 - al), mu * al, bbar, c)]
        return (*out, layer.D.detach().float().contiguous().numpy(), k.contiguous().numpy())


def fused_runner(buf, consts, xs, pos, n, fmt16=None):
    """Callable running positions ``pos .. pos + n - 1`` through the fused step (writes ``buf`` in place)."""
    y = np.zeros(xs.shape[1:], np.float32)

    def run():
        for i in range(n):
            fstep.decode_step(buf, xs[i], *consts, pos + i, y, fmt16=fmt16)
    return run


def torch_runner(layer, cache, xs, pos, n):
    def run():
        cache.t = pos
        with torch.no_grad():
            for i in range(n):
                layer.step(xs[i], cache)
    return run


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
    hdr = f"{'batch':>5s} {'position':>9s} {'fused':>10s} {'f16':>10s} {'bf16':>10s} {'torch':>10s} {'S4D':>10s}"
    print(hdr + f" {'S4D/fused':>10s} {'torch/fused':>12s}")
    summary = {}
    for B in batches:
        cache = ds.allocate_inference_cache(B)                # shared by the fused and the torch step
        buf = cache.buf.numpy()
        buf16 = np.zeros(buf.shape + (2,), np.uint16)
        s4cache = s4.allocate_inference_cache(B)
        xs_t = torch.randn(n_tok, B, H)
        xs = xs_t.numpy()
        n = n_tok if B == 1 else max(2, n_tok // 4)
        res = {}
        for name, pos in (("early", early), ("late", late)):
            fns = [fused_runner(buf, consts, xs, pos, n), fused_runner(buf16, consts, xs, pos, n, "float16"),
                   fused_runner(buf16, consts, xs, pos, n, "bfloat16"), torch_runner(ds, cache, xs_t, pos, n),
                   torch_runner(s4, s4cache, xs_t, 0, n)]
            t = [v / n for v in interleaved(fns, reps)]
            res[name] = t
            print(f"{B:5d} {name + ' ' + str(pos):>9s} " + " ".join(f"{v * 1e6:8.1f}us" for v in t)
                  + f" {t[4] / t[0]:10.2f} {t[3] / t[0]:12.2f}")
        summary[B] = res
        del cache, buf, buf16
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
        buf = np.zeros((B, R, H, N // 2) + ((2,) if fmt16 else ()), np.uint16 if fmt16 else np.complex64)
        y = np.zeros((B, L, H), np.float32)
        for t in range(L):
            fstep.decode_step(buf, xs[t], *consts, t, y[:, t], fmt16=fmt16)
        out[name] = np.abs(y - y64).max() / scale
    cache = ds.allocate_inference_cache(B)
    with torch.no_grad():
        yt = torch.stack([ds.step(x[:, t], cache) for t in range(L)], 1).numpy()
    out["complex64 cache, torch step"] = np.abs(yt - y64).max() / scale
    for name, e in out.items():
        print(f"   {name:30s} {e:9.2e}")
    base = out["complex64 cache, fused"]
    print(f"   float16 / complex64: x{out['float16 history'] / base:.0f}; bfloat16 / complex64: "
          f"x{out['bfloat16 history'] / base:.0f} (storage rounding 2^-11, 2^-8 against 2^-24); memory: "
          f"16-bit = half of complex64")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="H=64, fewer repeats")
    ap.add_argument("--l-max", type=int, default=1024, help="delay range of the layer (R ~ l_max slots)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (the Numba budget follows)")
    ap.add_argument("--no-accuracy", action="store_true")
    args = ap.parse_args(argv)
    if os.environ.get("DDESYS_REFERENCE"):
        print("note: DDESYS_REFERENCE is set; the 'torch' column then times the reference path")
    if args.threads:
        torch.set_num_threads(args.threads)
    H, N = (64, 64) if args.quick else (256, 64)
    reps, n_tok = (5, 8) if args.quick else (11, 16)
    speed_section(H, N, args.l_max, (1, 8), reps, n_tok)
    if not args.no_accuracy:
        accuracy_section(H, N)


if __name__ == "__main__":
    main()
