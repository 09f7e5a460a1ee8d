"""Hostile inputs to ``ddesys``: huge delays, the exact stability test's memory budget, integer output
dtypes, unstable simulations, and arguments aimed at the compiled recurrence's indices.

Every accepted input must give finite, correct output, checked against the independent float64 oracle
(`verification/reference/loops.py`, written from docs/theory.md §2-§5 without importing ddesys); every
refused input must raise at the public call, naming the argument, the limit and the remedy.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc
import warnings

import numpy as np
import pytest

import ddesys
from ddesys import DelaySystem, DiscreteDelaySystem
from ddesys.recurrence import run_recurrence
from discrete_helpers import REPO, oracle_kernel
from ddesys.verification.reference import brute_force, rel_err, roots_radius


def _system(delay, lam=(0.5 + 0.2j, -0.3 + 0j), mu=(0.2 - 0.1j, 0.4j), d=0.3):
    lam, mu = np.array([lam]), np.array([mu])
    return dict(lam=lam, mu=mu, bbar=np.array([[1.0, 0.5 - 0.5j]]), c=np.array([[0.7 - 0.2j, 1.0 + 0.3j]]),
                delay=np.array([delay], dtype=np.float64), d=np.array([d]))


def _check_against_oracle(s, L=40, seed=0):
    x = np.random.default_rng(seed).standard_normal((1, L))
    sysm = DiscreteDelaySystem(**s)
    y, h = sysm.simulate(x), sysm.states(x)
    y_ref, h_ref = brute_force(**s, x=x, return_states=True)
    assert np.all(np.isfinite(y)) and np.all(np.isfinite(h))
    assert np.abs(y - y_ref).max() <= 1e-12 * np.abs(y_ref).max()
    assert np.abs(h - h_ref.reshape(h.shape)).max() <= 1e-12 * np.abs(h_ref).max()


# ---------------------------------------------------------------------------------------------------
# 1. Delays: what integer arithmetic can hold
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("delay", [1e20, 2.0**63, 2.0**31, 2.0**31 - 0.5, 1e300])
def test_delay_above_limit_refused(delay):
    with pytest.raises(ValueError, match=r"\bdelay\b.*MAX_DELAY_STEPS.*2147483647.*coarser"):
        DiscreteDelaySystem(**_system(delay))


def test_delay_at_limit_and_one_ulp_below_an_integer_match_oracle():
    """The largest accepted delay, and fractional parts at 1 ulp from 1, with a short sequence."""
    assert ddesys.discrete.MAX_DELAY_STEPS == 2**31 - 1
    for delay in (2.0**31 - 1, 2.0**31 - 1.25, np.nextafter(8.0, 0.0), np.nextafter(1.0, 2.0), 1.0):
        _check_against_oracle(_system(delay))
    s = _system(2.0**31 - 1)
    K = DiscreteDelaySystem(**s).kernel(64)                    # FFT path: stable by the margin
    assert rel_err(K, oracle_kernel(s, 64)) <= 1e-10
    with pytest.raises(ValueError, match=r"\bdelay\b.*<= 1 step|delay must be >= 1"):
        DiscreteDelaySystem(**_system(np.nextafter(1.0, 0.0)))
    with pytest.raises(ValueError, match=r"\bdelay\b.*MAX_DELAY_STEPS"):   # float32(2**31 - 1) = 2**31
        DiscreteDelaySystem(**{**_system(1.0), "delay": np.array([2**31 - 1], dtype=np.float32)})


def test_continuous_discretize_refuses_delay_and_overflow():
    s = DelaySystem([-0.5 + 1j], [0.2], [1.0], [1.0], 1.0)
    with pytest.raises(ValueError, match=r"\bdt\b.*MAX_DELAY_STEPS"):
        s.discretize(1e-12)                                    # tau / dt = 1e12 steps
    big = DelaySystem([800.0 + 0j], [0.2], [1.0], [1.0], 1.0)
    with pytest.raises(ValueError, match=r"\bdt\b.*overflow"):
        big.discretize(1.0)                                    # exp(800) is not a float64


def test_continuous_simulate_refuses_grid_beyond_budget():
    s = DelaySystem([-0.5 + 1j], [0.2], [1.0], [1.0], 1.0)
    with pytest.raises(ValueError, match=r"\bh\b.*GiB"):
        s.simulate(lambda t: np.ones_like(t), np.linspace(0, 10, 5), h=1e-15)
    with pytest.raises(ValueError, match=r"\bh\b"):
        s.simulate(lambda t: np.ones_like(t), np.linspace(0, 10, 5), h=np.nan)


# ---------------------------------------------------------------------------------------------------
# 2. The exact stability test: a memory budget, checked before allocating
# ---------------------------------------------------------------------------------------------------
@pytest.mark.integration
def test_exact_stability_at_huge_delay_refuses_before_allocating():
    """Delay 1e9, not certified by |lam| + |mu| < 1: the exact test must refuse (ValueError naming the
    limit) rather than allocate. Run in a child under a 2 GiB address-space limit, so the failure mode
    (tens of GiB) cannot take the machine down."""
    import resource

    def limit():  # pragma: no cover - runs in the child
        resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))

    code = ("import numpy as np, ddesys\n"
            "s = ddesys.DiscreteDelaySystem([[0.5 + 0.1j]], [[0.6]], [[1.0]], [[1.0]], 1e9)\n"
            "for call in (lambda: s.is_stable(), lambda: s.spectral_radius(), lambda: s.kernel(8)):\n"
            "    try:\n"
            "        call(); print('ACCEPTED')\n"
            "    except ValueError as e:\n"
            "        print('REFUSED', e)\n")
    env = dict(os.environ, DDESYS_DISABLE_NUMBA="1")      # numba's JIT reserves address space
    proc = subprocess.run([sys.executable, "-c", code], cwd=str(REPO), env=env, capture_output=True,
                          text=True, timeout=120, preexec_fn=limit)
    assert proc.returncode == 0, proc.stderr[-800:]
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 3 and all(ln.startswith("REFUSED") for ln in lines), proc.stdout
    assert all("method='sufficient'" in ln and "sufficient_margin()" in ln for ln in lines)
    assert "recurrence" in lines[2]                      # kernel() says what to use instead


def test_exact_stability_budget_names_max_bytes():
    lam, mu, k, alpha = 0.5 + 0.1j, 0.6 + 0j, 10_000, 0.25            # M = 131072 samples
    with pytest.raises(ValueError, match=r"max_bytes.*EXACT_MAX_BYTES|EXACT_MAX_BYTES.*max_bytes"):
        ddesys.is_stable_exact(lam, mu, k, alpha, max_bytes=2**20)
    with pytest.raises(ValueError, match="max_bytes"):
        ddesys.spectral_radius(lam, mu, k, alpha, max_bytes=2**20)
    with pytest.raises(ValueError, match="max_bytes"):
        ddesys.winding_number(lam, mu, k, alpha, max_bytes=2**20)
    sysm = DiscreteDelaySystem([[lam]], [[mu]], [[1.0]], [[1.0]], k + alpha)
    with pytest.raises(ValueError, match="max_bytes"):
        sysm.is_stable(max_bytes=2**20)
    with pytest.raises(ValueError, match="max_bytes"):
        ddesys.is_stable_exact(lam, mu, k, alpha, max_bytes=-1)


def test_exact_stability_stays_within_budget_and_agrees_with_roots():
    """Blocks of modes and slices of the refinement are sized to max_bytes: the traced peak stays under
    it, and the answers are the polynomial roots' (np.roots in the oracle)."""
    rng = np.random.default_rng(3)
    P = 24
    lam = rng.uniform(0.0, 0.9, P) * np.exp(2j * np.pi * rng.uniform(size=P))
    mu = rng.uniform(0.3, 1.2, P) * np.exp(2j * np.pi * rng.uniform(size=P))   # many uncertified arcs
    k = rng.integers(100, 400, P)
    alpha = rng.uniform(0, 1, P)
    budget = 2**22                                        # 4 MiB: a few modes per block
    R = np.array([roots_radius(*a) for a in zip(lam, mu, k, alpha)])
    tracemalloc.start()
    try:
        stable = ddesys.is_stable_exact(lam, mu, k, alpha, max_bytes=budget)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= budget, peak
    near = np.abs(R - 1) < 1e-7
    np.testing.assert_array_equal(stable[~near], (R < 1)[~near])
    assert (R < 1).any() and (R > 1).any()


# ---------------------------------------------------------------------------------------------------
# 3. Output dtypes
# ---------------------------------------------------------------------------------------------------
REFUSED_DTYPES = [np.int32, np.int64, bool, np.uint8, np.complex128, np.float16, "int32"]


@pytest.mark.parametrize("method", ["fft", "recurrence"])
def test_output_dtypes_float_only(method):
    """Integer, bool, complex and half outputs are refused (the issue: ``kernel(L, dtype=np.int32)``
    returned ``[1 0 0 ...]``); float32 and float64, however spelled, give the oracle's kernel."""
    s = _system(3.5)
    sysm = DiscreteDelaySystem(**s)
    for dtype in REFUSED_DTYPES:
        with pytest.raises(TypeError, match=r"\bdtype\b.*float32, float64"):
            sysm.kernel(16, method=method, dtype=dtype)
        if method == "fft":
            with pytest.raises(TypeError, match=r"compute_dtype.*float32, float64"):
                sysm.kernel(16, compute_dtype=dtype)
    for dtype in (np.float32, "float32", np.dtype("float64"), float):
        K = sysm.kernel(32, method=method, dtype=dtype)
        assert K.dtype == np.dtype(dtype)
        assert rel_err(K, oracle_kernel(s, 32)) <= (1e-6 if K.dtype == np.float32 else 1e-10)


# ---------------------------------------------------------------------------------------------------
# 4. simulate of a system that is not stable warns, once
# ---------------------------------------------------------------------------------------------------
def test_simulate_warns_once_when_not_stable_and_never_when_stable():
    lam = np.array([[0.5 + 0j], [1.3 + 0j], [0.2 + 0j]])
    mu = np.array([[0.1 + 0j], [0.2 + 0j], [0.1 + 0j]])
    s = dict(lam=lam, mu=mu, bbar=np.ones_like(lam), c=np.ones_like(lam), delay=np.array([2.0, 3.5, 1.0]),
             d=np.zeros(3))
    R = roots_radius(1.3, 0.2, 3, 0.5)
    with pytest.warns(RuntimeWarning) as rec:
        y = DiscreteDelaySystem(**s).simulate(np.ones((2, 3, 4000)))
    assert len(rec) == 1
    msg = str(rec[0].message)
    assert "not stable" in msg and "1 of 3 channel" in msg and "(1,)" in msg
    assert f"{R:.6g}" in msg and "non-finite" in msg
    assert not np.isfinite(y[:, 1]).all() and np.isfinite(y[:, [0, 2]]).all()
    # unstable but still finite after 30 steps: warned all the same
    with pytest.warns(RuntimeWarning, match="not stable"):
        DiscreteDelaySystem(**s).simulate(np.ones(30))

    # no false alarm: stable by the exact test only (|lam| + |mu| = 1.15; roots 0 and 0.05), and stable
    # by the margin; kernel(method='recurrence') is the documented finite-length response of an unstable one
    stable_exact = dict(lam=np.array([[0.6 + 0j]]), mu=np.array([[-0.55 + 0j]]), bbar=np.array([[1.0]]),
                        c=np.array([[1.0]]), delay=np.array([1.0]), d=np.array([0.0]))
    unstable = _system(4.5, lam=(1.02 + 0.1j, 0.3), mu=(0.05j, -0.2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for sd in (stable_exact, _system(7.25)):
            _check_against_oracle(sd, L=300)
        K = DiscreteDelaySystem(**unstable).kernel(200, method="recurrence")
    assert rel_err(K, oracle_kernel(unstable, 200)) <= 1e-12


def test_simulate_overflow_of_stable_system_warns():
    s = _system(2.0)
    s["bbar"] = s["bbar"] * 1e300
    with pytest.warns(RuntimeWarning, match="non-finite.*too large"):
        DiscreteDelaySystem(**s).simulate(np.full(20, 1e10))


# ---------------------------------------------------------------------------------------------------
# 5. The compiled recurrence never reads outside its arrays
# ---------------------------------------------------------------------------------------------------
def _flat_args(B=2, N2=3, L=12, k=3, alpha=0.25):
    rng = np.random.default_rng(1)
    c = lambda *s: (rng.standard_normal(s) + 1j * rng.standard_normal(s)) * 0.3  # noqa: E731
    return dict(lam=c(B, N2), mu=c(B, N2), bbar=c(B, N2), c=c(B, N2), k=np.full(B, k, np.int64),
                alpha=np.full(B, alpha), d=rng.standard_normal(B), x=rng.standard_normal((B, L)))


@pytest.mark.parametrize("k", [0, -1, -(2**62), 2**62, 2**63 - 1, -(2**63), 2**31])
def test_recurrence_refuses_out_of_range_k(k):
    a = _flat_args()
    a["k"] = np.array([3, k], np.int64)
    with pytest.raises(ValueError, match=r"\bk\b.*MAX_DELAY_STEPS"):
        run_recurrence(**a)


@pytest.mark.parametrize("alpha", [np.nan, -0.5, 1.5, np.inf])
def test_recurrence_refuses_bad_alpha(alpha):
    a = _flat_args()
    a["alpha"] = np.array([0.25, alpha])
    with pytest.raises(ValueError, match=r"\balpha\b"):
        run_recurrence(**a)


@pytest.mark.parametrize("name,shape", [("lam", (3, 3)), ("mu", (2, 4)), ("c", (2,)), ("k", (3,)),
                                        ("alpha", (1,)), ("d", (2, 1)), ("x", (3, 12))])
def test_recurrence_refuses_mismatched_shapes(name, shape):
    a = _flat_args()
    a[name] = np.resize(a[name], shape)
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        run_recurrence(**a)


def test_recurrence_accepted_extremes_match_oracle():
    """k = 1, k at the limit, alpha at 1 ulp below 1, an empty batch and L = 0: finite and correct."""
    for k, alpha in ((1, 0.0), (1, np.nextafter(1.0, 0.0)), (ddesys.discrete.MAX_DELAY_STEPS, 0.5), (5, 1.0)):
        a = _flat_args(k=k, alpha=alpha)
        y, h = run_recurrence(**a, return_states=True)
        s = dict(lam=a["lam"], mu=a["mu"], bbar=a["bbar"], c=a["c"], delay=a["k"] + a["alpha"], d=a["d"])
        if alpha == 1.0:                     # the oracle splits the delay itself: give it (k, 1) by hand
            s["delay"] = a["k"] + 1.0
        y_ref, h_ref = brute_force(**s, x=a["x"], return_states=True)
        assert np.isfinite(y).all()
        assert np.abs(y - y_ref).max() <= 1e-12 * np.abs(y_ref).max()
        assert np.abs(h - h_ref).max() <= 1e-12 * np.abs(h_ref).max()
    y = run_recurrence(**_flat_args(B=0))
    assert y.shape == (0, 12)
    y = run_recurrence(**_flat_args(L=0))
    assert y.shape == (2, 0)


def test_public_empty_batch_and_empty_sequence():
    s = _system(2.5)
    empty = {**s, **{n: s[n][:0] for n in ("lam", "mu", "bbar", "c", "delay", "d")}}
    sysm = DiscreteDelaySystem(**empty)
    assert sysm.simulate(np.ones((0, 9))).shape == (0, 9)
    assert sysm.kernel(9, method="recurrence").shape == (0, 9)
    assert sysm.is_stable().shape == (0,)
    assert "delay in []" in repr(sysm)
    assert DiscreteDelaySystem(**s).simulate(np.ones((1, 0))).shape == (1, 0)
