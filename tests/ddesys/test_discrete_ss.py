"""DiscreteDelayStateSpace and zoh_statespace against independent float64 references.

References, none of them ddesys code under test: the recurrence written out from its definition
(``brute_states``), the lifted companion matrix built here and ``numpy.linalg.eigvals``, closed-form
stability boundaries (Levin & May 1976; Kuruklis 1994, solved here with ``scipy.optimize.brentq``), the
sign of ``det P(1)`` (a real root above 1), ``scipy.linalg.expm`` and ``scipy.integrate.quad_vec``, and
closed forms for nilpotent ``A``. Cross-checks against other ddesys modules (``DiscreteDelaySystem``,
``ddesys.zoh``) are marked as such.
"""
from __future__ import annotations

import doctest
import importlib
import math
import time

import numpy as np
import pytest
import scipy.integrate
import scipy.linalg
import scipy.optimize

import ddesys
from ddesys.matrix.discrete import DiscreteDelayStateSpace, zoh_statespace
from ddesys.matrix.discrete_stability import lag_form, winding_count


# ----------------------------------------------------------------------------- references (no ddesys)
def brute_states(Phi, G, delay, B, u):
    """x_t = Phi x_{t-1} + sum_k G_k ((1 - a_k) x_{t-k_k} + a_k x_{t-k_k-1}) + B u_t, zero history."""
    n, L = Phi.shape[0], u.shape[-1]
    x = np.zeros((L, n), np.result_type(Phi, G, B, u))
    past = lambda j: x[j] if j >= 0 else np.zeros(n)  # noqa: E731
    for t in range(L):
        v = B @ u[:, t] + Phi @ past(t - 1)
        for Gk, s in zip(G, delay):
            k = int(math.floor(s))
            a = s - k
            v = v + Gk @ ((1 - a) * past(t - k) + a * past(t - k - 1))
        x[t] = v
    return x


def brute_output(Phi, G, delay, B, C, D, u):
    return (brute_states(Phi, G, delay, B, u) @ C.T).T + D @ u


def brute_kernel(Phi, G, delay, B, C, L):
    """(p, m, L): column j driven by a unit impulse on input j."""
    m = B.shape[1]
    out = []
    for j in range(m):
        u = np.zeros((m, L))
        u[j, 0] = 1
        out.append((brute_states(Phi, G, delay, B, u) @ C.T).T)
    return np.stack(out, axis=1)


def companion(Phi, G, delay):
    """Lifted companion matrix of (x_{t-1}, ..., x_{t-J}), built from the definition."""
    n = Phi.shape[0]
    coeffs = {1: Phi.astype(complex)}
    for Gk, s in zip(G, delay):
        k = int(math.floor(s))
        a = s - k
        coeffs[k] = coeffs.get(k, 0) + (1 - a) * Gk
        if a > 0:
            coeffs[k + 1] = coeffs.get(k + 1, 0) + a * Gk
    J = max(coeffs)
    Cm = np.zeros((n * J, n * J), complex)
    for j, E in coeffs.items():
        Cm[:n, (j - 1) * n:j * n] = E
    Cm[n:, :-n] = np.eye(n * (J - 1))
    return Cm


def radius(Phi, G, delay):
    return float(np.abs(np.linalg.eigvals(companion(Phi, G, delay))).max())


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


# ----------------------------------------------------------------------------- stability
def _near_boundary(rng, n, K, kmax, target):
    """A random system scaled (bisection on the test's own companion radius) to radius ~ target."""
    Z = lambda *s: rng.standard_normal(s) + 1j * rng.standard_normal(s) * (rng.random() < 0.5)  # noqa: E731
    Phi, G = Z(n, n) / np.sqrt(n), Z(K, n, n) / np.sqrt(n) * rng.uniform(0.2, 1.0)
    delay = rng.integers(1, kmax, K) + rng.uniform(0, 1, K) * (rng.random(K) < 0.6)
    lo, hi = 0.0, 4.0
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if radius(mid * Phi, mid * G, delay) < target else (lo, mid)
    return lo * Phi, lo * G, delay


def test_exact_stability_against_companion_eigenvalues_near_the_boundary():
    rng = np.random.default_rng(7)
    checked = 0
    for trial in range(40):
        n = int(rng.integers(1, 5))
        Phi, G, delay = _near_boundary(rng, n, int(rng.integers(1, 3)), 50 // n, rng.choice([0.99, 1.01]))
        eig = np.abs(np.linalg.eigvals(companion(Phi, G, delay)))
        if np.min(np.abs(eig - 1)) < 1e-6:                      # the reference itself is ambiguous
            continue
        sys_ = DiscreteDelayStateSpace(Phi, G, delay)
        rep = sys_.stability_report()
        assert rep.certified, rep.message
        assert rep.stable == bool(eig.max() < 1)
        assert rep.roots_outside == int((eig > 1).sum())
        assert sys_.is_stable() == bool(eig.max() < 1)
        checked += 1
    assert checked >= 35


def test_spectral_radius_and_poles_against_companion():
    rng = np.random.default_rng(8)
    for n, delay in ((2, 9.5), (2, 149.5)):              # n J = 20 (eigenvalues), 300 (bisection on r)
        Phi = rng.standard_normal((n, n)) * 0.4
        G = rng.standard_normal((1, n, n)) * 0.4
        ref = radius(Phi, G, [delay])
        assert 0.9 < ref < 1.2
        sys_ = DiscreteDelayStateSpace(Phi, G, delay)
        assert abs(sys_.spectral_radius(rtol=1e-10) - ref) < 1e-9 * ref
    small = DiscreteDelayStateSpace(Phi[:1, :1], G[:, :1, :1], 3.25)
    ref = np.sort_complex(np.linalg.eigvals(companion(Phi[:1, :1], G[:, :1, :1], [3.25])))
    assert np.allclose(np.sort_complex(small.poles()), ref, atol=1e-10)


def levin_may_bound(k):
    # Levin & May (1976): h_t = h_{t-1} - q h_{t-k} is stable iff 0 < q < 2 cos((k - 1) pi / (2k - 1))
    # (docs/theory.md §3.4, this project's delay convention).
    return 2 * math.cos((k - 1) * math.pi / (2 * k - 1))


@pytest.mark.parametrize("k", [2, 3, 10, 40])
def test_levin_may_scalar(k):
    q = levin_may_bound(k)
    for fac, stable in ((0.98, True), (1.02, False)):
        s = DiscreteDelayStateSpace([[1.0]], [[-fac * q]], float(k))
        assert s.is_stable() is stable


def kuruklis_upper_b(a, k):
    """Kuruklis (1994), J. Math. Anal. Appl. 188, 719-731: x_{n+1} - a x_n + b x_{n-k} = 0 with
    0 < a < (k+1)/k, b > 0 is asymptotically stable iff a - 1 < b < (a^2 + 1 - 2 a cos(phi))^(1/2), phi the
    root in (0, pi/(k+1)) of sin(k phi) / sin((k+1) phi) = 1/a. (Derived here from z = e^{i phi} on
    z^{k+1} - a z^k + b = 0: a = sin((k+1) phi)/sin(k phi), b = sin(phi)/sin(k phi).)"""
    f = lambda p: math.sin((k + 1) * p) / math.sin(k * p) - a  # noqa: E731
    phi = scipy.optimize.brentq(f, 1e-12, math.pi / (k + 1) - 1e-12, xtol=1e-15)
    return math.sqrt(a * a + 1 - 2 * a * math.cos(phi))


@pytest.mark.parametrize("k", [1, 2, 5, 20])
@pytest.mark.parametrize("a", [0.3, 0.9, 1.04])
def test_kuruklis_region(k, a):
    if a >= (k + 1) / k:
        pytest.skip("outside the region")
    bstar = kuruklis_upper_b(a, k)
    # x_{t} = a x_{t-1} - b x_{t-k-1}: Phi = a, G = -b, delay k + 1 (docs/theory.md §3.4)
    mk = lambda b: DiscreteDelayStateSpace([[a]], [[-b]], float(k + 1))  # noqa: E731
    assert mk(0.98 * bstar).is_stable()
    assert not mk(1.02 * bstar).is_stable()
    if a > 1:                                                    # lower boundary b = a - 1 (root z = 1)
        assert not mk((a - 1) * 0.9).is_stable() and mk((a - 1) * 1.1).is_stable() == ((a - 1) * 1.1 < bstar)


def _levin_may_matrix(k, fac, rng):
    """4 x 4 dense system whose det P = (Levin-May factor) x (three Rouche-stable scalar factors):
    upper-triangular Phi, G (Levin-May last) under a random orthogonal similarity."""
    q = fac * levin_may_bound(k)
    Phi = np.triu(rng.standard_normal((4, 4)) * 0.3, 1) + np.diag([0.5, 0.3, -0.2, 1.0])
    G = np.triu(rng.standard_normal((4, 4)) * 0.3, 1) + np.diag([0.2, 0.1, 0.3, -q])  # |phi|+|g| < 1
    Q = np.linalg.qr(rng.standard_normal((4, 4)))[0]
    return Q @ Phi @ Q.T, Q @ G @ Q.T


@pytest.mark.parametrize("fac", [0.98, 1.02])
def test_large_delay_levin_may_matrix(fac):
    """k = 3000, n = 4 (n J = 12000, no companion): the closed form of Levin & May decides, and past the
    bound exactly one conjugate pair has crossed (the next crossing, at phi = 3 pi / (2k - 1), needs a q
    about three times larger)."""
    Phi, G = _levin_may_matrix(3000, fac, np.random.default_rng(11))
    rep = DiscreteDelayStateSpace(Phi, G, 3000.0).stability_report()
    assert rep.certified, rep.message
    assert rep.stable is (fac < 1)
    assert rep.roots_outside == (0 if fac < 1 else 2)


def test_large_delay_independent_references():
    rng = np.random.default_rng(12)
    Phi = rng.standard_normal((4, 4))
    G = rng.standard_normal((4, 4))
    # Rouche: ||Phi|| + ||G|| < 1 proves stability; the winding count must agree without that shortcut
    Ps, Gs = 0.55 * Phi / np.linalg.norm(Phi, 2), 0.4 * G / np.linalg.norm(G, 2)
    wc = winding_count(lag_form(Ps, Gs[None], np.array([3000]), np.array([0.5])))
    assert wc.certified and wc.wind == 0
    # det P(1) = det(I - Phi - G) < 0 while det P(z) -> 1 as z -> +inf: a real root above 1
    Pu, Gu = 0.3 * Phi / np.linalg.norm(Phi, 2), 0.3 * G / np.linalg.norm(G, 2) + np.diag([1.2, 0, 0, 0])
    assert np.linalg.det(np.eye(4) - Pu - Gu) < 0
    rep = DiscreteDelayStateSpace(Pu, Gu, 3000.25).stability_report()
    assert rep.certified and not rep.stable and rep.roots_outside >= 1
    assert DiscreteDelayStateSpace(Ps, Gs, 3000.5).is_stable()         # sufficient shortcut, same answer


def test_large_delay_triangular_cross_check_with_diagonal_class():
    """Cross-check (another module): triangular Phi, G factor det P into scalar modes, whose exact
    stability ddesys.DiscreteDelaySystem decides."""
    rng = np.random.default_rng(13)
    lam = np.array([0.9, -0.6, 0.3 + 0.5j, 0.95])
    for mu_last in (-0.06, -0.2):
        mu = np.array([0.05, 0.3, -0.3, mu_last])
        Phi = np.triu(rng.standard_normal((4, 4)) * 0.2, 1) + np.diag(lam)
        G = np.triu(rng.standard_normal((4, 4)) * 0.2, 1) + np.diag(mu)
        dd = ddesys.DiscreteDelaySystem(lam, mu, np.ones(4), np.ones(4), delay=1500.0)
        assert DiscreteDelayStateSpace(Phi, G, 1500.0).is_stable() == bool(dd.is_stable())


def test_root_on_the_circle_is_not_certified():
    """x_t = 0.5 x_{t-1} + 0.5 x_{t-2} has the root z = 1: never called stable, and says why."""
    s = DiscreteDelayStateSpace([[0.5]], [[0.5]], 2.0)
    rep = s.stability_report()
    assert not rep.stable and not rep.certified and "could not be certified" in rep.message
    with pytest.warns(RuntimeWarning, match="could not be certified"):
        assert s.is_stable() is False
    with pytest.raises(ValueError, match="not certified stable"):
        s.kernel(16)
    assert s.kernel(16, method="recurrence").shape == (1, 1, 16)


def test_budgets():
    Phi, G = _levin_may_matrix(1000, 1.02, np.random.default_rng(14))
    s = DiscreteDelayStateSpace(Phi, G, 1000.0)
    rep = s.stability_report(max_evals=40000)                   # M = 32768: too few to refine
    assert not rep.certified and "evaluation budget" in rep.message and not rep.stable
    with pytest.raises(ValueError, match="GiB of working memory"):
        s.stability_report(max_bytes=10_000)
    assert s.is_stable(method="sufficient") is False
    assert s.sufficient_margin() == pytest.approx(1 - np.linalg.norm(Phi, 2) - np.linalg.norm(G, 2), abs=1e-14)


def test_sufficient_criterion_holds_for_every_delay():
    rng = np.random.default_rng(15)
    Phi, G = rng.standard_normal((3, 3)), rng.standard_normal((2, 3, 3))
    nP, nG = np.linalg.norm(Phi, 2), np.linalg.norm(G, 2, axis=(1, 2))
    Phi, G = 0.5 * Phi / nP, 0.2 * G / nG[:, None, None]
    for delay in ([1.0, 1.5], [7.25, 30.0]):
        s = DiscreteDelayStateSpace(Phi, G, delay)
        assert s.is_stable(method="sufficient") and radius(Phi, G, delay) < 1
        assert s.sufficient_margin() == pytest.approx(0.1, abs=1e-12)


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
    (dict(dt=False), TypeError, "dt must be"),
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


@pytest.mark.parametrize("name", ["ddesys.matrix.discrete", "ddesys.matrix.discrete_response", "ddesys.matrix.discrete_stability"])
def test_doctests(name):
    res = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert res.attempted > 0 and res.failed == 0


@pytest.mark.slow
@pytest.mark.parametrize("k", [1000, 5000])
def test_timing_large_delay(k, capsys):
    """Timing for the report: n = 4, generic dense system near the boundary (radius ~1.0)."""
    rng = np.random.default_rng(17)
    Phi, G = rng.standard_normal((4, 4)) * 0.35, rng.standard_normal((4, 4)) * 0.35
    t = time.perf_counter()
    rep = DiscreteDelayStateSpace(Phi, G, k + 0.3).stability_report()
    with capsys.disabled():
        print(f"\nis_stable n=4 k={k}: {time.perf_counter() - t:.2f} s, {rep.evaluations} evaluations, "
              f"certified={rep.certified}, roots outside={rep.roots_outside}")
    assert rep.certified
