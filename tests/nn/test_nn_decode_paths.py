"""DS4D decoding paths in the layer: the fused CPU step is used and matches the float64 recurrence and
the reference step; 16-bit histories stay within their stated bound; prefill in blocks equals prefill
at once (the independent oracle: ``verification/reference/loops.py`` through ``nn_helpers``)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ddesys.nn.decode.prefill as prefill_mod  # noqa: E402
import ddesys.nn.decode.engine as engine_mod  # noqa: E402
from ddesys.cpu import step as fstep  # noqa: E402
from ddesys.nn import DS4D  # noqa: E402

from nn_helpers import bhl, layer_oracle  # noqa: E402

F64 = torch.float64


def _decode(layer, x, history_dtype=None, dtype=None, prompt=0, engine=None):
    """Outputs ``(B, L, H)`` of prefilling ``prompt`` tokens then stepping through the rest."""
    cache = layer.allocate_inference_cache(x.shape[0], dtype=dtype, history_dtype=history_dtype, engine=engine)
    ys = [layer.prefill(x[:, :prompt], cache)] if prompt else []
    ys += [layer.step(x[:, t], cache)[:, None] for t in range(prompt, x.shape[1])]
    return torch.cat(ys, 1), cache


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_fused_step_is_used_and_matches_the_oracle(monkeypatch, dtype):
    layer = DS4D(5, 8, l_max=24, p0=0.3, seed=4).to(dtype)       # random fractional delays below 23
    x = torch.randn(3, 70, 5, dtype=dtype, generator=torch.Generator().manual_seed(1))   # wraps the ring
    calls = []
    orig = fstep.bind_step

    def counting_bind(*a, **k):                                  # the engine binds once, then runs per token
        run = orig(*a, **k)
        return lambda *b: calls.append(1) or run(*b)
    monkeypatch.setattr(engine_mod, "bind_step", counting_bind)
    with torch.no_grad():
        y, _ = _decode(layer, x, dtype=dtype)
        ref = layer_oracle(layer.double(), bhl(x.double()))          # float64 brute-force loop (B, H, L)
    assert len(calls) == x.shape[1]
    tol = 1e-12 if dtype == F64 else 2e-6
    assert np.abs(bhl(y.double()) - ref).max() <= tol * np.abs(ref).max()


@pytest.mark.parametrize("how", ["env", "engine"])
def test_fused_and_reference_steps_agree(monkeypatch, how):
    """DDESYS_REFERENCE=1 at allocation (or engine="reference") records the torch engine in the cache."""
    layer = DS4D(4, 6, l_max=16, seed=2)
    x = torch.randn(2, 40, 4)
    with torch.no_grad():
        y_fused, c1 = _decode(layer, x, prompt=10)
        if how == "env":
            monkeypatch.setenv("DDESYS_REFERENCE", "1")
        y_ref, c2 = _decode(layer, x, prompt=10, engine=None if how == "env" else "reference")
    assert (type(c1.engine), type(c2.engine)) == (engine_mod.FusedEngine, engine_mod.ReferenceEngine)
    assert torch.allclose(y_fused, y_ref, rtol=0, atol=1e-6 * float(y_ref.abs().max()))
    assert torch.allclose(c1.buf, c2.buf, rtol=0, atol=1e-6 * float(c2.buf.abs().max()))


@pytest.mark.parametrize("hd", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("reference", [False, True])
def test_16bit_history_within_its_bound(monkeypatch, hd, reference):
    if reference:
        monkeypatch.setenv("DDESYS_REFERENCE", "1")
    layer = DS4D(4, 8, l_max=20, seed=3)
    x = torch.randn(2, 60, 4, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        y, cache = _decode(layer, x, history_dtype=hd, prompt=15)
        assert cache.buf.dtype == hd and cache.nbytes == layer.allocate_inference_cache(2).nbytes // 2
        k_ = layer.step_constants(F64)
        lam, m1, m2, c = k_.lam, k_.m1, k_.m2, k_.c
        ref_layer = layer.double()
        ref = layer_oracle(ref_layer, bhl(x.double()))               # (B, H, L)
        # each mode's largest |h| over the run, from the float64 states of the oracle recurrence
        cache64 = ref_layer.allocate_inference_cache(2, dtype=F64)
        h_max = torch.zeros(4, 4, dtype=F64)
        for t in range(60):
            ref_layer.step(x[:, t].double(), cache64)
            h_max = torch.maximum(h_max, cache64.buf[:, t % cache64.n_slots].abs().amax(0))
    fmt = "float16" if hd == torch.float16 else "bfloat16"
    bound = fstep.history_error_bound(lam.numpy(), m1.numpy(), m2.numpy(), c.numpy(), h_max.numpy(), fmt)
    err = np.abs(bhl(y.double()) - ref).max(axis=(0, 2))    # (H,)
    assert np.all(err <= bound + 1e-5 * np.abs(ref).max()), (err, bound)


def test_16bit_history_refuses_float64_and_unknown():
    layer = DS4D(2, 4, l_max=8)
    with pytest.raises(ValueError, match="float32"):
        layer.allocate_inference_cache(1, dtype=F64, history_dtype=torch.float16)
    with pytest.raises(ValueError, match="history_dtype"):
        layer.allocate_inference_cache(1, history_dtype=torch.int16)


@pytest.mark.parametrize("hd", [None, torch.bfloat16])
def test_prefill_in_blocks_equals_prefill_at_once(monkeypatch, hd):
    layer = DS4D(6, 12, l_max=30, seed=5)
    x = torch.randn(5, 50, 6)
    with torch.no_grad():
        whole = layer.allocate_inference_cache(5, history_dtype=hd, engine="reference")   # the spectral prefill
        y1 = layer.prefill(x, whole)
        monkeypatch.setattr(prefill_mod, "PREFILL_BLOCK", 1)       # one mode and one batch row at a time
        blocks = layer.allocate_inference_cache(5, history_dtype=hd, engine="reference")
        y2 = layer.prefill(x, blocks)
    assert torch.equal(y1, y2) and torch.equal(whole.buf, blocks.buf) and blocks.t == whole.t == 50
