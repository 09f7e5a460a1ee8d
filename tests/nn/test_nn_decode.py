"""``nn`` decoding and API: prefill + step vs the FFT output and the oracle (after weight updates,
ring-buffer wrap-around), clear exceptions on bad input, ``param_groups``, the decode cache size
(``k_max + 1`` slots) and the public API.

The references (``layer_oracle`` on ``verification/reference/loops.py``'s ``brute_force``, ``vandermonde_kernel``,
``causal_conv`` in ``tests/nn_helpers.py``) never run the layer's own code path; see
``nn_helpers``' docstring.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from ddesys import nn as dnn
from ddesys.nn import DS4D, S4D, SequenceModel, param_groups

from nn_helpers import (D_IN, D_MODEL, F64, _np, bhl, causal_conv, layer_oracle, make_model,
                        reference_model_forward, spec_discrete, vandermonde_kernel)
from ddesys.verification.reference import rel_max, rel_rmse as rrmse


# ---------------------------------------------------------------------------------------------------
# 7. Decoding: prefill + step vs the FFT output, after weight updates, ring-buffer wrap-around
# ---------------------------------------------------------------------------------------------------
def _decode(module, x, P, cache):
    """Prefill ``x[:, :P]`` (if P > 0), then step through the rest; returns the concatenated outputs."""
    outs = []
    if P > 0:
        outs.append(module.prefill(x[:, :P], cache))
    for t in range(P, x.shape[1]):
        outs.append(module.step(x[:, t], cache)[:, None])
    return torch.cat(outs, dim=1)


def _sgd_update(module, x):
    opt = torch.optim.SGD(module.parameters(), lr=0.05)
    opt.zero_grad()
    module(x).pow(2).mean().backward()
    before = {n: p.detach().clone() for n, p in module.named_parameters()}
    opt.step()
    opt.zero_grad()
    changed = [n for n, p in module.named_parameters() if not torch.equal(before[n], p.detach())]
    assert changed, "the optimizer step must change the weights"
    return changed


@pytest.mark.parametrize("P", [0, 1, 13, 45])
def test_ds4d_prefill_step_matches_fft(P):
    L, H = 60, 3
    layer = DS4D(H, d_state=8, l_max=40, seed=0).double()
    x = torch.randn(2, L, H, dtype=F64, generator=torch.Generator().manual_seed(P))
    with torch.no_grad():
        y = layer(x)
        y_dec = _decode(layer, x, P, layer.allocate_inference_cache(2, dtype=F64))
        assert rel_max(y_dec, y) <= 1e-11
        assert rel_max(bhl(y_dec), layer_oracle(layer, bhl(x))) <= 1e-11


def test_ds4d_decode_after_optimizer_step():
    L, H = 60, 3
    layer = DS4D(H, d_state=8, l_max=40, seed=1).double()
    x = torch.randn(2, L, H, dtype=F64, generator=torch.Generator().manual_seed(1))
    changed = _sgd_update(layer, x)
    assert "nu_tau" in changed and "log_dt" in changed
    with torch.no_grad():
        y = layer(x)
        y_ref = layer_oracle(layer, bhl(x))
        assert rel_max(bhl(y), y_ref) <= 1e-9
        y_dec = _decode(layer, x, 21, layer.allocate_inference_cache(2, dtype=F64))
        assert rel_max(y_dec, y) <= 1e-11
        assert rel_max(bhl(y_dec), y_ref) <= 1e-11


def test_ds4d_decode_float32_cache():
    L, H = 60, 3
    layer = DS4D(H, d_state=8, l_max=40, seed=0)
    x = torch.randn(2, L, H, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        cache = layer.allocate_inference_cache(2)
        assert cache.buf.dtype == torch.complex64
        y_dec = _decode(layer, x, 20, cache)
        assert y_dec.dtype == torch.float32
        assert rrmse(bhl(y_dec), layer_oracle(layer, bhl(x))) <= 1e-5


def test_ds4d_ring_buffer_wraps():
    """Constant delay 5.5 steps: a 6-slot buffer, a 200-step sequence wraps it 33 times."""
    L, H = 200, 2
    layer = DS4D(H, d_state=6, l_max=64, delay_init="constant", tau0=5.5, seed=0).double()
    x = torch.randn(2, L, H, dtype=F64, generator=torch.Generator().manual_seed(0))
    y_ref = layer_oracle(layer, bhl(x))
    with torch.no_grad():
        cache = layer.allocate_inference_cache(2, dtype=F64)
        assert cache.buf.shape == (2, 6, H, 3)
        y_step = _decode(layer, x, 0, cache)
        assert cache.t == L and cache.buf.shape == (2, 6, H, 3)   # memory does not grow with t
        assert rel_max(bhl(y_step), y_ref) <= 1e-12
        for P in (3, 6, 7, 101):                                     # prefill shorter / longer than R
            y_dec = _decode(layer, x, P, layer.allocate_inference_cache(2, dtype=F64))
            assert rel_max(bhl(y_dec), y_ref) <= 1e-11, P


@pytest.mark.parametrize("cls", [DS4D, S4D])
def test_decode_outside_no_grad_keeps_no_graph(cls):
    layer = cls(2, d_state=4, **({"l_max": 16} if cls is DS4D else {}))
    cache = layer.allocate_inference_cache(1)
    for _ in range(5):
        layer.step(torch.randn(1, 2), cache)
    state = cache.buf if cls is DS4D else cache.h
    assert state.grad_fn is None and not state.requires_grad


def test_ds4d_stale_cache_after_delay_growth_raises():
    layer = DS4D(2, d_state=4, l_max=64, delay_init="constant", tau0=5.5, seed=0).double()
    cache = layer.allocate_inference_cache(1, dtype=F64)
    with torch.no_grad():
        layer.nu_tau.fill_(3.0)                                     # delay -> ~60 steps > buffer
        with pytest.raises(RuntimeError, match="allocate a new cache"):
            layer.step(torch.zeros(1, 2, dtype=F64), cache)


@pytest.mark.parametrize("P", [0, 17])
def test_s4d_prefill_step_matches_fft_and_vandermonde(P):
    L, H, N = 50, 3, 8
    s4 = S4D(H, d_state=N, seed=0).double()
    x = torch.randn(2, L, H, dtype=F64, generator=torch.Generator().manual_seed(0))
    d = _np(s4.D)

    def ref():
        K = vandermonde_kernel(s4.log_dt, s4.nu_re, s4.nu_im, s4.B, s4.C, L)
        return causal_conv(bhl(x), K) + d[:, None] * bhl(x)

    for round_ in range(2):                                        # before and after an SGD step
        with torch.no_grad():
            y_ref = ref()
            assert rel_max(bhl(s4(x)), y_ref) <= 1e-12
            assert rel_max(bhl(_decode(s4, x, P, s4.allocate_inference_cache(2, dtype=F64))), y_ref) <= 1e-12
        if round_ == 0:
            _sgd_update(s4, x)


@pytest.mark.parametrize("layer", ["ds4d", "s4d"])
def test_model_prefill_step_matches_fft(layer):
    """Model decoding (prefill + step, and step only) and the FFT forward, each against the reference
    model (its SSM layers replaced by the NumPy recurrence)."""
    L = 48
    m = make_model(32, 0, layer=layer, n_layers=2, d_state=8).double()
    x = torch.randn(2, L, D_IN, dtype=F64, generator=torch.Generator().manual_seed(0))
    for round_ in range(2):                                        # before and after an SGD step
        with torch.no_grad():
            y_ref = reference_model_forward(m, x)
            assert rel_max(m(x), y_ref) <= 1e-10
            caches = m.allocate_inference_cache(2, dtype=F64)
            assert len(caches) == 2
            assert rel_max(_decode(m, x, 20, caches), y_ref) <= 1e-10
            assert rel_max(_decode(m, x, 0, m.allocate_inference_cache(2, dtype=F64)), y_ref) <= 1e-10
        if round_ == 0:
            _sgd_update(m, x)


def test_model_token_prefill_step():
    """Token LM: embedding input ``(B, L)`` ids, step takes ``(B,)``."""
    L, V = 30, 11
    torch.manual_seed(0)
    m = SequenceModel(V, V, d_model=8, n_layers=2, embedding=True, layer_kw=dict(d_state=4, l_max=16)).double()
    ids = torch.randint(0, V, (3, L), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        y = m(ids)
        assert y.shape == (3, L, V)
        y_ref = reference_model_forward(m, ids)
        assert rel_max(y, y_ref) <= 1e-10
        assert rel_max(_decode(m, ids, 10, m.allocate_inference_cache(3, dtype=F64)), y_ref) <= 1e-10


# ---------------------------------------------------------------------------------------------------
# 8. Bad input raises clear exceptions
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [DS4D, S4D])
def test_bad_input_shapes_and_dtypes(cls):
    layer = cls(3, d_state=4, **({"l_max": 16} if cls is DS4D else {}))
    with pytest.raises(ValueError, match="3-D input"):
        layer(torch.randn(5, 3))
    with pytest.raises(ValueError, match="3-D input"):
        layer(torch.randn(1, 2, 5, 3))
    with pytest.raises(ValueError, match="got 4 channels"):
        layer(torch.randn(2, 5, 4))
    with pytest.raises(TypeError, match="floating-point"):
        layer(torch.randint(0, 3, (2, 5, 3)))
    with pytest.raises(TypeError, match="floating-point"):
        layer(torch.randn(2, 5, 3, dtype=torch.complex64))
    with pytest.raises(TypeError, match="torch.Tensor"):
        layer(np.zeros((2, 5, 3), dtype=np.float32))
    with pytest.raises(ValueError, match="mode must be 'fft' or 'recurrent'"):
        layer(torch.randn(2, 5, 3), mode="bogus")
    with pytest.raises(ValueError, match="even"):
        cls(3, d_state=5)
    cache = layer.allocate_inference_cache(2)
    with pytest.raises(ValueError, match="batch 3 but the cache was allocated for 2"):
        layer.step(torch.randn(3, 3), cache)
    with pytest.raises(ValueError, match=r"shape \(B, 3\)"):
        layer.step(torch.randn(2, 4), cache)
    with torch.no_grad():
        layer.prefill(torch.randn(2, 4, 3), cache)
        layer.prefill(torch.randn(2, 4, 3), cache)          # a used cache continues (tests/nn/test_decode_state.py)
        assert cache.t == 8
    tr = cls(3, d_state=4, transposed=True, **({"l_max": 16} if cls is DS4D else {}))
    with pytest.raises(ValueError, match=r"got 5 channels.*transposed=True"):
        tr(torch.randn(2, 3, 5).transpose(1, 2).contiguous())


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="tau0 strictly inside"):
        DS4D(3, d_state=4, l_max=64, delay_init="constant", tau0=80.0)
    with pytest.raises(ValueError, match="tau0 strictly inside"):
        DS4D(3, d_state=4, l_max=64, delay_init="constant", tau0=1.0)   # == s_min: not strictly inside
    with pytest.raises(ValueError, match="tau0 strictly inside"):
        DS4D(3, d_state=4, l_max=64, delay_init="constant")              # tau0 missing
    with pytest.raises(ValueError, match="s_min < s_max"):
        DS4D(3, d_state=4, l_max=2)                                      # s_max = l_max - 1 = 1 = s_min
    with pytest.raises(ValueError, match="s_min < s_max"):
        DS4D(3, d_state=4, l_max=64, s_min=10.0, s_max=5.0)
    with pytest.raises(ValueError, match="s_min < s_max"):
        DS4D(3, d_state=4, l_max=64, s_min=0.5)                          # delays below one step
    with pytest.raises(ValueError, match="p0"):
        DS4D(3, d_state=4, l_max=64, p0=1.0)
    with pytest.raises(ValueError, match="delay_init"):
        DS4D(3, d_state=4, l_max=64, delay_init="random")
    with pytest.raises(ValueError, match="pool"):
        SequenceModel(4, 4, pool="max")


@pytest.mark.parametrize("cls", [DS4D, S4D])
def test_bidirectional_has_no_decoding(cls):
    bi = cls(3, d_state=4, bidirectional=True, **({"l_max": 16} if cls is DS4D else {}))
    with pytest.raises(ValueError, match="bidirectional"):
        bi.allocate_inference_cache(2)
    with pytest.raises(ValueError, match="bidirectional"):
        bi(torch.randn(2, 5, 3), mode="recurrent")


@pytest.mark.parametrize("cls", [DS4D, S4D])
def test_step_on_bidirectional_layer_raises_clearly(cls):
    kw = {"l_max": 16} if cls is DS4D else {}
    bi = cls(3, d_state=4, bidirectional=True, **kw)
    cache = cls(3, d_state=4, **kw).allocate_inference_cache(2)
    with pytest.raises(ValueError, match="bidirectional"):
        bi.step(torch.randn(2, 3), cache)


@pytest.mark.parametrize("cls", [DS4D, S4D])
def test_step_rejects_integer_input(cls):
    layer = cls(3, d_state=4, **({"l_max": 16} if cls is DS4D else {}))
    cache = layer.allocate_inference_cache(2)
    with pytest.raises(TypeError, match="floating-point"):
        layer.step(torch.ones(2, 3, dtype=torch.int64), cache)


def test_prefill_batch_mismatch_raises_clearly():
    layer = DS4D(3, d_state=4, l_max=16)
    with pytest.raises(ValueError, match="batch"):
        layer.prefill(torch.randn(3, 5, 3), layer.allocate_inference_cache(2))


def test_empty_sequence_raises_clearly():
    layer = DS4D(3, d_state=4, l_max=16)
    with pytest.raises(ValueError, match="L|length|empty"):
        layer(torch.randn(2, 0, 3))


# ---------------------------------------------------------------------------------------------------
# 9. Optimizer groups
# ---------------------------------------------------------------------------------------------------
DT_GROUP = {"log_dt", "nu_tau"}
SSM_NO_WD = {"nu_re", "nu_im", "r", "theta", "B"}


@pytest.mark.parametrize("layer", ["ds4d", "s4d"])
@pytest.mark.parametrize("dt_lr", [1e-4, None])
def test_param_groups(layer, dt_lr):
    lr, wd = 1e-3, 0.1
    m = make_model(32, 0, layer=layer, n_layers=2, d_state=4, dt_lr=dt_lr)
    groups = param_groups(m, lr=lr, weight_decay=wd)
    name_of = {id(p): n for n, p in m.named_parameters()}
    seen = [id(p) for g in groups for p in g["params"]]
    assert len(seen) == len(set(seen)) == len(name_of)              # every parameter exactly once
    assert set(seen) == set(name_of)
    where = {name_of[id(p)]: g for g in groups for p in g["params"]}
    for name, g in where.items():
        leaf = name.rsplit(".", 1)[-1]
        if ".layer." in name and leaf in DT_GROUP:
            assert g["weight_decay"] == 0.0, name
            assert g["lr"] == (dt_lr if dt_lr is not None else lr), name
        elif ".layer." in name and leaf in SSM_NO_WD:
            assert g["weight_decay"] == 0.0 and g["lr"] == lr, name
        else:                                   # linears, norms, embedding, C and D (S4 convention)
            assert g["weight_decay"] == wd and g["lr"] == lr, name
    for name in ("encoder.weight", "blocks.0.out.weight", "blocks.1.out.bias", "decoder.weight"):
        assert where[name]["weight_decay"] == wd
    if layer == "ds4d" and dt_lr is not None:
        dt_group = where["blocks.0.layer.log_dt"]
        assert dt_group is where["blocks.1.layer.nu_tau"]
        assert {name_of[id(p)].rsplit(".", 1)[-1] for p in dt_group["params"]} == DT_GROUP
    opt = torch.optim.AdamW(groups)                                    # torch accepts the groups
    m(torch.randn(2, 8, D_IN)).pow(2).mean().backward()
    opt.step()


def test_param_groups_survive_dtype_conversion():
    m = make_model(32, 0, n_layers=1, d_state=4, dt_lr=1e-4).double()
    lrs = sorted(g["lr"] for g in param_groups(m, lr=1e-3, weight_decay=0.1))
    assert lrs == [1e-4, 1e-3, 1e-3]


def test_param_groups_survive_deepcopy():
    m = copy.deepcopy(make_model(32, 0, n_layers=1, d_state=4, dt_lr=1e-4))
    assert len(param_groups(m, lr=1e-3, weight_decay=0.1)) == 3


# ---------------------------------------------------------------------------------------------------
# 10. Decode cache size: k_max + 1 slots, not l_max
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("H,l_max", [(4, 1024), (3, 200), (1, 50)])
def test_cache_size_is_kmax_plus_one(H, l_max):
    layer = DS4D(H, d_state=6, l_max=l_max, seed=0)
    k_max = int(np.floor(spec_discrete(layer)[4]).max())
    cache = layer.allocate_inference_cache(2)
    assert cache.buf.shape == (2, k_max + 1, H, 3) and cache.n_slots == k_max + 1
    assert cache.n_slots != l_max
    assert cache.nbytes == 2 * H * 3 * (k_max + 1) * 8                 # complex64
    assert cache.batch_size == 2
    c64 = layer.allocate_inference_cache(1, dtype=F64)
    assert c64.buf.dtype == torch.complex128 and c64.n_slots == k_max + 1
    with torch.no_grad():
        layer.nu_tau.add_(2.0)                                          # longer delays -> larger cache
    k_max2 = int(np.floor(spec_discrete(layer)[4]).max())
    assert k_max2 > k_max
    assert layer.allocate_inference_cache(1).n_slots == k_max2 + 1


def test_cache_size_in_model():
    m = make_model(256, 0, n_layers=2, d_state=4)
    for blk, cache in zip(m.blocks, m.allocate_inference_cache(3)):
        k_max = int(np.floor(spec_discrete(blk.layer)[4]).max())
        assert cache.buf.shape == (3, k_max + 1, D_MODEL, 2)


def test_public_api():
    assert set(dnn.__all__) >= {"DS4D", "DS4DCache", "S4D", "S4DCache", "SequenceBlock", "SequenceModel",
                                "param_groups"}
