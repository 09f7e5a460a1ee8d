"""Prefill and forward from any state (issue 20, finding 3): a prompt prefilled in chunks equals one
prefill (outputs, ring, tap input ring), and ``forward(x, state=..., return_state=True)`` over chunks
equals the whole-sequence forward, outputs and gradients, for DS4D (with and without the tap) and S4D;
the states decode like any cache. References: the layer's own whole-sequence FFT forward and prefill
(checked against the float64 oracle in test_nn_decode.py) and ``layer_oracle`` (verification/reference/loops.py)."""
from __future__ import annotations

import pytest
import torch

from ddesys.nn import DS4D, S4D

from nn_helpers import bhl, layer_oracle, live_states
from ddesys.verification.reference import rel_max

F64 = torch.float64
CUTS = (0, 13, 14, 37, 50)                    # chunks of 13, 1, 23, 13: shorter and longer than the delays


def _layer(kind, **kw):
    if kind == "s4d":
        return S4D(3, 8, seed=1, **kw).double()
    layer = DS4D(3, 8, l_max=20, seed=1, p0=0.4, tap=kind == "tap", **kw).double()
    if kind == "tap":                         # off the window's kinks (the grid puts a tap delay at 10.0)
        with torch.no_grad():
            layer.tap.nu.add_(torch.tensor([0.013, -0.021, 0.017], dtype=F64))
    return layer


def _x(L=50, seed=0, B=2):
    return torch.randn(B, L, 3, dtype=F64, generator=torch.Generator().manual_seed(seed))


def _raw(cache):
    return cache.buf if hasattr(cache, "buf") else cache.h


def _state(cache, layer):
    """The states later steps read (``live_states``: a prefill leaves older slots unspecified) and the tap's
    input ring."""
    return live_states(cache, layer), getattr(cache, "branch_states", ())


@pytest.mark.parametrize("kind", ["ds4d", "tap", "s4d"])
def test_chunked_prefill_equals_one_prefill(kind):
    """Regression: prefill refused a cache holding tokens ("expects a fresh cache")."""
    layer = _layer(kind)
    x = _x()
    with torch.no_grad():
        y = layer(x)
        whole = layer.allocate_inference_cache(2, dtype=F64)
        y1 = layer.prefill(x, whole)
        parts = layer.allocate_inference_cache(2, dtype=F64)
        y2 = torch.cat([layer.prefill(x[:, a:b], parts) for a, b in zip(CUTS, CUTS[1:])], 1)
    assert parts.t == whole.t == 50
    assert rel_max(y2, y) <= 1e-11 and rel_max(y1, y) <= 1e-11
    (s1, x1), (s2, x2) = _state(whole, layer), _state(parts, layer)
    assert float((s1 - s2).abs().max()) <= 1e-11 * float(s1.abs().max())
    assert len(x1) == len(x2) == (kind == "tap")
    for a, b in zip(x1, x2):
        assert torch.equal(a, b)


@pytest.mark.parametrize("kind", ["ds4d", "tap", "s4d"])
def test_prefill_after_decoding_and_decoding_after_chunks(kind):
    """Steps, then a prefill chunk, then steps again: the whole-sequence forward and the float64 oracle."""
    layer = _layer(kind)
    x = _x(45, seed=1)
    with torch.no_grad():
        cache = layer.allocate_inference_cache(2, dtype=F64)
        ys = [layer.step(x[:, t], cache)[:, None] for t in range(5)]
        ys.append(layer.prefill(x[:, 5:31], cache))
        ys += [layer.step(x[:, t], cache)[:, None] for t in range(31, 45)]
        y = torch.cat(ys, 1)
        ref = layer(x)
    assert rel_max(y, ref) <= 1e-11
    if kind == "ds4d":
        assert rel_max(bhl(y), layer_oracle(layer, bhl(x))) <= 1e-11


@pytest.mark.parametrize("kind", ["ds4d", "tap", "s4d"])
def test_chunked_training_forward_equals_whole_forward(kind):
    """Outputs and gradients (through the carried state) of a chunked forward equal the whole sequence's;
    the final state equals prefill's and decodes like it once detached."""
    layer = _layer(kind)
    x, w = _x(), _x(seed=9)
    params = list(layer.parameters())
    y = layer(x)
    g_whole = torch.autograd.grad((y * w).sum(), params)
    state, ys = None, []
    for a, b in zip(CUTS, CUTS[1:]):
        y_c, state = layer(x[:, a:b], state=state, return_state=True)
        ys.append(y_c)
    y_chunks = torch.cat(ys, 1)
    g_chunks = torch.autograd.grad((y_chunks * w).sum(), params)
    assert rel_max(y_chunks.detach(), y.detach()) <= 1e-11
    for (name, _), g1, g2 in zip(layer.named_parameters(), g_whole, g_chunks):
        assert rel_max(g2, g1) <= 1e-9, name
    with torch.no_grad():
        pre = layer.allocate_inference_cache(2, dtype=F64)
        layer.prefill(x, pre)
        s1, s2 = _state(pre, layer)[0], _state(state, layer)[0]
        assert state.t == 50 and float((s1 - s2).abs().max()) <= 1e-11 * float(s1.abs().max())
        with pytest.raises(RuntimeError, match="detach"):
            layer.step(x[:, 0], state)                # autograd history: decoding would write into it
        with pytest.raises(RuntimeError, match="detach"):
            layer.prefill(x[:, :2], state)
        x2 = _x(8, seed=3)
        y_next = _steps(layer, x2, state.detach())
        ref = layer(torch.cat([x, x2], 1))[:, 50:]
    assert rel_max(y_next, ref) <= 1e-11


def _steps(layer, x, cache):
    return torch.stack([layer.step(x[:, t], cache) for t in range(x.shape[1])], 1)


@pytest.mark.parametrize("kind", ["ds4d", "s4d"])
def test_forward_from_a_decode_cache_and_float32(kind):
    """``state=`` takes any cache of the layer (here one filled by decoding) and never modifies it; float32
    input gives a complex64 state."""
    layer = _layer(kind).float()
    x = _x().float()
    with torch.no_grad():
        cache = layer.allocate_inference_cache(2)
        for t in range(20):
            layer.step(x[:, t], cache)
        before = _raw(cache).clone()
        y, new = layer(x[:, 20:], state=cache, return_state=True)
        ref = layer(x)[:, 20:]
    assert torch.equal(_raw(cache), before) and cache.t == 20 and new.t == 50
    assert _raw(new).dtype == torch.complex64 and new.owner is layer
    assert rel_max(y, ref) <= 2e-5


def test_16bit_history_state_and_errors():
    layer = _layer("ds4d")
    x = _x().float()
    layer = layer.float()
    with torch.no_grad():
        c16 = layer.allocate_inference_cache(2, history_dtype=torch.bfloat16)
        layer.prefill(x[:, :20], c16)
        y, new = layer(x[:, 20:], state=c16, return_state=True)
        ref = layer(x)[:, 20:]
    assert new.buf.dtype == torch.bfloat16 and rel_max(y, ref) <= 2e-2
    with pytest.raises(ValueError, match="mode='fft'"):
        layer(x, mode="recurrent", return_state=True)
    with pytest.raises(ValueError, match="bidirectional"):
        DS4D(3, 8, l_max=20, bidirectional=True)(x, return_state=True)
    other = DS4D(3, 8, l_max=20)
    with pytest.raises(RuntimeError, match="not by this layer"):
        layer(x, state=other.allocate_inference_cache(2))
    with pytest.raises(ValueError, match="batch"):
        layer(x, state=layer.allocate_inference_cache(3))


def test_a_chunk_that_continues_a_state_does_not_warn_about_its_length():
    """The "delays never act" warning is about training lengths; a short chunk forwarded from a carried
    state continues a longer sequence, so it stays silent (the first chunk may still warn)."""
    import warnings
    layer = DS4D(4, d_state=8, l_max=64, seed=0)
    x = torch.randn(2, 40, 4)
    st = layer.allocate_inference_cache(2)
    layer.prefill(x[:, :32], st)                        # a prompt: no training length seen yet
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        layer(x[:, 32:], state=st)                      # 8 steps after 32: no warning
