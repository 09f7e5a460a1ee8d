"""The compiled model step (nn/model_step.py, ``model.compile_step``) against an independent
float64 NumPy model, the module path, and its fallbacks: the plan runs compiled exactly where the blocks
publish fused forms, and follows parameter changes."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from ddesys.cpu import block_loops
from ddesys.nn import DS4D, SequenceModel
from ddesys.nn import model_step as ms
from nn_helpers import spec_discrete, vec_recurrence
from torch import nn

pytestmark = pytest.mark.skipif(not block_loops.available(), reason="the compiled model step needs Numba")

_erf = np.vectorize(math.erf)


def _np(t):
    return t.detach().double().numpy()


def np_norm(mod, x):
    """LayerNorm over the last axis (biased variance), or the identity; NumPy float64."""
    if isinstance(mod, nn.Identity):
        return x
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + mod.eps) * _np(mod.weight) + _np(mod.bias)


def np_gelu(x, approximate):
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def np_model(model, x):
    """SequenceModel's causal forward in NumPy float64, written from its definition (pre- or post-norm,
    GLU or not, LayerNorm or none, erf or tanh GELU, float inputs); each DS4D layer is the recurrence of
    its parameters (tests/nn_helpers.vec_recurrence on spec_discrete). ``x`` ``(B, L, d_in)``."""
    h = _np(x) @ _np(model.encoder.weight).T + _np(model.encoder.bias)          # (B, L, H)
    for blk in model.blocks:
        z = np_norm(blk.norm, h) if blk.prenorm else h
        s = vec_recurrence(*spec_discrete(blk.layer), z.transpose(0, 2, 1)).transpose(0, 2, 1)   # (B, L, H)
        o = np_gelu(s, blk.act.approximate) @ _np(blk.out.weight).T + _np(blk.out.bias)
        H = h.shape[-1]
        r = o[..., :H] / (1 + np.exp(-o[..., H:])) if isinstance(blk.glu, nn.GLU) else o
        h = h + r if blk.prenorm else np_norm(blk.norm, h + r)
    return np_norm(model.norm, h) @ _np(model.decoder.weight).T + _np(model.decoder.bias)


def build(dtype=torch.float64, prenorm=True, glu=True, norm="layer", approximate="none", seed=0, H=12, L=24):
    torch.manual_seed(seed)
    model = SequenceModel(5, 4, d_model=H, n_layers=3, layer_kw=dict(d_state=8, l_max=L), glu=glu, prenorm=prenorm,
                          norm=norm, dtype=dtype).eval()
    for blk in model.blocks:
        blk.act.approximate = approximate
        if norm == "layer":                                              # non-trivial affine norms
            with torch.no_grad():
                blk.norm.weight.uniform_(0.5, 1.5)
                blk.norm.bias.uniform_(-0.3, 0.3)
    return model


def steps(model, x, caches=None, compiled=True):
    """Step ``model`` through ``x`` ``(B, L, ...)``: outputs ``(B, L, ...)`` and the plan from
    ``model.compile_step`` (``compiled=False``: ``model.module_step``, the modules; then the caches instead)."""
    caches = model.allocate_inference_cache(x.shape[0], dtype=x.dtype) if caches is None else caches
    plan = model.compile_step(caches) if compiled else None
    with torch.no_grad():
        ys = [plan.step(x[:, t]) if compiled else model.module_step(x[:, t], caches) for t in range(x.shape[1])]
    return torch.stack(ys, 1), plan if compiled else caches


def run(plan, x):
    """``plan.step`` through ``x`` ``(B, L, ...)`` without autograd: ``(B, L, ...)``."""
    with torch.no_grad():
        return torch.stack([plan.step(x[:, t]) for t in range(x.shape[1])], 1)


def used_plan(plan, n):
    """The plan ran compiled for ``n`` tokens."""
    return plan.reason is None and plan.fused_tokens == n


@pytest.mark.parametrize("prenorm,glu,norm,approximate,B", [
    (True, True, "layer", "none", 1), (False, True, "layer", "none", 2), (True, False, "none", "tanh", 1),
    (False, False, "layer", "tanh", 3), (True, True, "layer", "none", 5)])
def test_fused_step_equals_numpy_model_float64(prenorm, glu, norm, approximate, B):
    model = build(prenorm=prenorm, glu=glu, norm=norm, approximate=approximate)
    k_max = max(int(b.layer.discrete(torch.float64).k.max()) for b in model.blocks)
    x = torch.randn(B, 2 * k_max + 8, 5, dtype=torch.float64)                    # past every delay, twice
    y, plan = steps(model, x)
    assert used_plan(plan, x.shape[1])
    ref = np_model(model, x)
    assert np.abs(y.numpy() - ref).max() <= 1e-10 * np.abs(ref).max()
    assert (B > ms.MATVEC_MAX_BATCH) == (not plan.program.matvec)               # both product paths


@pytest.mark.parametrize("B", [1, 4])
def test_fused_step_float32_matches_module_path_and_oracle(B):
    model = build(dtype=torch.float32, H=32, L=40)
    x = torch.randn(B, 60, 5)
    y, plan = steps(model, x)
    assert used_plan(plan, 60)
    y_mod, _ = steps(model, x, compiled=False)
    scale = float(y_mod.abs().max())
    assert float((y - y_mod).abs().max()) <= 2e-6 * scale
    ref = np_model(model, x.double())
    assert np.abs(y.double().numpy() - ref).max() <= 2e-6 * np.abs(ref).max()


def test_model_step_runs_the_plan_and_module_step_the_modules():
    model = build(H=12)
    x = torch.randn(1, 6, 5, dtype=torch.float64)
    y_mod, caches = steps(model, x, compiled=False)
    assert caches[0].plan is None                                                 # module_step makes no plan
    assert not hasattr(SequenceModel, "fuse_step")                                # no class flag
    y, plan = steps(model, x)
    assert used_plan(plan, 6) and plan.caches is not caches                       # a plan holds its own list
    assert float((y - y_mod).abs().max()) <= 1e-12 * float(y.abs().max())
    fresh = model.allocate_inference_cache(1, dtype=torch.float64)
    with torch.no_grad():
        y_auto = torch.stack([model.step(x[:, t], fresh) for t in range(6)], 1)   # the user's own loop
    auto = model.compile_step(fresh)
    assert fresh[0].plan is auto and used_plan(auto, 6)                           # the plan step made and ran
    assert float((y_auto - y_mod).abs().max()) <= 1e-12 * float(y.abs().max())
    with pytest.raises(ValueError, match="one cache per layer"):
        model.compile_step(caches[:2])


def test_blocks_publish_their_fused_form():
    model = build(H=12)
    form = model.blocks[0].fused_form()
    assert form.layer is model.blocks[0].layer and form.out is model.blocks[0].out and form.glu
    assert form.norm is model.blocks[0].norm and form.prenorm and form.act == "gelu"
    relu = SequenceModel(5, 4, d_model=12, n_layers=1, activation="ReLU", layer_kw=dict(d_state=8, l_max=24))
    assert relu.blocks[0].fused_form() is None
    drop = SequenceModel(5, 4, d_model=12, n_layers=1, dropout=0.1, layer_kw=dict(d_state=8, l_max=24))
    assert drop.train().blocks[0].fused_form() is None and drop.eval().blocks[0].fused_form() is not None
    h = model.blocks[0].act.register_forward_pre_hook(lambda *a: None)
    assert model.blocks[0].fused_form() is None
    h.remove()
    assert model.blocks[0].fused_form() is not None


def test_prefill_then_fused_steps_equal_forward():
    model = build(H=16, L=32)
    x = torch.randn(2, 50, 5, dtype=torch.float64)
    caches = model.allocate_inference_cache(2, dtype=torch.float64)
    with torch.no_grad():
        y0 = model.prefill(x[:, :20], caches)
        y1, plan = steps(model, x[:, 20:], caches)
        y = model(x)
    assert used_plan(plan, 30)
    assert float((torch.cat([y0, y1], 1) - y).abs().max()) <= 1e-9 * float(y.abs().max())


def _not_fused(model, x, caches=None, grad=False):
    caches = model.allocate_inference_cache(x.shape[0], dtype=x.dtype) if caches is None else caches
    plan = model.compile_step(caches)
    with torch.set_grad_enabled(grad):
        plan.step(x[:, 0])
    return plan.fused_tokens == 0


def test_ineligible_models_take_the_module_path():
    x = torch.randn(2, 3, 5, dtype=torch.float64)
    model = build()
    assert not _not_fused(model, x)                                             # the plain model is fused
    assert _not_fused(model, x, grad=True)                                      # gradients: the modules
    h = model.blocks[1].out.register_forward_hook(lambda *a: None)
    assert _not_fused(model, x)                                                 # hooks run on the modules
    h.remove()
    drop = SequenceModel(5, 4, d_model=12, n_layers=2, dropout=0.1, layer_kw=dict(d_state=8, l_max=24),
                         dtype=torch.float64)
    assert _not_fused(drop.train(), x)                                          # dropout in training
    assert not _not_fused(drop.eval(), x)
    relu = SequenceModel(5, 4, d_model=12, n_layers=2, activation="ReLU", layer_kw=dict(d_state=8, l_max=24),
                         dtype=torch.float64).eval()
    assert _not_fused(relu, x)
    assert "fused form" in relu.compile_step(relu.allocate_inference_cache(2, dtype=torch.float64)).reason


def test_plan_follows_parameter_changes():
    model = build(H=16, L=32)
    x = torch.randn(1, 40, 5, dtype=torch.float64)
    _, plan = steps(model, x[:, :10])
    program = plan.program
    with torch.no_grad():                                                        # in place: seen directly
        model.blocks[0].out.weight.mul_(1.5)
        model.blocks[2].norm.bias.add_(0.2)
        model.blocks[1].layer.log_dt.add_(0.1)                                   # the layer's constants too
    model.reset_cache(plan.caches)
    y = run(plan, x)
    assert plan.program is program                                               # no re-derivation was needed
    assert float(np.abs(y.numpy() - np_model(model, x)).max()) <= 1e-10 * float(y.abs().max())
    model.decoder.weight = nn.Parameter(torch.randn_like(model.decoder.weight))   # a new object: derived again
    model.reset_cache(plan.caches)
    y = run(plan, x)
    assert plan.program is not program and used_plan(plan, 10 + 2 * 40)
    assert float(np.abs(y.numpy() - np_model(model, x)).max()) <= 1e-10 * float(y.abs().max())


def test_fused_model_step_is_bitwise_across_threads_and_batches_alone():
    model = build(dtype=torch.float32, H=32, L=40)
    x = torch.randn(3, 30, 5)
    n = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        y1, _ = steps(model, x)
        torch.set_num_threads(2)
        y2, _ = steps(model, x)
    finally:
        torch.set_num_threads(n)
    assert torch.equal(y1, y2)


def test_reset_and_new_caches_rebuild_the_binding():
    model = build(H=16, L=32)
    x = torch.randn(2, 30, 5, dtype=torch.float64)
    y, plan = steps(model, x)
    model.reset_cache(plan.caches)
    y2, _ = steps(model, x, plan.caches)
    assert torch.equal(y, y2)
    y3, p3 = steps(model, x)                                                     # another list of caches
    assert torch.equal(y, y3) and used_plan(p3, 30)


def test_layer_subclass_with_own_step_is_not_bypassed():
    class Marked(DS4D):
        calls = 0

        def step(self, x_t, cache):
            Marked.calls += 1
            return super().step(x_t, cache)

    model = build(H=12)
    model.blocks[0].layer.__class__ = Marked
    x = torch.randn(1, 4, 5, dtype=torch.float64)
    y, plan = steps(model, x)
    assert Marked.calls == 4 and used_plan(plan, 4)                             # its step, the block compiled
    assert isinstance(plan.program.steps[0], ms._OwnStep) and not isinstance(plan.program.steps[1], ms._OwnStep)
    assert float(np.abs(y.numpy() - np_model(model, x)).max()) <= 1e-10 * float(y.abs().max())


def test_a_plan_is_not_used_in_training_mode_or_on_moved_storage():
    torch.manual_seed(1)
    model = SequenceModel(5, 4, d_model=12, n_layers=2, dropout=0.5, layer_kw=dict(d_state=8, l_max=24),
                          dtype=torch.float64).eval()
    x = torch.randn(1, 6, 5, dtype=torch.float64)
    _, plan = steps(model, x)
    assert used_plan(plan, 6)
    model.train()                                                               # dropout active now
    with torch.no_grad():
        plan.step(x[:, 0])
    assert plan.fused_tokens == 6 and "dropout" in plan.reason
    model.eval()
    lin = model.blocks[0].out
    lin.weight.data = lin.weight.data * 2                                       # new storage, same object
    model.reset_cache(plan.caches)
    y = run(plan, x)                                                            # the same caches
    assert plan.reason is None and plan.fused_tokens == 12
    assert float(np.abs(y.numpy() - np_model(model, x)).max()) <= 1e-10 * float(y.abs().max())


def test_clocked_token_model_fused_step_equals_module_path_and_forward():
    from ddesys.nn import TokenClock
    torch.manual_seed(3)
    model = SequenceModel(9, 9, d_model=12, n_layers=2, embedding=True, clock=TokenClock(pause_tokens=(0,)),
                          layer_kw=dict(d_state=8, l_max=20), dtype=torch.float64).eval()
    ids = torch.randint(0, 9, (3, 40))
    ids[:, ::3] = 0                                                             # pauses
    plan = model.compile_step(model.allocate_inference_cache(3, dtype=torch.float64))
    with torch.no_grad():
        y = torch.stack([plan.step(ids[:, t]) for t in range(40)], 1)
        assert used_plan(plan, 40)
        c2 = model.allocate_inference_cache(3, dtype=torch.float64)
        y_mod = torch.stack([model.step(ids[:, t], c2) for t in range(40)], 1)
        y_fwd = model(ids)
    assert float((y - y_mod).abs().max()) <= 1e-12 * float(y.abs().max())
    assert float((y - y_fwd).abs().max()) <= 1e-9 * float(y.abs().max())


def test_plans_over_cache_lists_decoded_in_turn_are_independent():
    model = build(H=12)
    x = torch.randn(1, 8, 5, dtype=torch.float64)
    plans = [model.compile_step(model.allocate_inference_cache(1, dtype=torch.float64)) for _ in range(5)]
    with torch.no_grad():
        ys = [[p.step(x[:, t]) for p in plans] for t in range(8)]
    y_alone, _ = steps(model, x)
    for i, p in enumerate(plans):
        assert used_plan(p, 8) and torch.equal(torch.stack([ys[t][i] for t in range(8)], 1), y_alone)


def test_a_token_batch_that_does_not_fit_the_caches_is_named():
    model = build(H=12)
    x = torch.randn(3, 4, 5, dtype=torch.float64)
    _, plan = steps(model, x)                                                    # a plan for batch 3
    with torch.no_grad(), pytest.raises(ValueError, match="batch 2"):
        plan.step(x[:2, 0])


def test_compiled_encoder_and_decoder_follow_in_place_updates_and_hooks():
    model = build(H=16, L=32)
    x = torch.randn(1, 12, 5, dtype=torch.float64)
    _, plan = steps(model, x[:, :4])
    program = plan.program
    assert program.enc is not None and program.dec is not None                  # batch 1: both compiled
    with torch.no_grad():                                                        # seen through the views
        model.encoder.weight.mul_(0.5)
        model.decoder.bias.add_(1.0)
    model.reset_cache(plan.caches)
    y = run(plan, x)
    assert plan.program is program
    assert float(np.abs(y.numpy() - np_model(model, x)).max()) <= 1e-10 * float(y.abs().max())
    seen = []
    model.encoder.register_forward_hook(lambda mod, inp, out: seen.append(out.shape))
    model.reset_cache(plan.caches)
    y2, plan2 = steps(model, x, plan.caches)                                     # hooks: the plan derived again
    assert plan2 is plan and len(seen) == x.shape[1]                          # a hooked encoder runs as torch's
    assert used_plan(plan2, 4 + 12 + 12)
    assert plan2.program.enc is None
    assert float((y2 - y).abs().max()) <= 1e-12 * float(y.abs().max())


def test_embedding_model_fused_at_batch_one_and_float_input_mismatch_is_named():
    torch.manual_seed(4)
    model = SequenceModel(9, 7, d_model=12, n_layers=2, embedding=True, layer_kw=dict(d_state=8, l_max=20),
                          dtype=torch.float64).eval()
    ids = torch.randint(0, 9, (1, 30))
    plan = model.compile_step(model.allocate_inference_cache(1, dtype=torch.float64))
    with torch.no_grad():
        y = torch.stack([plan.step(ids[:, t]) for t in range(30)], 1)
        assert used_plan(plan, 30)
        y_fwd = model(ids)
    assert float((y - y_fwd).abs().max()) <= 1e-9 * float(y_fwd.abs().max())
    lin = build(H=12)
    plan = lin.compile_step(lin.allocate_inference_cache(1, dtype=torch.float64))
    with torch.no_grad(), pytest.raises(RuntimeError):
        plan.step(torch.randn(1, 5, dtype=torch.float32))                        # torch's dtype error, not a plan's
