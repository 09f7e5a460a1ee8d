"""Decoding benchmark: DS4D's step against S4D's, prefill memory, cache sizes, decode accuracy.

    python -m ddesys.experiments.bench.decode [--quick] [--only step|model|cache|prefill|memory|load|accuracy]

Measured in one run (H = 256, N = 64; ``--quick``: smaller l_max and fewer tokens):

1. ``step``: seconds per token of ``nn.DS4D.step`` and ``nn.S4D.step`` at batch 1 and 8, at an early
   position (half the longest delay: some channels not yet reading) and past the longest delay; the
   throughput ratio DS4D / S4D (goals: >= 1.0 at batch 1, >= 0.8 at batch 8), DS4D late / early
   (<= 1.1), and beside each figure the memory bound: the bytes the step must move
   (:mod:`verification.bounds`) over this machine's bandwidth, measured in the same run (goal: DS4D
   within 3x of it at batch 8).
2. ``model``: a 4-layer ``SequenceModel`` step (compiled, :mod:`nn.model_step`, and its modules)
   against the sum of its layer steps (goal <= 1.3x): its 4 layers, each stepped on a cache of its own
   in turn, as the model steps them; beside it one layer stepped 4 times (a cache that stays hot in L2,
   a lower bound the model cannot reach) and the ratio the bytes alone imply (the GLU linears' weights
   are read every token).
3. ``cache``: bytes of the decode cache for each history dtype.
4. ``prefill``: seconds of ``prefill`` of a prompt into a fresh cache, of a forward over it, and of
   stepping through it (measured on 64 tokens, times the prompt length), DS4D (with and without the
   tap) and S4D, batch 1 and 8, prompts 256 to 8192 (quick: 256 and 1024). Goals: prefill <= 2x the
   forward and faster than stepping.
5. ``memory``: peak extra resident memory of ``DS4D.prefill`` at batch 16, l_max 8192 (quick: batch 4,
   l_max 2048) next to the cache it fills.
6. ``load``: the step of section 1 past the delays again while another process runs a 2-thread matrix
   product loop, and while two 1-thread processes run (two training runs); each layer's slowdown (goal:
   DS4D's no larger than S4D's), DS4D's serial loop beside its default (the parallel one at batch 8), and
   the throughput ratio DS4D / S4D under the load.
7. ``accuracy``: a 4-layer DS4D model decoding 8192 tokens (quick: 1024) against its FFT forward,
   max |dy| / max |y| for the complex64 cache (goal <= 1e-5) and the 16-bit histories.

Times are medians of runs interleaved between the variants (a shared machine's load hits all alike):
read the ratios. Peak memory is the process's resident high-water mark (Linux ``/proc``), reset
before the prefill.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import torch

from ddesys.nn import DS4D, S4D, SequenceModel
from ddesys.verification.bounds import bound_s, memory_bandwidth, model_step_bytes, step_bytes
from ddesys.nn.timing import decoder, interleaved

HISTORIES = {"complex64": None, "float16": torch.float16, "bfloat16": torch.bfloat16}


def step_times(H, N, l_max, n_tok, reps):
    """``{batch: [DS4D early, S4D early, DS4D late, S4D late]}`` seconds per token, and ``(early, late)``."""
    ds, s4 = DS4D(H, N, l_max=l_max, seed=0), S4D(H, N, seed=0)
    k_max = int(ds.discrete(torch.float64).k.max())
    early, late = k_max // 2, k_max + 16
    out = {}
    for batch in (1, 8):
        runs = [decoder(layer, H, p, n_tok, batch=batch)[0] for p in (early, late) for layer in (ds, s4)]
        out[batch] = [v / n_tok for v in interleaved(runs, reps)]
    return out, (early, late)


def step_section(H, N, l_max, n_tok, reps):
    print(f"1. step, seconds per token (H={H}, N={N}, l_max={l_max}; DS4D delays on the default grid)")
    bw = memory_bandwidth()
    print(f"   memory bandwidth (copy_, this run): {bw / 1e9:.1f} GB/s")
    times, (early, late) = step_times(H, N, l_max, n_tok, reps)
    for batch, t in times.items():
        bd, bs = bound_s("ds4d", batch, H, N // 2, bw), bound_s("s4d", batch, H, N // 2, bw)
        print(f"   batch {batch}: DS4D {t[0] * 1e6:7.1f} us (t={early}) {t[2] * 1e6:7.1f} us (t={late}), bound "
              f"{bd * 1e6:.1f} us ({step_bytes('ds4d', batch, H, N // 2) / 1024:.0f} KiB): {t[2] / bd:.1f}x;  "
              f"S4D {t[1] * 1e6:7.1f} / {t[3] * 1e6:7.1f} us, bound {bs * 1e6:.1f} us: {t[3] / bs:.1f}x")
        print(f"            DS4D/S4D throughput {t[1] / t[0]:.2f} (early) / {t[3] / t[2]:.2f} (late);  "
              f"DS4D late/early {t[2] / t[0]:.2f}")
    print("   goals: throughput ratio >= 1.0 at batch 1 and >= 0.8 at batch 8; late/early <= 1.1; "
          "DS4D <= 3x its bound at batch 8")
    return times


def model_section(H, N, l_max, n_tok, reps):
    print("\n2. model-level step (4 layers, batch 1) against the sum of its 4 layer steps")
    model = SequenceModel(H, H, d_model=H, n_layers=4, layer_kw=dict(d_state=N, l_max=l_max)).eval()
    plan = model.compile_step(decoder(model, H, l_max // 2, n_tok)[1])      # prefilled caches, compiled step
    xs = torch.randn(n_tok, 1, H)

    def fused():                                                # the compiled model step (nn.model_step)
        with torch.no_grad():
            for x in xs:
                plan.step(x)
    modules = decoder(model, H, l_max // 2, n_tok, compiled=False)[0]           # the same model through its modules
    own = [decoder(blk.layer, H, l_max // 2, n_tok)[0] for blk in model.blocks]   # each layer, its own cache

    def layers():                                               # the model's 4 layers stepped in turn
        for run in own:
            run()
    hot = decoder(model.blocks[0].layer, H, l_max // 2, n_tok)[0]   # one layer: its cache stays in L2
    tf, tm, tl, th = (v / n_tok for v in interleaved([fused, modules, layers, hot], reps))
    bw = memory_bandwidth()
    lb, mb = step_bytes("ds4d", 1, H, N // 2), model_step_bytes(model, 1)
    print(f"   fused model step {tf * 1e6:.1f} us/token ({tf / tl:.2f}x its 4 layer steps, goal <= 1.3); module "
          f"path {tm * 1e6:.1f} us ({tm / tl:.2f}x); its 4 layers, each stepped on its own cache, {tl * 1e6:.1f} us")
    print(f"   one layer stepped 4 times (its ring rows stay cached) {4 * th * 1e6:.1f} us: fused model "
          f"{tf / (4 * th):.2f}x that")
    print(f"   bytes per token: model {mb / 1024:.0f} KiB, 4 layers {4 * lb / 1024:.0f} KiB: the memory-bound ratio is "
          f"{mb / (4 * lb):.2f}x (the GLU linears' weights); fused model / its bound "
          f"{tf / (mb / bw):.1f}x at {bw / 1e9:.1f} GB/s")


def cache_section(H, N, l_max):
    print(f"\n3. decode cache bytes, batch 1 (H={H}, N={N}, l_max={l_max})")
    ds = DS4D(H, N, l_max=l_max, seed=0)
    for name, hd in HISTORIES.items():
        print(f"   {name:>10s}: {ds.allocate_inference_cache(1, history_dtype=hd).nbytes:,}")
    print(f"   {'complex128':>10s}: {ds.allocate_inference_cache(1, dtype=torch.float64).nbytes:,}")
    print(f"   S4D state: {S4D(H, N).allocate_inference_cache(1).nbytes:,}")


def _rss(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    return 0


def _timed(setup, fn, reps):
    """Median seconds of ``fn()`` over ``reps`` runs, ``setup()`` before each run untimed."""
    ts = []
    for _ in range(reps + 1):                                # the first run warms up
        setup()
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts[1:])


def _prefill_row(name, layer, batch, L, H, reps):
    """One row of section 4 (the layer, its cache and prompt freed on return); prefill / forward."""
    x = torch.randn(batch, L, H)
    n_step = min(64, L)
    t0 = time.perf_counter()
    cache = layer.allocate_inference_cache(batch)
    t_alloc = time.perf_counter() - t0
    with torch.no_grad():
        tf = _timed(lambda: None, lambda: layer(x), reps)
        tp = _timed(cache.reset, lambda: layer.prefill(x, cache), reps)
        ts = _timed(cache.reset, lambda: [layer.step(x[:, t], cache) for t in range(n_step)], reps)
    ts *= L / n_step
    print(f"   {name:10s} {batch:5d} {L:6d} {tf:9.4f} {tp:9.4f} {ts:9.3f} {tp / tf:8.2f} {tp / ts:8.3f} {t_alloc:7.3f}")
    return tp / tf


def prefill_speed_section(H, N, lengths, reps):
    print(f"\n4. prefill against a forward and against stepping, seconds (H={H}, N={N}; the cache allocated "
          "once, emptied by reset() before each run, untimed; stepping timed on 64 tokens, times the prompt)")
    print(f"   {'layer':10s} {'batch':>5s} {'prompt':>6s} {'forward':>9s} {'prefill':>9s} {'stepping':>9s} "
          f"{'pre/fwd':>8s} {'pre/step':>8s} {'alloc':>7s}")
    worst = 0.0
    for name, make in (("S4D", lambda L: S4D(H, N, seed=0)), ("DS4D", lambda L: DS4D(H, N, l_max=L, seed=0)),
                       ("DS4D+tap", lambda L: DS4D(H, N, l_max=L, tap=True, seed=0))):
        for batch in (1, 8):
            for L in lengths:
                worst = max(worst, _prefill_row(name, make(L).eval(), batch, L, H, reps))
    print(f"   worst prefill / forward {worst:.2f} (goal <= 2); prefill / stepping < 1")


def prefill_section(H, N, l_max, batch):
    print(f"\n5. prefill memory: batch {batch}, prompt {l_max}, H={H}, N={N}")
    ds = DS4D(H, N, l_max=l_max, seed=0)
    x = torch.randn(batch, l_max, H)
    cache = ds.allocate_inference_cache(batch)
    cache.buf.fill_(1.0)                                       # touch the cache: its pages count before
    try:
        with open("/proc/self/clear_refs", "w") as f:          # reset the high-water mark
            f.write("5")
    except OSError:
        print("   (cannot reset the resident high-water mark here: peak includes earlier work)")
    base = _rss("VmRSS:")
    cache.buf.zero_()
    ds.prefill(x, cache)
    peak = _rss("VmHWM:") - base
    print(f"   cache {cache.nbytes / 2**30:.2f} GiB; peak extra memory during prefill {peak / 2**30:.2f} GiB "
          f"(prompt spectrum B x H x M complex128: {batch * H * 2 * l_max * 16 / 2**30:.2f} GiB)")


_LOADS = {   # another process's work: a 2-thread matrix product loop, or two 1-thread loops (two training runs)
    "a 2-thread matrix product loop": ["import torch\ntorch.set_num_threads(2)\na = torch.randn(1024, 1024)\n"
                                       "while True:\n    a = (a @ a).tanh_()\n"],
    "two 1-thread processes": ["import torch\ntorch.set_num_threads(1)\na = torch.randn(512, 512)\n"
                               "while True:\n    a = (a @ a).tanh_()\n"] * 2,
}


def late_times(H, N, l_max, n_tok, reps):
    """``{batch: [DS4D, DS4D serial loop, S4D]}`` seconds per token past the longest delay."""
    ds, s4 = DS4D(H, N, l_max=l_max, seed=0), S4D(H, N, seed=0)
    late = int(ds.discrete(torch.float64).k.max()) + 16
    out = {}
    for batch in (1, 8):
        runs = [decoder(ds, H, late, n_tok, batch=batch)[0],
                decoder(ds, H, late, n_tok, batch=batch, parallel=False)[0],
                decoder(s4, H, late, n_tok, batch=batch)[0]]
        out[batch] = [v / n_tok for v in interleaved(runs, reps)]
    return out


def load_section(H, N, l_max, n_tok, reps):
    print("\n6. step past the delays under load (another process's work), against the same run quiet")
    quiet = late_times(H, N, l_max, n_tok, reps)
    met = []
    for what, scripts in _LOADS.items():
        busy = [subprocess.Popen([sys.executable, "-c", s], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                for s in scripts]
        try:
            time.sleep(1.0)
            loaded = late_times(H, N, l_max, n_tok, reps)
        finally:
            for p in busy:
                p.kill()
                p.wait()
        print(f"   under {what}:")
        for batch in quiet:
            q, b = quiet[batch], loaded[batch]
            sd, sl, ss = (b[i] / q[i] for i in range(3))
            met.append(sd <= ss)
            print(f"   batch {batch}: DS4D {q[0] * 1e6:.0f} -> {b[0] * 1e6:.0f} us ({sd:.2f}x; "
                  f"serial loop {q[1] * 1e6:.0f} -> {b[1] * 1e6:.0f} us, {sl:.2f}x), "
                  f"S4D {q[2] * 1e6:.0f} -> {b[2] * 1e6:.0f} us ({ss:.2f}x); loaded DS4D/S4D throughput "
                  f"{b[2] / b[0]:.2f}")
    print(f"   goal: DS4D slows no more than S4D ({'met' if all(met) else 'not met'} in this run)")


@torch.no_grad()
def accuracy_section(H, N, L):
    print(f"\n7. decode accuracy: 4-layer DS4D model, {L} tokens, against its FFT forward")
    torch.manual_seed(0)                                       # the same model and input in every run
    model = SequenceModel(4, 4, d_model=H, n_layers=4, layer_kw=dict(d_state=N, l_max=L)).eval()
    x = torch.randn(1, L, 4)
    y = model(x)                                               # (1, L, 4)
    for name, hd in HISTORIES.items():
        caches = [blk.layer.allocate_inference_cache(1, history_dtype=hd) for blk in model.blocks]
        ys = torch.stack([model.step(x[:, t], caches) for t in range(L)], 1)
        err = float((ys - y).abs().max() / y.abs().max())
        goal = " (goal <= 1e-5)" if hd is None else ""
        print(f"   {name:>10s} history: max |dy| / max |y| = {err:.2e}{goal}")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m ddesys.experiments.bench.decode",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", choices=["step", "model", "cache", "prefill", "memory", "load", "accuracy"])
    args = ap.parse_args(argv)
    H, N = 256, 64
    l_max, n_tok, reps = (2048, 32, 3) if args.quick else (8192, 128, 7)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs")
    if args.only in (None, "step"):
        step_section(H, N, l_max, n_tok, reps)
    if args.only in (None, "model"):
        model_section(H, N, l_max, n_tok, reps)
    if args.only in (None, "cache"):
        cache_section(H, N, l_max)
    if args.only in (None, "prefill"):
        prefill_speed_section(H, N, (256, 1024) if args.quick else (256, 1024, 4096, 8192), 2 if args.quick else 3)
    if args.only in (None, "memory"):
        prefill_section(H, N, l_max, 4 if args.quick else 16)
    if args.only in (None, "load"):
        load_section(H, N, l_max, n_tok, reps)
    if args.only in (None, "accuracy"):
        accuracy_section(64 if args.quick else H, N, 1024 if args.quick else 8192)


if __name__ == "__main__":
    main()
