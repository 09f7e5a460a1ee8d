"""The fused model step (nn/model_step.py) against an independent float64 NumPy model, the module path,
and its fallbacks: the plan is used exactly where eligible, and follows parameter changes."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from ddesys.nn import DS4D, SequenceModel
from ddesys.nn import model_step as ms
from nn_helpers import spec_discrete, vec_recurrence
from torch import nn

pytestmark = pytest.mark.skipif(ms._nb is None, reason="the fused model step needs Numba")

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


def steps(model, x, caches=None):
    caches = model.allocate_inference_cache(x.shape[0], dtype=x.dtype) if caches is None else caches
    with torch.no_grad():
        return torch.stack([model.step(x[:, t], caches) for t in range(x.shape[1])], 1), caches


def used_plan(model, caches):
    return ms.current_plan(model, caches) is not None


@pytest.mark.parametrize("prenorm,glu,norm,approximate,B", [
    (True, True, "layer", "none", 1), (False, True, "layer", "none", 2), (True, False, "none", "tanh", 1),
    (False, False, "layer", "tanh", 3), (True, True, "layer", "none", 5)])
def test_fused_step_equals_numpy_model_float64(prenorm, glu, norm, approximate, B):
    model = build(prenorm=prenorm, glu=glu, norm=norm, approximate=approximate)
    k_max = max(int(b.layer.discrete(torch.float64).k.max()) for b in model.blocks)
    x = torch.randn(B, 2 * k_max + 8, 5, dtype=torch.float64)                    # past every delay, twice
    y, caches = steps(model, x)
    assert used_plan(model, caches)
    ref = np_model(model, x)
    assert np.abs(y.numpy() - ref).max() <= 1e-10 * np.abs(ref).max()
    assert (B > ms.MATVEC_MAX_BATCH) == (not ms.current_plan(model, caches).matvec)   # both product paths


@pytest.mark.parametrize("B", [1, 4])
def test_fused_step_float32_matches_module_path_and_oracle(B):
    model = build(dtype=torch.float32, H=32, L=40)
    x = torch.randn(B, 60, 5)
    y, caches = steps(model, x)
    assert used_plan(model, caches)
    model.fuse_step = False
    y_mod, c2 = steps(model, x)
    assert not used_plan(model, c2)
    scale = float(y_mod.abs().max())
    assert float((y - y_mod).abs().max()) <= 2e-6 * scale
    ref = np_model(model, x.double())
    assert np.abs(y.double().numpy() - ref).max() <= 2e-6 * np.abs(ref).max()


def test_prefill_then_fused_steps_equal_forward():
    model = build(H=16, L=32)
    x = torch.randn(2, 50, 5, dtype=torch.float64)
    caches = model.allocate_inference_cache(2, dtype=torch.float64)
    with torch.no_grad():
        y0 = model.prefill(x[:, :20], caches)
        y1, _ = steps(model, x[:, 20:], caches)
        y = model(x)
    assert used_plan(model, caches)
    assert float((torch.cat([y0, y1], 1) - y).abs().max()) <= 1e-9 * float(y.abs().max())


def _not_fused(model, x, caches=None, grad=False):
    caches = model.allocate_inference_cache(x.shape[0], dtype=x.dtype) if caches is None else caches
    ms._PLANS.pop(model, None)                                                  # no plan kept from before
    with torch.set_grad_enabled(grad):
        model.step(x[:, 0], caches)
    return not used_plan(model, caches)


def test_ineligible_models_take_the_module_path():
    x = torch.randn(2, 3, 5, dtype=torch.float64)
    model = build()
    assert not _not_fused(model, x)                                             # the plain model is fused
    assert _not_fused(model, x, grad=True)                                      # gradients: the modules
    ref = model.allocate_inference_cache(2, dtype=torch.float64, engine="reference")
    assert _not_fused(model, x, ref)                                            # another engine
    h = model.blocks[1].out.register_forward_hook(lambda *a: None)
    assert _not_fused(model, x)                                                 # hooks run on the modules
    h.remove()
    drop = SequenceModel(5, 4, d_model=12, n_layers=2, dropout=0.1, layer_kw=dict(d_state=8, l_max=24),
                         dtype=torch.float64)
    assert _not_fused(drop.train(), x)                                          # dropout in training
    assert not _not_fused(drop.eval(), x)
    tap = SequenceModel(5, 4, d_model=12, n_layers=2, layer_kw=dict(d_state=8, l_max=24, tap=True),
                        dtype=torch.float64).eval()
    assert _not_fused(tap, x)                                                   # the tap's term is torch's
    relu = SequenceModel(5, 4, d_model=12, n_layers=2, activation="ReLU", layer_kw=dict(d_state=8, l_max=24),
                         dtype=torch.float64).eval()
    assert _not_fused(relu, x)
    s4 = SequenceModel(5, 4, d_model=12, n_layers=2, layer="s4d", dtype=torch.float64).eval()
    assert _not_fused(s4, x)


def test_plan_follows_parameter_changes():
    model = build(H=16, L=32)
    x = torch.randn(1, 40, 5, dtype=torch.float64)
    _, caches = steps(model, x[:, :10])
    plan = ms.current_plan(model, caches)
    with torch.no_grad():                                                        # in place: seen directly
        model.blocks[0].out.weight.mul_(1.5)
        model.blocks[2].norm.bias.add_(0.2)
        model.blocks[1].layer.log_dt.add_(0.1)                                   # the layer's constants too
    model.reset_cache(caches)
    y, _ = steps(model, x, caches)
    assert ms.current_plan(model, caches) is plan                                # no rebuild was needed
    assert float(np.abs(y.numpy() - np_model(model, x)).max()) <= 1e-10 * float(y.abs().max())
    model.decoder.weight = nn.Parameter(torch.randn_like(model.decoder.weight))   # a new object: a new plan
    model.reset_cache(caches)
    old = ms.current_plan(model, caches)
    assert old is None                                                           # the old plan is stale
    y, _ = steps(model, x, caches)
    assert used_plan(model, caches)
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
    y, caches = steps(model, x)
    model.reset_cache(caches)
    y2, _ = steps(model, x, caches)
    assert torch.equal(y, y2)
    y3, c3 = steps(model, x)                                                     # another list of caches
    assert torch.equal(y, y3) and used_plan(model, c3)


def test_layer_subclass_with_own_step_is_not_bypassed():
    class Marked(DS4D):
        calls = 0

        def step(self, x_t, cache):
            Marked.calls += 1
            return super().step(x_t, cache)

    model = build(H=12)
    model.blocks[0].layer.__class__ = Marked
    x = torch.randn(1, 4, 5, dtype=torch.float64)
    steps(model, x)
    assert Marked.calls == 4


def test_a_plan_is_not_reused_in_training_mode_or_on_moved_storage():
    torch.manual_seed(1)
    model = SequenceModel(5, 4, d_model=12, n_layers=2, dropout=0.5, layer_kw=dict(d_state=8, l_max=24),
                          dtype=torch.float64).eval()
    x = torch.randn(1, 6, 5, dtype=torch.float64)
    _, caches = steps(model, x)
    assert used_plan(model, caches)
    model.train()                                                               # dropout active now
    assert not used_plan(model, caches)
    model.eval()
    lin = model.blocks[0].out
    lin.weight.data = lin.weight.data * 2                                       # new storage, same object
    model.reset_cache(caches)
    y, _ = steps(model, x, caches)                                              # the same caches
    assert float(np.abs(y.numpy() - np_model(model, x)).max()) <= 1e-10 * float(y.abs().max())


def test_clocked_token_model_fused_step_equals_module_path_and_forward():
    from ddesys.nn import TokenClock
    torch.manual_seed(3)
    model = SequenceModel(9, 9, d_model=12, n_layers=2, embedding=True, clock=TokenClock(pause_tokens=(0,)),
                          layer_kw=dict(d_state=8, l_max=20), dtype=torch.float64).eval()
    ids = torch.randint(0, 9, (3, 40))
    ids[:, ::3] = 0                                                             # pauses
    caches = model.allocate_inference_cache(3, dtype=torch.float64)
    with torch.no_grad():
        y = torch.stack([model.step(ids[:, t], caches) for t in range(40)], 1)
        assert used_plan(model, caches)
        model.fuse_step = False
        c2 = model.allocate_inference_cache(3, dtype=torch.float64)
        y_mod = torch.stack([model.step(ids[:, t], c2) for t in range(40)], 1)
        y_fwd = model(ids)
    assert float((y - y_mod).abs().max()) <= 1e-12 * float(y.abs().max())
    assert float((y - y_fwd).abs().max()) <= 1e-9 * float(y.abs().max())


def test_cache_lists_decoded_in_turn_keep_their_plans():
    model = build(H=12)
    x = torch.randn(1, 8, 5, dtype=torch.float64)
    lists = [model.allocate_inference_cache(1, dtype=torch.float64) for _ in range(ms.MAX_PLANS)]
    with torch.no_grad():
        for t in range(2):
            for c in lists:
                model.step(x[:, t], c)
    plans = [ms.current_plan(model, c) for c in lists]
    assert all(p is not None for p in plans) and len({id(p) for p in plans}) == ms.MAX_PLANS
    extra = model.allocate_inference_cache(1, dtype=torch.float64)
    with torch.no_grad():
        model.step(x[:, 0], extra)
    assert ms.current_plan(model, lists[0]) is None and ms.current_plan(model, extra) is not None


def test_a_token_batch_that_does_not_fit_the_caches_is_named():
    model = build(H=12)
    x = torch.randn(3, 4, 5, dtype=torch.float64)
    _, caches = steps(model, x)                                                  # a plan for batch 3
    with torch.no_grad(), pytest.raises(ValueError, match="batch 2"):
        model.step(x[:2, 0], caches)


def test_compiled_encoder_and_decoder_follow_in_place_updates_and_hooks():
    model = build(H=16, L=32)
    x = torch.randn(1, 12, 5, dtype=torch.float64)
    _, caches = steps(model, x[:, :4])
    plan = ms.current_plan(model, caches)
    assert plan.enc is not None and plan.dec is not None                         # batch 1: both compiled
    with torch.no_grad():                                                        # seen through the views
        model.encoder.weight.mul_(0.5)
        model.decoder.bias.add_(1.0)
    model.reset_cache(caches)
    y, _ = steps(model, x, caches)
    assert ms.current_plan(model, caches) is plan
    assert float(np.abs(y.numpy() - np_model(model, x)).max()) <= 1e-10 * float(y.abs().max())
    seen = []
    model.encoder.register_forward_hook(lambda mod, inp, out: seen.append(out.shape))
    ms._PLANS.pop(model, None)
    model.reset_cache(caches)
    y2, _ = steps(model, x, caches)
    assert len(seen) == x.shape[1] and used_plan(model, caches)                  # a hooked encoder runs as torch's
    assert ms.current_plan(model, caches).enc is None
    assert float((y2 - y).abs().max()) <= 1e-12 * float(y.abs().max())


def test_embedding_model_fused_at_batch_one_and_float_input_mismatch_is_named():
    torch.manual_seed(4)
    model = SequenceModel(9, 7, d_model=12, n_layers=2, embedding=True, layer_kw=dict(d_state=8, l_max=20),
                          dtype=torch.float64).eval()
    ids = torch.randint(0, 9, (1, 30))
    caches = model.allocate_inference_cache(1, dtype=torch.float64)
    with torch.no_grad():
        y = torch.stack([model.step(ids[:, t], caches) for t in range(30)], 1)
        assert used_plan(model, caches)
        y_fwd = model(ids)
    assert float((y - y_fwd).abs().max()) <= 1e-9 * float(y_fwd.abs().max())
    lin = build(H=12)
    c = lin.allocate_inference_cache(1, dtype=torch.float64)
    with torch.no_grad(), pytest.raises(RuntimeError):
        lin.step(torch.randn(1, 5, dtype=torch.float32), c)                      # torch's dtype error, not a plan's
