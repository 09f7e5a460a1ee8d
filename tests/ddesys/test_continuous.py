"""Continuous delay systems: Lambert-W roots, the reference DDE solver, discretization convergence.

Independent references: the characteristic equation itself, a closed-form solution of the DDE on
[0, 2 tau] for a step input (method of steps by hand), and np.roots for the exact d = 0 case.
"""
import numpy as np
import pytest

import ddesys

A = np.array([-0.5 + 2j, -1 + 0.3j, -0.2 - 1j])
AD = np.array([0.3 - 0.2j, -0.4 + 0.1j, 0.15 + 0.0j])
B = np.array([1.0, 0.5 + 0.5j, -0.3j])
C = np.array([0.7 - 0.1j, 0.2 + 0.3j, 1.0])


def test_lambert_roots_satisfy_characteristic_equation():
    rng = np.random.default_rng(0)
    for _ in range(20):
        a = -rng.uniform(0.01, 3, 4) + 1j * rng.uniform(-10, 10, 4)
        ad = rng.uniform(-2, 2, 4) + 1j * rng.uniform(-2, 2, 4)
        tau = rng.uniform(0.1, 5)
        sys_c = ddesys.DelaySystem(a, ad, np.ones(4), np.ones(4), tau)
        r = sys_c.characteristic_roots(range(-6, 7))
        res = r - a[:, None] - ad[:, None] * np.exp(-r * tau)
        scale = 1 + np.abs(r) + np.abs(ad[:, None] * np.exp(-r * tau))
        assert np.all(np.abs(res) / scale < 1e-9)


def test_rightmost_root_and_stability_known_cases():
    # real scalar: h' = -h(t - tau) is stable iff tau < pi/2 (classical)
    for tau, stable in [(1.0, True), (1.5, True), (1.6, False), (3.0, False)]:
        s = ddesys.DelaySystem([0.0], [-1.0], [1.0], [1.0], tau)
        assert bool(s.is_stable()) == stable
    # no delay branch: the only root is a
    s = ddesys.DelaySystem([-0.3 + 1j], [0.0], [1.0], [1.0], 2.0)
    assert np.isclose(s.rightmost_root()[0], -0.3 + 1j)


def test_reference_solver_matches_closed_form_step_response():
    tau = 1.3
    s = ddesys.DelaySystem(A, AD, B, C, tau)
    t = np.linspace(0, 2 * tau, 60)
    h = s.states(lambda u: np.where(np.asarray(u) >= 0, 1.0, 0.0), t)
    ex = []
    for ti in t:  # method of steps by hand for x = 1
        v = B * (np.exp(A * ti) - 1) / A
        if ti > tau:
            u = ti - tau
            v = v + (AD * B / A) * (u * np.exp(A * u) - (np.exp(A * u) - 1) / A)
        ex.append(v)
    assert np.abs(h - np.array(ex).T).max() < 1e-9


def test_discretization_converges_first_order():
    s = ddesys.DelaySystem(A, AD, B, C, 1.3, d=0.2)
    u = lambda t: np.sin(np.asarray(t)) ** 2 * np.exp(-0.1 * np.asarray(t))  # noqa: E731
    errs = []
    for dt in [0.08, 0.04, 0.02, 0.01]:
        tg = np.arange(int(round(8.0 / dt))) * dt
        yd = s.discretize(dt).simulate(u(tg))
        yr = s.simulate(u, tg, h=dt / 8)
        errs.append(np.abs(yd - yr).max())
    order = np.log2(np.array(errs[:-1]) / np.array(errs[1:]))
    assert errs[-1] < 1e-2 and np.all(order > 0.85), (errs, order)
    # Euler converges too
    tg = np.arange(800) * 0.01
    assert np.abs(s.discretize(0.01, "euler").simulate(u(tg)) - s.simulate(u, tg)).max() < 5e-2


def test_discretize_zoh_formulas_and_delay():
    s = ddesys.DelaySystem(A, AD, B, C, 0.37)
    dsys = s.discretize(0.01)
    g = (np.exp(A * 0.01) - 1) / A
    assert np.allclose(dsys.lam, np.exp(A * 0.01), rtol=1e-14)
    assert np.allclose(dsys.mu, g * AD, rtol=1e-14) and np.allclose(dsys.bbar, g * B, rtol=1e-14)
    k, al = int(dsys.k), float(dsys.alpha)  # 0.37 / 0.01 is 37 up to rounding
    assert (k == 37 and al < 1e-9) or (k == 36 and al > 1 - 1e-9)


def test_freqresp_matches_definition():
    tau = 0.7
    s = ddesys.DelaySystem(A, AD, B, C, tau, d=0.5)
    w = np.array([0.0, 0.3, 2.0, 11.0])
    G = lambda z: np.sum(C * B / (z - A - AD * np.exp(-z * tau)))  # noqa: E731
    ref = np.array([G(1j * x) + np.conj(G(-1j * x)) + 0.5 for x in w])
    assert np.allclose(s.freqresp(w), ref, rtol=1e-13)


@pytest.mark.parametrize("kw, match", [
    (dict(tau=0.0), "tau"), (dict(tau=np.nan), "tau"), (dict(a=[np.inf, 0, 0]), "a"),
    (dict(ad=np.ones(2)), "broadcast"),
])
def test_continuous_bad_input(kw, match):
    args = dict(a=A, ad=AD, b=B, c=C, tau=1.0)
    args.update(kw)
    with pytest.raises((ValueError, TypeError), match=match):
        ddesys.DelaySystem(**args)


def test_discretize_rejects_subsample_delay():
    with pytest.raises(ValueError, match="tau/dt"):
        ddesys.DelaySystem(A, AD, B, C, 0.05).discretize(0.1)
