"""`ddesys.DiscreteDelaySystem` and the stability functions against the independent oracle
(`tests/oracle.py`, float64, written from SPEC sections 2-5 without importing ddesys).

Default run: a few seconds of compute plus Numba compilation. `-m slow`: long kernels (L up to 8192,
delays up to L/2).
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import ddesys
from ddesys import DiscreteDelaySystem
try:  # tests/ on sys.path (pytest's default rootdir-relative import of a package-less test dir)
    from oracle import brute_force, char_poly, impulse_response, random_system, roots_radius, split_delay
except ImportError:  # tests/ made a package
    from tests.oracle import brute_force, char_poly, impulse_response, random_system, roots_radius, split_delay

TESTS_DIR = Path(__file__).resolve().parent
REPO = TESTS_DIR.parent

MODE_KEYS = ("lam", "mu", "bbar", "c")


def rel_err(K, K_ref):
    """Per-channel ``max_t |K - K_ref| / max_t |K_ref|``, maximized over channels."""
    K = np.asarray(K, dtype=np.float64).reshape(-1, K_ref.shape[-1])
    K_ref = K_ref.reshape(-1, K_ref.shape[-1])
    return float((np.abs(K - K_ref).max(-1) / np.abs(K_ref).max(-1)).max())


def oracle_kernel(s, L):
    return impulse_response(s["lam"], s["mu"], s["bbar"], s["c"], s["delay"], L)


# ---------------------------------------------------------------------------------------------------
# Oracle self-consistency (so a failure below points at ddesys, not at the oracle)
# ---------------------------------------------------------------------------------------------------
def test_oracle_impulse_response_matches_brute_force():
    rng = np.random.default_rng(0)
    s = random_system(rng, 3, 4, 0.1, 80, init="lin", phase="uniform", p=0.3)
    s["delay"][0] = 3.0                                   # an integer delay: alpha = 0
    x = np.zeros((3, 80))
    x[:, 0] = 1.0
    y = brute_force(**s, x=x)
    K = oracle_kernel(s, 80)
    K[:, 0] += s["d"]
    np.testing.assert_allclose(y, K, rtol=0, atol=1e-14 * np.abs(K).max())


def test_oracle_char_poly_layout():
    # k = 1 merges the z^1 terms: P(z) = z^2 - (lam + mu (1 - alpha)) z - mu alpha
    np.testing.assert_allclose(char_poly(0.3, 0.2, 1, 0.25), [1, -0.3 - 0.15, -0.05])
    c = char_poly(0.3, 0.2, 4, 0.25)
    assert c.size == 6
    np.testing.assert_allclose(c, [1, -0.3, 0, 0, -0.15, -0.05])
    assert split_delay(np.array([3.0, 3.75]))[0].tolist() == [3, 3]


# ---------------------------------------------------------------------------------------------------
# FFT kernel with automatic settings vs the oracle impulse response
# ---------------------------------------------------------------------------------------------------
SYSTEM_KINDS = [("inv", "pi", 0.1), ("lin", "pi", 0.1), ("inv", "uniform", 0.3)]


@pytest.mark.parametrize("L", [256, 1024])
@pytest.mark.parametrize("dt", [1e-3, 1e-2, 1e-1])
@pytest.mark.parametrize("init,phase,p", SYSTEM_KINDS, ids=["inv", "lin", "inv-randphase"])
def test_fft_kernel_auto_matches_oracle(L, dt, init, phase, p):
    rng = np.random.default_rng([L, int(round(-math.log10(dt))), len(init), len(phase)])
    s = random_system(rng, 3, 6, dt, L, init=init, p=p, phase=phase)
    sysm = DiscreteDelaySystem(**s)
    K_ref = oracle_kernel(s, L)

    K64, contour = sysm.kernel(L, return_contour=True)
    assert K64.shape == (3, L) and K64.dtype == np.float64
    assert contour.M >= 2 * L
    assert rel_err(K64, K_ref) <= 1e-10

    K32 = sysm.kernel(L, dtype=np.float32)
    assert K32.dtype == np.float32
    assert rel_err(K32, K_ref) <= 2e-6


@pytest.mark.parametrize("dt", [1e-3, 1e-1])
def test_fft_kernel_float32_synthesis(dt):
    """``compute_dtype=float32``: the low-precision synthesis. SPEC section 5 puts its floor at a few
    1e-5 (worst float32 case over random systems); assert that documented bound."""
    rng = np.random.default_rng(7)
    L = 512
    s = random_system(rng, 4, 8, dt, L, init="inv", phase="uniform", p=0.3)
    K = DiscreteDelaySystem(**s).kernel(L, dtype=np.float32, compute_dtype=np.float32)
    assert K.dtype == np.float32
    assert rel_err(K, oracle_kernel(s, L)) <= 3e-5


def test_fft_kernel_complex64_parameters():
    """complex64 parameters: float32 output by default, synthesized in float64 (so the error is the
    float32 rounding of the output, measured against the oracle fed the same rounded parameters)."""
    rng = np.random.default_rng(3)
    L = 512
    s = random_system(rng, 3, 8, 1e-2, L)
    s32 = {k: (v.astype(np.complex64) if k in MODE_KEYS else v.astype(np.float32)) for k, v in s.items()}
    K = DiscreteDelaySystem(**s32).kernel(L)
    assert K.dtype == np.float32
    s64 = {k: (v.astype(np.complex128) if k in MODE_KEYS else v.astype(np.float64)) for k, v in s32.items()}
    assert rel_err(K, oracle_kernel(s64, L)) <= 2e-6


def test_fft_kernel_explicit_settings():
    """Explicit (M, eps): the paper's setting M = 2L, eps = 1e-3, and a balanced one. SPEC section 5:
    the restored kernel is the aliased sum K_t + eps K_{t+M} + eps^2 K_{t+2M} + ..., which the oracle
    reproduces from a longer impulse response."""
    rng = np.random.default_rng(11)
    L = 512
    s = random_system(rng, 3, 8, 0.1, L, max_delay_frac=0.3)
    sysm = DiscreteDelaySystem(**s)
    for eps, M in [(1e-3, 2 * L), (1e-10, 4 * L), (1e-2, 2 * L + 6)]:
        K, contour = sysm.kernel(L, eps=eps, M=M, return_contour=True)
        assert contour.M == M
        np.testing.assert_allclose(contour.eps, eps, rtol=1e-9)
        J = 5                                             # eps^5 <= 1e-10: later terms are negligible
        K_long = oracle_kernel(s, J * M + L)
        K_alias = sum(eps**j * K_long[:, j * M:j * M + L] for j in range(J))
        assert rel_err(K, K_alias) <= 1e-10
        K_ref = K_long[:, :L]
        assert rel_err(K, K_ref) <= 2 * eps * np.abs(K_long[:, M:]).max() / np.abs(K_ref).max(-1).min() + 1e-10


@pytest.mark.slow
@pytest.mark.parametrize("L", [4096, 8192])
@pytest.mark.parametrize("dt", [1e-3, 1e-2, 1e-1])
@pytest.mark.parametrize("init,phase,p", SYSTEM_KINDS + [("lin", "uniform", 0.5)],
                         ids=["inv", "lin", "inv-randphase", "lin-randphase-p05"])
def test_fft_kernel_auto_long(L, dt, init, phase, p):
    rng = np.random.default_rng([L, int(round(-math.log10(dt))), len(init), len(phase), int(10 * p)])
    s = random_system(rng, 4, 16, dt, L, init=init, p=p, phase=phase, max_delay_frac=0.5)
    s["delay"][0] = L / 2                                 # the longest delay allowed
    s["delay"][1] = 1.0                                   # the shortest
    sysm = DiscreteDelaySystem(**s)
    K_ref = oracle_kernel(s, L)
    assert rel_err(sysm.kernel(L), K_ref) <= 1e-10
    assert rel_err(sysm.kernel(L, dtype=np.float32), K_ref) <= 2e-6
    assert rel_err(sysm.kernel(L, method="recurrence"), K_ref) <= 1e-12


# ---------------------------------------------------------------------------------------------------
# Recurrence: simulate and the recurrence kernel
# ---------------------------------------------------------------------------------------------------
def _sim_case(seed=5, L=150, N2=4):
    rng = np.random.default_rng(seed)
    s = random_system(rng, 3, N2, 0.05, L, init="lin", phase="uniform", p=0.3)
    s["delay"] = np.array([1.0, 7.0, 41.3])               # k = 1, an integer delay, a fractional one
    x = rng.standard_normal((2, 3, L))                    # batch (2, 3) against the system's (3,)
    return s, x


def test_simulate_matches_brute_force():
    s, x = _sim_case()
    sysm = DiscreteDelaySystem(**s)
    y = sysm.simulate(x)
    assert y.shape == (2, 3, x.shape[-1]) and y.dtype == np.float64
    y_ref = brute_force(**s, x=x).reshape(y.shape)
    assert np.abs(y - y_ref).max() <= 1e-12 * np.abs(y_ref).max()

    y2, h = sysm.simulate(x, return_states=True)
    assert h.shape == (2, 3, sysm.n_modes, x.shape[-1])
    assert np.iscomplexobj(h)
    y_ref2, h_ref = brute_force(**s, x=x, return_states=True)
    np.testing.assert_array_equal(y2, y)
    h_ref = h_ref.reshape(h.shape)
    assert np.abs(h - h_ref).max() <= 1e-12 * np.abs(h_ref).max()


def test_simulate_system_batch_broadcasts_against_x():
    """x without a batch axis of its own broadcasts to the system's batch; float32 x gives float32 y."""
    s, x = _sim_case(seed=6, L=60)
    sysm = DiscreteDelaySystem(**s)
    x1 = x[0, 0]                                          # (L,)
    y = sysm.simulate(x1)
    assert y.shape == (3, 60)
    y_ref = brute_force(**s, x=x1).reshape(3, 60)
    assert np.abs(y - y_ref).max() <= 1e-12 * np.abs(y_ref).max()
    y32 = sysm.simulate(x1.astype(np.float32))
    assert y32.dtype == np.float32
    y_ref32 = brute_force(**s, x=x1.astype(np.float32)).reshape(3, 60)
    assert np.abs(y32 - y_ref32).max() <= 1e-6 * np.abs(y_ref32).max()


@pytest.mark.parametrize("init,phase", [("inv", "pi"), ("lin", "uniform")])
def test_recurrence_kernel_matches_oracle(init, phase):
    rng = np.random.default_rng(8)
    L = 700
    s = random_system(rng, 4, 8, 1e-2, L, init=init, phase=phase, p=0.2)
    sysm = DiscreteDelaySystem(**s)
    K_ref = oracle_kernel(s, L)
    K = sysm.kernel(L, method="recurrence")
    assert K.shape == (4, L)
    assert rel_err(K, K_ref) <= 1e-12
    # d is excluded from the kernel and added back by impulse()
    imp = sysm.impulse(L, method="recurrence")
    np.testing.assert_allclose(imp[:, 0] - K[:, 0], s["d"], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(imp[:, 1:], K[:, 1:])


def test_recurrence_kernel_of_unstable_system():
    """method='recurrence' gives the finite-length response even where the FFT kernel must refuse."""
    lam = np.array([[1.02 + 0.1j, 0.3]])
    mu = np.array([[0.05j, -0.2]])
    s = dict(lam=lam, mu=mu, bbar=np.ones_like(lam), c=np.array([[0.7 - 0.2j, 1.0]]),
             delay=np.array([4.5]), d=np.array([0.0]))
    K = DiscreteDelaySystem(**s).kernel(200, method="recurrence")
    assert rel_err(K, oracle_kernel(s, 200)) <= 1e-12


@pytest.mark.slow
def test_simulate_long_matches_brute_force():
    """Long sequence, delays up to L/2, pure-Python oracle (a few seconds)."""
    rng = np.random.default_rng(31)
    L = 4096
    s = random_system(rng, 3, 4, 1e-2, L, init="inv", phase="uniform", p=0.4)
    s["delay"][0] = L / 2
    x = rng.standard_normal((3, L))
    y, h = DiscreteDelaySystem(**s).simulate(x, return_states=True)
    y_ref, h_ref = brute_force(**s, x=x, return_states=True)
    assert np.abs(y - y_ref).max() <= 1e-12 * np.abs(y_ref).max()
    assert np.abs(h - h_ref).max() <= 1e-12 * np.abs(h_ref).max()


@pytest.mark.slow
def test_fft_kernel_random_sweep():
    """Random systems (S4D-Inv/Lin, p up to 0.5, any phase, delays up to L/2, dt log-uniform)."""
    rng = np.random.default_rng(32)
    worst64 = worst32 = 0.0
    for _ in range(40):
        L = int(rng.choice([512, 2048, 8192]))
        dt = float(10 ** rng.uniform(-3, -1))
        s = random_system(rng, 4, 16, dt, L, init=str(rng.choice(["inv", "lin"])), p=float(rng.uniform(0, 0.5)),
                          phase=str(rng.choice(["pi", "uniform"])))
        sysm = DiscreteDelaySystem(**s)
        K_ref = oracle_kernel(s, L)
        worst64 = max(worst64, rel_err(sysm.kernel(L), K_ref))
        worst32 = max(worst32, rel_err(sysm.kernel(L, dtype=np.float32, compute_dtype=np.float32), K_ref))
    assert worst64 <= 1e-10
    assert worst32 <= 3e-5


# ---------------------------------------------------------------------------------------------------
# Frequency domain
# ---------------------------------------------------------------------------------------------------
def test_freqresp_matches_dft_of_long_impulse_response():
    rng = np.random.default_rng(12)
    s = random_system(rng, 3, 4, 0.1, 10, init="lin", phase="uniform", p=0.2)
    s["delay"] = np.array([1.0, 2.5, 4.2])
    sysm = DiscreteDelaySystem(**s)
    T = 3000                                              # |lam| + |mu| = exp(-0.05): decayed past 1e-60
    K = oracle_kernel(s, T)
    assert np.abs(K[:, -50:]).max() < 1e-40 * np.abs(K).max()
    omega = np.concatenate([np.linspace(0.0, np.pi, 33), [-0.7, 2.0 * np.pi + 0.3]])
    G = sysm.freqresp(omega)
    assert G.shape == (3, omega.size)
    t = np.arange(T)
    ref = K @ np.exp(-1j * np.outer(t, omega)) + s["d"][:, None]
    assert np.abs(G - ref).max() <= 1e-10 * np.abs(ref).max()
    # real impulse response: K(e^{-i w}) = conj K(e^{i w})
    np.testing.assert_allclose(sysm.freqresp(-omega), np.conj(G), rtol=1e-12, atol=1e-12)

    # off the unit circle (|z| > spectral radius): the Z-transform sum_t K_t z^{-t} + d
    z = 1.05 * np.exp(1j * np.linspace(-3.0, 3.0, 13))
    Gz = sysm.transfer(z)
    ref_z = K @ (z[None, :] ** -t[:, None]) + s["d"][:, None]
    assert np.abs(Gz - ref_z).max() <= 1e-10 * np.abs(ref_z).max()


def test_transfer_rejects_origin():
    s = random_system(np.random.default_rng(0), 2, 3, 0.1, 20)
    with pytest.raises(ValueError, match="z"):
        DiscreteDelaySystem(**s).transfer(np.array([1.0, 0.0]))


# ---------------------------------------------------------------------------------------------------
# Stability: exact test, spectral radius and bounds against polynomial roots
# ---------------------------------------------------------------------------------------------------
# magnitudes: 0 or in [1e-4, 1.2]. Far smaller nonzero magnitudes put a (k+1)-fold cluster of roots
# near 0 whose np.roots (companion eigenvalue) moduli are wrong by orders of magnitude: no oracle there.
magnitude = st.one_of(st.just(0.0), st.floats(1e-4, 1.2))
phase_st = st.floats(0.0, 2 * np.pi)
mode_st = st.tuples(magnitude, phase_st, magnitude, phase_st, st.integers(1, 40),
                    st.floats(0.0, 1.0, exclude_max=True))


def _mode(m):
    rl, pl, rm, pm, k, alpha = m
    return rl * np.exp(1j * pl), rm * np.exp(1j * pm), k, alpha


@settings(max_examples=300, deadline=None)
@given(mode_st)
def test_exact_stability_agrees_with_roots(m):
    lam, mu, k, alpha = _mode(m)
    R = roots_radius(lam, mu, k, alpha)
    assume(abs(R - 1.0) > 1e-7)
    assert bool(ddesys.is_stable_exact(lam, mu, k, alpha)) == (R < 1.0)


@settings(max_examples=300, deadline=None)
@given(mode_st)
def test_spectral_radius_and_bound_agree_with_roots(m):
    lam, mu, k, alpha = _mode(m)
    R = roots_radius(lam, mu, k, alpha)
    r = float(ddesys.spectral_radius(lam, mu, k, alpha))
    assert abs(r - R) <= 1e-9 * R + 1e-300
    rb = float(ddesys.radius_bound(lam, mu, k, alpha))
    assert rb >= R * (1 - 1e-9)


@settings(max_examples=300, deadline=None)
@given(mode_st)
def test_positive_margin_implies_exact_stable(m):
    lam, mu, k, alpha = _mode(m)
    margin = float(ddesys.stability_margin(lam, mu))
    assume(margin > 0)
    assert bool(ddesys.is_stable_exact(lam, mu, k, alpha))
    # the exact machinery itself (not the short-cut) agrees: no root outside the unit circle
    wind, certified = ddesys.winding_number(lam, mu, k, alpha, 1.0)
    if margin > 1e-9:
        assert certified and int(wind) == 0
    assert roots_radius(lam, mu, k, alpha) < 1.0 + 1e-12


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.floats(0.5, 1.2))
def test_system_exact_never_contradicts_sufficient(seed, scale):
    rng = np.random.default_rng(seed)
    H, N2 = 5, 6
    lam = scale * rng.uniform(0, 1, (H, N2)) * np.exp(2j * np.pi * rng.uniform(size=(H, N2)))
    mu = scale * rng.uniform(0, 1, (H, N2)) * np.exp(2j * np.pi * rng.uniform(size=(H, N2)))
    delay = rng.uniform(1, 60, H)
    sysm = DiscreteDelaySystem(lam, mu, np.ones_like(lam), np.ones_like(lam), delay)
    suff = sysm.is_stable()
    exact = sysm.is_stable(exact=True)
    assert suff.shape == exact.shape == (H,)
    assert not np.any(suff & ~exact)
    # per channel, the exact answer is the roots' answer (skipping near-marginal channels)
    k, alpha = split_delay(delay)
    for h in range(H):
        R = max(roots_radius(lam[h, n], mu[h, n], k[h], alpha[h]) for n in range(N2))
        if abs(R - 1) > 1e-7:
            assert bool(exact[h]) == (R < 1)
    R_sys = sysm.spectral_radius()
    assert np.all(sysm.decay_bound() >= R_sys * (1 - 1e-9))


SR_BIG_CASES = [  # (|lam|, arg lam, |mu|, arg mu, k, alpha): degree >= 96 -> the bisection path
    (0.9, 0.3, 0.05, np.pi, 100, 0.25),
    (0.5, 2.0, 0.5, 1.0, 150, 0.0),
    (0.95, -1.0, 0.04, 3.0, 217, 0.75),
    (0.0, 0.0, 0.8, 0.5, 240, 0.5),
    (1.1, 0.7, 0.2, -2.0, 300, 0.1),
    (0.3, 0.0, 1.05, 0.0, 123, 0.9),
    (0.6, 1.0, 0.0, 0.0, 180, 0.4),
]


@pytest.mark.parametrize("case", SR_BIG_CASES)
def test_spectral_radius_large_delay(case):
    rl, pl, rm, pm, k, alpha = case
    lam, mu = rl * np.exp(1j * pl), rm * np.exp(1j * pm)
    R = roots_radius(lam, mu, k, alpha)
    assert char_poly(lam, mu, k, alpha).size == k + 2
    r = float(ddesys.spectral_radius(lam, mu, k, alpha))
    assert abs(r - R) <= 1e-9 * R
    assert float(ddesys.radius_bound(lam, mu, k, alpha)) >= R * (1 - 1e-9)
    if abs(R - 1) > 1e-7:
        assert bool(ddesys.is_stable_exact(lam, mu, k, alpha)) == (R < 1)


def test_spectral_radius_vectorized_mixed_degrees():
    rng = np.random.default_rng(21)
    P = 12
    lam = rng.uniform(0, 1.1, P) * np.exp(2j * np.pi * rng.uniform(size=P))
    mu = rng.uniform(0, 0.6, P) * np.exp(2j * np.pi * rng.uniform(size=P))
    k = rng.integers(1, 250, P)
    alpha = rng.uniform(0, 1, P)
    r = ddesys.spectral_radius(lam.reshape(3, 4), mu.reshape(3, 4), k.reshape(3, 4), alpha.reshape(3, 4))
    assert r.shape == (3, 4)
    R = np.array([roots_radius(*a) for a in zip(lam, mu, k, alpha)]).reshape(3, 4)
    np.testing.assert_allclose(r, R, rtol=1e-9)


def test_spectral_radius_large_delay_without_delayed_branch():
    """mu = 0: P(z) = z^k (z - lam), radius |lam|. Run in a child process under a 2 GiB address-space
    limit so the failure mode (unbounded memory) cannot take the test machine down."""
    import resource

    def limit():  # pragma: no cover - runs in the child
        resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))

    code = "import ddesys; print(float(ddesys.spectral_radius(0.01, 0.0, 200, 0.3)))"
    env = dict(os.environ, DDESYS_DISABLE_NUMBA="1")      # numba's JIT reserves address space
    proc = subprocess.run([sys.executable, "-c", code], cwd=str(REPO), env=env, capture_output=True,
                          text=True, timeout=120, preexec_fn=limit)
    assert proc.returncode == 0, proc.stderr[-500:]
    assert abs(float(proc.stdout.strip()) - 0.01) <= 1e-11


# ---------------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------------
@pytest.fixture
def good():
    return random_system(np.random.default_rng(0), 3, 4, 0.1, 64)


def test_delay_below_one_step(good):
    with pytest.raises(ValueError, match="delay"):
        DiscreteDelaySystem(**{**good, "delay": np.array([0.5, 2.0, 3.0])})


@pytest.mark.parametrize("name", ["lam", "mu", "bbar", "c", "delay", "d"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_parameter(good, name, bad):
    v = np.array(good[name], copy=True)
    v.flat[1] = bad
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        DiscreteDelaySystem(**{**good, name: v})


def test_mismatched_mode_shapes():
    lam = np.full((3, 4), 0.5 + 0j)
    mu = np.full((2, 4), 0.1 + 0j)
    with pytest.raises(ValueError, match=r"lam.*mu|mu.*lam"):
        DiscreteDelaySystem(lam, mu, np.ones((3, 4)), np.ones((3, 4)), 2.0)


def test_delay_shape_does_not_broadcast(good):
    with pytest.raises(ValueError, match="delay"):
        DiscreteDelaySystem(**{**good, "delay": np.full(5, 2.0)})
    with pytest.raises(ValueError, match=r"\bd\b"):
        DiscreteDelaySystem(**{**good, "d": np.zeros(5)})


def test_complex_delay(good):
    with pytest.raises(TypeError, match="delay"):
        DiscreteDelaySystem(**{**good, "delay": np.array([2.0 + 1j, 3.0, 4.0])})


@pytest.mark.parametrize("eps", [0.0, 1.0, 1.5, -1e-3, float("nan"), "often"])
def test_eps_outside_unit_interval(good, eps):
    with pytest.raises(ValueError, match="eps"):
        DiscreteDelaySystem(**good).kernel(64, eps=eps)


@pytest.mark.parametrize("M", [64, 127, 128.0])
def test_fft_length_too_short(good, M):
    with pytest.raises(ValueError, match=r"\bM\b"):
        DiscreteDelaySystem(**good).kernel(64, M=M)


def test_bad_length_and_method(good):
    sysm = DiscreteDelaySystem(**good)
    with pytest.raises(ValueError, match=r"\bL\b"):
        sysm.kernel(0)
    with pytest.raises(ValueError, match="method"):
        sysm.kernel(16, method="euler")


def test_unstable_fft_kernel():
    lam = np.array([[0.5, 1.01 + 0.0j], [0.3, 0.2]])
    mu = np.zeros_like(lam)
    sysm = DiscreteDelaySystem(lam, mu, np.ones_like(lam), np.ones_like(lam), np.array([3.0, 2.0]))
    with pytest.raises(ValueError, match="unstable"):
        sysm.kernel(32)
    # stable by the exact test but not by the sufficient one: the FFT kernel is allowed and right
    # (k = 1, alpha = 0: P(z) = z (z - lam - mu), roots 0 and 0.05, while |lam| + |mu| = 1.15)
    lam2 = np.array([[0.6 + 0j]])
    mu2 = np.array([[-0.55 + 0j]])
    assert roots_radius(0.6, -0.55, 1, 0.0) < 1
    s2 = dict(lam=lam2, mu=mu2, bbar=np.ones_like(lam2), c=np.ones_like(lam2),
              delay=np.array([1.0]), d=np.array([0.0]))
    sysm2 = DiscreteDelaySystem(**s2)
    assert not sysm2.is_stable()[0] and sysm2.is_stable(exact=True)[0]
    assert rel_err(sysm2.kernel(256), oracle_kernel(s2, 256)) <= 1e-10


def test_complex_input_to_simulate(good):
    sysm = DiscreteDelaySystem(**good)
    with pytest.raises(TypeError, match="real"):
        sysm.simulate(np.ones((3, 10)) + 1j)
    with pytest.raises(ValueError, match=r"\bx\b"):
        sysm.simulate(np.full((3, 10), np.nan))
    with pytest.raises(ValueError, match=r"\bx\b"):
        sysm.simulate(np.ones((4, 10)))


@pytest.mark.parametrize("cdt", [np.float32, np.float64])
def test_meaningless_restoration_raises(good, cdt):
    with pytest.raises(ValueError, match="eps"):
        DiscreteDelaySystem(**good).kernel(64, eps=1e-300, M=128, compute_dtype=cdt)


# ---------------------------------------------------------------------------------------------------
# Import hygiene and the NumPy fallback
# ---------------------------------------------------------------------------------------------------
def _run_py(code, env_extra=None, timeout=240):
    env = dict(os.environ)
    env.update(env_extra or {})
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(TESTS_DIR), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=str(REPO), env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"subprocess failed:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_import_without_cupy_or_torch():
    """``sys.modules[name] = None`` makes any ``import cupy`` / ``import torch`` raise; ddesys must
    still import and compute (all arguments as NumPy arrays; scalars are covered below)."""
    out = _run_py("""
        import sys, json
        sys.modules["cupy"] = None
        sys.modules["torch"] = None
        import numpy as np
        import ddesys
        lam = np.array([[0.9 * np.exp(0.3j), 0.5]]); mu = np.array([[0.05j, -0.1]])
        s = ddesys.DiscreteDelaySystem(lam, mu, np.ones_like(lam), np.ones_like(lam), np.array([3.5]),
                                       np.array([0.2]))
        K = s.kernel(64)
        y = s.simulate(np.ones(16))
        G = s.freqresp(np.linspace(0, 3, 5))
        print(json.dumps(dict(shape=list(K.shape), finite=bool(np.isfinite(K).all()),
                              y=list(y.shape), G=list(G.shape), stable=bool(s.is_stable(exact=True)[0]),
                              cupy=sys.modules["cupy"] is None, torch=sys.modules["torch"] is None)))
    """)
    assert out == dict(shape=[1, 64], finite=True, y=[1, 16], G=[1, 5], stable=True, cupy=True, torch=True)


def test_nothing_tries_to_import_cupy_or_torch():
    """An import hook records (and refuses) every attempt to import cupy or torch: there must be none,
    whatever the argument types (Python scalars included)."""
    out = _run_py("""
        import sys, json
        tried = []
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("cupy", "torch"):
                    tried.append(name)
                    raise ImportError(f"blocked: {name}")
                return None
        sys.meta_path.insert(0, Block())
        import numpy as np
        import ddesys
        lam = np.array([[0.9 * np.exp(0.3j), 0.5]]); mu = np.array([[0.05j, -0.1]])
        s = ddesys.DiscreteDelaySystem(lam, mu, np.ones_like(lam), np.ones_like(lam), 3.5, 0.2)
        K = s.kernel(64)
        y = s.simulate(np.ones(16))
        print(json.dumps(dict(tried=tried, finite=bool(np.isfinite(K).all()), y=list(y.shape))))
    """)
    assert out == dict(tried=[], finite=True, y=[1, 16])


def test_scalar_arguments_with_cupy_blocked_via_sys_modules():
    _run_py("""
        import sys, json
        sys.modules["cupy"] = None
        sys.modules["torch"] = None
        import numpy as np
        import ddesys
        lam = np.array([[0.5 + 0j]])
        K = ddesys.DiscreteDelaySystem(lam, 0.1 * lam, lam, lam, 3.5).kernel(8)   # delay, d: Python floats
        print(json.dumps(dict(ok=bool(np.isfinite(K).all()))))
    """)


def test_numpy_fallback_without_numba():
    out = _run_py("""
        import json
        import numpy as np
        import ddesys
        from oracle import brute_force, random_system
        rng = np.random.default_rng(4)
        errs = []
        for delays in ([2.5, 7.0, 13.25], [5.5, 5.5, 5.5]):       # per-channel k, and one shared k
            s = random_system(rng, 3, 3, 0.05, 60, init="lin", phase="uniform", p=0.3)
            s["delay"] = np.array(delays)
            x = rng.standard_normal((2, 3, 60))
            y, h = ddesys.DiscreteDelaySystem(**s).simulate(x, return_states=True)
            y_ref, h_ref = brute_force(**s, x=x, return_states=True)
            errs.append(float(np.abs(y - y_ref.reshape(y.shape)).max() / np.abs(y_ref).max()))
            errs.append(float(np.abs(h - h_ref.reshape(h.shape)).max() / np.abs(h_ref).max()))
        print(json.dumps(dict(numba=ddesys.numba_available(), err=max(errs))))
    """, env_extra={"DDESYS_DISABLE_NUMBA": "1"})
    assert out["numba"] is False
    assert out["err"] <= 1e-12
