"""Characteristic roots of matrix delay systems (ddesys.matrix.roots): certified roots against independent
references: Lambert W closed forms (scipy.special.lambertw), published problems (NLEVP), Hayes'
stability region, and brute-force Newton searches written here without ddesys."""
import doctest
import time

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.special import lambertw

import ddesys.matrix.chart
import ddesys
import ddesys.matrix.roots
from ddesys.matrix._roots_igd import igd_eigvals
from ddesys.matrix.roots import (RootsResult, characteristic_roots, is_stable, rightmost_roots_batch,
                          spectral_abscissa)


# ----------------------------------------------------------------------------- references
def lambert_roots(a, ad, tau, re_min, branches=400):
    """All roots of s - a - ad exp(-s tau) with Re s >= re_min: s = a + W_k(ad tau e^{-a tau}) / tau,
    one per branch k (Corless et al. 1996; Asl & Ulsoy 2003), branch real parts -> -inf as |k| grows."""
    z = ad * tau * np.exp(-a * tau)
    s = np.array([a + lambertw(z, k) / tau for k in range(-branches, branches + 1)])
    return s[s.real >= re_min]


def match(found, expected, rtol):
    """Every expected root matched once by a found root within rtol (1 + |s|), and nothing else."""
    found, expected = list(np.asarray(found)), list(np.asarray(expected))
    assert len(found) == len(expected), (len(found), len(expected))
    worst = 0.0
    for e in expected:
        d = np.abs(np.array(found) - e)
        i = int(np.argmin(d))
        worst = max(worst, d[i] / (1 + abs(e)))
        found.pop(i)
    assert worst <= rtol, worst


def brute_force_roots(f, df, x0, x1, y0, y1, h=0.05, re_min=None):
    """Distinct zeros of the analytic f in the box: Newton from every point of a grid of spacing h."""
    X, Y = np.meshgrid(np.arange(x0, x1, h), np.arange(y0, y1, h))
    s = (X + 1j * Y).ravel()
    with np.errstate(all="ignore"):
        for _ in range(60):
            s = s - f(s) / df(s)
        ok = np.isfinite(s) & (np.abs(f(s) / df(s)) < 1e-12 * (1 + np.abs(s)))
    s = s[ok]
    if re_min is not None:
        s = s[s.real >= re_min]
    out = []
    for z in s[np.argsort(-s.real)]:
        if all(abs(z - w) > 1e-7 * (1 + abs(z)) for w in out):
            out.append(z)
    return np.array(out)


# ----------------------------------------------------------------------------- scalar and structured
@pytest.mark.parametrize("a, ad, tau, re_min", [
    (-0.5 + 2j, 0.3 - 0.2j, 1.3, -3.0),
    (0.2 - 1j, -1.5 + 0.5j, 0.7, -4.0),
    (-1.0, -2.0, 1.0, -2.5),
    (0.0, -1.0, 1.0, -3.0),                 # x' = -x(t - 1): W_0(-1) = -0.318131505... + 1.337235701...i
])
def test_scalar_vs_lambert_w(a, ad, tau, re_min):
    res = characteristic_roots([[a]], [[ad]], [tau], re_min)
    ref = lambert_roots(a, ad, tau, re_min)
    assert res.certified and res.count == ref.size >= 2
    match(res.roots, ref, 1e-10)
    assert np.all(np.diff(res.roots.real) <= 1e-12)                        # descending real part
    assert np.all(res.residuals < 1e-12)
    r, rr = res                                                              # unpacks
    assert r is res.roots and rr is res.residuals


def test_triangular_two_delays_factors_into_scalar_ones():
    # M(s) upper triangular: det = (s - a1 - b1 e^{-s tau1}) (s - a2 - b2 e^{-s tau2}), each a scalar DDE
    # with its own delay; the off-diagonal coupling (through A and both delays) does not enter det.
    a1, a2, b1, b2, t1, t2 = -0.3, 0.1 + 0.5j, -1.2, 0.4 - 0.3j, 0.8, 1.9
    A = np.array([[a1, 2.0], [0, a2]])
    Ad = np.array([[[b1, 0.7], [0, 0]], [[0, -1.5j], [0, b2]]])
    re_min = -2.0
    res = characteristic_roots(A, Ad, [t1, t2], re_min)
    ref = np.concatenate([lambert_roots(a1, b1, t1, re_min), lambert_roots(a2, b2, t2, re_min)])
    assert res.certified and res.count == ref.size
    match(res.roots, ref, 1e-10)


def test_dense_complex_normal_matrices_vs_lambert_w():
    # A = Q diag(a) Q*, Ad = Q diag(b) Q* with Q unitary: det M = prod_i (s - a_i - b_i e^{-s tau}).
    # Complex matrices, which no other tool we know of accepts.
    rng = np.random.default_rng(3)
    Q, _ = np.linalg.qr(rng.standard_normal((4, 4)) + 1j * rng.standard_normal((4, 4)))
    a = np.array([-0.5 + 1j, -1 - 2j, 0.3 + 0.1j, -2.0])
    b = np.array([0.4j, -0.8, 0.2 - 0.3j, 1.1])
    tau, re_min = 1.1, -2.5
    res = characteristic_roots(Q @ np.diag(a) @ Q.conj().T, Q @ np.diag(b) @ Q.conj().T, [tau], re_min)
    ref = np.concatenate([lambert_roots(ai, bi, tau, re_min) for ai, bi in zip(a, b)])
    assert res.certified and res.count == ref.size
    match(res.roots, ref, 1e-9)
    assert spectral_abscissa(Q @ np.diag(a) @ Q.conj().T, Q @ np.diag(b) @ Q.conj().T, [tau]) == \
        pytest.approx(ref.real.max(), abs=1e-10)


# ----------------------------------------------------------------------------- published problems
def nlevp_time_delay():
    """NLEVP 'time_delay' (Betcke et al. 2013, ACM TOMS 39(2); from Jarlebring & Michiels 2010,
    Automatica 46, 1112-1115, b(2) as corrected there): x' = A0 x + A1 x(t - 1) has the double
    non-semisimple eigenvalue 3 pi i (the NLEVP documentation states this)."""
    pi = np.pi
    a = [2 * (65 * pi + 32) / (5 * (8 + 5 * pi)), 9 * pi ** 2 * (13 + 5 * pi) / (8 + 5 * pi),
         324 * pi ** 2 * (5 * pi + 4) / (5 * (8 + 5 * pi))]
    b = [(260 * pi + 128 + 225 * pi ** 2) / (10 * (8 + 5 * pi)), 45 * pi ** 2 / (8 + 5 * pi),
         81 * pi ** 2 * (40 * pi + 32 + 25 * pi ** 2) / (10 * (8 + 5 * pi))]
    A0 = np.array([[0, 1, 0], [0, 0, 1], [-a[2], -a[1], -a[0]]])
    A1 = np.array([[0, 0, 0], [0, 0, 0], [-b[2], -b[1], -b[0]]])
    return A0, A1


def test_nlevp_time_delay_double_imaginary_root():
    A0, A1 = nlevp_time_delay()
    res = characteristic_roots(A0, A1, [1.0], -1.0)
    assert res.certified
    for target in (3j * np.pi, -3j * np.pi):
        near = np.abs(res.roots - target) < 1e-6
        assert near.sum() == 2                                    # one root of multiplicity 2
        assert np.all(res.multiplicity[near] == 2)
        assert np.abs(res.roots[near] - target).max() < 1e-9      # the centroid, well conditioned
    assert res.multiplicity.size == res.roots.size == res.count
    assert not is_stable(A0, A1, [1.0])                           # roots on the axis: not stable


def test_michiels_niculescu_example_vs_brute_force():
    # NLEVP 'time_delay2' (Michiels & Niculescu 2007, SIAM; Kressner 2009, Numer. Math. 114):
    # lambda I + B0 + A1 exp(-tau lambda), i.e. x' = -B0 x - A1 x(t - tau). No published roots at hand,
    # so the reference is a brute-force Newton search on the explicit 2x2 determinant.
    B0, A1, tau = np.array([[5.0, -1], [-2, 6]]), np.array([[2.0, -1], [-4, 1]]), 1.0
    A, Ad = -B0, -A1
    re_min = -2.0

    def parts(s):
        e = np.exp(-s * tau)
        m = [[(s if i == j else 0) - A[i, j] - Ad[i, j] * e for j in range(2)] for i in range(2)]
        dm = [[(1 if i == j else 0) + tau * Ad[i, j] * e for j in range(2)] for i in range(2)]
        return m, dm

    def f(s):
        m, _ = parts(s)
        return m[0][0] * m[1][1] - m[0][1] * m[1][0]

    def df(s):
        m, d = parts(s)
        return d[0][0] * m[1][1] + m[0][0] * d[1][1] - d[0][1] * m[1][0] - m[0][1] * d[1][0]

    res = characteristic_roots(A, Ad, [tau], re_min)
    # every root with Re s >= re_min has |s| <= ||A||_1 + ||Ad||_1 e^{-re_min tau} (a norm bound)
    R = np.abs(A).sum(axis=0).max() + np.abs(Ad).sum(axis=0).max() * np.exp(-re_min * tau)
    ref = brute_force_roots(f, df, re_min - 0.5, R, -R, R, h=0.25, re_min=re_min)
    assert ref.size >= 5
    assert res.certified
    match(res.roots, ref, 1e-10)


def test_hayes_stability_region():
    # x' = a x + b x(t - 1), real: stable iff a < 1, a + b < 0 and b > -sqrt(a^2 + z^2), z in (0, pi)
    # with z = a tan z (z = pi/2 at a = 0) (Hayes 1950, J. London Math. Soc. 25, 226-232). The third
    # boundary is where s = i w is a root: 0 = a + b cos w, w = -b sin w.
    def hayes(a, b):
        if a >= 1 or a + b >= 0:
            return False
        if a == 0:
            z = np.pi / 2
        elif a < 0:
            z = brentq(lambda z: z - a * np.tan(z), np.pi / 2 + 1e-12, np.pi - 1e-12)
        else:
            z = brentq(lambda z: z - a * np.tan(z), 1e-12, np.pi / 2 - 1e-12)
        return b > -np.sqrt(a * a + z * z)

    rng = np.random.default_rng(0)
    checked = n_stable = 0
    for a, b in rng.uniform([-3, -4], [1.5, 2], size=(40, 2)):
        exact = hayes(a, b)
        if hayes(a * 1.03 + 0.03, b * 1.03) != exact or hayes(a * 0.97 - 0.03, b * 0.97) != exact:
            continue                                               # too close to the boundary
        assert is_stable([[a]], [[b]], [1.0]) == exact, (a, b)
        checked += 1
        n_stable += exact
    assert checked >= 25 and 5 <= n_stable <= checked - 5


# ----------------------------------------------------------------------------- traps and multiple roots
@pytest.mark.parametrize("tau", [1.0, 10.0, 50.0])
@pytest.mark.parametrize("upper", [0.0, 3.0])
def test_nilpotent_delayed_coupling(tau, upper):
    # M(s) = [[s - a1, -upper - e^{-s tau}], [0, s - a2]]: det = (s - a1)(s - a2) exactly, whatever tau.
    a1, a2 = -0.5, -1.0
    A, Ad = np.array([[a1, upper], [0, a2]]), np.array([[0.0, 1.0], [0.0, 0.0]])
    if tau >= 10:                     # the trap is there: the discretization has spurious eigenvalues
        ev = igd_eigvals(A, Ad[None], np.array([tau]), 40)
        assert (ev.real >= -3).sum() > 10
    res = characteristic_roots(A, Ad, [tau], -3.0)
    assert res.certified and res.count == 2
    assert np.allclose(res.roots, [a1, a2], rtol=0, atol=1e-12)
    assert spectral_abscissa(A, Ad, [tau]) == pytest.approx(a1, abs=1e-12)
    assert is_stable(A, Ad, [tau])


def test_real_double_root_at_the_branch_point():
    # s - a - b e^{-s tau} has a double root where W's argument is -1/e: b tau e^{-a tau} = -1/e gives
    # s = a + W(-1/e)/tau = a - 1/tau (f = f' = 0 there: f'(s) = 1 + b tau e^{-s tau} = 1 - 1 = 0).
    a, tau = 0.5, 1.0
    b = -np.exp(a * tau - 1) / tau
    res = characteristic_roots([[a]], [[b]], [tau], -3.0)
    assert res.certified
    near = np.abs(res.roots - (a - 1 / tau)) < 1e-6
    assert near.sum() == 2 and np.all(res.multiplicity[near] == 2)
    assert np.abs(res.roots[near] - (a - 1 / tau)).max() < 1e-10
    assert res.roots.size == res.count


def test_complex_double_root_on_the_imaginary_axis():
    # f(s) = s - a - b e^{-s tau} = 0 = f'(s) = 1 + b tau e^{-s tau} gives b e^{-s tau} = -1/tau and
    # s = a - 1/tau; for s = i w: a = 1/tau + i w, b = -e^{i w tau}/tau (complex coefficients).
    w, tau = 2.0, 0.7
    a, b = 1 / tau + 1j * w, -np.exp(1j * w * tau) / tau
    res = characteristic_roots([[a]], [[b]], [tau], -2.0)
    assert res.certified
    near = np.abs(res.roots - 1j * w) < 1e-6
    assert near.sum() == 2 and np.all(res.multiplicity[near] == 2)
    assert np.abs(res.roots[near] - 1j * w).max() < 1e-10
    match(res.roots[~near], lambert_roots(a, b, tau, -2.0)[np.abs(lambert_roots(a, b, tau, -2.0) - 1j * w) > 1e-4],
          1e-10)
    with pytest.warns(ddesys.UndecidableStability):          # a root on the axis: not proven stable
        assert not is_stable([[a]], [[b]], [tau])


def test_re_min_on_a_root_is_moved_and_reported():
    s0 = complex(lambertw(-1.0, 0))                               # x' = -x(t - 1)
    res = characteristic_roots([[0.0]], [[-1.0]], [1.0], s0.real)
    assert res.certified and res.re_min < s0.real and "moved" in res.message
    match(res.roots, [s0, np.conj(s0)], 1e-12)


def test_one_delay_stability_boundary():
    # x' = -x(t - tau): stable iff tau < pi/2; at pi/2 the roots +-i lie on the axis (not stable).
    assert is_stable([[0.0]], [[-1.0]], [np.pi / 2 * 0.999])
    with pytest.warns(ddesys.UndecidableStability):          # fl(pi/2): Re s ~ -5e-17, below rounding
        assert not is_stable([[0.0]], [[-1.0]], [np.pi / 2])
    assert not is_stable([[0.0]], [[-1.0]], [np.pi / 2 * 1.001])
    assert spectral_abscissa([[0.0]], [[-1.0]], [np.pi / 2]) == pytest.approx(0.0, abs=1e-12)


# ----------------------------------------------------------------------------- API, errors, speed
def test_uncertified_paths_report_instead_of_raising():
    small = characteristic_roots([[0.0]], [[-1.0]], [1.0], -5.0, max_grid=6)
    assert not small.certified and small.count == lambert_roots(0.0, -1.0, 1.0, -5.0).size
    assert "max_grid" in small.message and "counted" in small.message
    loose = characteristic_roots([[0.0]], [[-1.0]], [1.0], -3.0, certify=False)
    assert not loose.certified and loose.count is None and "certify=False" in loose.message
    match(loose.roots, lambert_roots(0.0, -1.0, 1.0, -3.0), 1e-10)


def test_result_is_frozen_and_short():
    res = characteristic_roots([[-1.0]], [[0.5]], [1.0], -1.0)
    assert isinstance(res, RootsResult) and res.roots.size == 1
    with pytest.raises(AttributeError):
        res.certified = False
    with pytest.raises(ValueError):
        res.roots[0] = 0
    assert "certified=True" in repr(res) and len(repr(res)) < 200
    empty = characteristic_roots([[-1.0]], [[0.5]], [1.0], 5.0)         # bound: no root right of 5
    assert empty.certified and empty.count == 0 and empty.roots.size == 0


@pytest.mark.parametrize("kw, err", [
    (dict(re_min=np.nan), ValueError), (dict(re_min=np.inf), ValueError), (dict(re_min=1j), TypeError),
    (dict(re_min="0"), TypeError), (dict(re_min=-800.0), ValueError), (dict(re_min=0, n_grid=1), ValueError),
    (dict(re_min=0, n_grid=2.5), TypeError), (dict(re_min=0, max_grid=0), ValueError),
    (dict(re_min=0, tol=0.0), ValueError), (dict(re_min=0, certify="yes"), TypeError),
])
def test_bad_arguments(kw, err):
    with pytest.raises(err, match=next(iter(k for k in kw if k != "re_min"), "re_min")):
        characteristic_roots([[0.0]], [[-1.0]], [1.0], **kw)


def test_bad_systems_name_the_argument():
    with pytest.raises(ValueError, match="tau"):
        characteristic_roots([[0.0]], [[-1.0]], [0.0], 0.0)
    with pytest.raises(ValueError, match="Ad"):
        is_stable(np.eye(2), np.eye(3), [1.0])
    with pytest.raises(ValueError, match="A"):
        spectral_abscissa([[np.nan]], [[1.0]], [1.0])


def test_a_failed_root_count_carries_its_cause():
    """The argument principle's count says why it failed in attributes, which ``is_stable`` and the root
    search decide on (not the message): a root on the curve (``x' = -x(t - pi/2)`` has roots at ``+-i``; ``s``
    exactly at a root of ``x' = 0``), or the sample budget."""
    from ddesys.matrix._roots_count import CountFailure, Rectangle, winding_numbers

    A, Ad, tau = np.array([[0.0]]), np.array([[[-1.0]]]), np.array([np.pi / 2])
    cases = [(dict(curves=[Rectangle(-1.0, 1.0, -2.0, 1.0)]), (False, True)),     # an edge through s = i
             (dict(curves=[Rectangle(-3.0, 1.0, -30.0, 30.0)], h0=10.0, max_samples=10), (False, False))]
    for kw, cause in cases:
        (count,), (why,) = winding_numbers(A, Ad, tau, **kw)
        assert count is None and isinstance(why, CountFailure) and why and (why.at_root, why.near_root) == cause
    zero = np.zeros((1, 1))                                                   # x' = 0: a root at s = 0, a corner
    (count,), (why,) = winding_numbers(zero, zero[None], np.ones(1), [Rectangle(0.0, 1.0, 0.0, 1.0)])
    assert count is None and (why.at_root, why.near_root) == (True, False)
    (count,), (why,) = winding_numbers(A, Ad, tau, [Rectangle(-1.0, 1.0, -2.0, 2.0)])
    assert count == 2 and why == "" and not (why.at_root or why.near_root)
    with pytest.warns(ddesys.UndecidableStability):
        assert not is_stable([[0.0]], [[-1.0]], [np.pi / 2])              # roots on the axis: not proven stable


def test_batched_rightmost_roots_vs_lambert_w():
    a = np.array([-0.5 + 1j, 0.3, -1.0])
    b = np.array([0.8, -1.7, 0.2 - 0.9j])
    tau = np.array([[1.0], [0.9], [2.0]])
    roots, est, ok = rightmost_roots_batch(a[:, None, None], b[:, None, None, None], tau, n_grid=24, n_roots=2)
    assert ok.all()
    for i in range(3):
        ref = lambert_roots(a[i], b[i], tau[i, 0], -50)
        ref = ref[np.argsort(-ref.real)]
        assert est[i] == pytest.approx(ref[0].real, abs=1e-10)
        assert np.abs(roots[i, 0] - ref[:2]).min() < 1e-9


@pytest.mark.slow
def test_speed_20_states_3_delays():
    rng = np.random.default_rng(0)
    n = 20
    A = rng.standard_normal((n, n)) / np.sqrt(n) - 2 * np.eye(n)
    Ad = 0.3 * rng.standard_normal((3, n, n)) / np.sqrt(n)
    tau = rng.uniform(0.3, 2, 3)
    t = time.perf_counter()
    a = spectral_abscissa(A, Ad, tau)
    res = characteristic_roots(A, Ad, tau, a - 1)
    assert res.certified and time.perf_counter() - t < 3.0
    assert res.roots[0].real == pytest.approx(a, abs=1e-12)


@pytest.mark.parametrize("module", [ddesys.matrix.roots, ddesys.matrix.chart])
def test_doctests(module):
    r = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert r.attempted > 0 and r.failed == 0
