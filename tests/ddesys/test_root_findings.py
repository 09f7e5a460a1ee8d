"""Hard cases of the characteristic-root machinery, each against an independent mpmath reference:
a root of multiplicity 6 (multiplicity-induced dominancy), delayed terms that cancel in det M(s),
stability decided next to a delay crossing, and a scalar system with a huge delay."""
from __future__ import annotations

import time
import warnings

import mpmath as mp
import numpy as np
import pytest

import ddesys
from ddesys import DelayStateSpace
from ddesys.matrix.roots import (
    UndecidableStability,
    characteristic_roots,
    is_stable,
    spectral_abscissa,
)


# ----------------------------------------------------------------------------- a 6-fold dominant root
def mid_quasipolynomial(kappa=1.964, k=-0.67036, tau0=0.33, tau1=0.33):
    """Mazanti, Boussaada & Niculescu (J. Differential Equations 286, 2021), eqs. (6.10a)-(6.10f):
    ``s^3 + a2 s^2 + a1 s + a0 + e^{-s tau} (b2 s^2 + b1 s + b0)`` with a root of multiplicity
    ``3 + 3 = 6`` at ``s0`` (the generic maximal multiplicity), returned as float64 coefficients."""
    tau = tau0 + tau1
    r0 = -3.0 - 9.0 ** (1 / 3) + 3.0 ** (1 / 3)
    s0 = r0 / tau - 1 / kappa
    omega = (-kappa * (s0**3 + 9 / tau * s0**2 + 36 / tau**2 * s0 + 60 / tau**3)) ** 0.5
    xi = -1.5 * s0 / omega - 4.5 / omega / tau - 0.5 / omega / kappa
    e = np.exp(s0 * tau)
    beta0 = -(3 * kappa * (s0**2 * tau**2 - 8 * s0 * tau + 20) * e) / (k * omega**2 * tau**3)
    beta1 = (6 * kappa * (s0 * tau - 4) * e) / (k * omega**2 * tau**2)
    beta2 = (-3 * kappa * e) / (k * omega**2 * tau)
    a = [omega**2 / kappa, omega**2 + 2 * omega * xi / kappa, 2 * omega * xi + 1 / kappa]
    b = [-beta * k * omega**2 / kappa for beta in (beta0, beta1, beta2)]
    return np.array(a), np.array(b), tau, s0


def companion(a, b):
    """``det(s I - A - e^{-s tau} Ad) = s^3 + a2 s^2 + a1 s + a0 + e^{-s tau} (b2 s^2 + b1 s + b0)``."""
    A = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [-a[0], -a[1], -a[2]]])
    Ad = np.zeros((3, 3))
    Ad[2] = -b
    return A, Ad


@pytest.fixture(scope="module")
def mid_reference():
    """The six roots near ``s0`` of the float64 quasi-polynomial, at 40 digits (mpmath)."""
    a, b, tau, s0 = mid_quasipolynomial()
    with mp.workdps(40):
        am, bm, T = [mp.mpf(float(x)) for x in a], [mp.mpf(float(x)) for x in b], mp.mpf(tau)

        def q(s):
            return s**3 + am[2] * s**2 + am[1] * s + am[0] + mp.exp(-s * T) * (bm[2] * s**2 + bm[1] * s + bm[0])

        c = mp.mpf(s0)
        local = mp.polyroots(mp.taylor(q, c, 12)[::-1], maxsteps=200, extraprec=200)
        roots = [complex(mp.findroot(q, c + z)) for z in local if abs(z) < 0.5]
    return np.array(roots)


def test_mid_sixfold_root_is_found_as_one_cluster(mid_reference):
    a, b, tau, _ = mid_quasipolynomial()
    A, Ad = companion(a, b)
    ref = mid_reference
    assert ref.size == 6 and np.abs(ref - ref.mean()).max() < 0.05     # rounding splits the 6-fold root
    t0 = time.perf_counter()
    res = DelayStateSpace(A, Ad, tau).roots(re_min=-8.0)
    assert time.perf_counter() - t0 < 20
    assert res.certified and res.count == 6
    assert res.roots.size == 6 and np.all(res.multiplicity == 6)
    assert np.abs(res.roots - ref.mean()).max() < 1e-6             # the centroid is well conditioned
    absc = spectral_abscissa(A, Ad, [tau])
    assert abs(absc - ref.real.max()) < 0.05                       # ~ eps^(1/6) |s|


# ----------------------------------------------------------------------------- cancelling delayed terms
def hidden_nilpotent():
    T = np.array([[2.0, 1.0], [1.0, 1.0]])
    Ti = np.linalg.inv(T)
    return T @ np.diag([-1.0, -2.0]) @ Ti, T @ np.array([[0.0, 1.0], [0.0, 0.0]]) @ Ti


def test_hidden_nilpotent_determinant_is_a_polynomial():
    # the reference: det M(s) = (s + 1)(s + 2) exactly, checked at 30 digits far left (e^{-s tau} huge)
    A, Ad = hidden_nilpotent()
    with mp.workdps(80):
        for s in (mp.mpc(-2.7, 3.1), mp.mpc(-0.4, -17.0), mp.mpc(1.3, 0.2)):
            z = mp.exp(-s * 50)
            M = mp.matrix([[s * (i == j) - A[i, j] - z * Ad[i, j] for j in range(2)] for i in range(2)])
            d = mp.det(M)
            assert abs(d - (s + 1) * (s + 2)) < mp.mpf(10) ** -60 * (1 + abs(z) ** 2)


@pytest.mark.parametrize("tau", [10.0, 50.0])
def test_hidden_nilpotent_coupling_has_two_roots(tau):
    A, Ad = hidden_nilpotent()
    res = characteristic_roots(A, Ad, [tau], -3.0)
    assert res.certified and res.count == 2
    assert np.allclose(res.roots, [-1.0, -2.0], rtol=0, atol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert spectral_abscissa(A, Ad, [tau]) == pytest.approx(-1.0, abs=1e-12)
    assert is_stable(A, Ad, [tau])


def test_partly_cancelling_delayed_terms():
    # block diag(hidden nilpotent, scalar): det M = (s + 1)(s + 2)(s - a - b e^{-s tau})
    A2, Ad2 = hidden_nilpotent()
    a, b, tau, re_min = -0.7, 1e-17, 50.0, -0.77
    A, Ad = np.zeros((3, 3)), np.zeros((3, 3))
    A[:2, :2], Ad[:2, :2], A[2, 2], Ad[2, 2] = A2, Ad2, a, b
    with mp.workdps(30):
        x = mp.mpf(b) * tau * mp.exp(-mp.mpf(a) * tau)
        ref = [complex(a + mp.lambertw(x, k) / tau) for k in range(-40, 41)]
    ref = np.array([z for z in ref if z.real >= re_min])
    assert ref.size == 9
    res = characteristic_roots(A, Ad, [tau], re_min)
    assert res.certified and res.count == ref.size
    assert np.allclose(np.sort_complex(res.roots), np.sort_complex(ref), rtol=0, atol=1e-9)


# ----------------------------------------------------------------------------- stability at the edge
def scalar_rightmost(tau):
    """Rightmost root of ``x' = -x(t - tau)``: ``W_0(-tau) / tau`` at 30 digits."""
    with mp.workdps(30):
        return complex(mp.lambertw(-mp.mpf(tau), 0) / mp.mpf(tau))


@pytest.mark.parametrize("rel, stable", [(-1e-12, True), (1e-12, False), (-1e-13, True)])
def test_is_stable_next_to_the_delay_margin(rel, stable):
    tau = float(np.pi / 2) * (1 + rel)
    ref = scalar_rightmost(tau).real
    assert (ref < 0) == stable and abs(ref) > 1e-14
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert is_stable([[0.0]], [[-1.0]], [tau]) == stable
        assert DelayStateSpace([[0.0]], [[-1.0]], tau).is_stable() == stable


def test_is_stable_next_to_a_matrix_delay_margin():
    A, A1 = np.array([[-2.0, 0.0], [0.0, -0.9]]), np.array([[-1.0, 0.0], [-1.0, -1.0]])
    margin = DelayStateSpace(A, A1, 1.0).delay_margin()
    for rel in (-1e-11, 1e-11):
        tau = margin * (1 + rel)
        # the crossing root, refined at 30 digits: det M = (s + 2 + e^{-s tau})(s + 0.9 + e^{-s tau})
        with mp.workdps(30):
            s = mp.findroot(lambda s, t=mp.mpf(tau): s + mp.mpf(0.9) + mp.exp(-s * t),
                            mp.mpc(0, float(np.sqrt(1 - 0.81))))
            ref = float(mp.re(s))
        assert (ref < 0) == (rel < 0) and abs(ref) > 1e-13
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert is_stable(A, A1, [tau]) == (ref < 0)


def test_is_stable_undecidable_in_float64_warns():
    # tau = fl(pi/2) is pi/2 - 6e-17: Re s = -5e-17, below what float64 evaluation of M(s) can resolve
    ref = scalar_rightmost(float(np.pi / 2)).real
    assert -1e-15 < ref < 0
    with pytest.warns(UndecidableStability, match="cannot decide"):
        assert not is_stable([[0.0]], [[-1.0]], [np.pi / 2])
    assert issubclass(UndecidableStability, RuntimeWarning)


# ----------------------------------------------------------------------------- scalar class, huge delay
def test_diagonal_class_huge_delay_lambert_w():
    a, ad, tau = -1.0, -0.5, 1e6
    sys = ddesys.DelaySystem([a], [ad], [1.0], [1.0], tau=tau)
    with mp.workdps(30):
        x = mp.mpf(ad) * tau * mp.exp(-mp.mpf(a) * tau)
        ref = np.array([complex(a + mp.lambertw(x, k) / tau) for k in range(-3, 4)])
    roots = np.asarray(sys.characteristic_roots()).reshape(-1)
    assert np.all(np.isfinite(roots))
    assert np.allclose(roots, ref, rtol=1e-12, atol=1e-14)
    right = complex(np.asarray(sys.rightmost_root()).reshape(-1)[0])
    assert right.real == pytest.approx(ref.real.max(), rel=1e-9, abs=1e-15)
    assert bool(np.all(sys.is_stable()))
