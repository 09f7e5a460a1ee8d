"""Benchmark of the user's path: a caller's own ``model.step`` loop and state passing, as ratios.

    python -m ddesys.experiments.bench.userpath [--quick] [--l-max L] [--chunk C] [--reps R]

Measured in one run on a 4-layer token ``SequenceModel`` (H = 256, N = 64, vocabulary 96; ``--quick``:
H = 64, N = 16), eval mode, prompts prefilled first:

1. ``step``: tokens per second of a caller's own loop ``for tok in ...: model.step(tok, caches)`` (the
   default path: the compiled plan kept with the caches, its checks per token), of the plan held by the
   caller (``plan = model.compile_step(caches)``, ``plan.step(tok)``) and of the modules alone
   (``model.module_step``), DS4D and S4D models, batch 1 and 8. Ratios: own loop / plan (goal >= 0.9),
   DS4D / S4D through the own loop (goal >= 1.0 at batch 1), own loop / modules.
2. ``state``: ``model(x, state=st, return_state=True)`` on a chunk of ``C`` tokens (default 256) against a
   plain ``model(x)`` of the same chunk, without autograd, and in training (forward and backward of two
   carried chunks against one forward and backward of their concatenation), DS4D and S4D (goal <= 2x).
   Beside DS4D's ratio: the bytes of the state a chunk reads and writes (the decode ring, ``k_max + 1``
   states of every mode) against the chunk's activations, the floor state passing cannot go below.

Times are medians of runs interleaved between the variants (:func:`nn.timing.interleaved`): on a shared
machine read the ratios, not the absolutes; the machine's load averages are printed with them.
"""
from __future__ import annotations

import argparse
import os
import warnings

import torch

from ddesys.nn import SequenceModel
from ddesys.nn.timing import interleaved

V = 96


def build(layer, H, N, l_max, seed=0):
    torch.manual_seed(seed)
    kw = dict(d_state=N, l_max=l_max) if layer == "ds4d" else dict(d_state=N)
    return SequenceModel(V, V, d_model=H, n_layers=4, layer=layer, embedding=True, layer_kw=kw).eval()


def _loops(model, batch, n_tok, prompt):
    """Three callables decoding ``n_tok`` tokens: the own loop, the held plan, the modules."""
    toks = torch.randint(0, V, (n_tok, batch), generator=torch.Generator().manual_seed(1))
    caches = []
    for _ in range(3):
        c = model.allocate_inference_cache(batch)
        with torch.no_grad():
            model.prefill(torch.randint(0, V, (batch, prompt)), c)
        caches.append(c)
    plan = model.compile_step(caches[1])

    def own():
        for t in toks:
            model.step(t, caches[0])

    def held():
        with torch.no_grad():
            for t in toks:
                plan.step(t)

    def modules():
        for t in toks:
            model.module_step(t, caches[2])
    return own, held, modules


def step_section(models, n_tok, reps, prompt):
    print("\n1. a caller's own model.step loop (tokens/s ratios; goals: own/plan >= 0.9, DS4D/S4D >= 1.0 at "
          "batch 1)")
    for batch in (1, 8):
        runs = {name: _loops(m, batch, n_tok, prompt) for name, m in models.items()}
        fns = [f for name in models for f in runs[name]]
        t = dict(zip([(n, k) for n in models for k in ("own", "plan", "modules")],
                     (v / n_tok for v in interleaved(fns, reps))))
        for name in models:
            own, plan, mod = t[name, "own"], t[name, "plan"], t[name, "modules"]
            print(f"   batch {batch} {name}: own loop {own * 1e6:7.1f} us/token, held plan {plan * 1e6:7.1f}, modules "
                  f"{mod * 1e6:7.1f}; own/plan {plan / own:.2f}, own/modules {mod / own:.2f}")
        if "ds4d" in models and "s4d" in models:
            print(f"   batch {batch}: DS4D/S4D through the own loop {t['s4d', 'own'] / t['ds4d', 'own']:.2f} "
                  f"(held plans {t['s4d', 'plan'] / t['ds4d', 'plan']:.2f})")


def state_section(models, chunk, reps, batch=8):
    print(f"\n2. state passing, chunks of {chunk} tokens at batch {batch} (goal <= 2x a plain forward)")
    gen = torch.Generator().manual_seed(2)
    x = torch.randint(0, V, (batch, 2 * chunk), generator=gen)
    for name, m in models.items():
        with torch.no_grad():
            _, st = m(x[:, :chunk], return_state=True)
            plain, carried = interleaved([lambda: m(x[:, chunk:]),
                                          lambda: m(x[:, chunk:], state=st, return_state=True)], reps)
        m.train()

        def whole():
            m(x).square().mean().backward()

        def chunks():
            y1, s = m(x[:, :chunk], return_state=True)
            y2 = m(x[:, chunk:], state=s)
            (y1.square().mean() + y2.square().mean()).backward()
        tw, tc = interleaved([whole, chunks], reps)
        m.eval()
        line = (f"   {name}: forward from a state {carried / plain:.2f}x a plain forward ({carried * 1e3:.0f} / "
                f"{plain * 1e3:.0f} ms); training on 2 carried chunks {tc / tw:.2f}x one sequence "
                f"({tc * 1e3:.0f} / {tw * 1e3:.0f} ms)")
        if name == "ds4d":
            R = st[0].n_slots
            ring = sum(c.nbytes for c in st)
            act = batch * chunk * m.blocks[0].layer.H * 4 * len(m.blocks)
            line += f"\n      the state: a ring of {R} slots per layer, {ring / 2**20:.0f} MiB read and written per " \
                    f"chunk, {ring / act:.0f}x the chunk's layer inputs ({act / 2**20:.1f} MiB)"
        print(line)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m ddesys.experiments.bench.userpath",
                                 description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a small model, few tokens (a smoke run)")
    ap.add_argument("--l-max", type=int, default=None, help="DS4D's delay horizon (default: the chunk length)")
    ap.add_argument("--chunk", type=int, default=None, help="tokens per chunk in section 2 (default 256; quick 64)")
    ap.add_argument("--reps", type=int, default=None, help="interleaved repetitions (default 7; quick 3)")
    ap.add_argument("--only", choices=("step", "state"), default=None)
    args = ap.parse_args(argv)
    for name in ("l_max", "chunk", "reps"):
        v = getattr(args, name)
        if v is not None and v < 1:
            ap.error(f"--{name.replace('_', '-')} must be a positive integer, got {v}")
    H, N = (64, 16) if args.quick else (256, 64)
    chunk = args.chunk or (64 if args.quick else 256)
    l_max = args.l_max or chunk
    reps = args.reps or (3 if args.quick else 7)
    n_tok = 16 if args.quick else 64
    print(f"user path: 4 layers, H={H}, N={N}, vocabulary {V}, DS4D l_max={l_max}; torch threads "
          f"{torch.get_num_threads()}; load averages {os.getloadavg()[0]:.2f} / {os.getloadavg()[1]:.2f} "
          f"(1 / 5 min) on {os.cpu_count()} cores")
    models = {"ds4d": build("ds4d", H, N, l_max), "s4d": build("s4d", H, N, l_max)}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="DS4D: delays are spread")
        if args.only in (None, "step"):
            step_section(models, n_tok, reps, prompt=min(l_max, 300))
        if args.only in (None, "state"):
            state_section(models, chunk, reps)
    print(f"\nload averages at the end {os.getloadavg()[0]:.2f} / {os.getloadavg()[1]:.2f}")


if __name__ == "__main__":
    main()
