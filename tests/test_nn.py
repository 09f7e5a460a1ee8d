"""`nn` (DS4D, S4D, SequenceModel, param_groups) against independent references.

References used here never run the layer's own code path:

* ``tests/oracle.py`` (written from SPEC.md, imports nothing from ``ddesys``): ``brute_force`` (plain
  Python loop over channel, mode and time) and ``impulse_response`` (NumPy loop over time);
* :func:`spec_discrete`: SPEC section 7's parameterization recomputed in NumPy from the raw
  parameters (``log_dt, nu_re, nu_im, r, theta, nu_tau, B, C``), so ``layer.discrete`` is checked too;
* :func:`vec_recurrence`: a NumPy delay recurrence vectorized over (batch, channel, mode), checked
  against ``brute_force`` below and used where the brute-force loop would be too slow (models);
* :func:`vandermonde_kernel`: the S4D kernel ``2 Re sum_n C_n bbar_n exp(t dt a_n)`` in NumPy;
* direct (``np.convolve``) convolutions and finite differences of the oracle.

Default run: well under a minute on 2 cores. ``-m slow``: the paper's protocol (4-layer model,
L up to 8192, 5 seeds) and longer single-layer checks.

Tests marked ``xfail`` document defects of ``nn`` found while writing this file (see their reasons);
they are ``strict=False`` so a fix turns them into XPASS without breaking the run.
"""
from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import nn as dnn
from nn import DS4D, S4D, SequenceModel, param_groups

try:  # tests/ on sys.path (pytest's default rootdir-relative import of a package-less test dir)
    from oracle import brute_force, impulse_response
except ImportError:  # tests/ made a package
    from tests.oracle import brute_force, impulse_response

F64 = torch.float64

DS4D_PARAMS = ("log_dt", "nu_re", "nu_im", "r", "theta", "nu_tau", "B", "C", "D")


# ---------------------------------------------------------------------------------------------------
# Independent references and helpers
# ---------------------------------------------------------------------------------------------------
def _np(t):
    return t.detach().cpu().double().numpy()


def _cplx(p):
    """``(..., 2)`` real view -> complex128."""
    p = _np(p)
    return p[..., 0] + 1j * p[..., 1]


def spec_discrete(layer):
    """SPEC section 7 in NumPy from the raw parameters: ``lam, mu, bbar, c`` ``(C, N2)`` complex128,
    ``delay`` ``(C,)`` and ``d`` ``(H,)`` float64. Written without ``nn`` / ``ddesys``."""
    dt = np.exp(_np(layer.log_dt))[:, None]
    a = -np.exp(_np(layer.nu_re)) + 1j * _np(layer.nu_im)
    abar = np.exp(a * dt)
    p = 1.0 / (1.0 + np.exp(-_np(layer.r)))
    lam = (1 - p) * abar
    mu = p * np.abs(abar) * np.exp(1j * _np(layer.theta))
    bbar = (abar - 1) / a * _cplx(layer.B)
    delay = layer.s_min + (layer.s_max - layer.s_min) / (1.0 + np.exp(-_np(layer.nu_tau)))
    return lam, mu, bbar, _cplx(layer.C), delay, _np(layer.D)


def vandermonde_kernel(log_dt, nu_re, nu_im, B, C, L):
    """S4D kernel ``K_t = 2 Re sum_n C_n (exp(dt a_n) - 1)/a_n B_n exp(t dt a_n)`` (ZOH, explicit B)."""
    dt = np.exp(_np(log_dt))[:, None]
    a = -np.exp(_np(nu_re)) + 1j * _np(nu_im)
    bbar = (np.exp(a * dt) - 1) / a * _cplx(B)
    t = np.arange(L)
    V = np.exp((a * dt)[..., None] * t)                              # (H, N2, L)
    return 2 * np.einsum("hn,hnt->ht", _cplx(C) * bbar, V).real


def vec_recurrence(lam, mu, bbar, c, delay, d, x):
    """The SPEC section 2 recurrence, NumPy, vectorized over (batch, channel, mode), loop over time.

    ``lam, mu, bbar, c`` ``(H, N2)``; ``delay, d`` ``(H,)``; ``x`` ``(B, H, L)`` -> ``y`` ``(B, H, L)``.
    The history is front-padded with ``P = k_max + 1`` zeros so ``t - k - 1`` is always a valid index.
    """
    x = np.asarray(x, dtype=np.float64)
    Bsz, H, L = x.shape
    k = np.floor(delay).astype(np.int64)
    al = (delay - k)[:, None]
    P = int(k.max()) + 1
    hist = np.zeros((Bsz, H, lam.shape[1], P + L), dtype=np.complex128)
    ch = np.arange(H)
    y = np.empty((Bsz, H, L))
    for t in range(L):
        i = P + t
        hk = hist[:, ch, :, i - k].transpose(1, 0, 2)                # advanced index lands first: (B, H, N2)
        hk1 = hist[:, ch, :, i - k - 1].transpose(1, 0, 2)
        delayed = (1 - al) * hk + al * hk1                           # (B, H, N2)
        h = lam * hist[:, :, :, i - 1] + mu * delayed + bbar * x[:, :, t, None]
        hist[:, :, :, i] = h
        y[:, :, t] = 2 * (c * h).real.sum(-1) + d * x[:, :, t]
    return y


def causal_conv(x, K):
    """``y_t = sum_{j <= t} K_j x_{t-j}`` by ``np.convolve``: ``x`` ``(B, H, L)``, ``K`` ``(H, L)``."""
    Bsz, H, L = x.shape
    return np.array([[np.convolve(x[b, h], K[h])[:L] for h in range(H)] for b in range(Bsz)])


def layer_oracle(layer, x_bhl):
    """``brute_force`` on the layer's SPEC parameters: ``x`` ``(B, H, L)`` -> ``(B, H, L)``."""
    lam, mu, bbar, c, delay, d = spec_discrete(layer)
    Bsz, H, L = x_bhl.shape
    return brute_force(lam, mu, bbar, c, delay, d, x_bhl).reshape(Bsz, H, L)


def rel_max(a, ref):
    a, ref = np.asarray(a, np.float64), np.asarray(ref, np.float64)
    return float(np.abs(a - ref).max() / np.abs(ref).max())


def rel_max_per_channel(K, K_ref):
    """``max_t |K - K_ref| / max_t |K_ref|`` per channel, maximized over channels."""
    K = np.asarray(K, np.float64).reshape(-1, K_ref.shape[-1])
    K_ref = np.asarray(K_ref, np.float64).reshape(-1, K_ref.shape[-1])
    return float((np.abs(K - K_ref).max(-1) / np.abs(K_ref).max(-1)).max())


def rrmse(a, ref):
    a, ref = np.asarray(a, np.float64), np.asarray(ref, np.float64)
    return float(np.sqrt(np.mean((a - ref) ** 2) / np.mean(ref**2)))


def next_pow2(n):
    return 1 << (int(n) - 1).bit_length()


def bhl(x, transposed=False):
    """Layer input/output ``(B, L, H)`` (or transposed ``(B, H, L)``) -> NumPy ``(B, H, L)``."""
    x = _np(x)
    return x if transposed else x.transpose(0, 2, 1)


# ---------------------------------------------------------------------------------------------------
# 0. Reference self-checks and the parameterization (SPEC section 7)
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
    """SPEC section 7 initialization: S4D-Inv/Lin poles, dt in [dt_min, dt_max], p = p0, B = 1,
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
        assert rel_max_per_channel(K, K_ref) <= 1e-10
        assert rel_max_per_channel(layer.kernel(L, M=next_pow2(4 * L)), K_ref) <= 1e-12   # per-call override
        layer4 = DS4D(4, d_state=16, l_max=L, p0=0.2, M=next_pow2(4 * L))
        layer4.load_state_dict(layer.state_dict())
        assert rel_max_per_channel(layer4.kernel(L), K_ref) <= 1e-12


def test_ds4d_float32_kernel_synthesis():
    """``kernel_dtype=float32``: the SPEC section 5 float32 floor (a few 1e-5)."""
    L = 256
    layer = DS4D(4, d_state=16, l_max=L, seed=4, kernel_dtype=torch.float32)
    lam, mu, bbar, c, delay, _ = spec_discrete(layer)
    with torch.no_grad():
        K = layer.kernel(L)
    assert K.dtype == torch.float32
    assert rel_max_per_channel(K, impulse_response(lam, mu, bbar, c, delay, L)) <= 1e-4


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
# 2. SequenceModel: FFT vs recurrent forward (and vs a NumPy-recurrence reference model)
# ---------------------------------------------------------------------------------------------------
D_IN, D_OUT, D_MODEL = 8, 8, 16


def make_model(L, seed, layer="ds4d", n_layers=4, **kw):
    torch.manual_seed(seed)
    layer_kw = dict(d_state=64, l_max=L) if layer == "ds4d" else dict(d_state=64)
    layer_kw.update(kw)
    return SequenceModel(D_IN, D_OUT, d_model=D_MODEL, n_layers=n_layers, layer=layer, layer_kw=layer_kw,
                         glu=True)


def reference_model_forward(model, x):
    """SequenceModel's forward (pre-norm, GLU, no dropout) with every DS4D layer replaced by
    :func:`vec_recurrence` on :func:`spec_discrete` parameters; the norms and linears are the model's."""
    h = model.encoder(x)
    for blk in model.blocks:
        assert blk.prenorm and blk.drop.p == 0.0
        z = blk.norm(h)
        y = torch.from_numpy(vec_recurrence(*spec_discrete(blk.layer), bhl(z))).transpose(1, 2)
        h = h + blk.glu(blk.out(blk.act(y)))
    return model.decoder(model.norm(h))


def _check_model_fft_vs_recurrent(L, seed):
    m32 = make_model(L, seed)
    m64 = copy.deepcopy(m32).double()
    x = torch.randn(2, L, D_IN, generator=torch.Generator().manual_seed(seed + 100), dtype=F64)
    with torch.no_grad():
        y64 = m64(x)
        y64_rec = m64(x, mode="recurrent")
        assert y64.shape == (2, L, D_OUT)
        assert rrmse(y64, y64_rec) <= 1e-9
        y32 = m32(x.float())
        y32_rec = m32(x.float(), mode="recurrent")
        assert y32.dtype == torch.float32 and y32_rec.dtype == torch.float32
        assert rrmse(y32, y32_rec) <= 1e-5
        assert float((y32 - y32_rec).abs().max()) <= 1.2e-4
        assert rrmse(y32, y64) <= 5e-6                       # float32 FFT vs float64 FFT, same weights
        assert rrmse(y32, y64_rec) <= 1e-5
    return m64, x, y64


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("L", [256, 1024])
def test_model_fft_vs_recurrent(L, seed):
    m64, x, y64 = _check_model_fft_vs_recurrent(L, seed)
    if L == 256:                                              # fully independent SSM path as well
        with torch.no_grad():
            assert rrmse(y64, reference_model_forward(m64, x)) <= 1e-9


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("L", [1024, 2048, 4096, 8192])
def test_model_fft_vs_recurrent_paper_protocol(L, seed):
    _check_model_fft_vs_recurrent(L, seed)


def test_s4d_model_fft_vs_recurrent():
    L = 256
    m = make_model(L, 0, layer="s4d", n_layers=2).double()
    x = torch.randn(2, L, D_IN, dtype=F64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert rrmse(m(x), m(x, mode="recurrent")) <= 1e-12


# ---------------------------------------------------------------------------------------------------
# 3. p0 = 0: DS4D is S4D (SPEC section 7)
# ---------------------------------------------------------------------------------------------------
S4D_KEYS = ("log_dt", "nu_re", "nu_im", "B", "C", "D")


def _s4d_twin(ds4d, H, N):
    s4 = S4D(H, d_state=N)
    s4.load_state_dict({k: v for k, v in ds4d.state_dict().items() if k in S4D_KEYS})
    return s4


@pytest.mark.parametrize("path", ["fused", "reference"])
def test_s4d_kernel_matches_vandermonde(monkeypatch, path):
    import ddesys.transfer as transfer
    if path != "fused":
        monkeypatch.setenv("DDESYS_REFERENCE", "1")
    L, H, N = 300, 4, 16
    s4 = S4D(H, d_state=N, seed=0)
    K_ref = vandermonde_kernel(s4.log_dt, s4.nu_re, s4.nu_im, s4.B, s4.C, L)
    with torch.no_grad():
        K = s4.kernel(L, F64)
        assert K.dtype == F64 and K.shape == (H, L)
        assert rel_max_per_channel(K, K_ref) <= 1e-13
        K32 = s4.kernel(L)
        assert K32.dtype == torch.float32
        assert rel_max_per_channel(K32, K_ref) <= 1e-4
        bi = S4D(H, d_state=N, seed=0, bidirectional=True)
        Kb = bi.kernel(L, F64)
        assert Kb.shape == (2, H, L)
        assert rel_max_per_channel(Kb, vandermonde_kernel(bi.log_dt, bi.nu_re, bi.nu_im, bi.B, bi.C, L)
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
    assert rel_max_per_channel(K_s4, K_np) <= 1e-13
    assert rel_max_per_channel(K, K_s4) <= 1e-12
    assert rel_max_per_channel(K, K_np) <= 1e-12


def test_p0_zero_default_layer_close_to_s4d():
    """The layer exactly as built with ``p0=0`` and its default contour (M = 2L, documented ~3e-11):
    equal to S4D to 1e-10 at L = 256; with M = 4L to 1e-12 (test below)."""
    L, H, N = 256, 4, 16
    ds = DS4D(H, d_state=N, l_max=L, p0=0.0, seed=1)
    with torch.no_grad():
        K = ds.kernel(L)
        K_s4 = _s4d_twin(ds, H, N).kernel(L, F64)
    assert rel_max_per_channel(K, K_s4) <= 1e-10
    assert rel_max_per_channel(K, vandermonde_kernel(ds.log_dt, ds.nu_re, ds.nu_im, ds.B, ds.C, L)) <= 1e-10


@pytest.mark.parametrize("L", [64, 256])
def test_p0_zero_is_exactly_s4d(L):
    """The layer as built with ``p0=0`` has ``mu`` exactly 0 (an earlier ``r = -30`` init gave
    p = sigmoid(-30) = 9.4e-14 and a kernel drift of ~t p, 2e-11 relative at L = 256, dt = 1e-3);
    with the 4L contour its kernel and output are S4D's to 1e-12."""
    H, N = 4, 16
    ds = DS4D(H, d_state=N, l_max=L, p0=0.0, seed=1, dt_min=1e-3, dt_max=1e-1, M=next_pow2(4 * L)).double()
    s4 = _s4d_twin(ds, H, N).double()
    x = torch.randn(2, L, H, dtype=F64, generator=torch.Generator().manual_seed(L))
    with torch.no_grad():
        assert float(ds.discrete(F64)[1].abs().max()) == 0.0     # mu must vanish when p0 = 0
        assert float(ds.discrete(torch.float32)[1].abs().max()) == 0.0
        K, K_s4 = ds.kernel(L), s4.kernel(L, F64)
        assert rel_max_per_channel(K, K_s4) <= 1e-12
        assert rel_max_per_channel(K, vandermonde_kernel(ds.log_dt, ds.nu_re, ds.nu_im, ds.B, ds.C, L)) <= 1e-12
        assert rel_max(ds(x), s4(x)) <= 1e-12
        assert rel_max(ds(x, mode="recurrent"), s4(x, mode="recurrent")) <= 1e-12


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
    with torch.no_grad():
        K = layer.kernel(L)
        assert rel_max_per_channel(sysd.kernel(L), K) <= 1e-12
        assert rel_max_per_channel(sysd.kernel(L, method="recurrence"), K) <= 1e-12
        K_ref = impulse_response(lam, mu, bbar, c, delay, L)
        assert rel_max_per_channel(K, K_ref) <= 1e-12
        x = torch.randn(2, L, H, dtype=F64, generator=torch.Generator().manual_seed(3))
        y_sim = sysd.simulate(bhl(x))                            # (2, H, L) broadcasts over the batch
        y_rec = bhl(layer(x, mode="recurrent"))
        assert rel_max(y_sim, y_rec) <= 1e-12
        assert rel_max(y_sim, brute_force(lam, mu, bbar, c, delay, d, bhl(x)).reshape(2, H, L)) <= 1e-12
    assert np.all(sysd.stability_margin() > 0) and np.all(sysd.is_stable(exact=True))


def test_to_ddesys_default_layer_kernel():
    """Default contour: to_ddesys (decay-aware contour) and the layer agree to the layer's accuracy."""
    L = 96
    layer = DS4D(3, d_state=8, l_max=L, seed=7)
    with torch.no_grad():
        assert rel_max_per_channel(layer.to_ddesys().kernel(L), layer.kernel(L)) <= 1e-10


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
    assert rel_max_per_channel(sysd.kernel(L), K) <= 1e-12
    K_ref = impulse_response(lam, mu, bbar, c, delay, L).reshape(2, H, L)
    assert rel_max_per_channel(K, K_ref) <= 1e-12


# ---------------------------------------------------------------------------------------------------
# 5. Gradients
# ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_layer():
    layer = DS4D(2, d_state=4, l_max=16, seed=0).double()
    s = spec_discrete(layer)[4]
    assert np.all(np.abs(s - np.round(s)) > 1e-3)      # finite differences must not cross an integer delay
    return layer


@pytest.mark.parametrize("name", DS4D_PARAMS)
def test_gradcheck_every_parameter(tiny_layer, name):
    layer = tiny_layer
    L = 16
    x = torch.randn(2, L, 2, dtype=F64, generator=torch.Generator().manual_seed(0))
    params = {n: p.detach().clone() for n, p in layer.named_parameters()}
    assert set(params) == set(DS4D_PARAMS)

    def f(p):
        return torch.func.functional_call(layer, {**params, name: p}, (x,))

    assert torch.autograd.gradcheck(f, (params[name].clone().requires_grad_(),))


def test_gradcheck_input(tiny_layer):
    x = torch.randn(1, 16, 2, dtype=F64, generator=torch.Generator().manual_seed(1), requires_grad=True)
    assert torch.autograd.gradcheck(tiny_layer, (x,))


def test_delay_gradient_nonzero_and_matches_oracle(tiny_layer):
    """dK/dnu_tau by autograd (through alpha) vs a central difference of the oracle impulse response
    in the delay (chain rule ds/dnu_tau = (s_max - s_min) sigmoid'(nu_tau))."""
    layer = tiny_layer
    L = 16
    nu = layer.nu_tau.detach().clone()
    params = {n: p.detach() for n, p in layer.named_parameters()}
    delta = torch.zeros(1, L, 2, dtype=F64)
    delta[:, 0] = 1.0                                             # impulse: y = K + D delta

    def kern(v):
        return torch.func.functional_call(layer, {**params, "nu_tau": v}, (delta,))[0].T   # (H, L)

    J = torch.autograd.functional.jacobian(kern, nu)            # (H, L, H)
    J = J.diagonal(dim1=0, dim2=2).T.numpy()                     # (H, L): dK[h]/dnu_tau[h]
    lam, mu, bbar, c, delay, _ = spec_discrete(layer)
    h = 1e-6
    dK_ds = (impulse_response(lam, mu, bbar, c, delay + h, L)
             - impulse_response(lam, mu, bbar, c, delay - h, L)) / (2 * h)
    sig = 1 / (1 + np.exp(-_np(layer.nu_tau)))
    dK_dnu = dK_ds * ((layer.s_max - layer.s_min) * sig * (1 - sig))[:, None]
    assert np.abs(J).max(-1).min() > 1e-6                       # nonzero for every channel
    assert rel_max_per_channel(J, dK_dnu) <= 1e-6

    x = torch.randn(2, L, 2, dtype=F64, generator=torch.Generator().manual_seed(2))
    layer.zero_grad()
    layer(x).pow(2).sum().backward()
    g = layer.nu_tau.grad
    assert g is not None and torch.isfinite(g).all() and bool((g.abs() > 0).all())
    layer.zero_grad()


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


@pytest.mark.parametrize("path", ["fused", "reference"])
@pytest.mark.parametrize("name", S4D_KEYS)
def test_s4d_gradcheck_every_parameter(monkeypatch, path, name):
    import ddesys.transfer as transfer
    if path != "fused":
        monkeypatch.setenv("DDESYS_REFERENCE", "1")
    layer = S4D(2, d_state=4, seed=0).double()
    x = torch.randn(2, 16, 2, dtype=F64, generator=torch.Generator().manual_seed(0))
    params = {n: p.detach().clone() for n, p in layer.named_parameters()}
    assert set(params) == set(S4D_KEYS)

    def f(p):
        return torch.func.functional_call(layer, {**params, name: p}, (x,))

    assert torch.autograd.gradcheck(f, (params[name].clone().requires_grad_(),))


def test_gradients_finite_and_present_model():
    m = make_model(64, 0, n_layers=2, d_state=8)
    x = torch.randn(2, 64, D_IN, generator=torch.Generator().manual_seed(0))
    m(x).pow(2).mean().backward()
    for n, p in m.named_parameters():
        assert p.grad is not None, n
        assert torch.isfinite(p.grad).all(), n


# ---------------------------------------------------------------------------------------------------
# 6. Hypothesis: any finite unconstrained parameters give a stable layer and a finite kernel
# ---------------------------------------------------------------------------------------------------
PROP_H, PROP_N2, PROP_LMAX, PROP_L = 2, 3, 48, 32
_PROP_LAYER = {}


def _prop_layer():
    if not _PROP_LAYER:
        _PROP_LAYER["l"] = DS4D(PROP_H, d_state=2 * PROP_N2, l_max=PROP_LMAX, s_min=2.5, s_max=40.0, seed=0).double()
    return _PROP_LAYER["l"]


def _vec(n, lo, hi):
    return st.lists(st.floats(lo, hi, allow_nan=False, allow_infinity=False), min_size=n, max_size=n)


def _param_strategy(nu_re_range, big=1e3):
    M = PROP_H * PROP_N2
    return st.fixed_dictionaries(dict(
        log_dt=_vec(PROP_H, -10.0, 5.0), nu_re=_vec(M, *nu_re_range), nu_im=_vec(M, -big, big),
        r=_vec(M, -big, big), theta=_vec(M, -big, big), nu_tau=_vec(PROP_H, -big, big)))


def _check_stable_finite(vals):
    layer = _prop_layer()
    with torch.no_grad():
        for name, v in vals.items():
            p = getattr(layer, name)
            p.copy_(torch.tensor(v, dtype=F64).reshape(p.shape))
        lam, mu, bbar, c, k, alpha, s = layer.discrete(F64)
        for t in (lam, mu, bbar, c, s, alpha):
            assert torch.isfinite(t).all()
        assert float((lam.abs() + mu.abs()).max()) < 1.0
        assert float(s.min()) >= layer.s_min and float(s.max()) <= layer.s_max
        assert bool(((alpha >= 0) & (alpha < 1)).all()) and int(k.min()) >= 1
        K = layer.kernel(PROP_L)
        assert torch.isfinite(K).all()


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(_param_strategy((-20.0, 20.0)))
def test_property_stable_finite(vals):
    """Every other parameter with scales up to 1e3, log_dt in [-10, 5], nu_re in [-20, 20]."""
    _check_stable_finite(vals)


@settings(max_examples=100, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow])
@given(_param_strategy((-1e3, 1e3)))
def test_property_stable_finite_full_range(vals):
    """The brief's full range: nu_re too with scale 1e3."""
    _check_stable_finite(vals)


@pytest.mark.parametrize("nu_re", [-40.0, 800.0], ids=["underflow-unit-modulus", "overflow-nan"])
def test_extreme_nu_re_reproducer(nu_re):
    layer = DS4D(2, d_state=4, l_max=32, seed=0).double()
    with torch.no_grad():
        layer.nu_re.fill_(nu_re)
        lam, mu, bbar = layer.discrete(F64)[:3]
        assert torch.isfinite(bbar).all()
        assert float((lam.abs() + mu.abs()).max()) < 1.0
        assert torch.isfinite(layer.kernel(32)).all()


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
        y_dec = _decode(layer, x, P, layer.allocate_inference_cache(2, F64))
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
        y_dec = _decode(layer, x, 21, layer.allocate_inference_cache(2, F64))
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
        cache = layer.allocate_inference_cache(2, F64)
        assert cache.buf.shape == (2, 6, H, 3)
        y_step = _decode(layer, x, 0, cache)
        assert cache.t == L and cache.buf.shape == (2, 6, H, 3)   # memory does not grow with t
        assert rel_max(bhl(y_step), y_ref) <= 1e-12
        for P in (3, 6, 7, 101):                                     # prefill shorter / longer than R
            y_dec = _decode(layer, x, P, layer.allocate_inference_cache(2, F64))
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
    cache = layer.allocate_inference_cache(1, F64)
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

    with torch.no_grad():
        y = s4(x)
        assert rel_max(bhl(y), ref()) <= 1e-12
        assert rel_max(_decode(s4, x, P, s4.allocate_inference_cache(2, F64)), y) <= 1e-12
    _sgd_update(s4, x)
    with torch.no_grad():
        y = s4(x)
        assert rel_max(bhl(y), ref()) <= 1e-12
        assert rel_max(_decode(s4, x, P, s4.allocate_inference_cache(2, F64)), y) <= 1e-12


@pytest.mark.parametrize("layer", ["ds4d", "s4d"])
def test_model_prefill_step_matches_fft(layer):
    L = 48
    m = make_model(32, 0, layer=layer, n_layers=2, d_state=8).double()
    x = torch.randn(2, L, D_IN, dtype=F64, generator=torch.Generator().manual_seed(0))
    for round_ in range(2):                                        # before and after an SGD step
        with torch.no_grad():
            y = m(x)
            caches = m.allocate_inference_cache(2, F64)
            assert len(caches) == 2
            assert rel_max(_decode(m, x, 20, caches), y) <= 1e-10
            assert rel_max(_decode(m, x, 0, m.allocate_inference_cache(2, F64)), y) <= 1e-10
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
        assert rel_max(_decode(m, ids, 10, m.allocate_inference_cache(3, F64)), y) <= 1e-10


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
        with pytest.raises(ValueError, match="fresh cache"):
            layer.prefill(torch.randn(2, 4, 3), cache)
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
    c64 = layer.allocate_inference_cache(1, F64)
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
