"""Benchmark: DS4D against S4D on this machine, measured in one run.

    python -m ddesys.experiments.bench.layers [--quick] [--threads T] [--only threads|train|decode]

0. Thread hygiene: a train step of S4D and DS4D after ``torch.set_num_threads(T)`` for T = 1 and 2
   (the setting of a user's script), the ratio DS4D / S4D (goal <= 1.3 at 1 thread), and torch's
   thread count after DS4D's steps (must still be T: the compiled loops stay inside torch's budget).
1. Train step (forward + backward + SGD step of one layer, float32 input, H=256, N=64, batch 8 and 32)
   at L in {1024, 2048, 4096, 8192}: seconds per step, DS4D's tokens/s as a fraction of S4D's (goal
   >= 0.9 at batch 8 for every L), and where each step's time goes (torch's profiler, one step each):
   kernel synthesis forward and backward (the batch-independent part), FFTs, the rest.
2. Decode: seconds per token of ``step`` after prefilling 1024 and 8192 tokens (batch 1, l_max 8192,
   delays on the default grid up to 8191), the ratio at 8192 / at 1024 (goal <= 1.1), S4D's step for
   reference.
3. Decode cache size in bytes: DS4D's ring buffer (``H x N/2 x (k_max + 1)`` complex64) next to the
   paper's ``H x N x l_max`` float32 sizing, and S4D's state.

Times are medians of runs interleaved between the compared variants (a shared machine's load then
hits both alike); read ratios, not absolutes.
"""
from __future__ import annotations

import argparse

import torch

from ddesys import nn as dnn
from ddesys.nn.common import fft_conv
from ddesys.nn.timing import decoder, interleaved, trainer


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m ddesys.experiments.bench.layers",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="H=64, L in {1024, 2048}, fewer repeats")
    ap.add_argument("--threads", type=int, default=None, help="torch threads for sections 1-3")
    ap.add_argument("--only", choices=["threads", "train", "decode"], default=None,
                    help="run one section (decode includes the cache sizes)")
    args = ap.parse_args(argv)
    if args.threads is not None and args.threads < 1:
        ap.error(f"--threads must be >= 1, got {args.threads}")
    H, N, B = (64, 64, 8) if args.quick else (256, 64, 8)
    batches = (8,) if args.quick else (8, 32)
    Ls = [1024, 2048] if args.quick else [1024, 2048, 4096, 8192]
    reps = 3 if args.quick else 7
    torch.manual_seed(0)
    if args.only in (None, "threads"):
        thread_section(H, N, B, 1024, reps)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; H={H}, N={N}, batch {B}")
    if args.only in (None, "train"):
        train_section(H, N, batches, Ls, reps)
    if args.only in (None, "decode"):
        decode_section(H, N, args.quick, reps)


def thread_section(H, N, B, L, reps):
    """Section 0: train steps inside a caller's thread setting, and that setting afterwards."""
    before = torch.get_num_threads()
    print(f"0. thread hygiene: train step (fwd + bwd + SGD), one layer, H={H}, N={N}, batch {B}, L={L}")
    print(f"{'threads':>8s} {'S4D (s)':>10s} {'DS4D (s)':>10s} {'DS4D/S4D':>9s} {'torch threads after':>20s}")
    x = torch.randn(B, L, H)
    try:
        for T in (1, 2):
            torch.set_num_threads(T)
            ts, td = interleaved([trainer(dnn.S4D(H, N), x), trainer(dnn.DS4D(H, N, l_max=L), x)], reps)
            print(f"{T:8d} {ts:10.4f} {td:10.4f} {td / ts:9.2f} {torch.get_num_threads():20d}")
    finally:
        torch.set_num_threads(before)
    print("   goal: DS4D/S4D <= 1.3 at 1 thread; 'torch threads after' equal to 'threads'\n")


def parts(layer, x, reps):
    """Median seconds of the kernel synthesis (forward + backward of ``layer.kernel(L)``) and of the FFT
    convolution (forward + backward of ``fft_conv`` with that kernel) for input ``x`` ``(B, L, H)``."""
    L = x.shape[1]
    xt = x.transpose(1, 2).contiguous()                      # (B, H, L)

    def kern():
        layer.zero_grad(set_to_none=True)
        layer.kernel(L).square().sum().backward()
    K = layer.kernel(L).detach().float().requires_grad_()     # (H, L)

    def conv():
        K.grad = None
        fft_conv(xt, K).square().mean().backward()
    return interleaved([kern, conv], reps)


def train_section(H, N, batches, Ls, reps):
    print("\n1. train step (fwd + bwd + SGD), one layer; shares of a step: kernel synthesis (fwd + bwd) / FFT "
          "convolution (fwd + bwd) / the rest")
    print(f"{'batch':>5s} {'L':>6s} {'S4D (s)':>9s} {'DS4D (s)':>9s} {'DS4D tok/s vs S4D':>18s}   "
          f"{'S4D kern/fft/rest':>19s}   {'DS4D kern/fft/rest':>19s}")
    worst = {}
    for B in batches:
        for L in Ls:
            x = torch.randn(B, L, H)
            m4, md = dnn.S4D(H, N), dnn.DS4D(H, N, l_max=L)
            ts, td = interleaved([trainer(m4, x), trainer(md, x)], reps)
            fs, fd = ((*p, max(0.0, t - sum(p))) for p, t in ((parts(m4, x, reps), ts), (parts(md, x, reps), td)))
            worst[B] = min(worst.get(B, 9.9), ts / td)
            share = lambda f: "/".join(f"{min(1.0, v / sum(f)):.0%}" for v in f)   # noqa: E731
            print(f"{B:5d} {L:6d} {ts:9.4f} {td:9.4f} {ts / td:18.2f}   {share(fs):>19s}   {share(fd):>19s}")
    for B, w in worst.items():
        print(f"   batch {B}: worst DS4D tokens/s {w:.2f}x S4D's" + (" (goal >= 0.9)" if B == 8 else ""))


def decode_section(H, N, quick, reps):
    print("\n2. decode, batch 1, seconds per token after a prompt")
    l_max = 2048 if quick else 8192
    positions = [1024, l_max]
    n_tok = 32 if quick else 128
    ds = dnn.DS4D(H, N, l_max=l_max)
    s4 = dnn.S4D(H, N)
    runs, caches = [], []
    for p in positions:
        for layer in (ds, s4):
            run, cache = decoder(layer, H, p, n_tok)
            runs.append(run)
            caches.append(cache)
    t = [v / n_tok for v in interleaved(runs, reps)]
    per = {p: t[2 * i] for i, p in enumerate(positions)}
    for i, p in enumerate(positions):
        print(f"   position {p:5d}: DS4D {t[2 * i] * 1e3:8.3f} ms/token   S4D {t[2 * i + 1] * 1e3:8.3f} ms/token")
    print(f"   DS4D at {positions[1]} / at {positions[0]}: {per[positions[1]] / per[positions[0]]:.2f} (goal <= 1.1); "
          f"S4D, position-independent by construction: {t[3] / t[1]:.2f}")
    cache, s4cache = caches[2], caches[3]
    print("\n3. decode cache size")
    R = cache.n_slots
    paper = H * N * l_max * 4
    print(f"   DS4D ring buffer: {cache.nbytes:,} bytes (H x N/2 x (k_max+1) = {H} x {N // 2} x {R} complex64)")
    print(f"   paper sizing H x N x l_max float32: {paper:,} bytes (ratio {cache.nbytes / paper:.3f})")
    print(f"   S4D state: {s4cache.nbytes:,} bytes")


if __name__ == "__main__":
    main()
