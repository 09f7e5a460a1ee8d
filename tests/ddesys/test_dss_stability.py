"""DiscreteDelayStateSpace stability against independent float64 references: the lifted companion
matrix built from the definition (``tests/dss_helpers.py``) and ``numpy.linalg.eigvals``, closed-form
stability boundaries (Levin & May 1976; Kuruklis 1994, solved here with ``scipy.optimize.brentq``), the
sign of ``det P(1)`` (a real root above 1). Cross-checks against ``DiscreteDelaySystem`` are marked as such.
"""
from __future__ import annotations

import math
import time

import numpy as np
import pytest
import scipy.optimize

import ddesys
from ddesys.matrix.discrete import DiscreteDelayStateSpace
from ddesys.matrix.discrete_stability import lag_form, winding_count
from dss_helpers import companion, radius


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
