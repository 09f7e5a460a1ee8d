"""ddesys.matrix.crossings: roots on the imaginary axis that are multiple (a double root of the delay
equation) or touch the axis, and the inclusion of a crossing at exactly ``tau_max``.

The system is NLEVP 'time_delay' (Betcke, Higham, Mehrmann, Schroeder & Tisseur 2013, ACM TOMS 39(2);
from Jarlebring & Michiels 2010, Automatica 46, with b(2) as corrected there): a companion pair, so
det(s I - A0 - A1 e^{-s tau}) = p(s) + q(s) e^{-s tau} with p = s^3 + a1 s^2 + a2 s + a3 and
q = b1 s^2 + b2 s + b3; at tau = 1 it has the double non-semisimple root 3 pi i.

Independent references (mpmath, 30 digits, none of the code under test):
* crossing frequencies in closed form: |p(i w)| = |q(i w)| is the cubic F(x) = |p|^2 - |q|^2 in
  x = w^2 (roots by mpmath.polyroots), theta = -arg(-p(i w) / q(i w));
* the roots near i w at tau -+ 1e-4 by mpmath.findroot on p + q e^{-s tau} (started on a small circle), whose
  real parts give how many roots lie in the right half-plane just before and just after each delay;
* for the complex scalar s = a + b e^{-s tau} with a double root on the axis: Lambert W (mpmath.lambertw).
"""
import itertools
import warnings

import mpmath as mp
import numpy as np
import pytest

from ddesys import DelayStateSpace
from ddesys.matrix._crossing_search import newton_s, sigma_min
from ddesys.matrix.crossings import (
    Crossing,
    crossing_frequencies,
    crossings,
    delay_margin,
)

TWO_PI = 2 * np.pi
DPS = 30


# ----------------------------------------------------------------------------- the problem, in mpmath
def _coeffs():
    pi = mp.pi
    a = [2 * (65 * pi + 32) / (5 * (8 + 5 * pi)), 9 * pi ** 2 * (13 + 5 * pi) / (8 + 5 * pi),
         324 * pi ** 2 * (5 * pi + 4) / (5 * (8 + 5 * pi))]
    b = [(260 * pi + 128 + 225 * pi ** 2) / (10 * (8 + 5 * pi)), 45 * pi ** 2 / (8 + 5 * pi),
         81 * pi ** 2 * (40 * pi + 32 + 25 * pi ** 2) / (10 * (8 + 5 * pi))]
    return a, b


def nlevp_time_delay():
    """A0, A1 (float64) of NLEVP 'time_delay' (the nlevp MATLAB file time_delay.m)."""
    with mp.workdps(DPS):
        a, b = (list(map(float, v)) for v in _coeffs())
    A0 = np.array([[0, 1, 0], [0, 0, 1], [-a[2], -a[1], -a[0]]])
    A1 = np.array([[0, 0, 0], [0, 0, 0], [-b[2], -b[1], -b[0]]])
    return A0, A1


def char_fn(s, tau):
    a, b = _coeffs()
    return s ** 3 + a[0] * s ** 2 + a[1] * s + a[2] + (b[0] * s ** 2 + b[1] * s + b[2]) * mp.exp(-s * tau)


def reference_pairs():
    """(omega, theta, multiplicity of x = omega^2 as a root of F), closed form, omega > 0."""
    with mp.workdps(DPS):
        a, b = _coeffs()
        F = [1, a[0] ** 2 - 2 * a[1] - b[0] ** 2, a[1] ** 2 - 2 * a[0] * a[2] + 2 * b[0] * b[2] - b[1] ** 2,
             a[2] ** 2 - b[2] ** 2]
        xs = sorted(mp.re(x) for x in mp.polyroots(F, maxsteps=200, extraprec=300) if abs(mp.im(x)) < 1e-20)
        out = []
        for x in xs:
            if out and abs(x - out[-1][0] ** 2) < 1e-12:       # a double root of F (rounded apart)
                out[-1][2] += 1
                continue
            w = mp.sqrt(x)
            s = 1j * w
            th = (-mp.arg(-(s ** 3 + a[0] * s ** 2 + a[1] * s + a[2]) / (b[0] * s ** 2 + b[1] * s + b[2]))) \
                % (2 * mp.pi)
            out.append([w, th, 1])
        return [(float(w), float(th), m) for w, th, m in out]


def roots_near(w, tau, radius=0.06, n_start=16):
    """Distinct roots of p + q e^{-s tau} within 0.5 of i w (mpmath.findroot from a circle of starts)."""
    with mp.workdps(DPS):
        c = 1j * mp.mpf(w)
        out = []
        for k in range(n_start + 1):
            s0 = c + (radius * mp.expjpi(2 * mp.mpf(k) / n_start) if k < n_start else 0)
            try:
                s = mp.findroot(lambda s_: char_fn(s_, mp.mpf(tau)), s0, tol=1e-40)
            except (ValueError, ZeroDivisionError):
                continue
            if abs(s - c) < 0.5 and all(abs(s - o) > 1e-15 for o in out):
                out.append(s)
        return out


def reference_entries(w, tau, delta=1e-4):
    """Directions of the roots at i w, delay tau: (multiplicity, net number of roots entering Re s > 0),
    from the roots near i w at tau -+ delta; the multiplicity is the number of roots there."""
    before, after = roots_near(w, tau - delta), roots_near(w, tau + delta)
    assert len(before) == len(after) >= 1
    for r in before + after:
        assert abs(mp.re(r)) > 1e-12                     # decided: no root on the axis beside tau
    net = sum(mp.re(r) > 0 for r in after) - sum(mp.re(r) > 0 for r in before)
    m, k = len(before), min(abs(net), len(before))
    return sorted([int(np.sign(net))] * k + [0] * (m - k))


# ----------------------------------------------------------------------------- the reference itself
def test_reference_facts():
    pairs = reference_pairs()
    assert [m for _, _, m in pairs] == [2, 1]                   # 3 pi: F has a double root (a touch)
    (w1, th1, _), (w2, th2, _) = pairs
    assert abs(w1 - 3 * np.pi) < 1e-12 and abs(th1 - np.pi) < 1e-12
    assert abs(w2 - 4.5 * np.pi) < 1e-12 and abs(th2 - np.pi / 2) < 1e-12
    with mp.workdps(DPS):                                       # a double (not triple) root at tau = 1
        s0 = 3j * mp.pi
        f = lambda s: char_fn(s, 1)
        assert abs(f(s0)) < 1e-25 and abs(mp.diff(f, s0)) < 1e-25 and abs(mp.diff(f, s0, 2)) > 1
    assert len(roots_near(3 * np.pi, 1.0 - 1e-4)) == 2


# ----------------------------------------------------------------------------- NLEVP time_delay
def expected_list(tau_max):
    """(tau, omega, sorted directions) for every crossing delay <= tau_max, from the mpmath references."""
    out = []
    for w, th, _ in reference_pairs():
        k = 0
        while True:
            t = (th + TWO_PI * k) / w
            if t > tau_max * (1 + 1e-12):
                break
            out.append((t, w, reference_entries(w, t)))
            k += 1
    return sorted(out)


def check_against(got, exp):
    assert all(isinstance(c, Crossing) for c in got)
    assert all(x.tau <= y.tau for x, y in itertools.pairwise(got))
    for t, w, dirs in exp:
        mine = [c for c in got if abs(c.tau - t) <= 1e-10 * t and abs(c.omega - w) <= 1e-9 * w]
        assert sorted(c.direction for c in mine) == dirs, (t, w, mine, dirs)
    assert len(got) == sum(len(d) for _, _, d in exp), (got, exp)


@pytest.mark.parametrize("tau_max, method", [(0.99, "auto"), (1.0, "auto"), (1.0, "sweep"), (3.0, "auto")])
def test_nlevp_time_delay_crossings(tau_max, method):
    # tau_max = 1: the double root 3 pi i (and a simple crossing at 4.5 pi i) exactly at the boundary;
    # tau_max = 3: tau = 1 inside, and the touch of 3 pi i at tau = 3 exactly
    A0, A1 = nlevp_time_delay()
    exp = expected_list(tau_max)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                          # and no "continuation failed" warning
        got = crossings(A0, A1, tau_max, method=method)
    check_against(got, exp)
    if tau_max >= 1.0:
        at1 = [c for c in got if abs(c.tau - 1.0) < 1e-12 and abs(c.omega - 3 * np.pi) < 1e-10]
        assert [c.direction for c in at1] == [0, 0]             # double root: as many roots right after as before


def test_nlevp_time_delay_through_the_class():
    A0, A1 = nlevp_time_delay()
    sys = DelayStateSpace(A=A0, Ad=A1, tau=1.0)
    got = sys.crossings(1.0)
    check_against(got, expected_list(1.0))
    assert [round(c.tau * 9) for c in got] == [1, 3, 5, 9, 9, 9]
    # first crossing: 4.5 pi at theta / omega = (pi / 2) / (4.5 pi) = 1/9, destabilizing (reference_entries)
    assert reference_entries(4.5 * np.pi, 1 / 9) == [1]
    assert abs(sys.delay_margin() - 1 / 9) < 1e-14
    assert abs(delay_margin(A0, A1) - 1 / 9) < 1e-14


def test_nlevp_time_delay_frequencies():
    A0, A1 = nlevp_time_delay()
    got = sorted(crossing_frequencies(A0, A1), key=lambda p: p.omega)
    ref = reference_pairs()
    assert len(got) == len(ref)
    for p, (w, th, _) in zip(got, ref):
        assert abs(p.omega - w) < 1e-9 * w and abs(p.theta - th) < 1e-9
        assert [p.direction] == reference_entries(w, th / w)   # direction at the first delay


# ----------------------------------------------------------------------------- a complex scalar, Lambert W
def lambert_entries(w, tau, delta=1e-4):
    """As reference_entries for s = a + b e^{-s tau}, a = 1 + 2i, b = -e^{2i} (exact), whose roots are
    a + W_k(tau b e^{-a tau}) / tau (mpmath.lambertw, branches -6..5, the ones within 0.5 of i w)."""
    with mp.workdps(DPS):
        a, b = mp.mpc(1, 2), -mp.expj(2)

        def near(t):
            t = mp.mpf(t)
            rs = [a + mp.lambertw(t * b * mp.exp(-a * t), k) / t for k in range(-6, 6)]
            return [r for r in rs if abs(r - 1j * w) < 0.5]
        before, after = near(tau - delta), near(tau + delta)
        assert len(before) == len(after) >= 1 and all(abs(mp.re(r)) > 1e-12 for r in before + after)
        net = sum(mp.re(r) > 0 for r in after) - sum(mp.re(r) > 0 for r in before)
    m, k = len(before), min(abs(net), len(before))
    return sorted([int(np.sign(net))] * k + [0] * (m - k))


@pytest.mark.parametrize("tau_max", [1.0, 1 + 2 * np.pi])
def test_complex_scalar_double_root_on_the_axis(tau_max):
    # a = 1 + 2i, b = -e^{2i}: s = 2i solves s = a + b e^{-s}, and 1 + tau (s - a) = 0 there (the derivative
    # of s - a - b e^{-s tau}), so 2i is a double root at tau = 1 (the branch point of W). Crossings at
    # tau_k = 1 + pi k (omega = 2, theta = 2); |b| = Re a makes w = Im a the only crossing frequency.
    a, b = 1 + 2j, -np.exp(2j)
    with mp.workdps(DPS):                                       # the double root, at 30 digits
        f = lambda s: s - mp.mpc(1, 2) + mp.expj(2) * mp.exp(-s)
        assert abs(f(2j)) < 1e-25 and abs(mp.diff(f, 2j)) < 1e-25 and abs(mp.diff(f, 2j, 2)) > 0.5
    exp = [(1 + np.pi * k, 2.0, lambert_entries(2.0, 1 + np.pi * k))
           for k in range(3) if 1 + np.pi * k <= tau_max * (1 + 1e-12)]
    assert exp[0][2] == [0, 0]                                  # one root on each side before and after
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = crossings([[a]], [[b]], tau_max)
    check_against(got, exp)
    assert len(got) == (2 if tau_max == 1.0 else 4)


# ----------------------------------------------------------------------------- no non-finite SVD input
def test_newton_from_an_overflowing_start_fails_cleanly():
    # a start with Re s = -1e300: exp(-s tau) overflows; Newton must say "not converged", not raise
    A0, A1 = nlevp_time_delay()
    _, ok = newton_s(A0, A1[None], 1.0, complex(-1e300, 3 * np.pi), 1.0)
    assert ok is False
    assert sigma_min(np.array([[np.inf, 0.0], [0.0, 1.0]])) == np.inf
    assert sigma_min(np.array([[np.nan, 0.0], [0.0, 1.0]])) == np.inf


# ----------------------------------------------------------------------------- tau_max at a crossing delay
def _hayes(a, b):
    # x' = a x + b x(t - tau), |b| > |a| (Hayes 1950): w = sqrt(b^2 - a^2), theta = arccos(-a/b) (b < 0)
    w = np.sqrt(b * b - a * a)
    th = np.arccos(-a / b) if b < 0 else TWO_PI - np.arccos(-a / b)
    return w, th


def _cooke(a, b, c):
    # x'' + a x' + b x + c x(t - tau): w^2 roots of w^4 + (a^2 - 2b) w^2 + b^2 - c^2 (Cooke & Grossman 1982)
    p = 2 * b - a * a
    root = np.sqrt(p * p - 4 * (b * b - c * c))
    out = []
    for w2 in ((p + root) / 2, (p - root) / 2):
        w = np.sqrt(w2)
        out.append((w, np.mod(-np.angle((w2 - b - 1j * a * w) / c), TWO_PI)))
    return out


SYSTEMS = {
    "pure delay": ([[0.0]], [[-1.0]], [(1.0, np.pi / 2)]),
    "hayes": ([[-1.0]], [[-2.0]], [_hayes(-1.0, -2.0)]),
    "hayes b > 0": ([[0.5]], [[-1.0]], [_hayes(0.5, -1.0)]),
    "cooke": ([[0.0, 1.0], [-1.0, -0.1]], [[0.0, 0.0], [-0.5, 0.0]], _cooke(0.1, 1.0, 0.5)),
}


@pytest.mark.parametrize("name", list(SYSTEMS))
def test_tau_max_exactly_at_each_crossing_is_included(name):
    A, A1, pairs = SYSTEMS[name]
    every = sorted((th + TWO_PI * k) / w for w, th in pairs for k in range(40))
    for t in sorted((th + TWO_PI * k) / w for w, th in pairs for k in range(4)):
        n_le = sum(u <= t * (1 + 1e-12) for u in every)
        got = crossings(A, A1, t)
        assert len(got) == n_le, (name, t, got)
        assert abs(got[-1].tau - t) <= 1e-12 * t
        assert len(crossings(A, A1, t * (1 - 1e-9))) == n_le - 1          # just below: excluded
