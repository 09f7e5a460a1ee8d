"""The selective clock's costs: decoding against attention as the context grows, and training against
the unclocked layers.

    python -m ddesys.experiments.bench.clock [--quick]

Measured in one run, batch 1 decoding and the synthetic copy preset's models (vocabulary 16, 2 layers,
N = 64, widths matched to S4D's parameter count at H = 64, as ``experiments.synthetic``):

1. ``decode``: seconds per token after a context of 256, 1024 and 4096 tokens (quick: 256 and 1024),
   half of them pauses, for DS4D with the given clock (``ds4d-clock``), DS4D with a learned clock
   (``ds4d-gate``: its cache keeps every state), S4D with the learned binary clock (``s4d-tick``: the
   given clock's ring) and the Llama recipe with its key/value cache
   (``transformers``; skipped without it). The ratio late / early shows which cost grows with the
   context (goal for the clocked layers: flat).
2. ``train``: seconds per training step (forward + backward, batch 32) of ``ds4d``, ``ds4d-clock``,
   ``s4d-clock``, ``ds4d-gate`` (its training scan) and ``s4d-tick`` (the FFT on its ticks and the clock's
   gradient by FFT, every token ticking at initialization) on variable-delay copy, against ``s4d``'s in the same run.

Times are medians of runs interleaved between the variants: read the ratios.
"""
from __future__ import annotations

import argparse
import importlib.util
import inspect
import os
import time

import numpy as np
import torch
import torch.nn.functional as F

from ddesys.experiments._models import ModelSpec
from ddesys.experiments.synthetic.models import build, match_width, n_params
from ddesys.experiments.synthetic.tasks import IGNORE, preset


def interleaved(fns, reps):
    """Median of the seconds each callable *returns* (its own timed part, set-up excluded), called in
    alternation (A B A B ...) after one warm-up call each."""
    for f in fns:
        f()
    times = [[] for _ in fns]
    for _ in range(reps):
        for f, ts in zip(fns, times):
            ts.append(f())
    return [float(np.median(ts)) for ts in times]

S4D = ModelSpec("s4d")
MODELS = (S4D, ModelSpec("ds4d"), ModelSpec("ds4d", clock="given"), ModelSpec("s4d", clock="given"),
          ModelSpec("ds4d", clock="learned"), ModelSpec("s4d", clock="binary"))
FAMILIES = tuple(m.label for m in MODELS)            # s4d, ds4d, ds4d-clock, s4d-clock, ds4d-gate, s4d-tick


def _models(task, specs, length):
    """``{label: model}`` of ``specs``, widths matched to S4D's parameter count at H = 64."""
    budget = n_params(build(S4D, task.vocab, 64, 2, length))
    out = {}
    for spec in specs:
        w = match_width(spec, budget, task.vocab, 2, length)
        out[spec.label] = build(spec, task.vocab, w, 2, length, seed=0, ticks=min(length, 2 * task.T)).eval()
    return out


def _context(n, vocab, seed=0):
    """``(1, n)`` token ids, about half of them the pause token 0."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (1, n), generator=g)
    return torch.where(torch.rand(1, n, generator=g) < 0.5, torch.zeros_like(ids), ids)


def _ssm_decoder(model, ids, n_tok):
    def run():
        caches = model.allocate_inference_cache(1, max_seqlen=ids.shape[1] + n_tok)
        model.prefill(ids, caches)
        plan = model.compile_step(caches)                       # the compiled model step (nn.model_step)
        tok = ids[:, -1]
        t0 = time.perf_counter()
        for _ in range(n_tok):
            tok = plan.step(tok).argmax(-1)
        return time.perf_counter() - t0
    return run


def _hf_decoder(model, ids, n_tok):
    # transformers 5 names the KV cache `cache` (argument and output); `past_key_values` before (deprecated in 5)
    kw = "cache" if "cache" in inspect.signature(model.model.forward).parameters else "past_key_values"

    def run():
        out = model.model(input_ids=ids, use_cache=True)
        past, tok = out[kw], out.logits[:, -1].argmax(-1, keepdim=True)
        t0 = time.perf_counter()
        for _ in range(n_tok):
            out = model.model(input_ids=tok, use_cache=True, **{kw: past})
            past, tok = out[kw], out.logits[:, -1].argmax(-1, keepdim=True)
        return time.perf_counter() - t0
    return run


@torch.no_grad()
def decode_section(contexts, n_tok, reps):
    print(f"1. decode, seconds per token at batch 1 after a context of n tokens (half pauses), {n_tok} tokens timed")
    task = preset("copy", "variable")
    specs = [ModelSpec("ds4d", clock="given"), ModelSpec("ds4d", clock="learned"), ModelSpec("s4d", clock="binary")] + (
        [ModelSpec("llama")] if importlib.util.find_spec("transformers") else [])
    fams = [m.label for m in specs]
    L = max(contexts) + n_tok
    models = _models(task, specs, L)
    res = {}
    for n in contexts:
        ids = _context(n, task.vocab)
        runs = [(_hf_decoder if m.is_baseline else _ssm_decoder)(models[m.label], ids, n_tok) for m in specs]
        res[n] = dict(zip(fams, (v / n_tok for v in interleaved(runs, reps))))
        print(f"   n = {n:5d}: " + ";  ".join(f"{f} {res[n][f] * 1e6:8.1f} us" for f in fams))
    first, last = contexts[0], contexts[-1]
    print("   late / early (n = %d vs %d): " % (last, first)
          + ";  ".join(f"{f} {res[last][f] / res[first][f]:.2f}" for f in fams))
    if "llama" not in fams:
        print("   (llama skipped: transformers is not installed: pip install 'ddesys[experiments]')")
    return res


def train_section(reps, batch=32):
    print(f"\n2. train step (forward + backward, batch {batch}) on variable-delay copy, seconds, against s4d")
    task = preset("copy", "variable")
    models = _models(task, MODELS, task.length)
    x, y, _ = (torch.from_numpy(a) for a in task.sample(batch, np.random.default_rng(0)))

    def step(model):
        def run():
            t0 = time.perf_counter()
            loss = F.cross_entropy(model(x).reshape(-1, task.vocab), y.reshape(-1), ignore_index=IGNORE)
            loss.backward()
            return time.perf_counter() - t0
        return run

    for m in models.values():
        m.train()
    times = dict(zip(FAMILIES, interleaved([step(models[f]) for f in FAMILIES], reps)))
    for f in FAMILIES:
        print(f"   {f:>10s}: {times[f] * 1e3:8.1f} ms  ({times[f] / times['s4d']:.2f}x s4d; "
              f"{n_params(models[f]):,} parameters)")
    return times


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m ddesys.experiments.bench.clock",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs")
    decode_section((256, 1024) if args.quick else (256, 1024, 4096), 16 if args.quick else 32, 2 if args.quick else 5)
    train_section(2 if args.quick else 5)


if __name__ == "__main__":
    main()
