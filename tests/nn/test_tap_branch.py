"""The tap as a composed branch (issue 20, finding 1, and the tap items of finding 7).

``layer.tap`` is a :class:`nn.tap.TapBranch` (or None), old checkpoints load, seeded layers keep their
initial values (``tests/data/tap_v1.pt``, saved by the code before the branch: see
``tests/data/make_tap_v1.py``), the FIR tap is a ddesys system added to the delay system, the
``"tap_zero"`` ablation, the width bound and the schedule's step checks. Numbers are checked against
the float64 loops of verification/reference/loops.py (``brute_force``, ``tap_brute``).
"""
from __future__ import annotations

import inspect
import pathlib

import numpy as np
import pytest
import torch

from ddesys import nn as dnn
from ddesys import DelayTap, DiscreteDelaySystem, SumSystem
from ddesys.experiments._probes import tap_zero
from ddesys.nn.tap import TapBranch, TapWidthSchedule, max_tap_width

from nn_helpers import layer_oracle
from ddesys.verification.reference import brute_force, rel_max, tap_brute
from random_systems import tap_test_system

ROOT = pathlib.Path(__file__).resolve().parents[2]
OLD = torch.load(ROOT / "tests/data/tap_v1.pt", weights_only=True)
NEW_KEY = {"tap_e": "tap.e", "nu_tap": "tap.nu", "tap_width_bits": "tap.width_bits"}
CONFIGS = ["grid", "grid_w3", "constant", "bidir", "lazy", "notap", "notap_lazy"]


def _x(rec):
    return OLD["x"][..., :rec["kw"]["d_model"]].contiguous()


def _layer(width=2.5, seed=3, **kw):
    return dnn.DS4D(3, d_state=8, l_max=40, tap=True, tap_width=width, seed=seed, **kw).double()


def _tap_ref(layer, x_bhl):
    s = layer.tap_delay().detach().numpy()
    return tap_brute(layer.tap.e.detach().double().numpy(), s, layer.tap.width, x_bhl)


# ------------------------------------------------------------------------------------- the branch
def test_tap_is_a_composed_branch():
    plain, tapped = dnn.DS4D(4, 8, l_max=16, seed=0), dnn.DS4D(4, 8, l_max=16, tap=True, tap_lr=1e-2, seed=0)
    assert plain.tap is None and not plain.has_tap
    assert isinstance(tapped.tap, TapBranch) and tapped.has_tap and tapped.tap in list(tapped.children())
    assert {n for n, _ in tapped.tap.named_parameters()} == {"e", "nu"}
    assert tapped.tap.nu._optim == {"lr": 1e-2, "weight_decay": 0.0} and tapped.tap.e._optim == {"weight_decay": 0.0}
    # no tap mixin in the layer's bases, and one load hook among the project's classes
    assert not any(k.__module__ == "ddesys.nn.tap" for k in dnn.DS4D.__mro__)
    hooks = [k for k in dnn.DS4D.__mro__
             if k.__module__.startswith("ddesys.nn.") and "_load_from_state_dict" in vars(k)]
    assert hooks == [dnn.DS4D]
    for path in ("nn/ds4d.py", "nn/tap.py", "nn/delay_range.py", "verification/reference/layer.py"):
        assert "_parameters" not in (ROOT / path).read_text(), path


@pytest.mark.parametrize("name", CONFIGS)
def test_seeded_initial_values_and_outputs_are_unchanged(name):
    """Same RNG stream as before the branch: a seeded layer's initial parameters (before and after the
    first forward, which places the delays of a lazy layer) equal the saved ones bit for bit, and the outputs
    to the float64 synthesis error (1e-10 relative; their last bits depend on the machine's FFT and
    compiled-kernel build: a fresh environment's first compilation can differ from a cached one in the last
    place)."""
    rec = OLD[name]
    layer = dnn.DS4D(**rec["kw"]).double()
    init = {NEW_KEY.get(k, k): v for k, v in rec["init"].items()}
    assert set(layer.state_dict()) == set(init)
    assert all(torch.equal(layer.state_dict()[k], v) for k, v in init.items())
    torch.testing.assert_close(layer(_x(rec)).detach(), rec["y_init"], rtol=1e-10, atol=1e-11)
    after = {NEW_KEY.get(k, k): v for k, v in rec["init_after_forward"].items()}
    assert all(torch.equal(layer.state_dict()[k], v) for k, v in after.items())


@pytest.mark.parametrize("name", CONFIGS)
def test_old_checkpoints_load(name):
    """State dicts saved by the old code (keys tap_e, nu_tap, tap_width_bits) load strictly and give the
    outputs the old layer gave (forward, recurrent path, kernel; to float64 rounding, see above) and the saved
    width."""
    rec = OLD[name]
    layer = dnn.DS4D(**{**rec["kw"], "seed": 99}).double()
    layer.load_state_dict(rec["state_dict"])
    x = _x(rec)
    torch.testing.assert_close(layer(x).detach(), rec["y"], rtol=1e-10, atol=1e-11)
    torch.testing.assert_close(layer.kernel(24).detach(), rec["kernel"], rtol=1e-10, atol=1e-11)
    if rec["y_recurrent"] is not None:
        torch.testing.assert_close(layer(x, mode="recurrent"), rec["y_recurrent"], rtol=1e-10, atol=1e-11)
    if layer.has_tap:
        assert layer.tap_width == 2.5 and "tap_e" not in layer.state_dict()


def test_old_keys_load_inside_a_model_and_new_keys_round_trip():
    kw = {"l_max": 32, "tap": True, "d_state": 8, "seed": 1}
    src = dnn.SequenceModel(1, 1, d_model=4, n_layers=2, layer_kw=kw)
    dnn.set_tap_width(src, 3.5)
    new = src.state_dict()
    old = {}
    for k, v in new.items():                      # the key set the old code saved
        for o, n in NEW_KEY.items():
            k = k.replace("." + n, "." + o) if k.endswith("." + n) else k
        old[k] = v
    assert "blocks.0.layer.tap_e" in old and "blocks.0.layer.tap.e" not in old
    for sd in (old, new):
        dst = dnn.SequenceModel(1, 1, d_model=4, n_layers=2, layer_kw={**kw, "seed": 2})
        dst.load_state_dict(sd)
        assert all(torch.equal(a, b) for a, b in zip(dst.state_dict().values(), new.values()))
        assert [m.tap_width for m in dst.modules() if isinstance(m, dnn.DS4D)] == [3.5, 3.5]
    assert "blocks.0.layer.tap_e" in old and "blocks.0.layer.tap.e" not in old     # the caller's dict untouched


def test_the_names_before_the_branch_are_gone():
    layer = _layer()
    assert not hasattr(layer, "tap_e") and not hasattr(layer, "nu_tap")          # layer.tap.e, layer.tap.nu
    assert not hasattr(dnn.tap, "DelayedTap")
    plain = dnn.DS4D(3, 8, l_max=40, seed=0)
    assert not hasattr(plain, "tap_e")
    with pytest.raises(AttributeError, match="tap=True"):
        plain.tap_delay()


def test_nan_in_the_tap_is_named():
    layer = _layer()
    with torch.no_grad():
        layer.tap.e[1] = float("nan")
    with pytest.raises(FloatingPointError, match="tap.e"):
        layer(torch.randn(1, 40, 3, dtype=torch.float64))


def test_decode_constants_follow_a_tap_update():
    """The decode memo sees writes to the branch's parameters (they are not the layer's own)."""
    layer = _layer(1.0)
    x = torch.randn(2, 30, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    cache = layer.allocate_inference_cache(2, dtype=torch.float64)
    for t in range(15):
        layer.step(x[:, t], cache)
    with torch.no_grad():
        layer.tap.e.mul_(-3.0)
    ys = torch.stack([layer.step(x[:, t], cache) for t in range(15, 30)], -1)      # (B, H, 15)
    ref = layer_oracle(layer, x.transpose(1, 2).numpy()) + _tap_ref(layer, x.transpose(1, 2).numpy())
    assert rel_max(ys, ref[..., 15:]) < 1e-12


# ------------------------------------------------------------------------------------- ddesys
def test_delay_tap_is_a_system_and_sums_with_the_delay_system():
    rng = np.random.default_rng(0)
    lam, mu, bbar, c, delay, d = tap_test_system(rng)
    e, s, width, L = np.array([1.0, -2.0, 0.5]), np.array([2.3, 10.0, 0.0]), 2.5, 40
    tap, iir = DelayTap(e, s, width), DiscreteDelaySystem(lam, mu, bbar, c, delay, d)
    x = rng.standard_normal((2, 3, L))
    imp = np.zeros((1, 3, L))
    imp[..., 0] = 1.0
    assert rel_max(tap.simulate(x), tap_brute(e, s, width, x)) < 1e-14
    assert rel_max(tap.kernel(L), tap_brute(e, s, width, imp)[0]) < 1e-14
    z = 1.1 * np.exp(2j * np.pi * np.arange(16) / 16)
    K = tap_brute(e, s, width, imp)[0]
    assert rel_max(tap.transfer(z), (K[:, None, :] * z[None, :, None] ** -np.arange(L)).sum(-1)) < 1e-12
    assert np.all(tap.is_stable())
    total = iir + tap
    assert isinstance(total, SumSystem) and total.parts == (iir, tap) and total.tap is tap and total.iir == (iir,)
    y_ref = brute_force(lam, mu, bbar, c, delay, d, x).reshape(2, 3, L) + tap_brute(e, s, width, x)
    assert rel_max(total.simulate(x), y_ref) < 1e-12
    K_ref = brute_force(lam, mu, bbar, c, delay, np.zeros(3), imp).reshape(3, L) + K
    assert rel_max(total.kernel(L), K_ref) < 1e-11
    assert rel_max(total.kernel(L, method="recurrence"), K_ref) < 1e-12
    assert rel_max(total.impulse(L)[:, 0], K_ref[:, 0] + d) < 1e-12
    w = np.linspace(0, np.pi, 9)
    np.testing.assert_allclose(total.freqresp(w), iir.freqresp(w) + tap.freqresp(w), rtol=1e-13)
    # poles and stability are the delay system's
    np.testing.assert_array_equal(total.is_stable(), iir.is_stable())
    np.testing.assert_array_equal(total.sufficient_margin(), iir.sufficient_margin())
    assert total.k is iir.k and len(total.poles()) == len(iir.poles())
    with pytest.raises(ValueError, match="tap"):
        total.to_statespace(0)


def test_the_constructor_takes_no_tap_the_sum_does():
    rng = np.random.default_rng(1)
    lam, mu, bbar, c, delay, d = tap_test_system(rng)
    tap = (np.ones(3), np.array([5.0, 2.5, 4.0]), 2.0)
    with pytest.raises(TypeError, match="tap"):
        DiscreteDelaySystem(lam, mu, bbar, c, delay, d, tap=tap)
    with pytest.raises(TypeError, match="positional"):
        DiscreteDelaySystem(lam, mu, bbar, c, delay, d, tap)
    plain = DiscreteDelaySystem(lam, mu, bbar, c, delay, d)
    total = plain + DelayTap(*tap)
    assert plain.tap is None and isinstance(total, SumSystem) and total.tap.width == 2.0


@pytest.mark.parametrize("bidirectional", [False, True])
def test_to_ddesys_is_the_sum_built_by_the_branch(bidirectional):
    layer = _layer(3.0, bidirectional=bidirectional)
    sysd = layer.to_ddesys()
    assert isinstance(sysd, SumSystem) and isinstance(sysd.parts[0], DiscreteDelaySystem)
    batch = (2, 3) if bidirectional else (3,)
    assert sysd.batch_shape == batch and sysd.tap.batch_shape == batch and sysd.tap.width == 3.0
    np.testing.assert_array_equal(sysd.tap.e.ravel(), layer.tap.e.detach().numpy())
    np.testing.assert_array_equal(sysd.tap.delay.ravel(), layer.tap_delay().detach().numpy())
    assert rel_max(sysd.kernel(40), layer.kernel(40).detach()) < 1e-10
    src = inspect.getsource(dnn.DS4D.to_ddesys)
    assert "tap_e" not in src and "tap.e" not in src and "tap=" not in src      # no tap rebuilt by hand


# ------------------------------------------------------------------------------------- tap_zero
def test_tap_zero_ablation_removes_the_tap_everywhere():
    layer = _layer(2.0, ablation="tap_zero")
    x = torch.randn(2, 40, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    ref = layer_oracle(layer, x.transpose(1, 2).numpy())                 # the delay system alone
    assert rel_max(layer(x).transpose(1, 2), ref) < 1e-10
    assert rel_max(layer(x, mode="recurrent").transpose(1, 2), ref) < 1e-12
    cache = layer.allocate_inference_cache(2, dtype=torch.float64)
    yp = layer.prefill(x[:, :20], cache).transpose(1, 2)
    ys = torch.stack([layer.step(x[:, t], cache) for t in range(20, 40)], -1)
    assert rel_max(torch.cat([yp, ys], -1), ref) < 1e-10
    assert type(layer.to_ddesys()) is DiscreteDelaySystem
    layer(x).sum().backward()
    assert layer.tap.e.grad is None and layer.tap.nu.grad is None
    layer.ablation = None                                               # the ring was kept: the tap is back
    full = ref + _tap_ref(layer, x.transpose(1, 2).numpy())
    assert rel_max(layer(x).transpose(1, 2), full) < 1e-10
    with pytest.raises(ValueError, match="tap_zero"):
        dnn.DS4D(3, 8, l_max=40, ablation="tap_gone")


def test_experiments_tap_zero_uses_the_option_not_the_parameters():
    model = dnn.SequenceModel(3, 3, d_model=3, n_layers=2, layer_kw={"l_max": 40, "tap": True, "d_state": 8,
                                                                    "seed": 0, "ablation": "mu_zero"})
    layers = [m for m in model.modules() if isinstance(m, dnn.DS4D)]
    before = [(m.tap.e.detach().clone(), m.tap.e._version) for m in layers]
    x = torch.randn(1, 40, 3)
    with tap_zero(model):
        assert all(m.ablation == ("mu_zero", "tap_zero") for m in layers)
        y0 = model(x)
    assert all(m.ablation == "mu_zero" for m in layers)
    assert all(torch.equal(m.tap.e, e) and m.tap.e._version == v for m, (e, v) in zip(layers, before))
    for m in layers:
        m.ablation = ("mu_zero", "tap_zero")
    assert torch.equal(model(x), y0)


# ------------------------------------------------------------------------------------- finding 7
def test_tap_width_is_bounded_by_the_history():
    bound = max_tap_width(32)
    assert bound == 128.0
    with pytest.raises(ValueError, match=r"tap_width must be <= 4 \* l_max = 128"):
        dnn.DS4D(4, 8, l_max=32, tap=True, tap_width=1e9)
    layer = dnn.DS4D(4, 8, l_max=32, tap=True, tap_width=bound)         # the bound itself is accepted
    with pytest.raises(ValueError, match="l_max = 128"):
        layer.tap_width = 129.0
    for bad in (float("inf"), float("nan"), 0.5):
        with pytest.raises(ValueError, match="half-width"):
            layer.tap_width = bad
    assert layer.tap_width == bound
    lazy = dnn.DS4D(4, 8, tap=True, tap_width=1e3)                      # l_max from the first sequence
    with pytest.raises(ValueError, match=r"4 \* l_max = 80"):
        lazy(torch.randn(1, 20, 4))
    with pytest.raises(ValueError, match="l_max = 128"):
        TapWidthSchedule(dnn.DS4D(4, 8, l_max=32, tap=True), w0=1e9, steps=10)
    sd = layer.state_dict()
    sd["tap.width_bits"] = torch.tensor([1e9], dtype=torch.float64).view(torch.int64)
    with pytest.raises(RuntimeError, match="width_bits"):
        dnn.DS4D(4, 8, l_max=32, tap=True).load_state_dict(sd)


@pytest.mark.parametrize("bad", [-1, -100, 2.5, "3", True, None])
def test_schedule_refuses_a_bad_step(bad):
    model = dnn.DS4D(4, 8, l_max=64, tap=True)
    sched = TapWidthSchedule(model, w0=16.0, steps=10)
    with pytest.raises(ValueError, match="non-negative integer"):
        sched.load_state_dict({"i": bad})
    sched.i = bad
    with pytest.raises(ValueError, match="non-negative integer"):
        sched.step()
    sched.load_state_dict({"i": np.int64(5)})
    assert sched.i == 5 and 1.0 <= model.tap_width <= 16.0


def test_nan_in_the_tap_is_named_at_step():
    layer = _layer()
    cache = layer.allocate_inference_cache(1, dtype=torch.float64)
    layer.step(torch.zeros(1, 3, dtype=torch.float64), cache)
    with torch.no_grad():
        layer.tap.nu[0] = float("inf")
    with pytest.raises(FloatingPointError, match="tap.nu"):
        layer.step(torch.zeros(1, 3, dtype=torch.float64), cache)


def test_branch_prefill_writes_a_chunk_at_its_ring_slots():
    """``TapBranch.prefill(xb, xbuf, t0)``: chunks written one after the other leave the ring a whole
    prompt's prefill leaves (the slots the decode steps read)."""
    tap = _layer(2.0).tap
    x = torch.randn(2, 3, 97, dtype=torch.float64, generator=torch.Generator().manual_seed(8))
    whole, parts = tap.allocate(2, torch.float64, "cpu"), tap.allocate(2, torch.float64, "cpu")
    assert whole.shape[1] < 97                                           # the ring wraps
    tap.prefill(x, whole)
    for a, b in ((0, 5), (5, 6), (6, 50), (50, 97)):
        tap.prefill(x[..., a:b], parts, t0=a)
    assert torch.equal(whole, parts)
