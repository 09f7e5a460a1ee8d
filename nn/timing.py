"""Timing helpers shared by the verification checks and the experiments' benchmarks: seconds of
callables timed in alternation, a load-robust test that a per-token cost is flat in position, a
training-step callable and a decoding callable for any layer or model with the decoding interface
(``allocate_inference_cache`` / ``prefill`` / ``step``).

Here, in the torch package, because they build and drive torch modules; verification and experiments
both import :mod:`ddesys.nn` already, and neither may lend a module to the other."""
from __future__ import annotations

import statistics
import time

import torch


def interleaved(fns, reps, stat=statistics.median):
    """Seconds of each callable, timed ``reps`` times in alternation (A B A B ...) so that a shared
    machine's drifting load hits all of them alike; ``stat`` of each one's times (the median by default;
    ``min`` estimates the cost without the load, which only ever adds time)."""
    for f in fns:
        f()                                              # warm-up (JIT, caches, allocator)
    times = [[] for _ in fns]
    for _ in range(reps):
        for f, ts in zip(fns, times):
            t0 = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t0)
    return [stat(ts) for ts in times]


def flat_in_position(fns, bound=1.5, reps=15, attempts=3):
    """Whether a per-token cost is flat across positions: the fastest of ``reps`` interleaved timings of
    each callable (one per position, in increasing order), the ratio last / first, and up to ``attempts``
    measurements, the smallest ratio kept. A load burst only slows some repetitions (the minimum ignores
    it) and cannot last through every attempt; a cost that grows with the position fails every one.

    Returns
    -------
    (times, ratio, passed, n_attempts) : (list of float, float, bool, int)
    """
    best = None
    for k in range(1, attempts + 1):
        times = interleaved(fns, reps, stat=min)
        ratio = times[-1] / times[0]
        if best is None or ratio < best[1]:
            best = (times, ratio)
        if ratio <= bound:
            break
    return best[0], best[1], best[1] <= bound, k


def sync(device):
    """Wait for queued CUDA work (no-op elsewhere), so wall-clock timing is honest."""
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def trainer(module, x, optimizer=torch.optim.SGD, lr=1e-4, device="cpu"):
    """A callable doing one training step of ``module`` on ``x`` (loss ``mean(y^2)``, then ``optimizer``)."""
    opt = optimizer(module.parameters(), lr=lr)

    def step():
        opt.zero_grad(set_to_none=True)
        module(x).square().mean().backward()
        opt.step()
        sync(device)
    return step


def decoder(layer, H, prompt_len, n_tokens, device="cpu", batch=1, compiled=True, **cache_kw):
    """A callable that decodes ``n_tokens`` after a prefilled prompt (cache state carried across calls;
    the ring buffer wraps, the per-token work does not change), and the cache. ``layer``: any module
    with ``allocate_inference_cache`` / ``prefill`` / ``step`` (a layer or an ``nn.SequenceModel``), for
    ``batch`` sequences; ``cache_kw`` go to ``allocate_inference_cache`` (e.g. ``parallel=False``). A
    model is stepped through its compiled plan (``compile_step``), as ``generate`` steps it
    (``compiled=False``: through its modules, ``model.module_step``). On CUDA the callable synchronizes
    before returning, so wall-clock timing is honest."""
    cache = layer.allocate_inference_cache(batch, **cache_kw)
    with torch.no_grad():
        layer.prefill(torch.randn(batch, prompt_len, H, device=device), cache)
    xs = torch.randn(n_tokens, batch, H, device=device)
    if compiled and hasattr(layer, "compile_step"):
        plan = layer.compile_step(cache)
        step = lambda x_t, cache: plan.step(x_t)        # noqa: E731
    else:
        step = getattr(layer, "module_step", layer.step)   # a model's modules, or a layer's own step

    def run():
        with torch.no_grad():
            for i in range(n_tokens):
                step(xs[i], cache)
        sync(device)
    return run, cache
