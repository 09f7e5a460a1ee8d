"""Decode-step constants: memoized across tokens yet never stale, and one delay split for every path
(float32 decoding of a delay just below an integer)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ddesys.nn import DS4D, S4D

from nn_helpers import bhl, layer_oracle
from ddesys.verification.reference import rel_rmse as rrmse


def _decode(module, x, cache):
    return torch.cat([module.step(x[:, t], cache)[:, None] for t in range(x.shape[1])], dim=1)


def _nu_tau_straddling_an_integer(layer, target):
    """A float32 ``nu_tau`` whose delay is just below ``target`` in float64 but rounds to it in float32."""
    span = layer.s_max - layer.s_min
    v = np.float32(np.log((target - layer.s_min) / (layer.s_max - target)))
    for _ in range(4000):
        s64 = layer.s_min + span / (1 + np.exp(-np.float64(v)))
        t = torch.tensor([v])
        s32 = float(layer.s_min + span * torch.sigmoid(t))       # float32 arithmetic, as a float32 path would
        if s64 < target <= s32:
            return v
        v = np.nextafter(v, np.float32(-np.inf) if s64 >= target else np.float32(np.inf))
    raise AssertionError("no straddling value found")


def test_ds4d_float32_step_agrees_with_cache_sizing_at_an_integer_delay():
    """Regression: the delay was split in the step's float32 while the cache was sized in float64; a delay
    of 118 - 1e-6 steps read k = 118 in float32 and overflowed its 118-slot buffer (found by the
    efficiency benchmark). The split is float64 everywhere now; decoding matches the oracle."""
    L, H = 150, 1
    layer = DS4D(H, d_state=4, l_max=128, seed=0)
    with torch.no_grad():
        layer.nu_tau.fill_(float(_nu_tau_straddling_an_integer(layer, 118.0)))
    x = torch.randn(1, L, H, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        cache = layer.allocate_inference_cache(1)
        assert cache.n_slots == 118                                  # k = 117 in float64
        y_dec = _decode(layer, x, cache)
    assert rrmse(bhl(y_dec), layer_oracle(layer, bhl(x))) <= 1e-5


@pytest.mark.parametrize("cls", [DS4D, S4D])
def test_step_constants_are_memoized_and_never_stale(cls, monkeypatch):
    """Constants are computed once across steps, and again after each kind of parameter change."""
    layer = cls(3, d_state=4, **({"l_max": 16} if cls is DS4D else {}))
    calls = []
    orig = cls.discrete
    monkeypatch.setattr(cls, "discrete", lambda self, dtype=None: calls.append(1) or orig(self, dtype))
    cache = layer.allocate_inference_cache(1)
    n0 = len(calls)
    x = torch.randn(1, 3)
    y0 = layer.step(x, cache)
    for _ in range(4):
        layer.step(x, cache)
    assert len(calls) - n0 == 1                                      # five steps, one computation
    fresh = lambda: layer.step(x, layer.allocate_inference_cache(1))    # noqa: E731
    with torch.no_grad():
        layer.C.mul_(2.0)                                           # in-place write: y doubles (minus D x)
    y1 = fresh()
    assert torch.allclose(y1 - layer.D * x, 2 * (y0 - layer.D * x), rtol=1e-5, atol=1e-6)
    state = {k: v.clone() for k, v in layer.state_dict().items()}
    state["C"] = state["C"] / 2
    layer.load_state_dict(state)
    assert torch.allclose(fresh(), y0, rtol=1e-5, atol=1e-6)
    layer.double()
    assert fresh().dtype == torch.float32                            # follows the input; constants rebuilt
    assert layer._step_memo._params[0].dtype == torch.float64      # the key was rebuilt from the cast parameters
