"""``DiscreteDelaySystem.simulate`` against the independent oracle (`verification/reference/loops.py`, float64, written
from docs/theory.md §2-§5 without importing ddesys), the errors raised on bad input, and import hygiene
(no CuPy / torch import attempted, the NumPy fallback without Numba) checked in subprocesses.

Default run: a few seconds of compute plus Numba compilation. `-m slow`: a long sequence with delays
up to L/2.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from ddesys import DiscreteDelaySystem
from discrete_helpers import REPO, TESTS_DIR, oracle_kernel
from ddesys.verification.reference import brute_force, rel_err, roots_radius
from random_systems import random_system


# ---------------------------------------------------------------------------------------------------
# Simulate (the recurrence) vs the pure-Python oracle
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

    y2, h = sysm.simulate(x), sysm.states(x)
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


@pytest.mark.slow
def test_simulate_long_matches_brute_force():
    """Long sequence, delays up to L/2, pure-Python oracle (a few seconds)."""
    rng = np.random.default_rng(31)
    L = 4096
    s = random_system(rng, 3, 4, 1e-2, L, init="inv", phase="uniform", p=0.4)
    s["delay"][0] = L / 2
    x = rng.standard_normal((3, L))
    sysm = DiscreteDelaySystem(**s)
    y, h = sysm.simulate(x), sysm.states(x)
    y_ref, h_ref = brute_force(**s, x=x, return_states=True)
    assert np.abs(y - y_ref).max() <= 1e-12 * np.abs(y_ref).max()
    assert np.abs(h - h_ref).max() <= 1e-12 * np.abs(h_ref).max()


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


@pytest.mark.parametrize("M", [32, 63, 128.0])   # M >= L (= 64), an integer
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
    assert not sysm2.is_stable(method="sufficient")[0] and sysm2.is_stable()[0]
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


@pytest.mark.integration
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
                              y=list(y.shape), G=list(G.shape), stable=bool(s.is_stable()[0]),
                              cupy=sys.modules["cupy"] is None, torch=sys.modules["torch"] is None)))
    """)
    assert out == dict(shape=[1, 64], finite=True, y=[1, 16], G=[1, 5], stable=True, cupy=True, torch=True)


@pytest.mark.integration
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


@pytest.mark.integration
def test_scalar_arguments_with_cupy_blocked_via_sys_modules():
    out = _run_py("""
        import sys, json
        sys.modules["cupy"] = None
        sys.modules["torch"] = None
        import numpy as np
        import ddesys
        lam = np.array([[0.5 + 0j]])
        K = ddesys.DiscreteDelaySystem(lam, 0.1 * lam, lam, lam, 3.5).kernel(8)   # delay, d: Python floats
        print(json.dumps(dict(ok=bool(np.isfinite(K).all()), shape=list(K.shape))))
    """)
    assert out == dict(ok=True, shape=[1, 8])          # regression: the result was computed and never checked


@pytest.mark.integration
def test_numpy_fallback_without_numba():
    out = _run_py("""
        import json
        import numpy as np
        import ddesys
        from ddesys.verification.reference import brute_force
        from random_systems import random_system
        rng = np.random.default_rng(4)
        errs = []
        for delays in ([2.5, 7.0, 13.25], [5.5, 5.5, 5.5]):       # per-channel k, and one shared k
            s = random_system(rng, 3, 3, 0.05, 60, init="lin", phase="uniform", p=0.3)
            s["delay"] = np.array(delays)
            x = rng.standard_normal((2, 3, 60))
            sysm = ddesys.DiscreteDelaySystem(**s)
            y, h = sysm.simulate(x), sysm.states(x)
            y_ref, h_ref = brute_force(**s, x=x, return_states=True)
            errs.append(float(np.abs(y - y_ref.reshape(y.shape)).max() / np.abs(y_ref).max()))
            errs.append(float(np.abs(h - h_ref.reshape(h.shape)).max() / np.abs(h_ref).max()))
        print(json.dumps(dict(numba=ddesys.recurrence.numba_available(), err=max(errs))))
    """, env_extra={"DDESYS_DISABLE_NUMBA": "1"})
    assert out["numba"] is False
    assert out["err"] <= 1e-12


def test_fft_length_of_the_kernel_length_is_accepted(good):
    """M >= L suffices (the contour suppresses aliasing): M = L against the recurrence."""
    sysm = DiscreteDelaySystem(**good)
    K = sysm.kernel(64, M=64)
    ref = sysm.kernel(64, method="recurrence")
    assert np.abs(K - ref).max() <= 1e-6 * np.abs(ref).max()
