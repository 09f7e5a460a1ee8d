"""The diagonal classes, the DS4D export and the matrix classes agree (issue 19's acceptance item 3):
roots (against Lambert W computed here), exact stability and frequency responses, continuous and discrete."""
import numpy as np
import pytest
from scipy.special import lambertw

import ddesys


def _lambert(a, ad, tau, re_min, branches=range(-40, 41)):
    """Roots of s = a + ad e^{-s tau} with Re s >= re_min, and their conjugates (the implied modes)."""
    r = np.array([a + lambertw(ad * tau * np.exp(-a * tau), k) / tau for k in branches])
    r = r[r.real >= re_min]
    return np.concatenate([r, np.conj(r)])


def _match(got, ref, tol):
    got, ref = np.asarray(got), np.asarray(ref)
    assert got.size == ref.size, (got, ref)
    for z in ref:                               # each reference root has a partner within tol
        assert np.abs(got - z).min() <= tol * max(1.0, abs(z)), (z, got)


def _diagonal(seed, unstable=False):
    rng = np.random.default_rng(seed)
    N2 = 3
    a = -rng.uniform(0.3, 1.0, N2) + 1j * rng.uniform(-3, 3, N2)
    ad = rng.uniform(0.2, 0.9, N2) * np.exp(1j * rng.uniform(0, 2 * np.pi, N2))
    if unstable:
        ad[0] = 2.5
    return ddesys.DelaySystem(a=a, ad=ad, b=rng.standard_normal(N2) + 1j * rng.standard_normal(N2),
                              c=rng.standard_normal(N2) + 0j, tau=1.1, d=0.3)


@pytest.mark.parametrize("seed,unstable", [(0, False), (1, False), (2, True)])
def test_continuous_diagonal_roots_stability_and_response(seed, unstable):
    diag = _diagonal(seed, unstable)
    ss = diag.to_statespace()
    assert ss.n_states == 2 * diag.n_modes and ss.dt == 0
    re_min = -1.5
    ref = np.concatenate([_lambert(a, ad, 1.1, re_min) for a, ad in zip(diag.a, diag.ad)])
    res = ss.roots(re_min=re_min)
    assert res.certified
    _match(res.roots, ref, 1e-10)
    assert bool(ss.is_stable()) == bool(diag.is_stable()) == (not unstable)
    assert ss.spectral_abscissa() == pytest.approx(ref.real.max(), abs=1e-10)
    omega = np.linspace(-4, 4, 17)
    np.testing.assert_allclose(ss.freqresp(omega)[0, 0], diag.freqresp(omega), rtol=1e-12, atol=1e-13)
    s = np.array([0.3 + 0.2j, -0.1 + 2j])
    np.testing.assert_allclose(ss(s)[0, 0], diag(s), rtol=1e-12)


def test_discretize_commutes_with_the_conversion():
    diag = _diagonal(3)
    a = diag.discretize(0.05).to_statespace()
    b = diag.to_statespace().discretize(0.05)
    assert a.dt == b.dt == 0.05
    z = np.exp(1j * np.linspace(0, np.pi, 9)) * 1.01
    np.testing.assert_allclose(a.transfer(z), b.transfer(z), rtol=1e-10)


def test_discrete_diagonal_agrees_with_discrete_statespace():
    rng = np.random.default_rng(4)
    N2 = 4
    lam = rng.uniform(0.6, 0.9, N2) * np.exp(1j * rng.uniform(0, np.pi, N2))
    mu = rng.uniform(0.05, 0.5, N2) * np.exp(1j * rng.uniform(0, 2 * np.pi, N2))   # some outside |lam|+|mu|<1
    sysd = ddesys.DiscreteDelaySystem(lam=lam, mu=mu, bbar=np.ones(N2), c=rng.standard_normal(N2) + 0j,
                                      delay=[6.4, 13.0], d=0.1)
    assert list(sysd.is_stable()) == [True, False]
    for i in range(2):
        one = ddesys.DiscreteDelaySystem(lam=lam, mu=mu, bbar=np.ones(N2), c=sysd.c[i], delay=sysd.delay[i], d=0.1)
        ss = sysd.to_statespace(i)
        z = 1.05 * np.exp(1j * np.linspace(0.1, 3, 7))
        np.testing.assert_allclose(ss.transfer(z)[0, 0], one.transfer(z), rtol=1e-11)
        method = "fft" if one.is_stable() else "recurrence"      # delay 6.4 stable, 13 not (radius 1.07)
        np.testing.assert_allclose(ss.impulse(64, method=method)[0, 0], one.impulse(64, method=method),
                                   rtol=1e-9, atol=1e-12)
        assert bool(ss.is_stable()) == bool(one.is_stable()) == (one.spectral_radius() < 1)
        assert ss.spectral_radius() == pytest.approx(float(one.spectral_radius()), rel=1e-9)


def test_ds4d_export_converts_to_the_matrix_classes():
    torch = pytest.importorskip("torch")
    from ddesys import nn as dnn
    layer = dnn.DS4D(d_model=4, d_state=8, l_max=64, seed=0).double()
    sysd = layer.to_ddesys()
    x = torch.randn(1, 64, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        y = layer(x, mode="recurrent")[0, :, 1].numpy()
    ss = sysd.to_statespace(1)                          # channel 1 as a real-output state space
    assert ss.n_states == 8 and bool(ss.is_stable())
    K = ss.impulse(64)[0, 0]
    u = x[0, :, 1].numpy()
    y_ss = np.convolve(u, K)[:64]                       # the layer's channel = its impulse response * input
    np.testing.assert_allclose(y_ss, y, rtol=1e-9, atol=1e-10)


def test_norms_of_an_unstable_system_are_refused_by_the_exact_test():
    # x' = 0.5 x + 0.1 x(t - 1): the real root of s = 0.5 + 0.1 e^{-s} is 0.5573 (Lambert W, computed here)
    root = float((0.5 + lambertw(0.1 * np.exp(-0.5), 0)).real)
    sys = ddesys.DelayStateSpace([[0.5]], [[0.1]], 1.0)
    for norm in (sys.h2_norm, sys.hinf_norm):
        with pytest.raises(ValueError, match=f"unstable system \\(spectral abscissa {root:.6g}"):
            norm()
