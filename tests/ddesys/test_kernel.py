"""The ``DiscreteDelaySystem`` kernel (FFT with automatic and explicit settings, the recurrence
kernel) and its frequency domain (``freqresp``, ``transfer``) against the independent oracle
(`verification/reference/loops.py`, float64, written from docs/theory.md §2-§5 without importing ddesys).

Default run: a few seconds of compute plus Numba compilation. `-m slow`: long kernels (L up to 8192,
delays up to L/2) and a random sweep.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from ddesys import DiscreteDelaySystem
from discrete_helpers import oracle_kernel
from ddesys.verification.reference import brute_force, char_poly, rel_err, split_delay
from random_systems import random_system

MODE_KEYS = ("lam", "mu", "bbar", "c")


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

    K64, contour = sysm.kernel(L), sysm.contour(L)
    assert K64.shape == (3, L) and K64.dtype == np.float64
    assert contour.M >= 2 * L
    assert rel_err(K64, K_ref) <= 1e-10

    K32 = sysm.kernel(L, dtype=np.float32)
    assert K32.dtype == np.float32
    assert rel_err(K32, K_ref) <= 2e-6


@pytest.mark.parametrize("dt", [1e-3, 1e-1])
def test_fft_kernel_float32_synthesis(dt):
    """``compute_dtype=float32``: the low-precision synthesis. docs/theory.md §5 puts its floor at a few
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
    """Explicit (M, eps): the paper's setting M = 2L, eps = 1e-3, and a balanced one. docs/theory.md §5:
    the restored kernel is the aliased sum K_t + eps K_{t+M} + eps^2 K_{t+2M} + ..., which the oracle
    reproduces from a longer impulse response."""
    rng = np.random.default_rng(11)
    L = 512
    s = random_system(rng, 3, 8, 0.1, L, max_delay_frac=0.3)
    sysm = DiscreteDelaySystem(**s)
    for eps, M in [(1e-3, 2 * L), (1e-10, 4 * L), (1e-2, 2 * L + 6)]:
        K, contour = sysm.kernel(L, eps=eps, M=M), sysm.contour(L, eps=eps, M=M)
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
# Recurrence kernel
# ---------------------------------------------------------------------------------------------------
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
    # impulse() is the response to a unit impulse, d included (the kernel excludes it): the oracle's
    # brute-force loop driven by delta_t, for both methods
    delta = np.zeros((4, L))
    delta[:, 0] = 1.0
    imp_ref = brute_force(**s, x=delta)
    for method in ("recurrence", "fft"):
        imp = sysm.impulse(L, method=method)
        assert imp.shape == (4, L)
        assert rel_err(imp, imp_ref) <= (1e-12 if method == "recurrence" else 1e-10), method


def test_recurrence_kernel_of_unstable_system():
    """method='recurrence' gives the finite-length response even where the FFT kernel must refuse."""
    lam = np.array([[1.02 + 0.1j, 0.3]])
    mu = np.array([[0.05j, -0.2]])
    s = dict(lam=lam, mu=mu, bbar=np.ones_like(lam), c=np.array([[0.7 - 0.2j, 1.0]]),
             delay=np.array([4.5]), d=np.array([0.0]))
    K = DiscreteDelaySystem(**s).kernel(200, method="recurrence")
    assert rel_err(K, oracle_kernel(s, 200)) <= 1e-12


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
