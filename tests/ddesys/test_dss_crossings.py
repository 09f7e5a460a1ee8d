"""ddesys.matrix.crossings: imaginary-axis crossings and the delay margin of x' = A x + A1 x(t - tau).

Every expected number is independent of the code under test: closed forms derived in the comments,
published values (cited), or brute force written here with NumPy only (eigenvalues on a dense theta grid
with bisection; the number of right-half-plane roots by the argument principle on numpy.linalg.det).
"""
import doctest
import warnings

import numpy as np
import pytest

import ddesys.matrix.crossings as cr
from ddesys.matrix.crossings import Crossing, crossing_frequencies, crossings, delay_margin

TWO_PI = 2 * np.pi


# ----------------------------------------------------------------------------- independent references
def scalar_pairs(a, b):
    """Axis roots of s = a + b e^{-s tau} (a, b complex): i w - a = b e^{-i theta} needs |i w - a| = |b|,
    i.e. w = Im a +- sqrt(|b|^2 - Re(a)^2); theta = -arg((i w - a) / b). The direction is the sign of
    Re ds/dtau with ds/dtau = -s b e^{-s tau} / (1 + tau b e^{-s tau}) (implicit differentiation), which at
    s = i w is sign(w Im(i w - a)) = sign(w (w - Im a)) for every tau_k."""
    a, b = complex(a), complex(b)
    d = abs(b) ** 2 - a.real ** 2
    if d < 0:
        return []
    out = []
    for w in sorted({a.imag + np.sqrt(d), a.imag - np.sqrt(d)}):
        if abs(w) < 1e-14:
            continue
        th = np.mod(-np.angle((1j * w - a) / b), TWO_PI)
        if w < 0:
            th -= TWO_PI
        out.append((w, th, int(np.sign(w * (w - a.imag)))))
    return out


def taus_of(w, th, tau_max):
    t0 = th / w if th != 0 else TWO_PI / abs(w)
    return [t0 + TWO_PI * k / abs(w) for k in range(int((tau_max - t0) * abs(w) / TWO_PI) + 2)
            if t0 + TWO_PI * k / abs(w) <= tau_max]


def expected_from_pairs(pairs, tau_max, real):
    out = [(t, w, d) for w, th, d in pairs if not (real and w < 0) for t in taus_of(w, th, tau_max)]
    return sorted(out)


def brute_pairs(A, A1, real, n_grid=20001):
    """Crossing pairs by brute force: f(theta) = prod_j Re lambda_j(A + A1 e^{-i theta}) is continuous in
    theta (symmetric in the eigenvalues: no tracking) and changes sign where one eigenvalue crosses the
    imaginary axis; bisection on that sign, then omega = Im of the eigenvalue nearest the axis."""
    A, A1 = np.asarray(A), np.asarray(A1)
    f = lambda th: np.prod(np.linalg.eigvals(A + A1 * np.exp(-1j * th)).real, axis=-1)  # noqa: E731
    th = np.linspace(0, TWO_PI, n_grid)
    F = f(th[:, None, None])
    out = []
    for k in np.flatnonzero(np.signbit(F[1:]) != np.signbit(F[:-1])):
        lo, hi = th[k], th[k + 1]
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            if np.signbit(f(mid)) == np.signbit(f(lo)):
                lo = mid
            else:
                hi = mid
        lam = np.linalg.eigvals(A + A1 * np.exp(-1j * lo))
        w = lam[np.argmin(np.abs(lam.real))].imag
        if real and w < 0:
            continue
        out.append((w, lo if w > 0 else lo - TWO_PI))
    return sorted(out)


def rhp_count(A, A1, tau, n=40000):
    """Number of roots of det(s I - A - A1 e^{-s tau}) with Re s > 0, by the argument principle on the
    right half-disk of radius R: every such root is an eigenvalue of A + A1 e^{-s tau}, |e^{-s tau}| <= 1,
    so |s| <= ||A|| + ||A1|| < R."""
    A, A1 = np.asarray(A, dtype=complex), np.asarray(A1, dtype=complex)
    R = 1.1 * (np.linalg.norm(A, 2) + np.linalg.norm(A1, 2)) + 0.1
    arc = R * np.exp(1j * np.linspace(-np.pi / 2, np.pi / 2, n))
    axis = 1j * np.linspace(R, -R, 4 * n)
    s = np.concatenate([arc, axis[1:]])
    d = np.linalg.det(s[:, None, None] * np.eye(len(A)) - A - A1 * np.exp(-s * tau)[:, None, None])
    step = np.angle(d[1:] / d[:-1])
    assert np.max(np.abs(step)) < 1.0, "contour too coarse for the reference count"
    return int(round(step.sum() / TWO_PI))


def check_list(got, expected, tol=1e-8):
    assert len(got) == len(expected), (got, expected)
    assert all(x.tau <= y.tau for x, y in zip(got[:-1], got[1:])), "not sorted by tau"
    key = lambda x: (round(x[0], 6), x[1])                       # noqa: E731 - ties at equal tau: by omega
    for c, (t, w, d) in zip(sorted(got, key=key), sorted(expected, key=key)):
        assert isinstance(c, Crossing)
        assert abs(c.tau - t) <= tol * max(1.0, t) and abs(c.omega - w) <= tol * max(1.0, abs(w)), (c, t, w)
        assert c.direction == d, (c, d)


# ----------------------------------------------------------------------------- scalar closed forms
def test_pure_delay_feedback():
    # x' = -x(t - tau): i w = -e^{-i w tau} -> w = 1, tau_k = pi/2 + 2 pi k, destabilizing (classical;
    # e.g. Hale & Verduyn Lunel 1993, the equation x' = -a x(t - 1) with a tau = pi/2).
    got = crossings([[0.0]], [[-1.0]], 30.0)
    check_list(got, [(np.pi / 2 + TWO_PI * k, 1.0, 1) for k in range(5)], tol=1e-12)
    assert abs(delay_margin([[0.0]], [[-1.0]]) - np.pi / 2) < 1e-12


@pytest.mark.parametrize("a, b", [(-1.0, -2.0), (0.5, -1.0), (-0.3, -0.31), (-1.0, 1.5), (2.0, -3.0)])
def test_hayes_scalar(a, b):
    # Hayes (1950): x' = a x + b x(t - tau), |b| > |a|: w = sqrt(b^2 - a^2), cos(w tau) = -a/b,
    # sin(w tau) = -w/b, so theta = arccos(-a/b) for b < 0 and 2 pi - arccos(-a/b) for b > 0; every
    # crossing destabilizes (Cooke & van den Driessche 1986: sign Re ds/dtau = sign F'(w^2), F = w^2 + a^2 - b^2).
    w = np.sqrt(b * b - a * a)
    th = np.arccos(-a / b) if b < 0 else TWO_PI - np.arccos(-a / b)
    got = crossings([[a]], [[b]], 40.0)
    check_list(got, [(t, w, 1) for t in taus_of(w, th, 40.0)], tol=1e-11)
    if a + b < 0:
        assert abs(delay_margin([[a]], [[b]]) - th / w) <= 1e-11 * th / w


def test_hayes_no_crossing_is_delay_independent():
    # |b| < -a: no axis root for any delay (Re a + |b| < 0, docs/theory.md §1.3)
    assert crossings([[-2.0]], [[1.0]], 100.0) == []
    assert delay_margin([[-2.0]], [[1.0]]) == np.inf
    assert delay_margin([[-1 + 3j]], [[0.5j]]) == np.inf


@pytest.mark.parametrize("a, b", [(-0.3 + 1.0j, 0.8 * np.exp(0.4j)), (-0.3 + 0.2j, 1.0 + 0j),
                                  (0.2 - 0.7j, -1.1j), (-1.0 - 2.0j, 1.6 * np.exp(-2.0j))])
def test_complex_scalar(a, b):
    # closed form of scalar_pairs (derived there); complex systems list both signs of omega
    pairs = scalar_pairs(a, b)
    got = crossings([[a]], [[b]], 25.0)
    check_list(got, expected_from_pairs(pairs, 25.0, real=False), tol=1e-11)
    fr = sorted(crossing_frequencies([[a]], [[b]]))
    ref = sorted((w, th, d) for w, th, d in pairs)
    assert len(fr) == len(ref)
    for p, (w, th, d) in zip(fr, ref):
        assert abs(p.omega - w) < 1e-11 and abs(p.theta - th) < 1e-11 and p.direction == d


def test_complex_scalar_has_a_stabilizing_crossing():
    # a = -0.3 + i, b = 0.8 e^{0.4 i}: w = 1 -+ sqrt(0.55); the lower branch has w (w - Im a) < 0
    pairs = scalar_pairs(-0.3 + 1.0j, 0.8 * np.exp(0.4j))
    assert sorted(d for _, _, d in pairs) == [-1, 1]
    dirs = {round(c.omega, 9): c.direction for c in crossings([[-0.3 + 1.0j]], [[0.8 * np.exp(0.4j)]], 60.0)}
    assert dirs == {round(w, 9): d for w, _, d in pairs}


# ----------------------------------------------------------------------------- stability switches
def test_cooke_stability_switches():
    # x'' + a x' + b x + c x(t - tau) = 0 (Cooke & Grossman 1982, J. Math. Anal. Appl. 86; Cooke & van den
    # Driessche 1986, Funkcial. Ekvac. 29): |b - w^2 + i a w| = |c| gives F(w^2) = w^4 + (a^2 - 2b) w^2 +
    # b^2 - c^2 = 0 with two positive roots w+ > w- when b^2 > c^2, 2b > a^2 and the discriminant is > 0;
    # sign Re ds/dtau = sign F'(w^2) = sign(2 w^2 + a^2 - 2b): w+ destabilizes, w- stabilizes, so a system
    # stable at tau = 0 switches stable -> unstable -> stable -> unstable (finitely many switches).
    a, b, c = 0.1, 1.0, 0.5
    A = [[0.0, 1.0], [-b, -a]]
    A1 = [[0.0, 0.0], [-c, 0.0]]
    p = 2 * b - a * a
    root = np.sqrt(p * p - 4 * (b * b - c * c))
    exp = []
    for w2 in ((p + root) / 2, (p - root) / 2):
        w = np.sqrt(w2)
        th = np.mod(-np.angle((w2 - b - 1j * a * w) / c), TWO_PI)     # c e^{-i th} = w^2 - b - i a w
        exp += [(t, w, int(np.sign(2 * w2 + a * a - 2 * b))) for t in taus_of(w, th, 30.0)]
    got = crossings(A, A1, 30.0)
    check_list(got, sorted(exp), tol=1e-11)
    assert [c_.direction for c_ in got[:4]] == [1, -1, 1, 1]
    assert abs(delay_margin(A, A1) - got[0].tau) < 1e-14
    # independent count of right-half-plane roots between the crossings: 2 * (sum of directions so far)
    cuts = [0.0] + [c_.tau for c_ in got[:5]]
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        inside = sum(c_.direction for c_ in got if c_.tau < hi)
        assert rhp_count(A, A1, 0.5 * (lo + hi)) == 2 * inside


# ----------------------------------------------------------------------------- matrix systems
def test_published_delay_margin_benchmark():
    # A = diag(-2, -0.9), A1 = [[-1, 0], [-1, -1]]: the benchmark of the delay-dependent LMI literature
    # (e.g. Gu, Kharitonov & Chen 2003, "Stability of Time-Delay Systems", ch. 5 examples; Fridman & Shaked
    # 2002), quoted with the analytical delay margin 6.1725 (truncated). Closed form: the factor
    # s + 0.9 + e^{-s tau} (Hayes, a = -0.9, b = -1) gives arccos(-0.9) / sqrt(0.19) = 6.17258...;
    # the other factor, s + 2 + e^{-s tau}, never crosses (|b| < |a|).
    A = [[-2.0, 0.0], [0.0, -0.9]]
    A1 = [[-1.0, 0.0], [-1.0, -1.0]]
    m = delay_margin(A, A1)
    assert abs(m - 6.1725) < 1e-4
    assert abs(m - np.arccos(-0.9) / np.sqrt(0.19)) < 1e-12


def test_triangular_is_union_of_diagonal_entries():
    # det M = (s - a1 - b1 e^{-s tau})(s - a2 - b2 e^{-s tau}) for triangular A, A1
    A = [[-1.0, 2.0], [0.0, 0.5]]
    A1 = [[-2.0, 1.0], [0.0, -1.0]]
    exp = expected_from_pairs(scalar_pairs(-1, -2) + scalar_pairs(0.5, -1), 20.0, real=True)
    check_list(crossings(A, A1, 20.0), exp, tol=1e-11)
    Ac = [[-0.5 + 1j, 0.0], [0.3 - 1j, 0.1 - 0.5j]]                    # complex, lower triangular
    A1c = [[0.9j, 0.0], [2.0, -0.8]]
    exp = expected_from_pairs(scalar_pairs(-0.5 + 1j, 0.9j) + scalar_pairs(0.1 - 0.5j, -0.8), 20.0, real=False)
    check_list(crossings(Ac, A1c, 20.0), exp, tol=1e-11)


@pytest.mark.parametrize("complex_", [False, True])
def test_dense_matrix_against_brute_force(complex_):
    A = np.array([[-1.0, 0.5, 0.2], [0.3, -2.0, 1.0], [0.0, 0.4, -0.5]])
    A1 = np.array([[-0.8, 0.3, 0.0], [0.2, -0.4, 0.6], [0.5, 0.0, -1.2]])
    if complex_:
        A = A + 1j * np.array([[0.5, 0, 0.1], [0, -0.3, 0], [0.2, 0, 1.0]])
        A1 = A1 * np.exp(0.4j)
    ref = brute_pairs(A, A1, real=not complex_)
    assert len(ref) >= 1
    for method in ("qep", "sweep"):
        got = crossing_frequencies(A, A1, method=method)
        assert len(got) == len(ref), (got, ref)
        for p, (w, th) in zip(sorted(got), ref):
            assert abs(p.omega - w) < 1e-10 and abs(p.theta - th) < 1e-10
    got = crossings(A, A1, 20.0)
    assert all(abs(c.tau * c.omega - th - TWO_PI * round((c.tau * c.omega - th) / TWO_PI)) < 1e-9
               for c in got for w, th in ref if abs(w - c.omega) < 1e-9)
    # directions and the margin: the right-half-plane count (argument principle) between crossings
    factor = 1 if complex_ else 2
    cuts = [0.0] + [c.tau for c in got[:4]]
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        assert rhp_count(A, A1, 0.5 * (lo + hi)) == factor * sum(c.direction for c in got if c.tau < hi)
    m = delay_margin(A, A1)
    assert rhp_count(A, A1, m - 1e-3) == 0 and rhp_count(A, A1, m + 1e-3) > 0


def test_dense_similarity_of_scalars_sweep_path(monkeypatch):
    # Q diag(a) Q^T, Q diag(b) Q^T with one orthogonal Q: det M is the product of the scalar factors, so
    # the crossings are the union of Hayes' closed forms. n = 14 > QEP_MAX_N takes the theta sweep.
    a = np.array([-1.0, -0.5, 0.3, -2.0, -1.2, -0.1, 0.7, -3.0, -0.8, -1.5, 0.2, -0.4, -2.5, -0.6])
    b = np.array([-2.0, -1.7, -0.9, 1.0, 1.9, -0.3, -1.3, -3.5, 0.5, -2.2, 0.6, -1.1, 2.8, 0.4])
    Q = np.linalg.qr(np.random.default_rng(3).standard_normal((14, 14)))[0]
    A, A1 = Q @ np.diag(a) @ Q.T, Q @ np.diag(b) @ Q.T
    assert A.shape[0] > cr.QEP_MAX_N
    exp = expected_from_pairs(sum((scalar_pairs(x, y) for x, y in zip(a, b)), []), 15.0, real=True)
    with monkeypatch.context() as mp:                      # "auto" must not build the 2 n^2 = 392 pencil
        mp.setattr(cr, "qep_candidates", lambda *a_: pytest.fail("QEP used for n = 14"))
        check_list(crossings(A, A1, 15.0), exp, tol=1e-9)
    Qs = np.linalg.qr(np.random.default_rng(4).standard_normal((6, 6)))[0]
    A6, B6 = Qs @ np.diag(a[:6]) @ Qs.T, Qs @ np.diag(b[:6]) @ Qs.T
    exp6 = expected_from_pairs(sum((scalar_pairs(x, y) for x, y in zip(a[:6], b[:6])), []), 15.0, real=True)
    for method in ("qep", "sweep"):
        check_list(crossings(A6, B6, 15.0, method=method), exp6, tol=1e-9)


def test_nilpotent_delay_term_has_no_crossing():
    # A upper triangular, A1 strictly upper: det M = (s + 1)(s + 2) for every tau (also after a common
    # similarity that hides the structure)
    A = np.array([[-1.0, 3.0], [0.0, -2.0]])
    A1 = np.array([[0.0, 1.0], [0.0, 0.0]])
    assert crossings(A, A1, 100.0) == []
    T = np.array([[1.0, 2.0], [-0.5, 1.5]])
    Ti = np.linalg.inv(T)
    assert crossings(T @ A @ Ti, T @ A1 @ Ti, 100.0) == []
    assert delay_margin(T @ A @ Ti, T @ A1 @ Ti) == np.inf


def test_repeated_roots_are_listed_with_multiplicity():
    # two identical decoupled blocks (semisimple) and a Jordan-coupled pair: det M = (s + 1 + 2 e^{-s tau})^2
    exp = expected_from_pairs(scalar_pairs(-1, -2), 6.0, real=True)
    exp2 = sorted(exp + exp)
    for A, A1 in [(np.diag([-1.0, -1.0]), np.diag([-2.0, -2.0])),
                  ([[-1.0, 1.0], [0.0, -1.0]], np.diag([-2.0, -2.0])),
                  (np.diag([-1.0, -1.0]), [[-2.0, 1.0], [0.0, -2.0]])]:
        got = crossings(A, A1, 6.0)
        check_list(got, exp2, tol=1e-9)
        assert rhp_count(A, A1, 0.5 * (got[0].tau + got[2].tau)) == 4       # both roots crossed


# ----------------------------------------------------------------------------- touches and degenerate cases
def test_touch_direction_zero():
    # s = a + b e^{-s tau} with |b| = -Re a: Re s > 0 is impossible (|s - a| > -Re a = |b| >= |b e^{-s tau}|),
    # yet |i w - a| = |b| has the double root w = Im a: the root touches the axis at tau_k = (arg b +
    # 2 pi k) / Im a and goes back (a crossing there would put a root in Re s > 0).
    a, b = -1 + 2j, np.exp(0.7j)
    exp = [((0.7 + TWO_PI * k) / 2, 2.0, 0) for k in range(4)]
    check_list(crossings([[a]], [[b]], 10.0), exp, tol=1e-10)
    # the same pair as a real 2x2 system (realification: det is the product with the conjugate factor),
    # and hidden in a dense 4x4 system by a similarity (plus a Hayes block -1, -2 that does cross)
    Ar = np.array([[a.real, -a.imag], [a.imag, a.real]])
    Br = np.array([[b.real, -b.imag], [b.imag, b.real]])
    for method in ("qep", "sweep"):
        check_list(crossings(Ar, Br, 10.0, method=method), exp, tol=1e-10)
    T = np.array([[1.0, 0.3, -0.2, 0.5], [0.1, 1.2, 0.4, 0.0], [-0.3, 0.2, 0.9, 0.1], [0.2, -0.4, 0.3, 1.1]])
    Ti = np.linalg.inv(T)
    A4, B4 = np.zeros((4, 4)), np.zeros((4, 4))
    A4[:2, :2], B4[:2, :2] = Ar, Br
    A4[2:, 2:], B4[2:, 2:] = np.diag([-1.0, -3.0]), np.diag([-2.0, 1.0])
    exp4 = sorted(exp + expected_from_pairs(scalar_pairs(-1, -2), 10.0, real=True))
    check_list(crossings(T @ A4 @ Ti, T @ B4 @ Ti, 10.0), exp4, tol=1e-9)


def test_root_on_axis_for_every_delay_is_reported():
    # diag: the block x1' = 0 has s = 0 for every delay; the other block is Hayes (-1, -2)
    exp = expected_from_pairs(scalar_pairs(-1, -2), 5.0, real=True)
    with pytest.warns(RuntimeWarning, match="every delay"):
        got = crossings(np.diag([0.0, -1.0]), np.diag([0.0, -2.0]), 5.0)
    assert np.isnan(got[0].tau) and got[0].omega == 0.0 and got[0].direction == 0
    check_list(got[1:], exp, tol=1e-11)
    # complex: x1' = 2i x1 has s = 2i for every delay
    with pytest.warns(RuntimeWarning, match="every delay"):
        got = crossings(np.diag([2j, -1.0]), np.diag([0.0, -2.0]), 5.0)
    assert np.isnan(got[0].tau) and abs(got[0].omega - 2.0) < 1e-12
    check_list(got[1:], expected_from_pairs(scalar_pairs(-1, -2), 5.0, real=False), tol=1e-11)


def test_singular_qep_falls_back_to_the_sweep():
    # the block diag(1, -1) without delay has eigenvalues symmetric about the axis for every z: the QEP is
    # singular; the crossings are still those of the Hayes block (-1, -2)
    A, A1 = np.diag([1.0, -1.0, -1.0]), np.diag([0.0, 0.0, -2.0])
    exp = expected_from_pairs(scalar_pairs(-1, -2), 8.0, real=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_list(crossings(A, A1, 8.0), exp, tol=1e-10)
    with pytest.warns(RuntimeWarning, match="singular"):
        check_list(crossings(A, A1, 8.0, method="qep"), exp, tol=1e-10)


# ----------------------------------------------------------------------------- errors, speed, doctests
def test_delay_margin_rejects_a_system_unstable_at_small_delay():
    with pytest.raises(ValueError, match=r"not stable|stable at tau -> 0\+.*spectral abscissa of A \+ A1 is 0.5"):
        delay_margin([[1.0]], [[-0.5]])
    with pytest.raises(ValueError, match="spectral abscissa"):
        delay_margin([[0.0, 1.0], [-1.0, 0.0]], np.zeros((2, 2)))          # marginal: eigenvalues +-i


@pytest.mark.parametrize("tau_max", [0.0, -1.0, np.inf, np.nan])
def test_bad_tau_max(tau_max):
    with pytest.raises(ValueError, match="tau_max"):
        crossings([[0.0]], [[-1.0]], tau_max)


def test_bad_inputs():
    with pytest.raises(TypeError, match="tau_max"):
        crossings([[0.0]], [[-1.0]], "1")
    for A1 in (np.zeros((2, 1, 1)), [[[-1.0]], [[0.5]]]):
        with pytest.raises(ValueError, match="one delay"):
            crossings([[0.0]], A1, 1.0)
        with pytest.raises(ValueError, match="one delay"):
            delay_margin([[0.0]], A1)
    with pytest.raises(ValueError, match="A1"):
        crossings([[0.0]], [[1.0, 2.0]], 1.0)
    with pytest.raises(ValueError, match="square"):
        crossing_frequencies([[0.0, 1.0]], [[1.0]])
    with pytest.raises(ValueError, match="method"):
        crossings([[0.0]], [[-1.0]], 1.0, method="newton")
    with pytest.raises(ValueError, match="n_theta"):
        crossings([[0.0]], [[-1.0]], 1.0, n_theta=4)
    with pytest.raises(ValueError, match="crossings"):
        crossings([[0.0]], [[-1.0]], 1e9)                                  # ~1.6e8 crossings


def test_ten_states_against_brute_force():
    # speed is measured by experiments/bench/dss.py, not asserted in a unit test
    rng = np.random.default_rng(0)
    A = rng.standard_normal((10, 10)) - 1.5 * np.eye(10)
    A1 = rng.standard_normal((10, 10))
    got = crossings(A, A1, 10.0)
    ref = brute_pairs(A, A1, real=True, n_grid=4001)
    fr = sorted(crossing_frequencies(A, A1))
    assert len(fr) == len(ref) and all(abs(p.omega - w) < 1e-9 and abs(p.theta - th) < 1e-9
                                       for p, (w, th) in zip(fr, ref))
    assert len(got) == sum(len(taus_of(w, th, 10.0)) for w, th in ref)


def test_doctests():
    res = doctest.testmod(cr, optionflags=doctest.ELLIPSIS)
    assert res.attempted >= 3 and res.failed == 0
