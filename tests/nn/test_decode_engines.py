"""One decode engine per cache (issue 20, finding 2): recorded at allocation, no dispatch per token,
constants as a named tuple, deterministic by default, Triton imported only for CUDA data (and its
16-bit history), a public ``setup_step()``, and nothing derived pickled with the layer."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import ddesys.nn.decode.engine as engine_mod
import ddesys.nn.decode.select as select_mod
from ddesys import backend
from ddesys.cpu import step as fstep
from ddesys.nn import DS4D, S4D
from ddesys.nn.decode.engine import DS4DConstants, S4DConstants

ROOT = Path(__file__).parents[2]
needs_numba = pytest.mark.skipif(not fstep.step_available(), reason="the fused engine needs Numba")


def _run(layer, x, cache):
    with torch.no_grad():
        return torch.stack([layer.step(x[:, t], cache) for t in range(x.shape[1])], 1)


# ---------------------------------------------------------------------------------------------- the engine
@needs_numba
def test_engine_is_chosen_once_at_allocation(monkeypatch):
    """Regression: ``step`` chose a backend every token. Now the cache records its engine; ``step`` never
    asks ``ddesys.backend.choose`` again, and DDESYS_REFERENCE set after allocation changes nothing."""
    layer = DS4D(4, 8, l_max=16, seed=0)
    x = torch.randn(2, 25, 4, generator=torch.Generator().manual_seed(0))
    fused = layer.allocate_inference_cache(2)
    monkeypatch.setenv("DDESYS_REFERENCE", "1")
    ref = layer.allocate_inference_cache(2)
    assert (type(fused.engine), type(ref.engine)) == (engine_mod.FusedEngine, engine_mod.ReferenceEngine)
    calls = []
    monkeypatch.setattr(backend, "choose", lambda *a, **k: calls.append(1))
    monkeypatch.setattr(select_mod, "force_reference", lambda *a, **k: calls.append(1))
    orig = engine_mod.bind_step
    fused_calls, binds = [], []

    def counting_bind(*a, **k):
        run = orig(*a, **k)
        binds.append(1)
        return lambda *b: fused_calls.append(1) or run(*b)
    monkeypatch.setattr(engine_mod, "bind_step", counting_bind)
    y_f, y_r = _run(layer, x, fused), _run(layer, x, ref)
    assert not calls and len(fused_calls) == x.shape[1]               # the env var was set for all of them
    assert len(binds) == 1                                            # token-independent work once per cache
    torch.testing.assert_close(y_f, y_r, rtol=0, atol=2e-6 * float(y_r.abs().max()))


def test_engine_argument_is_validated():
    layer = DS4D(4, 8, l_max=16)
    with pytest.raises(ValueError, match="engine must be"):
        layer.allocate_inference_cache(2, engine="numba")
    with pytest.raises(ValueError, match="engine='triton' needs a CUDA cache"):
        layer.allocate_inference_cache(2, engine="triton")               # CPU data, no interpreter
    with pytest.raises(ValueError, match="parallel="):
        layer.allocate_inference_cache(2, engine="reference", parallel=True)
    with pytest.raises(ValueError, match="parallel must be"):
        layer.allocate_inference_cache(2, parallel="fast")


def test_constants_are_named_tuples():
    """Regression: the constants were a positional 10-tuple."""
    ds = DS4D(3, 8, l_max=16, seed=1)
    c = ds.step_constants(torch.float64)
    assert isinstance(c, DS4DConstants) and c.lam.dtype == torch.complex128 and c.k.dtype == torch.int64
    assert c.k_max == int(c.k.max()) and c.d.dtype == torch.float64 and c.branches == ()
    assert c.host is not None and c.host[-1].dtype.name == "int64"
    s = S4D(3, 8).step_constants(torch.float32)
    assert isinstance(s, S4DConstants) and s.lam.shape == (3, 4)


def test_the_two_step_functions_have_distinct_names():
    """Regression: ``ddesys.cpu.step.decode_step`` (NumPy, writes y_out) and ``gpu.decode.decode_step`` (torch,
    returns y) shared a name. The GPU one is ``triton_step``, and the old name is gone (no alias)."""
    pytest.importorskip("triton")
    from ddesys.gpu import decode as gd
    assert gd.triton_step is not fstep.decode_step
    p = torch.zeros(3, 4, dtype=torch.complex64)
    args = (torch.zeros(2, 5, 3, 4, dtype=torch.complex64), torch.zeros(2, 3), p, p, p, p, p, torch.zeros(3),
            torch.ones(3, dtype=torch.int64), 1)
    assert not hasattr(gd, "decode_step")
    with pytest.raises(ValueError, match="x_t"):
        gd.triton_step(args[0], args[1][:, :2], *args[2:])             # validated before any launch


@pytest.mark.integration
def test_import_nn_does_not_import_triton():
    """In a fresh interpreter: ``import nn``, then allocating and decoding on the CPU, import no Triton
    (``nn.ds4d``'s ``from gpu import decode`` imported it eagerly; ``gpu.usable_for`` imported it to
    answer for CPU data)."""
    code = ("import sys, torch\n"
            "tri = lambda: sorted(m for m in sys.modules if m == 'triton' or m.startswith('triton.'))[:3]\n"
            "from ddesys import nn\n"
            "print('import', tri())\n"
            "layer = nn.DS4D(4, 8, l_max=16)\n"
            "x = torch.randn(2, 4)\n"
            "c = layer.allocate_inference_cache(2)\n"
            "layer.step(x, c); layer.step(x, layer.allocate_inference_cache(2, history_dtype=torch.float16))\n"
            "s = nn.S4D(4, 8); s.step(x, s.allocate_inference_cache(2))\n"
            "print('decode', tri())\n")
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "DDESYS_GPU_INTERPRET")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                         cwd=ROOT)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip().splitlines()[-2:] == ["import []", "decode []"], res.stdout


# ---------------------------------------------------------------------------------------------- determinism
@needs_numba
@pytest.mark.parametrize("B, H, N", [(2, 4, 8), (16, 64, 64)])     # serial loop, then the parallel one
def test_default_engine_is_bitwise_equal_across_thread_counts(monkeypatch, B, H, N):
    """Regression: the fused step timed serial against parallel and kept the faster; the two loops may
    differ at float32 rounding, so outputs could depend on the machine's load. The default is a fixed
    rule now (nothing is timed): the same bits at 1 and 2 threads (the second size is past
    PARALLEL_MIN_WORK: the parallel loop, a fixed partition)."""
    monkeypatch.setattr(fstep, "_AUTO", fstep._Auto())
    layer = DS4D(H, N, l_max=12, seed=3)
    x = torch.randn(B, 14, H, generator=torch.Generator().manual_seed(4))
    before = torch.get_num_threads()
    out = {}
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            cache = layer.allocate_inference_cache(B)
            out[n] = (_run(layer, x, cache), cache.buf.clone())
    finally:
        torch.set_num_threads(before)
    assert torch.equal(out[1][0], out[2][0]) and torch.equal(out[1][1], out[2][1])
    assert not fstep._AUTO.state                                     # no timing decided anything


@needs_numba
def test_timed_choice_is_opt_in_and_yields_to_torch_determinism(monkeypatch):
    """``parallel="auto"`` times the loops (opt-in); under ``torch.use_deterministic_algorithms(True)`` it
    takes the fixed rule: the same bits as the default cache, and no timing."""
    monkeypatch.setattr(fstep, "_AUTO", fstep._Auto())
    monkeypatch.setattr(fstep, "PARALLEL_MIN_WORK", 1)
    layer = DS4D(8, 8, l_max=12, seed=5)
    x = torch.randn(3, 14, 8, generator=torch.Generator().manual_seed(6))
    y_default = _run(layer, x, layer.allocate_inference_cache(3))
    was = torch.are_deterministic_algorithms_enabled()
    try:
        torch.use_deterministic_algorithms(True)
        y_auto = _run(layer, x, layer.allocate_inference_cache(3, parallel="auto"))
    finally:
        torch.use_deterministic_algorithms(was)
    assert torch.equal(y_auto, y_default) and not fstep._AUTO.state
    y_timed = _run(layer, x, layer.allocate_inference_cache(3, parallel="auto"))
    torch.testing.assert_close(y_timed, y_default, rtol=0, atol=1e-5 * float(y_default.abs().max()))


# ---------------------------------------------------------------------------------------------- setup_step
@pytest.mark.parametrize("cls", [DS4D, S4D])
def test_setup_step_recomputes_after_an_untracked_write(cls):
    """``param.data`` writes bypass torch's version counters; ``layer.setup_step()`` (public) makes the
    next step use the new parameters (the README used to say ``layer._step_memo.clear()``)."""
    layer = cls(3, 4, l_max=16, seed=2) if cls is DS4D else cls(3, 4, seed=2)
    x = torch.randn(1, 3)
    y0 = layer.step(x, layer.allocate_inference_cache(1))
    layer.C.data.mul_(2.0)                                           # untracked
    layer.setup_step()
    y1 = layer.step(x, layer.allocate_inference_cache(1))
    torch.testing.assert_close(y1 - layer.D * x, 2 * (y0 - layer.D * x), rtol=1e-5, atol=1e-6)
    layer.setup_step(torch.float64)
    assert layer._step_memo.value.lam.dtype == torch.complex128


# ---------------------------------------------------------------------------------------------- pickling
@pytest.mark.parametrize("kind", ["ds4d", "tap", "s4d"])
def test_torch_save_whole_layer_loads_with_weights_only(kind):
    """Regression: ``torch.save(layer)`` after decoding pickled the step memo (``nn.common.StepConstants``
    and NumPy views), so ``torch.load(weights_only=True)`` failed. Only the layer classes are allowlisted."""
    from ddesys import nn
    layer = S4D(4, 8, seed=0) if kind == "s4d" else DS4D(4, 8, l_max=16, seed=0, tap=kind == "tap")
    x = torch.randn(2, 20, 4)
    cache = layer.allocate_inference_cache(2)
    layer.prefill(x, cache)
    y = layer.step(x[:, 0], cache)
    buf = io.BytesIO()
    torch.save(layer, buf)
    buf.seek(0)
    public = [getattr(nn, n) for n in nn.__all__ if isinstance(getattr(nn, n), type)]
    public += [v for v in vars(getattr(nn, "tap", object)).values() if isinstance(v, type) and
               issubclass(v, torch.nn.Module) and v.__module__.startswith("ddesys.nn.")]
    with torch.serialization.safe_globals(public):
        loaded = torch.load(buf, weights_only=True)
    assert type(loaded) is type(layer) and loaded._step_memo.value is None
    c2 = loaded.allocate_inference_cache(2)
    loaded.prefill(x, c2)
    assert torch.equal(loaded.step(x[:, 0], c2), y)


# ---------------------------------------------------------------------------------------------- Triton
_TRITON_SCRIPT = r"""
import json, torch
from ddesys.nn import DS4D
from ddesys.cpu.step import history_error_bound
layer = DS4D(3, 8, l_max=10, seed=0)
x = torch.randn(2, 24, 3, generator=torch.Generator().manual_seed(1))
out = {}
for name, hd in (("c64", None), ("f16", torch.float16), ("bf16", torch.bfloat16)):
    tri = layer.allocate_inference_cache(2, history_dtype=hd)
    ref = layer.allocate_inference_cache(2, history_dtype=hd, engine="reference")
    with torch.no_grad():
        yt = torch.stack([layer.step(x[:, t], tri) for t in range(24)], 1)
        yr = torch.stack([layer.step(x[:, t], ref) for t in range(24)], 1)
    out[name] = dict(engine=tri.engine.name, dtype=str(tri.buf.dtype), dy=float((yt - yr).abs().max() / yr.abs().max()),
                     dbuf=float((tri.buf.float() - ref.buf.float()).abs().max()),
                     same_buf=bool(torch.equal(tri.buf, ref.buf)))
print(json.dumps(out))
"""


@pytest.mark.integration
def test_triton_engine_runs_16bit_histories_under_the_interpreter():
    """Regression: a CUDA cache with a 16-bit history silently fell back to the per-token torch path. The
    Triton engine now reads and writes 16-bit rings itself (here through Triton's interpreter on CPU
    tensors): float16 states bit-equal to the reference engine's; bfloat16 within its rounding (the
    interpreter truncates float32 -> bfloat16 where compiled Triton rounds to nearest even)."""
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1", DDESYS_GPU_INTERPRET="1", DDESYS_REFERENCE="0",
               PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    res = subprocess.run([sys.executable, "-c", _TRITON_SCRIPT], env=env, capture_output=True, text=True,
                         timeout=600, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert {v["engine"] for v in out.values()} == {"triton"}
    assert out["f16"]["dtype"] == "torch.float16" and out["bf16"]["dtype"] == "torch.bfloat16"
    assert out["c64"]["dy"] <= 2e-6 and out["f16"]["dy"] <= 2e-6 and out["f16"]["same_buf"], out
    assert out["bf16"]["dy"] <= 3e-2, out                       # two bfloat16 roundings' worth (2^-7)


@needs_numba
@pytest.mark.parametrize("history", [None, torch.bfloat16])
def test_cpu_ring_is_channel_major_and_another_layout_is_copied_once(history):
    """The fused engine reads a channel-major ring (ddesys.cpu.step.new_ring): the layer allocates one, a state
    from a training forward is one, and a cache handed a slot-major buffer before its first step decodes
    from a channel-major copy, with the same outputs bitwise."""
    layer = DS4D(6, 4, l_max=16, seed=0)
    x = torch.randn(3, 20, 6, generator=torch.Generator().manual_seed(1))
    cache = layer.allocate_inference_cache(3, history_dtype=history)
    major = lambda c: fstep.is_channel_major((c.buf.view(torch.uint16) if history else c.buf).numpy())  # noqa: E731
    assert major(cache) and not cache.buf.is_contiguous()
    other = layer.allocate_inference_cache(3, history_dtype=history)
    other.buf = other.buf.contiguous()                                  # slot-major, still zero
    assert not major(other)
    y, y_other = _run(layer, x, cache), _run(layer, x, other)
    assert major(other) and torch.equal(y, y_other)
    if history is None:
        with torch.no_grad():
            _, state = layer(x[:, :12], return_state=True)
        assert major(state)


@needs_numba
def test_clocked_ring_is_channel_major_per_row_and_another_layout_is_copied_once():
    """A clocked cache steps its rows one at a time: each row's ring is channel-major on its own; a
    slot-major buffer handed to a fresh cache is copied into that layout at the first step, same outputs."""
    from ddesys.nn import Clocked
    clocked = Clocked(DS4D(6, 4, l_max=16, seed=0))
    x = torch.randn(3, 20, 6, generator=torch.Generator().manual_seed(2))
    ticks = torch.rand(3, 20, generator=torch.Generator().manual_seed(3)) > 0.3
    cache = clocked.allocate_inference_cache(3)
    rows = lambda c: fstep.is_channel_major(c.buf.numpy(), per_row=True)  # noqa: E731
    assert rows(cache) and not fstep.is_channel_major(cache.buf.numpy())
    other = clocked.allocate_inference_cache(3)
    other.buf = other.buf.contiguous()                                  # slot-major, still zero
    assert not rows(other)
    with torch.no_grad():
        y = torch.stack([clocked.step(x[:, t], cache, ticks[:, t]) for t in range(20)], 1)
        y_other = torch.stack([clocked.step(x[:, t], other, ticks[:, t]) for t in range(20)], 1)
    assert rows(other) and torch.equal(y, y_other)
