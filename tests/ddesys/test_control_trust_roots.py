"""Three wrong answers of the matrix root finders, each against a reference computed here without ddesys
(mpmath determinants and ``findroot`` at 40 digits, scipy's ``brentq``, brute force over the torus).

1. Two distinct real roots ``5.7e-4`` apart next to the imaginary axis, in a system with the delay 40
   (the situation of TDS-CONTROL's manual, Example 3.1, whose matrices are not reproduced here), were
   reported as one certified double root at their midpoint: non-converged Newton iterates near them
   made a circle counting 2 zeros, and a count alone was taken for a multiple root.
2. ``NeutralStateSpace.spectral_abscissa`` of Vyhlidal & Zitek's neutral benchmark (QPmR, 2009; qpmr's
   ``vyhlidal2014qpmr_03``) raised "re_min is too close to c_D" instead of choosing its own region.
3. ``difference_spectrum`` of a 12-delay neutral system started from a grid of ``4^11`` points on the
   torus (its docstring promises at most 4096) and gave no answer in 600 s.
"""
import signal
import time
from contextlib import contextmanager

import mpmath as mp
import numpy as np
import pytest
from scipy.optimize import brentq

import ddesys
from ddesys.matrix._neutral_difference import torus_max
from ddesys.matrix._roots_cluster import wide_clusters
from ddesys.matrix.neutral import NeutralStateSpace
from ddesys.verification.published import vyhlidal_zitek_system

DPS = 40


# ----------------------------------------------------------------------------- references
def mp_char_det(A, Ad, tau, H=None):
    """``s -> det(s (I - sum_k H_k e^{-s tau_k}) - A - sum_k Ad_k e^{-s tau_k})`` in mpmath (the float64
    entries taken exactly)."""
    A = np.asarray(A, float)
    Ad = np.asarray(Ad, float).reshape(-1, *A.shape)
    H = np.zeros_like(Ad) if H is None else np.asarray(H, float).reshape(Ad.shape)
    n = A.shape[0]

    def det(s):
        E = [mp.exp(-s * mp.mpf(float(t))) for t in np.atleast_1d(tau)]
        M = mp.matrix(n, n)
        for i in range(n):
            for j in range(n):
                v = -mp.mpf(float(A[i, j]))
                for k, e in enumerate(E):
                    v -= (mp.mpf(float(Ad[k, i, j])) + s * mp.mpf(float(H[k, i, j]))) * e
                M[i, j] = v + (s if i == j else 0)
        return mp.det(M)
    return det


def mp_polish(f, z):
    """The zero of ``f`` that ``findroot`` reaches from ``z`` (secant iteration, ``DPS`` digits)."""
    with mp.workdps(DPS):
        return complex(mp.findroot(f, mp.mpc(z.real, z.imag), tol=mp.mpf(10) ** (-30)))


@contextmanager
def time_limit(seconds):
    """Raise ``TimeoutError`` in the block after ``seconds`` (SIGALRM; the old grid hung for minutes)."""
    def handler(signum, frame):
        raise TimeoutError(f"no answer within {seconds} s")
    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# ----------------------------------------------------------------------------- 1. close real pair
R1, R2, TAU = -0.0076804, -0.0082461, 40.0


def close_pair_system(k):
    """``det M(s) = s^2 - p s + q - k e^{-40 s}`` with ``p, q`` chosen so that ``R1`` and ``R2`` (``5.7e-4``
    apart, the two rightmost roots of TDS-CONTROL's Example 3.1) are roots: ``A`` real with complex
    eigenvalues ``p/2 +- i sqrt(q - p^2/4)``, a rank-one delayed coupling."""
    M = np.array([[-R1, 1.0], [-R2, 1.0]])
    p, q = np.linalg.solve(M, [k * np.exp(-TAU * R1) - R1 ** 2, k * np.exp(-TAU * R2) - R2 ** 2])
    A = np.array([[p / 2, 1.0], [-(q - p * p / 4), p / 2]])
    Ad = np.array([[[0.0, 0.0], [k, 0.0]]])
    return A, Ad


def check_against_mpmath(A, Ad, res, near, expected):
    """Every reported root is a zero of det M (findroot from it stays there), the roots within 0.01 of
    ``near`` are ``expected`` distinct simple zeros, each reported once."""
    f = mp_char_det(A, Ad, [TAU])
    for z in res.roots:
        assert abs(mp_polish(f, z) - z) <= 1e-9 * (1 + abs(z)), z
    close = res.roots[np.abs(res.roots - near) < 0.01]
    assert close.size == expected and np.all(res.multiplicity[np.abs(res.roots - near) < 0.01] == 1)
    refs = [mp_polish(f, z) for z in close]
    assert min(abs(a - b) for i, a in enumerate(refs) for b in refs[i + 1:]) > 1e-4     # distinct zeros
    with mp.workdps(DPS):
        for z in refs:                                                  # simple: f' is far from 0
            assert abs(mp.diff(f, mp.mpc(z.real, z.imag))) > 1e-6
    return np.array(refs)


@pytest.mark.parametrize("k", [1e-6, 3e-6])
def test_close_real_roots_are_two_roots_not_a_certified_double_root(k):
    A, Ad = close_pair_system(k)
    res = ddesys.DelayStateSpace(A, Ad, TAU).roots(re_min=-0.3)
    assert res.certified
    refs = check_against_mpmath(A, Ad, res, -0.008, 2)
    f = mp_char_det(A, Ad, [TAU])
    for r in (R1, R2):                                   # the roots the system was built with
        assert abs(mp_polish(f, complex(r)) - r) < 1e-12
        assert np.min(np.abs(refs - r)) < 1e-12
    assert np.min(np.abs(res.roots - R1)) < 1e-10 and np.min(np.abs(res.roots - R2)) < 1e-10


def test_close_complex_pair_is_not_merged_into_a_real_double_root():
    """``det M = (s - a1)(s - a2) + 1e-7 e^{-40 s}``: the pair is complex, ``-0.0079605 +- 2.4e-4 i``."""
    a1, a2, k = R1, R2, 1e-7
    A = np.array([[a1, 1.0], [0.0, a2]])
    Ad = np.array([[[0.0, 0.0], [-k, 0.0]]])
    res = ddesys.DelayStateSpace(A, Ad, TAU).roots(re_min=-0.1)
    assert res.certified
    refs = check_against_mpmath(A, Ad, res, -0.008, 2)
    assert np.all(np.abs(refs.imag) > 1e-4)


def test_wide_cluster_of_two_distinct_roots_is_separated():
    """Non-converged iterates next to the pair (what the generator's spurious eigenvalues produced) must
    not turn the two converged roots into one cluster of multiplicity 2."""
    A, Ad = close_pair_system(1e-6)
    tau = np.array([TAU])
    stuck = np.array([-0.00766865, -0.00766865 + 1e-9])
    out = wide_clusters(A, Ad, tau, stuck, np.array([R1, R2], complex), guard=-0.3)
    assert sorted(m for _, _, m in out) == [1, 1]
    got = np.sort(np.array([c.real for c, _, _ in out]))
    assert np.allclose(got, [R2, R1], atol=1e-12, rtol=0)
    assert abs(out[0][0] - out[1][0]) > out[0][1] + out[1][1]          # disjoint disks


def test_separate_keeps_a_true_double_root_together():
    """``det M = (s + 1)^2`` (a Jordan block, no delayed term): the double root cannot be separated."""
    from ddesys.matrix._roots_cluster import separate                  # new with the fix
    A = np.array([[-1.0, 1.0], [0.0, -1.0]])
    Ad = np.zeros((1, 2, 2))
    assert separate(A, Ad, np.array([1.0]), -1.0 + 1e-3, 0.1, 2) is None


# ----------------------------------------------------------------------------- 2. neutral benchmark
def test_vyhlidal_zitek_neutral_spectral_abscissa_chooses_its_region():
    A, Ad, H, tau, h = vyhlidal_zitek_system()
    det = mp_char_det(A, Ad, tau, H)
    with mp.workdps(DPS):                                # the realization is the quasi-polynomial
        for z in (mp.mpc(0.3, 1.7), mp.mpc(-0.1, 5.0), mp.mpc(2.0, -0.4)):
            assert abs(det(z) - h(z)) <= mp.mpf(10) ** (-30) * abs(h(z))
    # reference: the zeros findroot reaches on h from a grid of starting points over Re s in [-0.05, 3]
    zeros = []
    with mp.workdps(DPS):
        for x in np.linspace(-0.05, 3.0, 7):
            for y in np.linspace(0.0, 8.0, 17):
                try:
                    z = mp.findroot(h, mp.mpc(x, y), tol=mp.mpf(10) ** (-30), maxsteps=60)
                except (ValueError, ZeroDivisionError):
                    continue
                if abs(h(z)) < 1e-25:
                    zeros.append(complex(z))
    zeros = np.array(zeros)
    top = zeros[np.argmax(zeros.real)]
    assert top.real == pytest.approx(0.9100066128, abs=1e-9)          # the published rightmost pair

    sys = NeutralStateSpace(A, Ad, H, tau)
    ab = sys.spectral_abscissa(detail=True)
    assert ab.dominant == "roots" and ab.certified
    assert ab.value == pytest.approx(top.real, abs=1e-10)
    assert abs(ab.rightmost - top) < 1e-9 or abs(ab.rightmost - top.conjugate()) < 1e-9
    assert sys.spectral_abscissa() == ab.value
    assert not sys.is_stable()


# ----------------------------------------------------------------------------- 3. many delays
def test_torus_max_first_grid_is_bounded_as_documented():
    sizes = []

    def fun(phi):
        sizes.append(phi.shape[0])
        z = np.zeros(phi.shape[0])
        return z, z, z
    for d in (3, 7, 8, 11, 13):
        sizes.clear()
        torus_max(fun, d, local=0, max_evals=10_000)
        assert sizes and sizes[0] <= 4096, (d, sizes[0])


def torus_rho_brute_force(H, count, seed):
    """``max rho(sum_k H_k e^{i theta_k})`` over ``count`` random points of the torus (a lower bound)."""
    rng = np.random.default_rng(seed)
    best = 0.0
    for _ in range(count // 20_000):
        th = rng.uniform(0.0, 2 * np.pi, (20_000, H.shape[0]))
        M = np.einsum("qk,kij->qij", np.exp(1j * th), H)
        best = max(best, float(np.abs(np.linalg.eigvals(M)).max()))
    return best


def test_difference_spectrum_of_twelve_delays_answers_in_seconds():
    rng = np.random.default_rng(1)
    K, n = 12, 2
    tau = np.sqrt(np.arange(2.0, 2.0 + K))                              # rationally independent
    H = rng.normal(size=(K, n, n))
    H *= 0.6 / sum(np.linalg.norm(h, 2) for h in H)
    sys = NeutralStateSpace(-np.eye(n), np.zeros((K, n, n)), H, tau)
    t0 = time.perf_counter()
    with time_limit(60):
        e = sys.difference_spectrum()
    assert time.perf_counter() - t0 < 30
    lo, hi = e.gamma0_bounds
    norm_bound = sum(np.linalg.norm(h, 2) for h in H)                   # rho <= ||sum|| <= sum ||H_k||
    brute = torus_rho_brute_force(H, 200_000, 7)
    assert lo <= hi <= norm_bound * (1 + 1e-12)
    assert brute <= hi * (1 + 1e-12)
    assert lo >= brute * (1 - 1e-3)                    # the attained value is at least as good as brute force
    assert e.gamma0 == lo < 1
    assert e.C_D_bounds[0] <= e.C_D <= e.C_D_bounds[1] and e.c_D <= e.C_D_bounds[1]


def test_difference_spectrum_of_twelve_delays_closed_form():
    """``H_k = a_k P``: ``gamma(r) = rho(P) sum_k |a_k| e^{-r tau_k}`` (phases aligned with the signs of
    ``a_k``), so ``gamma0 = rho(P) sum |a_k|`` and ``C_D`` solves ``gamma(r) = 1`` (scipy's brentq); for
    rationally independent delays ``c_D = C_D``."""
    K = 12
    a = np.array([0.3, -0.2, 0.15, 0.1, -0.1, 0.08, 0.05, -0.05, 0.04, 0.03, -0.02, 0.01])
    P = np.array([[0.9, 0.4], [-0.3, 0.5]])
    rho_p = float(np.abs(np.linalg.eigvals(P)).max())
    tau = np.sqrt(np.arange(2.0, 2.0 + K))
    H = a[:, None, None] * P
    sys = NeutralStateSpace(-np.eye(2), np.zeros((K, 2, 2)), H, tau)
    with time_limit(60):
        e = sys.difference_spectrum()
    g0 = rho_p * np.abs(a).sum()
    cd = brentq(lambda r: rho_p * float(np.abs(a) @ np.exp(-r * tau)) - 1.0, -5.0, 5.0, xtol=1e-15)
    lo, hi = e.gamma0_bounds
    assert lo <= g0 * (1 + 1e-12) and hi >= g0 * (1 - 1e-12)
    assert e.gamma0 == pytest.approx(g0, rel=1e-6)
    assert e.C_D == pytest.approx(cd, abs=1e-6)
    assert e.C_D_bounds[0] <= cd + 1e-9 and cd - 1e-9 <= e.C_D_bounds[1]
    assert e.c_D == pytest.approx(cd, abs=1e-6)
