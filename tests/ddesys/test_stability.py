"""Stability of ``DiscreteDelaySystem`` modes: the exact test, the spectral radius and its bounds
against polynomial roots from the independent oracle (`verification/reference/loops.py`, float64, written
from docs/theory.md §2-§5 without importing ddesys), including hypothesis property tests.
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import ddesys
from ddesys import DiscreteDelaySystem
from discrete_helpers import REPO
from ddesys.verification.reference import char_poly, roots_radius, split_delay


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
    margin = float(ddesys.sufficient_margin(lam, mu))
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
    suff = sysm.is_stable(method="sufficient")
    exact = sysm.is_stable()
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


@pytest.mark.integration
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
