"""The compiled model step (nn/model_step.py) around every kind of layer: a layer without a compiled
step of its own (the tap, the reference engine, S4D, a given or learned clock) runs its own ``step`` while
the rest of its block stays compiled; the outputs equal the module path and the model's forward pass (the
FFT path, computed independently) in float64."""
from __future__ import annotations

import pytest
import torch
from ddesys.cpu import block_loops
from ddesys.nn import SequenceModel, TokenClock
from ddesys.nn import model_step as ms

pytestmark = pytest.mark.skipif(not block_loops.available(), reason="the compiled model step needs Numba")

F64 = torch.float64


def _model(kind, seed=0):
    torch.manual_seed(seed)
    kw = dict(d_model=12, n_layers=2, embedding=True, dtype=F64)
    lk = dict(d_state=8, l_max=40)
    if kind == "tap":
        return SequenceModel(9, 9, layer_kw=dict(lk, tap=True), **kw)
    if kind == "s4d":
        return SequenceModel(9, 9, layer="s4d", layer_kw=dict(d_state=8), **kw)
    if kind in ("ds4d-clock", "s4d-clock"):
        layer = kind.split("-")[0]
        return SequenceModel(9, 9, layer=layer, clock=TokenClock(pause_tokens=(0,)),
                             layer_kw=lk if layer == "ds4d" else dict(d_state=8), **kw)
    if kind in ("ds4d-binary", "s4d-binary", "ds4d-learned"):
        layer, clock = kind.split("-")
        m = SequenceModel(9, 9, layer=layer, clock=clock, layer_kw=lk if layer == "ds4d" else dict(d_state=8), **kw)
        with torch.no_grad():                                       # gates that pause on some tokens
            for blk in m.blocks:
                blk.layer.gate.w.normal_(0, 2.0)
        return m
    return SequenceModel(9, 9, layer_kw=lk, **kw)                   # plain DS4D


def _ids(B=3, L=40, seed=1):
    ids = torch.randint(0, 9, (B, L), generator=torch.Generator().manual_seed(seed))
    ids[:, ::4] = 0                                                 # the given clocks' pauses
    return ids


def _rel(a, b):
    return float((a - b).abs().max()) / float(b.abs().max())


@pytest.mark.parametrize("kind,engine", [
    ("ds4d", "reference"), ("tap", None), ("s4d", None), ("ds4d-clock", None), ("s4d-clock", None),
    ("ds4d-binary", None), ("s4d-binary", None), ("ds4d-learned", None)])
def test_every_layer_runs_in_the_plan_and_equals_the_module_path_and_forward(kind, engine):
    model = _model(kind).eval()
    ids = _ids()
    kw = {} if engine is None else {"engine": engine}
    plan = model.compile_step(model.allocate_inference_cache(3, 40, dtype=F64, **kw))
    with torch.no_grad():
        y = torch.stack([plan.step(ids[:, t]) for t in range(ids.shape[1])], 1)
        caches = model.allocate_inference_cache(3, 40, dtype=F64, **kw)
        y_mod = torch.stack([model.step(ids[:, t], caches) for t in range(ids.shape[1])], 1)
        y_fwd = model(ids)
    assert plan.reason is None and plan.fused_tokens == ids.shape[1]
    assert all(isinstance(s, ms._OwnStep) for s in plan.program.steps)   # the layers' own steps
    assert _rel(y, y_mod) <= 1e-12
    assert _rel(y, y_fwd) <= 1e-9


def test_learned_binary_clock_pauses_in_the_plan():
    """The learned clock's ticks come from its gate on each token's layer input inside the plan: rows
    pause, and the plan's outputs still equal the forward pass."""
    model = _model("ds4d-binary", seed=2).eval()
    ids = _ids(seed=3)
    with torch.no_grad():
        x = model.blocks[0].norm(model.encoder(ids))
        ticks = model.blocks[0].layer.gate.ticks(x)                 # (B, L) the first layer's own clock
    assert 0 < int(ticks.sum()) < ticks.numel()                    # some pauses, some ticks
    plan = model.compile_step(model.allocate_inference_cache(3, 40, dtype=F64))
    with torch.no_grad():
        y = torch.stack([plan.step(ids[:, t]) for t in range(ids.shape[1])], 1)
        y_fwd = model(ids)
    assert _rel(y, y_fwd) <= 1e-9
    assert int(plan.caches[0].n.sum()) == int(ticks.sum())         # the ring advanced at the ticks alone


def test_a_tick_for_a_layer_without_a_clock_is_refused_as_by_the_module_path():
    model = _model("ds4d-clock").eval()
    model.blocks[0].layer = model.blocks[0].layer.inner             # a plain DS4D under the model's clock
    ids = _ids()
    with torch.no_grad():
        with pytest.raises(TypeError):
            model.step(ids[:, 0], model.allocate_inference_cache(3, 40, dtype=F64))
        plan = model.compile_step(model.allocate_inference_cache(3, 40, dtype=F64))
        assert not isinstance(plan.program.steps[0], ms._OwnStep)  # its compiled step
        with pytest.raises(TypeError):
            plan.step(ids[:, 0])
