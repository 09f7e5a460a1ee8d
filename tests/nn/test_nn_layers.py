"""``nn`` layers and models against independent references: the parameterization (docs/theory.md §7),
DS4D FFT and recurrent paths vs the brute-force oracle, SequenceModel FFT and recurrent paths vs a
reference model (the paper's Table 7 bounds), p0 = 0 vs S4D, kernels, ``to_ddesys``, bidirectional
layers, and both sampling paths (fused / reference, forward and gradcheck). Where two library paths
share code (the layer and ``to_ddesys`` share the kernel synthesis and the recurrence), each is checked
against the oracle, never one against the other.

The references (``verification/reference/loops.py``'s ``brute_force`` / ``impulse_response``, and ``spec_discrete``,
``vec_recurrence``, ``vandermonde_kernel``, ``causal_conv``, ``reference_model_forward`` in
``tests/nn_helpers.py``) never run the layer's own code path; see ``nn_helpers``' docstring.

Default run: well under a minute on 2 cores. ``-m slow``: the paper's protocol (4-layer model,
L up to 8192, 5 seeds) and longer single-layer checks.
"""
from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from ddesys.nn import DS4D, S4D

from ddesys.verification.reference import brute_force, impulse_response, rel_err, rel_max, rel_rmse as rrmse
from nn_helpers import (D_IN, D_OUT, F64, _cplx, _np, _s4d_twin, bhl, causal_conv, layer_oracle, make_model,
                        next_pow2, reference_model_forward, spec_discrete, vandermonde_kernel, vec_recurrence)


# ---------------------------------------------------------------------------------------------------
# 0. Reference self-checks and the parameterization (docs/theory.md §7)
# ---------------------------------------------------------------------------------------------------
def test_vec_recurrence_matches_brute_force():
    rng = np.random.default_rng(0)
    H, N2, L = 3, 4, 70
    lam = 0.9 * np.exp(1j * rng.uniform(0, 2 * np.pi, (H, N2)))
    mu = 0.08 * np.exp(1j * rng.uniform(0, 2 * np.pi, (H, N2)))
    bbar = rng.standard_normal((H, N2)) + 1j * rng.standard_normal((H, N2))
    c = rng.standard_normal((H, N2)) + 1j * rng.standard_normal((H, N2))
    delay = np.array([1.0, 6.25, 31.5])
    d = rng.standard_normal(H)
    x = rng.standard_normal((2, H, L))
    y = vec_recurrence(lam, mu, bbar, c, delay, d, x)
    y_ref = brute_force(lam, mu, bbar, c, delay, d, x).reshape(2, H, L)
    assert rel_max(y, y_ref) <= 1e-13


@pytest.mark.parametrize("bidirectional", [False, True])
def test_discrete_matches_spec_formulas(bidirectional):
    layer = DS4D(3, d_state=8, l_max=50, p0=0.2, seed=1, bidirectional=bidirectional, s_min=2.5)
    with torch.no_grad():                                    # move every parameter off its init value
        for p in layer.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    lam, mu, bbar, c, k, alpha, s = layer.discrete(F64)
    C = 6 if bidirectional else 3
    assert lam.shape == mu.shape == bbar.shape == c.shape == (C, 4)
    assert lam.dtype == torch.complex128 and s.dtype == F64 and k.dtype == torch.int64
    rlam, rmu, rbbar, rc, rdelay, _ = spec_discrete(layer)
    for got, ref in [(lam, rlam), (mu, rmu), (bbar, rbbar), (c, rc)]:
        np.testing.assert_allclose(got.detach().numpy(), ref, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(s.detach().numpy(), rdelay, rtol=1e-14)
    np.testing.assert_array_equal(k.numpy(), np.floor(rdelay).astype(np.int64))
    np.testing.assert_allclose(alpha.detach().numpy(), rdelay - np.floor(rdelay), atol=1e-12)
    # stable by construction: |lam| + |mu| = |abar| = exp(-exp(nu_re) dt) < 1
    np.testing.assert_allclose(np.abs(rlam) + np.abs(rmu),
                               np.exp(-np.exp(_np(layer.nu_re)) * np.exp(_np(layer.log_dt))[:, None]),
                               rtol=1e-13)


def test_init_follows_spec():
    """docs/theory.md §7 initialization: S4D-Inv/Lin poles, dt in [dt_min, dt_max], p = p0, B = 1,
    grid delays (a uniform grid over [s_min, s_max] in random order), constant delays."""
    H, N2, l_max = 6, 8, 100
    layer = DS4D(H, d_state=2 * N2, l_max=l_max, p0=0.1, seed=0)
    lam, mu, bbar, c, delay, d = spec_discrete(layer)
    n = np.arange(N2)
    a_inv = -0.5 + 1j * (2 * N2 / np.pi) * (2 * N2 / (2 * n + 1) - 1)
    a = -np.exp(_np(layer.nu_re)) + 1j * _np(layer.nu_im)
    np.testing.assert_allclose(a, np.broadcast_to(a_inv, (H, N2)), rtol=1e-6)
    dt = np.exp(_np(layer.log_dt))
    assert np.all((dt >= 1e-3 * (1 - 1e-6)) & (dt <= 1e-1 * (1 + 1e-6)))
    np.testing.assert_allclose(1 / (1 + np.exp(-_np(layer.r))), 0.1, rtol=1e-6)
    np.testing.assert_allclose(_cplx(layer.B), 1.0)
    grid = np.linspace(1.0, l_max - 1.0, H + 2)[1:-1]
    np.testing.assert_allclose(np.sort(delay), grid, rtol=1e-5)
    lin = DS4D(2, d_state=2 * N2, l_max=l_max, init="lin", seed=0)
    a = -np.exp(_np(lin.nu_re)) + 1j * _np(lin.nu_im)
    np.testing.assert_allclose(a, np.broadcast_to(-0.5 + 1j * np.pi * n, (2, N2)), rtol=1e-6, atol=1e-6)
    const = DS4D(4, d_state=4, l_max=l_max, delay_init="constant", tau0=28.0, seed=0)
    np.testing.assert_allclose(spec_discrete(const)[4], 28.0, rtol=1e-5)


# ---------------------------------------------------------------------------------------------------
# 1. DS4D FFT path and recurrent path vs the brute-force oracle
# ---------------------------------------------------------------------------------------------------
LAYER_CASES = {
    "inv-grid": dict(d_model=3, d_state=8, l_max=40),
    "lin-transposed-p03": dict(d_model=2, d_state=6, l_max=30, init="lin", p0=0.3, transposed=True),
    "constant-integer-delay": dict(d_model=3, d_state=4, l_max=64, delay_init="constant", tau0=7.0),
    "fast-dt": dict(d_model=2, d_state=8, l_max=40, dt_min=0.05, dt_max=0.5, theta0=0.0),
    "M4L": dict(d_model=2, d_state=8, l_max=40, M=256),
}


@pytest.mark.parametrize("case", list(LAYER_CASES))
def test_ds4d_fft_and_recurrent_match_oracle(case):
    kw = LAYER_CASES[case]
    L = 57
    layer = DS4D(**kw, seed=3).double()
    tr = kw.get("transposed", False)
    g = torch.Generator().manual_seed(5)
    x = torch.randn((2, kw["d_model"], L) if tr else (2, L, kw["d_model"]), generator=g, dtype=F64)
    with torch.no_grad():
        y_ref = layer_oracle(layer, bhl(x, tr))
        # the oracle fed layer.discrete(float64) directly (the brief's recipe): same answer
        lam, mu, bbar, c, _, _, s = (_np(v) if not v.is_complex() else v.numpy() for v in layer.discrete(F64))
        y_ref2 = brute_force(lam, mu, bbar, c, s, _np(layer.D), bhl(x, tr)).reshape(y_ref.shape)
        assert rel_max(y_ref2, y_ref) <= 1e-13

        y = layer(x)
        assert y.shape == x.shape and y.dtype == F64
        assert rel_max(bhl(y, tr), y_ref) <= 1e-9

        y_rec = layer(x, mode="recurrent")
        assert y_rec.shape == x.shape and y_rec.dtype == F64
        assert rel_max(bhl(y_rec, tr), y_ref) <= 1e-12

        layer32 = copy.deepcopy(layer).float()
        y32 = layer32(x.float())
        assert y32.dtype == torch.float32
        assert rrmse(bhl(y32, tr), y_ref) <= 1e-5
        y32_rec = layer32(x.float(), mode="recurrent")
        assert y32_rec.dtype == torch.float32
        assert rrmse(bhl(y32_rec, tr), y_ref) <= 1e-5


def test_ds4d_kernel_matches_oracle_impulse_response():
    L = 200
    layer = DS4D(4, d_state=16, l_max=L, p0=0.2, seed=2)
    lam, mu, bbar, c, delay, _ = spec_discrete(layer)
    K_ref = impulse_response(lam, mu, bbar, c, delay, L)
    with torch.no_grad():
        K = layer.kernel(L)
        assert K.shape == (4, L) and K.dtype == F64
        # default contour (M = nextpow2(2L), no decay assumed): documented ~3e-11, measured ~1e-11
        assert rel_err(K, K_ref) <= 1e-10
        assert rel_err(layer.kernel(L, M=next_pow2(4 * L)), K_ref) <= 1e-12   # per-call override
        layer4 = DS4D(4, d_state=16, l_max=L, p0=0.2, M=next_pow2(4 * L))
        layer4.load_state_dict(layer.state_dict())
        assert rel_err(layer4.kernel(L), K_ref) <= 1e-12


def test_ds4d_float32_kernel_synthesis():
    """``kernel_dtype=float32``: the docs/theory.md §5 float32 floor (a few 1e-5)."""
    L = 256
    layer = DS4D(4, d_state=16, l_max=L, seed=4, kernel_dtype=torch.float32)
    lam, mu, bbar, c, delay, _ = spec_discrete(layer)
    with torch.no_grad():
        K = layer.kernel(L)
    assert K.dtype == torch.float32
    assert rel_err(K, impulse_response(lam, mu, bbar, c, delay, L)) <= 1e-4


def test_ds4d_bidirectional_matches_direct_convolution():
    L, H = 40, 3
    layer = DS4D(H, d_state=8, l_max=L, seed=6, bidirectional=True).double()
    lam, mu, bbar, c, delay, d = spec_discrete(layer)
    K = impulse_response(lam, mu, bbar, c, delay, L).reshape(2, H, L)
    x = torch.randn(2, L, H, dtype=F64, generator=torch.Generator().manual_seed(0))
    xb = bhl(x)
    y_ref = causal_conv(xb, K[0]) + causal_conv(xb[..., ::-1], K[1])[..., ::-1] + d[:, None] * xb
    with torch.no_grad():
        y = layer(x)
    assert rel_max(bhl(y), y_ref) <= 1e-9


@pytest.mark.slow
@pytest.mark.parametrize("L", [1024, 4096])
def test_ds4d_long_sequence_matches_vec_recurrence(L):
    layer = DS4D(4, d_state=32, l_max=L, p0=0.1, seed=L).double()
    x = torch.randn(2, L, 4, dtype=F64, generator=torch.Generator().manual_seed(L))
    y_ref = vec_recurrence(*spec_discrete(layer), bhl(x))
    with torch.no_grad():
        assert rel_max(bhl(layer(x)), y_ref) <= 1e-9
        assert rrmse(bhl(copy.deepcopy(layer).float()(x.float())), y_ref) <= 1e-5


# ---------------------------------------------------------------------------------------------------
# 2. SequenceModel: FFT and recurrent forward, each against a reference model whose SSM layers are the
#    NumPy recurrence (reference_model_forward)
# ---------------------------------------------------------------------------------------------------
def _check_model_fft_and_recurrent(L, seed):
    """The paper's Table 7 bounds (relative RMSE 1e-5, max abs 1.2e-4 in float32; 1e-9 in float64),
    each path against the independent reference model (float64, same weights) rather than against the
    other path: by the triangle inequality FFT and recurrent then agree within twice the bound."""
    m32 = make_model(L, seed)
    m64 = copy.deepcopy(m32).double()
    x = torch.randn(2, L, D_IN, generator=torch.Generator().manual_seed(seed + 100), dtype=F64)
    with torch.no_grad():
        y_ref = reference_model_forward(m64, x)
        y64 = m64(x)
        y64_rec = m64(x, mode="recurrent")
        assert y64.shape == y64_rec.shape == (2, L, D_OUT)
        assert rrmse(y64, y_ref) <= 1e-9
        assert rrmse(y64_rec, y_ref) <= 1e-12
        y32 = m32(x.float())
        y32_rec = m32(x.float(), mode="recurrent")
        assert y32.dtype == torch.float32 and y32_rec.dtype == torch.float32
        for y in (y32, y32_rec):
            assert rrmse(y, y_ref) <= 1e-5
            assert float((y.double() - y_ref).abs().max()) <= 1.2e-4


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("L", [256, 1024])
def test_model_fft_and_recurrent_match_reference(L, seed):
    _check_model_fft_and_recurrent(L, seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("L", [1024, 2048, 4096, 8192])
def test_model_fft_and_recurrent_paper_protocol(L, seed):
    _check_model_fft_and_recurrent(L, seed)


def test_s4d_model_fft_and_recurrent_match_reference():
    L = 256
    m = make_model(L, 0, layer="s4d", n_layers=2).double()
    x = torch.randn(2, L, D_IN, dtype=F64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        y_ref = reference_model_forward(m, x)
        assert rrmse(m(x), y_ref) <= 1e-12
        assert rrmse(m(x, mode="recurrent"), y_ref) <= 1e-12


# ---------------------------------------------------------------------------------------------------
# 3. p0 = 0: DS4D is S4D (docs/theory.md §7)
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["fused", "reference"])
def test_s4d_kernel_matches_vandermonde(monkeypatch, path):
    if path != "fused":
        monkeypatch.setenv("DDESYS_REFERENCE", "1")
    L, H, N = 300, 4, 16
    s4 = S4D(H, d_state=N, seed=0)
    K_ref = vandermonde_kernel(s4.log_dt, s4.nu_re, s4.nu_im, s4.B, s4.C, L)
    with torch.no_grad():
        K = s4.kernel(L, F64)
        assert K.dtype == F64 and K.shape == (H, L)
        assert rel_err(K, K_ref) <= 1e-13
        K32 = s4.kernel(L)
        assert K32.dtype == torch.float32
        assert rel_err(K32, K_ref) <= 1e-4
        bi = S4D(H, d_state=N, seed=0, bidirectional=True)
        Kb = bi.kernel(L, F64)
        assert Kb.shape == (2, H, L)
        assert rel_err(Kb, vandermonde_kernel(bi.log_dt, bi.nu_re, bi.nu_im, bi.B, bi.C, L)
                                   .reshape(2, H, L)) <= 1e-13


@pytest.mark.parametrize("L", [64, 256])
def test_p0_zero_kernel_equals_s4d_exact_p(L):
    """With p exactly 0 (r = -inf) and the 4L contour the DS4D kernel is the S4D kernel to 1e-12."""
    H, N = 4, 16
    ds = DS4D(H, d_state=N, l_max=L, p0=0.0, seed=1, M=next_pow2(4 * L))
    with torch.no_grad():
        ds.r.fill_(-math.inf)
        lam, mu = ds.discrete(F64)[:2]
        assert float(mu.abs().max()) == 0.0
        K = ds.kernel(L)
        K_s4 = _s4d_twin(ds, H, N).kernel(L, F64)
    K_np = vandermonde_kernel(ds.log_dt, ds.nu_re, ds.nu_im, ds.B, ds.C, L)
    assert rel_err(K_s4, K_np) <= 1e-13
    assert rel_err(K, K_s4) <= 1e-12
    assert rel_err(K, K_np) <= 1e-12


def test_p0_zero_default_layer_close_to_s4d():
    """The layer exactly as built with ``p0=0`` and its default contour (M = 2L, documented ~3e-11):
    equal to S4D to 1e-10 at L = 256; with M = 4L to 1e-12 (test below)."""
    L, H, N = 256, 4, 16
    ds = DS4D(H, d_state=N, l_max=L, p0=0.0, seed=1)
    with torch.no_grad():
        K = ds.kernel(L)
        K_s4 = _s4d_twin(ds, H, N).kernel(L, F64)
    assert rel_err(K, K_s4) <= 1e-10
    assert rel_err(K, vandermonde_kernel(ds.log_dt, ds.nu_re, ds.nu_im, ds.B, ds.C, L)) <= 1e-10


@pytest.mark.parametrize("L", [64, 256])
def test_p0_zero_is_exactly_s4d(L):
    """The layer as built with ``p0=0`` has ``mu`` exactly 0 (an earlier ``r = -30`` init gave
    p = sigmoid(-30) = 9.4e-14 and a kernel drift of ~t p, 2e-11 relative at L = 256, dt = 1e-3);
    with the 4L contour its kernel and output are S4D's to 1e-12, and both are the NumPy
    Vandermonde convolution's."""
    H, N = 4, 16
    ds = DS4D(H, d_state=N, l_max=L, p0=0.0, seed=1, dt_min=1e-3, dt_max=1e-1, M=next_pow2(4 * L)).double()
    s4 = _s4d_twin(ds, H, N).double()
    x = torch.randn(2, L, H, dtype=F64, generator=torch.Generator().manual_seed(L))
    with torch.no_grad():
        assert float(ds.discrete(F64)[1].abs().max()) == 0.0     # mu must vanish when p0 = 0
        assert float(ds.discrete(torch.float32)[1].abs().max()) == 0.0
        K, K_s4 = ds.kernel(L), s4.kernel(L, F64)
        assert rel_err(K, K_s4) <= 1e-12
        assert rel_err(K, vandermonde_kernel(ds.log_dt, ds.nu_re, ds.nu_im, ds.B, ds.C, L)) <= 1e-12
        y_ref = causal_conv(bhl(x), vandermonde_kernel(ds.log_dt, ds.nu_re, ds.nu_im, ds.B, ds.C, L)) \
            + _np(ds.D)[:, None] * bhl(x)
        for y in (ds(x), s4(x), ds(x, mode="recurrent"), s4(x, mode="recurrent")):
            assert rel_max(bhl(y), y_ref) <= 1e-12
        assert rel_max(ds(x), s4(x)) <= 1e-12                     # the reduction itself, DS4D vs S4D


# ---------------------------------------------------------------------------------------------------
# 4. to_ddesys
# ---------------------------------------------------------------------------------------------------
def test_to_ddesys_reproduces_kernel_and_recurrence():
    L, H = 96, 3
    layer = DS4D(H, d_state=8, l_max=L, p0=0.2, seed=7, M=next_pow2(4 * L)).double()
    sysd = layer.to_ddesys()
    assert sysd.batch_shape == (H,) and sysd.n_modes == 4
    lam, mu, bbar, c, delay, d = spec_discrete(layer)
    np.testing.assert_allclose(sysd.delay, delay, rtol=1e-14)
    np.testing.assert_allclose(sysd.d, d, rtol=0)
    K_ref = impulse_response(lam, mu, bbar, c, delay, L)
    with torch.no_grad():
        # the layer and the system share the synthesis and the recurrence: each against the oracle
        assert rel_err(layer.kernel(L), K_ref) <= 1e-12
        assert rel_err(sysd.kernel(L), K_ref) <= 1e-12
        assert rel_err(sysd.kernel(L, method="recurrence"), K_ref) <= 1e-12
        x = torch.randn(2, L, H, dtype=F64, generator=torch.Generator().manual_seed(3))
        y_ref = brute_force(lam, mu, bbar, c, delay, d, bhl(x)).reshape(2, H, L)
        assert rel_max(sysd.simulate(bhl(x)), y_ref) <= 1e-12   # (2, H, L) broadcasts over the batch
        assert rel_max(bhl(layer(x, mode="recurrent")), y_ref) <= 1e-12
    assert np.all(sysd.sufficient_margin() > 0) and np.all(sysd.is_stable())


def test_to_ddesys_default_layer_kernel():
    """Default contours: to_ddesys (decay-aware contour) and the layer (M = 2L, no decay assumed)
    each reproduce the oracle's kernel to the layer's documented accuracy."""
    L = 96
    layer = DS4D(3, d_state=8, l_max=L, seed=7)
    lam, mu, bbar, c, delay, _ = spec_discrete(layer)
    K_ref = impulse_response(lam, mu, bbar, c, delay, L)
    with torch.no_grad():
        assert rel_err(layer.to_ddesys().kernel(L), K_ref) <= 1e-10
        assert rel_err(layer.kernel(L), K_ref) <= 1e-10


def test_to_ddesys_bidirectional():
    L, H = 48, 3
    layer = DS4D(H, d_state=8, l_max=L, seed=8, bidirectional=True, M=next_pow2(4 * L))
    sysd = layer.to_ddesys()
    assert sysd.batch_shape == (2, H)
    lam, mu, bbar, c, delay, d = spec_discrete(layer)
    np.testing.assert_allclose(sysd.delay, delay.reshape(2, H), rtol=1e-14)
    np.testing.assert_allclose(sysd.d, np.stack([d, np.zeros_like(d)]))
    with torch.no_grad():
        K = layer.kernel(L)
    assert K.shape == (2, H, L)
    K_ref = impulse_response(lam, mu, bbar, c, delay, L).reshape(2, H, L)
    assert rel_err(K, K_ref) <= 1e-12
    assert rel_err(sysd.kernel(L), K_ref) <= 1e-12


# ---------------------------------------------------------------------------------------------------
# Both sampling paths (fused Numba / array-API reference): forward vs the oracle, and gradcheck
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["fused", "reference-chunked"])
def test_sampling_paths_forward_and_gradient(monkeypatch, path):
    """Both implementations of the sampled transfer function: the fused Numba loops (CPU default) and
    the array-API reference forced with one channel per block (``DDESYS_REFERENCE=1``,
    ``CHUNK_ELEMENTS = 1``), each with its own backward: same output as the oracle, gradcheck passes."""
    import ddesys.transfer as transfer
    if path != "fused":
        monkeypatch.setenv("DDESYS_REFERENCE", "1")
        monkeypatch.setattr(transfer, "CHUNK_ELEMENTS", 1)
    layer = DS4D(4, d_state=4, l_max=16, seed=0).double()
    s = spec_discrete(layer)[4]
    assert np.all(np.abs(s - np.round(s)) > 1e-3)
    x = torch.randn(1, 16, 4, dtype=F64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert rel_max(bhl(layer(x)), layer_oracle(layer, bhl(x))) <= 1e-9
    params = {n: p.detach().clone() for n, p in layer.named_parameters()}
    for name in ("nu_im", "theta", "nu_tau", "B"):
        def f(p):
            return torch.func.functional_call(layer, {**params, name: p}, (x,))
        assert torch.autograd.gradcheck(f, (params[name].clone().requires_grad_(),)), name
