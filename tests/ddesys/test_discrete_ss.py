"""DiscreteDelayStateSpace and zoh_statespace against independent float64 references: time domain,
the diagonal class, discretization, bad input (stability: ``test_dss_stability.py``).

References, none of them ddesys code under test: the recurrence written out from its definition
(``brute_states``, ``tests/dss_helpers.py``), the lifted companion matrix built there and
``numpy.linalg.eigvals``, ``scipy.linalg.expm`` and ``scipy.integrate.quad_vec``, and closed forms for
nilpotent ``A``. Cross-checks against other ddesys modules (``DiscreteDelaySystem``, ``ddesys.zoh``)
are marked as such.
"""
from __future__ import annotations

import doctest
import importlib

import numpy as np
import pytest
import scipy.integrate
import scipy.linalg

import ddesys
from ddesys.matrix.discrete import DiscreteDelayStateSpace
from ddesys.matrix.discretize import zoh_statespace
from dss_helpers import brute_kernel, brute_output, radius


def random_system(rng, n=3, K=2, m=2, p=2, kmax=12, cplx=False, scale=0.25):
    def Z(*shape):
        return rng.standard_normal(shape) + 1j * rng.standard_normal(shape) if cplx else rng.standard_normal(shape)
    delay = rng.integers(1, kmax, K) + rng.uniform(0, 1, K) * (rng.random(K) < 0.7)
    return dict(Phi=scale * Z(n, n), G=scale * Z(K, n, n), delay=delay, B=Z(n, m), C=Z(p, n), D=Z(p, m))


def build(s, **kw):
    return DiscreteDelayStateSpace(s["Phi"], s["G"], s["delay"], s["B"], s["C"], s["D"], **kw)


def relerr(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


# ----------------------------------------------------------------------------- time domain
@pytest.mark.parametrize("cplx", [False, True])
def test_simulate_matches_brute_force(cplx):
    rng = np.random.default_rng(1 + cplx)
    s = random_system(rng, cplx=cplx)
    u = rng.standard_normal((2, 80))
    y = build(s).simulate(u)
    ref = brute_output(s["Phi"], s["G"], s["delay"], s["B"], s["C"], s["D"], u)
    assert y.shape == (2, 80) and (np.iscomplexobj(y) == cplx)
    assert relerr(y, ref) < 1e-12
    yb = build(s).simulate(np.stack([u, 2 * u]))                  # a leading batch
    assert yb.shape == (2, 2, 80) and relerr(yb[1], 2 * ref) < 1e-12


def test_simulate_single_input_and_integer_delay():
    rng = np.random.default_rng(3)
    s = random_system(rng, n=2, K=1, m=1, p=1)
    s["delay"] = np.array([4.0])
    u = rng.standard_normal(50)
    y = build(s).simulate(u)
    ref = brute_output(s["Phi"], s["G"], s["delay"], s["B"], s["C"], s["D"], u[None])
    assert y.shape == (1, 50) and relerr(y, ref) < 1e-12


@pytest.mark.parametrize("cplx", [False, True])
def test_kernel_fft_and_recurrence_match_brute_force(cplx):
    rng = np.random.default_rng(10 + cplx)
    s = random_system(rng, n=3, K=2, kmax=20, cplx=cplx, scale=0.2)
    assert radius(s["Phi"], s["G"], s["delay"]) < 0.99             # stable, by the test's own companion
    L = 300
    ref = brute_kernel(s["Phi"], s["G"], s["delay"], s["B"], s["C"], L)
    sys_ = build(s)
    K, contour = sys_.kernel(L), sys_.contour(L)
    assert K.shape == (2, 2, L) and np.iscomplexobj(K) == cplx
    assert relerr(K, ref) < 1e-12 and contour.M >= 2 * L
    assert relerr(sys_.kernel(L, method="recurrence"), ref) < 1e-12
    imp = sys_.impulse(L)
    ref[..., 0] += s["D"]
    assert relerr(imp, ref) < 1e-12


def test_kernel_fft_slow_decay():
    """Spectral radius 0.995: the automatic contour still gives ~1e-12 against the loop."""
    Phi = np.array([[0.6, 0.2], [0.0, 0.5]])
    G = np.array([[[0.3, 0.0], [0.1, 0.2]]])
    rho = radius(Phi, G, [7.0])
    Phi, G = Phi * 0.995 / rho, G * 0.995 / rho                     # exact scaling is not needed
    r = radius(Phi, G, [7.0])
    assert 0.98 < r < 1
    B, C = np.array([[1.0], [0.5]]), np.array([[1.0, -1.0]])
    L = 1024
    ref = brute_kernel(Phi, G, [7.0], B, C, L)
    K = DiscreteDelayStateSpace(Phi, G, 7.0, B, C).kernel(L)
    assert relerr(K, ref) < 1e-12


def test_transfer_is_the_z_transform_of_the_impulse_response():
    rng = np.random.default_rng(4)
    s = random_system(rng, n=3, K=2, kmax=10, cplx=True, scale=0.15)
    r = radius(s["Phi"], s["G"], s["delay"])
    assert r < 0.95
    T = 1500                                                         # 0.95^1500 ~ 1e-33: truncation
    Kt = brute_kernel(s["Phi"], s["G"], s["delay"], s["B"], s["C"], T)
    z = np.concatenate([np.exp(1j * np.linspace(0, 2 * np.pi, 7)), 1.3 * np.exp(1j * np.array([0.3, 2.0]))])
    ref = np.einsum("pmt,ft->pmf", Kt, z[:, None] ** -np.arange(T)[None]) + s["D"][..., None]
    F = build(s).transfer(z)
    assert F.shape == (2, 2, z.size) and relerr(F, ref) < 1e-12
    w = np.array([0.0, 0.7, np.pi])
    assert relerr(build(s).freqresp(w), build(s).transfer(np.exp(1j * w))) < 1e-14


def test_frequency_response_uses_dt():
    s = random_system(np.random.default_rng(5), n=2, K=1, m=1, p=1)
    sys_ = build(s, dt=0.5)
    om, resp = sys_.frequency_response([0.2, 1.0])                    # radians per time unit
    assert np.allclose(resp, sys_.freqresp(np.array([0.2, 1.0]) * 0.5), rtol=1e-14)


# ----------------------------------------------------------------------------- diagonal equivalence
def test_diagonal_system_converted_by_hand_agrees():
    """Cross-check with ddesys.DiscreteDelaySystem (another module), written out as in the issue."""
    lam = np.array([0.8 + 0.3j, -0.4 + 0.5j])
    mu = np.array([0.1 - 0.05j, 0.2 + 0.1j])
    bbar = np.array([1.0 + 0.5j, -0.3 + 0.2j])
    c = np.array([0.5 - 0.2j, 0.7 + 0.1j])
    dd = ddesys.DiscreteDelaySystem(lam, mu, bbar, c, delay=5.5, d=0.3)
    Phi = np.diag(np.concatenate([lam, lam.conj()]))
    G = np.diag(np.concatenate([mu, mu.conj()]))
    B = np.concatenate([bbar, bbar.conj()])[:, None]
    C = np.concatenate([c, c.conj()])[None]
    ss = DiscreteDelayStateSpace(Phi, G, 5.5, B, C, 0.3)
    z = np.exp(1j * np.linspace(0, np.pi, 9)) * 1.1
    assert relerr(ss.transfer(z)[0, 0], dd.transfer(z)) < 1e-13
    assert relerr(ss.kernel(200)[0, 0].real, dd.kernel(200)) < 1e-12
    assert bool(ss.is_stable()) == bool(dd.is_stable())
    unst = ddesys.DiscreteDelaySystem([0.5], [0.7], [1.0], [1.0], delay=2.0)   # root 1.1232 (stability.py)
    ss_u = DiscreteDelayStateSpace(np.diag([0.5, 0.5]), np.diag([0.7, 0.7]), 2.0, [1.0, 1.0], [1.0, 1.0])
    assert not bool(unst.is_stable()) and not ss_u.is_stable()
    assert ss_u.stability_report().roots_outside == 2                # one per conjugate copy


# ----------------------------------------------------------------------------- discretization
def test_zoh_diagonal_matches_mode_by_mode_rule():
    """Cross-check with ddesys.zoh / ddesys.euler (ddesys/discretize.py)."""
    a = np.array([-1.0 + 2j, -0.3 - 0.5j, 0.0 + 0j])
    ad = np.array([0.4 - 0.1j, -0.2 + 0.3j, 0.1 + 0j])
    b = np.array([1.0, 0.5j, -0.2])
    for method, rule in (("zoh", ddesys.zoh), ("euler", ddesys.euler)):
        sd = zoh_statespace(np.diag(a), np.diag(ad), 1.3, np.diag(b), dt=0.1, method=method)
        lam, mu, bbar = rule(a, ad, b, 0.1)
        assert np.allclose(np.diag(sd.Phi), lam, rtol=1e-13, atol=1e-15)
        assert np.allclose(np.diag(sd.G[0]), mu, rtol=1e-13, atol=1e-15)
        assert np.allclose(np.diag(sd.B), bbar, rtol=1e-13, atol=1e-15)
        assert sd.delay[0] == pytest.approx(13.0) and sd.dt == 0.1


def test_zoh_against_expm_and_quadrature():
    rng = np.random.default_rng(16)
    A, Ad, B = rng.standard_normal((3, 3)), rng.standard_normal((2, 3, 3)), rng.standard_normal((3, 2))
    C, D = rng.standard_normal((1, 3)), rng.standard_normal((1, 2))
    dt = 0.05
    sd = zoh_statespace(A, Ad, [0.5, 0.72], B, C, D, dt)
    Gam = scipy.integrate.quad_vec(lambda s: scipy.linalg.expm(A * s), 0, dt, epsabs=1e-15, epsrel=1e-13)[0]
    assert np.allclose(sd.Phi, scipy.linalg.expm(A * dt), rtol=1e-13, atol=1e-15)
    assert np.allclose(sd.G, Gam @ Ad, rtol=1e-11, atol=1e-15)
    assert np.allclose(sd.B, Gam @ B, rtol=1e-11, atol=1e-15)
    assert np.array_equal(sd.C, C) and np.array_equal(sd.D, D)
    assert np.allclose(sd.delay, [10.0, 14.4]) and sd.dt == dt


def test_zoh_singular_A_closed_form():
    """Nilpotent A = [[0, 1], [0, 0]]: e^{As} = I + A s, so Gamma = dt I + A dt^2 / 2."""
    A = np.array([[0.0, 1.0], [0.0, 0.0]])
    Ad = np.array([[0.1, 0.0], [0.2, -0.3]])
    dt = 0.2
    sd = zoh_statespace(A, Ad, 1.0, dt=dt)
    Gam = dt * np.eye(2) + A * dt**2 / 2
    assert np.allclose(sd.Phi, np.eye(2) + A * dt, atol=1e-15)
    assert np.allclose(sd.G[0], Gam @ Ad, atol=1e-15) and np.allclose(sd.B, Gam, atol=1e-15)


def test_zoh_dt_errors():
    with pytest.raises(ValueError, match=r"dt <= min\(tau\) = 0.5"):
        zoh_statespace([[-1.0]], [[0.5]], [0.5], dt=0.6)
    with pytest.raises(ValueError, match=r"dt >= max\(tau\) / MAX_DELAY_STEPS"):
        zoh_statespace([[-1.0]], [[0.5]], [1e3], dt=1e-7)
    for bad in (0.0, -0.1, float("nan")):
        with pytest.raises(ValueError, match="dt"):
            zoh_statespace([[-1.0]], [[0.5]], 1.0, dt=bad)
    with pytest.raises(TypeError, match="dt"):
        zoh_statespace([[-1.0]], [[0.5]], 1.0, dt=True)
    with pytest.raises(TypeError, match="dt"):
        zoh_statespace([[-1.0]], [[0.5]], 1.0)
    with pytest.raises(ValueError, match="method"):
        zoh_statespace([[-1.0]], [[0.5]], 1.0, dt=0.1, method="tustin")
    with pytest.raises(ValueError, match="overflows"):
        zoh_statespace([[800.0]], [[0.5]], 1.0, dt=1.0)


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(delay=0.5), ValueError, "delay must be >= 1"),
    (dict(delay=3e9), ValueError, "MAX_DELAY_STEPS"),
    (dict(delay=2 + 1j), TypeError, "delay must be real"),
    (dict(delay=[2.0, 3.0]), ValueError, "delay must hold one delay per delayed matrix"),
    (dict(delay=float("inf")), ValueError, "delay must be finite"),
    (dict(Phi=[[np.nan, 0], [0, 0]]), ValueError, "Phi must be finite"),
    (dict(Phi=np.zeros((2, 3))), ValueError, "Phi must be a square"),
    (dict(G=np.zeros((3, 3))), ValueError, "G must be"),
    (dict(B=np.zeros((3, 1))), ValueError, "B must have shape"),
    (dict(C=np.zeros((1, 3))), ValueError, "C must have shape"),
    (dict(D=np.zeros((2, 2))), ValueError, "D must have shape"),
    (dict(Phi="x"), TypeError, "Phi must hold numbers"),
    (dict(dt=0.0), ValueError, "dt must be"),
    (dict(dt=False), ValueError, "dt must be"),
])
def test_bad_input(kwargs, exc, match):
    args = dict(Phi=np.eye(2) * 0.5, G=np.eye(2) * 0.1, delay=2.0, B=np.ones((2, 1)), C=np.ones((1, 2)), D=None)
    dt = kwargs.pop("dt", True)
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        DiscreteDelayStateSpace(args["Phi"], args["G"], args["delay"], args["B"], args["C"], args["D"], dt=dt)


def test_bad_calls_and_immutability():
    s = DiscreteDelayStateSpace([[1.0]], [[0.1]], 2.0)                 # unstable: 1 + 0.1 at z = 1
    with pytest.raises(ValueError, match="is unstable"):
        s.kernel(8)
    with pytest.raises(ValueError, match="method"):
        s.kernel(8, method="lfilter")
    with pytest.raises(ValueError, match="L must be"):
        s.kernel(0, method="recurrence")
    with pytest.raises(ValueError, match="z must not contain 0"):
        s.transfer([0.0, 1.0])
    at_pole = DiscreteDelayStateSpace([[0.5]], [[0.0]], 1.0).transfer([0.5, 2.0])[0, 0]   # P(0.5) = 0
    assert np.isinf(at_pole[0]) and at_pole[1] == pytest.approx(1 / (1 - 0.25))
    with pytest.raises(ValueError, match="u must have shape"):
        s.simulate(np.ones((2, 5)))
    with pytest.raises(ValueError, match="u must be finite"):
        s.simulate([1.0, np.nan])
    with pytest.raises(ValueError, match="max_size"):
        DiscreteDelayStateSpace([[0.5]], [[0.1]], 2000.0).poles()
    with pytest.raises(AttributeError, match="immutable"):
        s.Phi = np.eye(1)
    with pytest.raises(ValueError):
        s.Phi[0, 0] = 2.0                                                # read-only array
    with pytest.warns(RuntimeWarning, match="non-finite"):
        DiscreteDelayStateSpace([[1e200]], [[1.0]], 1.0).simulate(np.ones(10))
    assert "DiscreteDelayStateSpace(n=1" in repr(s)


@pytest.mark.parametrize("name", ["ddesys.matrix.discrete", "ddesys.matrix.discrete_response",
                                  "ddesys.matrix.discrete_stability"])
def test_doctests(name):
    res = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert res.attempted > 0 and res.failed == 0
