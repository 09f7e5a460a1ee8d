"""The cache contract (issue 20, finding 3): Mamba's ``allocate_inference_cache(batch_size, max_seqlen,
dtype=None, **kwargs)`` validated, old calls kept; a cache bound to the layer that made it; NaN written
into parameters after allocation named at ``step``; a float16 history that overflows warns once."""
from __future__ import annotations

import copy
import io
import math
import warnings

import pytest
import torch

from ddesys.nn import DS4D, S4D, SequenceModel

LAYERS = {"ds4d": lambda **kw: DS4D(4, 8, l_max=16, seed=0, **kw), "s4d": lambda **kw: S4D(4, 8, seed=0, **kw)}


def _state(cache):
    return cache.buf if hasattr(cache, "buf") else cache.h


# ---------------------------------------------------------------------------------------------- signature
@pytest.mark.parametrize("kind", ["ds4d", "s4d"])
def test_mamba_signature(kind):
    layer = LAYERS[kind]()
    c = layer.allocate_inference_cache(3, 1024)                       # Mamba: (batch_size, max_seqlen)
    assert c.max_seqlen == 1024 and _state(c).dtype == torch.complex64 and c.batch_size == 3
    assert _state(layer.allocate_inference_cache(3, 1024, torch.float16)).dtype == torch.complex64
    assert _state(layer.allocate_inference_cache(3, 64, dtype=torch.float64)).dtype == torch.complex128
    x = torch.randn(3, 4)
    for _ in range(5):                                                # max_seqlen sizes nothing: decoding goes on
        layer.step(x, layer.allocate_inference_cache(3, 2))


@pytest.mark.parametrize("kind", ["ds4d", "s4d"])
def test_a_positional_int_landing_in_dtype_raises(kind):
    """Regression: ``dtype`` was never validated; a Mamba-style positional int landing in it gave a
    complex64 cache silently."""
    layer = LAYERS[kind]()
    with pytest.raises(TypeError, match="dtype must be None or a torch float dtype.*Mamba"):
        layer.allocate_inference_cache(8, dtype=1024)
    with pytest.raises(TypeError, match="dtype"):
        layer.allocate_inference_cache(8, 1024, 5)
    with pytest.raises(TypeError, match="dtype"):
        layer.allocate_inference_cache(8, dtype="float64")
    with pytest.raises(TypeError, match="dtype"):
        layer.allocate_inference_cache(8, dtype=torch.int64)
    for bad in (0, -3, 2.5, "long", True):
        with pytest.raises(TypeError, match="max_seqlen"):
            layer.allocate_inference_cache(8, bad)
    for bad in (-1, 2.0, None):
        with pytest.raises(TypeError, match="batch_size"):
            layer.allocate_inference_cache(bad)
    with pytest.raises(TypeError, match="unexpected keyword"):
        layer.allocate_inference_cache(8, history_dtyp=torch.float16)


def test_keyword_calls_work_and_a_positional_dtype_is_refused():
    ds = DS4D(4, 8, l_max=16)
    assert ds.allocate_inference_cache(8).buf.dtype == torch.complex64
    assert ds.allocate_inference_cache(batch_size=8, history_dtype=torch.float16).buf.dtype == torch.float16
    assert ds.allocate_inference_cache(2, dtype=torch.float64).buf.dtype == torch.complex128
    for layer in (ds, S4D(4, 8)):
        for call in (lambda: layer.allocate_inference_cache(2, torch.float64),      # the dtype where max_seqlen is
                     lambda: layer.allocate_inference_cache(2, torch.float64, dtype=torch.float32)):
            with pytest.raises(TypeError, match=r"as max_seqlen.*pass the dtype by keyword.*dtype=torch\.float64"):
                call()


# ---------------------------------------------------------------------------------------------- binding
@pytest.mark.parametrize("kind", ["ds4d", "s4d"])
def test_a_cache_is_bound_to_the_layer_that_made_it(kind):
    """Regression: another layer of the same shape accepted the cache (``model.step(x, [c0, c0])`` ran and
    was wrong by 0.46). Refused with a RuntimeError naming both layers."""
    a, b = LAYERS[kind](), LAYERS[kind]()
    ca = a.allocate_inference_cache(2)
    x = torch.randn(2, 4)
    a.step(x, ca)
    with pytest.raises(RuntimeError, match=r"allocated by .*at 0x.*not by this layer, .*at 0x"):
        b.step(x, ca)
    with pytest.raises(RuntimeError, match="not by this layer"):
        b.prefill(torch.randn(2, 5, 4), ca)
    assert ca.owner is a and ca.t == 1


def test_model_step_with_one_layers_cache_twice():
    model = SequenceModel(3, 5, d_model=8, n_layers=2, layer_kw=dict(d_state=4, l_max=16))
    caches = model.allocate_inference_cache(2)
    model.step(torch.randn(2, 3), caches)
    with pytest.raises(RuntimeError, match="not by this layer"):
        model.step(torch.randn(2, 3), [caches[0], caches[0]])


def test_unbound_copied_and_pickled_caches():
    layer = DS4D(4, 8, l_max=16, seed=0)
    cache = layer.allocate_inference_cache(2)
    x = torch.randn(2, 6, 4)
    layer.prefill(x, cache)
    twin = copy.deepcopy(cache)                                       # bound, independent tensors
    assert twin.owner is layer and twin.engine == cache.engine and twin.buf.data_ptr() != cache.buf.data_ptr()
    assert torch.equal(layer.step(x[:, 0], twin), layer.step(x[:, 0], cache))
    buf = io.BytesIO()
    torch.save(cache, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    assert loaded.owner is None
    with pytest.raises(RuntimeError, match="bound to no layer"):
        layer.step(x[:, 0], loaded)
    hand = type(cache)(torch.zeros_like(cache.buf))
    with pytest.raises(RuntimeError, match="bound to no layer"):
        layer.step(x[:, 0], hand)
    cache.reset()
    assert cache.t == 0 and not cache.buf.any()
    fresh = layer.allocate_inference_cache(2)
    assert torch.equal(layer.step(x[:, 0], cache), layer.step(x[:, 0], fresh))


# ---------------------------------------------------------------------------------------------- NaN, overflow
@pytest.mark.parametrize("kind", ["ds4d", "s4d"])
@pytest.mark.parametrize("name", ["C", "log_dt"])
def test_nan_written_after_allocation_is_named_at_step(kind, name):
    """Regression: NaN written into a parameter after the cache was allocated decoded to NaN silently.
    Checked when the constants are recomputed (once per parameter change), not per token."""
    layer = LAYERS[kind]()
    cache = layer.allocate_inference_cache(1)
    x = torch.randn(1, 4)
    layer.step(x, cache)
    with torch.no_grad():
        getattr(layer, name).view(-1)[0] = math.nan
    with pytest.raises(FloatingPointError, match=name):
        layer.step(x, cache)
    with torch.no_grad():
        getattr(layer, name).view(-1)[0] = 0.1
    getattr(layer, name).data.view(-1)[0] = math.inf                 # untracked: setup_step() names it
    with pytest.raises(FloatingPointError, match=name):
        layer.setup_step()


def test_float16_history_overflow_warns_once():
    """Regression: a float16 history overflowed to inf with inputs of 1e6 without a word. One
    RuntimeWarning per cache (step or prefill); bfloat16 (float32's range) stays finite and silent."""
    layer = DS4D(4, 8, l_max=16, seed=0)
    x = 1e6 * torch.randn(2, 12, 4, generator=torch.Generator().manual_seed(0))
    cache = layer.allocate_inference_cache(2, history_dtype=torch.float16)
    with pytest.warns(RuntimeWarning, match="float16 decode history overflowed") as rec:
        for t in range(12):
            layer.step(x[:, t], cache)
    assert sum("overflowed" in str(w.message) for w in rec) == 1
    with pytest.warns(RuntimeWarning, match="65504"):
        layer.prefill(x, layer.allocate_inference_cache(2, history_dtype=torch.float16))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cb = layer.allocate_inference_cache(2, history_dtype=torch.bfloat16)
        y = torch.stack([layer.step(x[:, t], cb) for t in range(12)])
        layer.prefill(x, layer.allocate_inference_cache(2, history_dtype=torch.bfloat16))
        small = layer.allocate_inference_cache(2, history_dtype=torch.float16)
        for t in range(12):
            layer.step(x[:, t] * 1e-6, small)
    assert torch.isfinite(y).all()
