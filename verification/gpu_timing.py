"""Timing rows of the GPU check, timed with CUDA events on CUDA (wall clock elsewhere), one row emitted
the moment it is measured.

* training step (forward + backward + SGD step): S4D, DS4D fused, DS4D unfused (``DDESYS_REFERENCE=1``);
* prefill of one prompt of length ``l_max``;
* decoding: tokens/s (``batch x tokens / time``) at batch 1 (launch overhead) and batch 64 (throughput),
  at a position before the longest delay (the reference step still masks reads before the start) and
  one after it, for S4D, DS4D fused and DS4D reference; each row reports the cache's bytes. The state is
  set directly (random ring buffer, ``t`` = the position): the per-token work does not depend on the
  values, and a batch-64 prefill of 8192 tokens would cost more than the whole check.
"""
from __future__ import annotations

import time

import torch

from .gpu_report import reference_path


def _sync(device):
    if str(device).startswith("cuda"):
        torch.cuda.synchronize(device)


def seconds(fn, device, reps):
    """Seconds per call of ``fn`` over ``reps`` calls (after the caller's warm-up): CUDA events around
    the whole loop on CUDA (no host sync inside), ``perf_counter`` around a synchronized loop elsewhere."""
    if str(device).startswith("cuda"):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / reps
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    _sync(device)
    return (time.perf_counter() - t0) / reps


def _peak(device, fn):
    if not str(device).startswith("cuda"):
        return None
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    _sync(device)
    return int(torch.cuda.max_memory_allocated(device))


def train_rows(device, emit, batch, H, N, Ls, reps, warmup=3):
    """One ``train`` row per ``L``: seconds per step of each implementation and peak memory."""
    from ddesys import nn as dnn
    for L in Ls:
        x = torch.randn(batch, L, H, device=device)                           # (B, L, H)
        secs, peak = {}, {}
        impls = [("S4D", dnn.S4D(H, N), False), ("DS4D fused", dnn.DS4D(H, N, l_max=L), False),
                 ("DS4D unfused", dnn.DS4D(H, N, l_max=L), True)]
        for name, layer, ref in impls:
            layer = layer.to(device)
            opt = torch.optim.SGD(layer.parameters(), lr=1e-4)

            def step():
                opt.zero_grad(set_to_none=True)
                layer(x).square().mean().backward()
                opt.step()
            with reference_path(ref):
                for _ in range(warmup):
                    step()
                secs[name] = seconds(step, device, reps)
                peak[name] = _peak(device, step)
        emit({"kind": "train", "status": "info", "L": L, "batch": batch, "H": H, "N": N, "reps": reps,
              "seconds": secs, "peak_bytes": peak, "fused_over_s4d": secs["DS4D fused"] / secs["S4D"],
              "goal_fused_over_s4d": 1.2})


def _random_state(cache, position, g):
    """Put ``cache`` at ``position`` with random states (timing only)."""
    st = cache.buf if hasattr(cache, "buf") else cache.h
    st.copy_(torch.randn(st.shape, dtype=st.dtype, generator=g).to(st.device))
    cache.t = position


def decode_rows(device, emit, H, N, l_max, batches, n_tokens, warmup, prefill_batch=1):
    """``prefill`` rows (batch ``prefill_batch``, prompt ``l_max``) and ``decode`` rows for each layer,
    batch and position (before / after the DS4D layer's longest delay)."""
    from ddesys import nn as dnn
    g = torch.Generator().manual_seed(0)
    ds = dnn.DS4D(H, N, l_max=l_max).to(device).eval()
    s4 = dnn.S4D(H, N).to(device).eval()
    k_max = ds.allocate_inference_cache(1).n_slots - 1
    positions = {"before": max(1, k_max // 2 - warmup - n_tokens), "after": k_max + 1}
    assert positions["before"] + warmup + n_tokens <= k_max, "decode run before the longest delay overruns it"
    with torch.no_grad():
        for name, layer in (("S4D", s4), ("DS4D", ds)):
            x = torch.randn(prefill_batch, l_max, H, device=device)
            layer.prefill(x, layer.allocate_inference_cache(prefill_batch))            # warm-up (FFT plans)
            sec = seconds(lambda: layer.prefill(x, layer.allocate_inference_cache(prefill_batch)), device, 1)
            emit({"kind": "prefill", "status": "info", "impl": name, "L": l_max, "batch": prefill_batch,
                  "seconds": sec})
        for impl, layer, ref in (("S4D", s4, False), ("DS4D fused", ds, False), ("DS4D reference", ds, True)):
            for batch in batches:
                xs = torch.randn(warmup + n_tokens, batch, H, device=device)          # (T, B, H)
                for rel, pos in positions.items():
                    with reference_path(ref):
                        cache = layer.allocate_inference_cache(batch)
                        _random_state(cache, pos, g)
                        for i in range(warmup):
                            layer.step(xs[i], cache)
                        it = iter(range(warmup, warmup + n_tokens))
                        sec = seconds(lambda: layer.step(xs[next(it)], cache), device, n_tokens)
                    emit({"kind": "decode", "status": "info", "impl": impl, "batch": batch, "position": pos,
                          "relative_to_delay": rel, "k_max": k_max, "tokens": n_tokens,
                          "seconds_per_step": sec, "tokens_per_s": batch / sec, "cache_bytes": int(cache.nbytes)})
