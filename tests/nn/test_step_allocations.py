"""Issue 23: DS4D's decode step (the default engine on the CPU) allocates nothing per token but the
output it returns, and keeps no Python objects across tokens. Counted with torch's profiler (every CPU
tensor allocation) and tracemalloc (the Python heap), not timed."""
from __future__ import annotations

import tracemalloc

import pytest
import torch

from ddesys import nn as dnn
from ddesys.nn.decode.engine import FusedEngine
from ddesys.cpu.step import step_available

pytestmark = pytest.mark.skipif(not step_available(), reason="the fused engine needs Numba")


def _allocations(layer, cache, xs):
    with torch.no_grad(), torch.profiler.profile(profile_memory=True,
                                                 activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        outs = [layer.step(x, cache) for x in xs]
    return [e.self_cpu_memory_usage for e in prof.events() if e.self_cpu_memory_usage > 0], outs


@pytest.mark.parametrize("batch,history", [(1, None), (3, None), (3, torch.bfloat16)])
def test_step_allocates_only_its_output(batch, history):
    layer = dnn.DS4D(8, 8, l_max=32, seed=0)
    cache = layer.allocate_inference_cache(batch, history_dtype=history)
    assert isinstance(cache.engine, FusedEngine)
    xs = torch.randn(40, batch, 8)
    with torch.no_grad():
        for x in xs[:5]:                                    # constants, binding, compilation: once
            layer.step(x, cache)
    allocs, outs = _allocations(layer, cache, xs[5:])
    assert allocs == [batch * 8 * 4] * len(outs)            # one float32 (B, H) output per token, nothing else


def test_step_keeps_no_python_objects_per_token():
    layer = dnn.DS4D(8, 8, l_max=32, seed=0)
    cache = layer.allocate_inference_cache(2)
    x = torch.randn(2, 8)
    with torch.no_grad():
        tracemalloc.start()
        try:
            for _ in range(2000):                           # the interpreter's free lists settle (a few KiB)
                layer.step(x, cache)
            base = tracemalloc.get_traced_memory()[0]
            for _ in range(10000):
                layer.step(x, cache)
            grown = tracemalloc.get_traced_memory()[0] - base
        finally:
            tracemalloc.stop()
    assert grown < 65536       # one object kept per token would be >= 320 KiB: no per-token list, memo or key
