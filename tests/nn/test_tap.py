"""The delayed input tap (docs/theory.md §8): ddesys.tap, DiscreteDelaySystem + DelayTap, DS4D(tap=True).

Every number is checked against the float64 Python loops of verification/reference/loops.py (``brute_force`` for the
delayed recurrence, ``tap_brute`` for the tap), written from the formulas without importing ddesys.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ddesys import DelayTap, DiscreteDelaySystem, SumSystem
from ddesys.tap import tap_kernel, tap_support, tap_transfer, tap_weights
from ddesys.nn import DS4D, SequenceModel, TapWidthSchedule, set_tap_width

from nn_helpers import spec_discrete
from ddesys.verification.reference import brute_force, rel_max, tap_brute
from random_systems import tap_test_system

WIDTHS = (1.0, 2.5, 9.0)


def _tap_ref(e, s, width, L):
    """The tap's kernel from the oracle: its response to a unit impulse, ``(C, L)``."""
    x = np.zeros((1, len(s), L))
    x[..., 0] = 1.0
    return tap_brute(e, s, width, x)[0]


@pytest.mark.parametrize("width", WIDTHS + (1.7,))
def test_weights_match_the_hat(width):
    s = np.array([1.0, 1.25, 3.5, 7.9, 0.4, 20.0])
    e = np.linspace(-1.0, 2.0, len(s))
    ref = _tap_ref(e, s, width, 40)
    assert np.abs(tap_kernel(e, s, width, 40) - ref).max() < 1e-14
    j, w = tap_support(s, width)
    inside = (s - width >= -1) & (s + width < 40)
    np.testing.assert_allclose(w.sum(-1)[inside], 1.0, atol=1e-14)   # support holds the whole hat
    assert j.dtype == np.int64


def test_width_one_is_linear_interpolation():
    s = np.array([1.0, 2.25, 5.5, 9.75])
    W = tap_weights(s, 1.0, 16)
    k, a = np.floor(s).astype(int), s - np.floor(s)
    ref = np.zeros((4, 16))
    ref[np.arange(4), k] += 1 - a
    ref[np.arange(4), k + 1] += a
    np.testing.assert_allclose(W, ref, atol=1e-15)


@pytest.mark.parametrize("width", WIDTHS)
def test_transfer_is_the_kernels_z_transform(width):
    e, s = np.array([0.7, -1.3]), np.array([3.3, 12.0])
    M = 64
    z = np.exp(2j * np.pi * np.arange(M) / M) * 1.1
    ref = (_tap_ref(e, s, width, M)[:, None, :] * z[None, :, None] ** -np.arange(M)).sum(-1)
    assert np.abs(tap_transfer(e, s, width, z) - ref).max() < 1e-12


@pytest.mark.parametrize("width", WIDTHS)
def test_discrete_system_with_tap_matches_the_loops(width):
    rng = np.random.default_rng(0)
    lam, mu, bbar, c, delay, d = tap_test_system(rng)
    e, s = np.array([1.0, -2.0, 0.5]), np.array([2.3, 10.0, 0.0])
    sysd = DiscreteDelaySystem(lam, mu, bbar, c, delay, d) + DelayTap(e, s, width)
    assert isinstance(sysd, SumSystem)
    L = 48
    x = rng.standard_normal((2, 3, L))
    y_ref = brute_force(lam, mu, bbar, c, delay, d, x).reshape(2, 3, L) + tap_brute(e, s, width, x)
    assert rel_max(sysd.simulate(x), y_ref) < 1e-12
    imp = np.zeros((1, 3, L))
    imp[..., 0] = 1.0
    K_ref = brute_force(lam, mu, bbar, c, delay, np.zeros(3), imp).reshape(3, L) + _tap_ref(e, s, width, L)
    assert rel_max(sysd.kernel(L), K_ref) < 1e-11
    assert rel_max(sysd.kernel(L, method="recurrence"), K_ref) < 1e-12


def test_tap_leaves_stability_and_poles_alone():
    rng = np.random.default_rng(1)
    lam, mu, bbar, c, delay, d = tap_test_system(rng)
    plain = DiscreteDelaySystem(lam, mu, bbar, c, delay, d)
    tapped = plain + DelayTap(np.ones(3), np.array([5.0, 2.5, 40.0]), 4.0)
    assert np.array_equal(plain.is_stable(), tapped.is_stable())
    np.testing.assert_array_equal(plain.sufficient_margin(), tapped.sufficient_margin())
    np.testing.assert_allclose(plain.spectral_radius(), tapped.spectral_radius(), rtol=1e-12)


@pytest.mark.parametrize("bad", [(1.0, -1.0), (1.0, np.nan), (1.0, 3.0, 0.5), (1.0, 3.0, np.inf), "tap"])
def test_bad_taps_are_refused(bad):
    rng = np.random.default_rng(2)
    lam, mu, bbar, c, delay, d = tap_test_system(rng)
    plain = DiscreteDelaySystem(lam, mu, bbar, c, delay, d)
    with pytest.raises(TypeError, match="SumSystem part 1"):
        plain + bad                                                      # a tap is a DelayTap, not a tuple
    with pytest.raises(TypeError, match="tap"):
        DiscreteDelaySystem(lam, mu, bbar, c, delay, d, tap=bad)         # no tap= argument: add a DelayTap
    if isinstance(bad, tuple):
        with pytest.raises(ValueError):
            DelayTap(*bad)


# ---------------------------------------------------------------------------- the layer
def _layer(width, seed=3, **kw):
    return DS4D(3, d_state=8, l_max=40, tap=True, tap_width=width, seed=seed, **kw).double()


def _oracle(layer, x_blh):
    """The layer's output from the raw parameters: brute-force recurrence plus the tap loop."""
    lam, mu, bbar, c, delay, d = spec_discrete(layer)
    x = x_blh.transpose(1, 2).numpy()                                      # (B, H, L)
    s = layer.s_min + (layer.s_max - layer.s_min) / (1 + np.exp(-layer.tap.nu.detach().double().numpy()))
    y = brute_force(lam, mu, bbar, c, delay, d, x).reshape(x.shape)
    return y + tap_brute(layer.tap.e.detach().double().numpy(), s, layer.tap.width, x)


@pytest.mark.parametrize("width", WIDTHS)
def test_layer_fft_recurrence_decode_prefill_match_the_oracle(width):
    layer = _layer(width)
    x = torch.randn(2, 40, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    ref = _oracle(layer, x)                                                # (B, H, L)
    y = layer(x).transpose(1, 2)
    assert rel_max(y, ref) < 1e-10                                         # the layer's float64 contour
    assert rel_max(layer(x, mode="recurrent").transpose(1, 2), ref) < 1e-12
    cache = layer.allocate_inference_cache(2, dtype=torch.float64)
    ys = torch.stack([layer.step(x[:, t], cache) for t in range(40)], -1)  # (B, H, L)
    assert rel_max(ys, ref) < 1e-12
    cache = layer.allocate_inference_cache(2, dtype=torch.float64)
    yp = layer.prefill(x[:, :25], cache).transpose(1, 2)
    yr = torch.stack([layer.step(x[:, t], cache) for t in range(25, 40)], -1)
    assert rel_max(torch.cat([yp, yr], -1), ref) < 1e-10


def test_layer_float32_paths():
    layer = _layer(2.5)
    x = torch.randn(2, 40, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    ref = _oracle(layer, x)
    layer32 = DS4D(3, d_state=8, l_max=40, tap=True, tap_width=2.5, seed=3, kernel_dtype=torch.float32)
    layer32.load_state_dict(layer.float().state_dict())
    layer.double()
    ref32 = _oracle(layer32, x)                                            # float32-rounded parameters
    assert rel_max(layer32(x.float()).transpose(1, 2), ref32) < 1e-4
    cache = layer32.allocate_inference_cache(2)
    ys = torch.stack([layer32.step(x[:, t].float(), cache) for t in range(40)], -1)
    assert rel_max(ys, ref32) < 1e-5
    assert rel_max(ref32, ref) < 1e-5


def test_16bit_history_with_tap():
    layer = DS4D(3, d_state=8, l_max=40, tap=True, tap_width=2.0, seed=3)
    x = torch.randn(2, 40, 3, generator=torch.Generator().manual_seed(2))
    ref = layer(x).transpose(1, 2)
    cache = layer.allocate_inference_cache(2, history_dtype=torch.bfloat16)
    ys = torch.stack([layer.step(x[:, t], cache) for t in range(40)], -1)
    assert rel_max(ys, ref) < 3e-2


def test_tap_delay_gradient_matches_finite_differences():
    layer = _layer(6.3)              # the weights are piecewise linear in s: keep the grid off the kinks
    x = torch.randn(1, 40, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    w = torch.randn(1, 40, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    loss = lambda: (layer(x) * w).sum()                                     # noqa: E731
    loss().backward()
    g = layer.tap.nu.grad.clone()
    h = 1e-6
    for ch in range(3):
        with torch.no_grad():
            layer.tap.nu[ch] += h
            up = loss().item()
            layer.tap.nu[ch] -= 2 * h
            down = loss().item()
            layer.tap.nu[ch] += h
        assert abs((up - down) / (2 * h) - g[ch].item()) < 1e-6 * max(1.0, abs(g[ch].item()))
    assert g.abs().max() > 0


def test_width_validation_and_state_dict():
    with pytest.raises(ValueError, match="half-width"):
        DS4D(3, d_state=8, l_max=40, tap=True, tap_width=0.5)
    plain = DS4D(3, d_state=8, l_max=40, seed=0)
    with pytest.raises(AttributeError, match="tap=True"):
        plain.tap_width = 2.0
    assert not any("tap" in k for k in plain.state_dict())                 # the paper's layer: unchanged
    layer = _layer(7.25)
    other = DS4D(3, d_state=8, l_max=40, tap=True, seed=9).double()
    other.load_state_dict(layer.state_dict())
    assert other.tap_width == 7.25
    half = _layer(7.25).half()
    assert half.state_dict()["tap.width_bits"].dtype == torch.int64 and half.tap_width == 7.25
    with pytest.raises(ValueError, match="half-width"):
        layer.tap_width = float("nan")


def test_cache_must_follow_a_wider_window():
    layer = _layer(1.0)
    cache = layer.allocate_inference_cache(1, dtype=torch.float64)
    layer.tap_width = 30.0
    with pytest.raises(RuntimeError, match="allocate a new cache"):
        for _ in range(2):
            layer.step(torch.zeros(1, 3, dtype=torch.float64), cache)


def test_schedule_shrinks_to_one_and_resumes():
    model = SequenceModel(1, 1, d_model=4, n_layers=2, layer_kw={"l_max": 32, "tap": True, "d_state": 8})
    sched = TapWidthSchedule(model, w0=16.0, steps=100, frac=0.5)
    widths = [sched.width]
    for _ in range(60):
        sched.step()
        widths.append(sched.width)
    assert widths[0] == 16.0 and math.isclose(widths[25], 4.0) and widths[50] == 1.0 and widths[60] == 1.0
    assert all(a >= b for a, b in zip(widths, widths[1:]))
    layers = [m for m in model.modules() if isinstance(m, DS4D)]
    assert all(m.tap_width == 1.0 for m in layers)
    again = TapWidthSchedule(model, w0=16.0, steps=100, frac=0.5)
    again.load_state_dict({"i": 25})
    assert all(math.isclose(m.tap_width, 4.0) for m in layers)
    assert set_tap_width(model, 2.0) == 2
    with pytest.raises(ValueError, match="no DS4D layer with tap"):
        TapWidthSchedule(SequenceModel(1, 1, d_model=4, n_layers=1, layer_kw={"l_max": 32}))


def test_to_ddesys_carries_the_tap():
    layer = _layer(3.0)
    K = layer.to_ddesys().kernel(40)
    assert rel_max(K, layer.kernel(40).detach()) < 1e-10


def test_s4_dropin_takes_the_tap():
    from ddesys.nn.s4compat import DS4D as S4DS4D
    layer = S4DS4D(8, d_state=8, l_max=32, tap=True)
    sched = TapWidthSchedule(layer, w0=8.0, steps=10)
    y, _ = layer(torch.randn(2, 8, 32))                                     # (B, H, L): S4's layout
    assert y.shape == (2, 8, 32) and sched.width == 8.0
    y.sum().backward()
    assert layer.kernel.tap.nu.grad is not None
