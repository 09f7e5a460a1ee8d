"""NeutralStateSpace: validation, the difference operator's spectral data, roots, stability, frequency
response. Every number is checked against an independent reference: a closed form, mpmath's findroot at
30 digits from a grid of starting points, a brute-force loop, or a scalar polynomial's roots."""
import math

import mpmath as mp
import numpy as np
import pytest
from scipy.special import lambertw

from ddesys.matrix.neutral import NeutralStateSpace

mp.mp.dps = 30


# ----------------------------------------------------------------------------------------- references
def mp_roots(h, a, b, tau, re_min, re_max, im_max):
    """Every root of ``s (1 - sum h_k e^{-s tau_k}) - a - sum b_k e^{-s tau_k}`` in the box, by mpmath's
    findroot from a grid of starting points (30 digits), duplicates merged."""
    h, b, tau = np.atleast_1d(h), np.atleast_1d(b), np.atleast_1d(tau)

    def f(s):
        E = [mp.e ** (-s * float(t)) for t in tau]
        return s * (1 - sum(float(hk) * e for hk, e in zip(h, E))) - a - sum(float(bk) * e for bk, e in zip(b, E))

    out = []
    for x in np.linspace(re_min, re_max, 4):
        for y in np.linspace(-im_max, im_max, int(2 * im_max * max(tau)) + 11):
            try:
                z = mp.findroot(f, mp.mpc(x, y))
            except (ValueError, ZeroDivisionError):
                continue
            if abs(f(z)) < 1e-25 and float(z.real) >= re_min and abs(float(z.imag)) <= im_max:
                z = complex(z)
                if all(abs(z - w) > 1e-8 for w in out):
                    out.append(z)
    return np.array(sorted(out, key=lambda z: (-round(z.real, 9), -z.imag)))


def brute_rho_max(H, radii, n_theta=20001):
    """``max_theta rho(H_0 r_0 + H_1 r_1 e^{i theta})`` on a fine grid (two delays)."""
    th = np.linspace(0, 2 * np.pi, n_theta)
    M = radii[0] * H[0] + radii[1] * np.exp(1j * th)[:, None, None] * H[1]
    return float(np.abs(np.linalg.eigvals(M)).max())


def assert_same_roots(ours, ref, tol=1e-9):
    assert ours.size == ref.size, (ours, ref)
    for z in ref:
        assert np.min(np.abs(ours - z)) < tol * (1 + abs(z)), (z, ours)


# ----------------------------------------------------------------------------------------- validation
def test_validation_and_shapes():
    sys = NeutralStateSpace([[-1.0, 0.0], [0.0, -2.0]], [[0.1, 0.0], [0.0, 0.1]], [[0.2, 0.0], [0.0, 0.0]], 1.0,
                            B=[1.0, 0.0], C=[0.0, 1.0])
    assert (sys.n_states, sys.n_inputs, sys.n_outputs, sys.n_delays) == (2, 1, 1, 1)
    assert sys.H.shape == (1, 2, 2) and sys.dt == 0 and sys.isctime()
    assert repr(sys) == "NeutralStateSpace(n_states=2, n_inputs=1, n_outputs=1, tau=[1.0])"
    with pytest.raises(ValueError, match="H must be an"):
        NeutralStateSpace([[-1.0]], [[0.1]], [[0.1, 0.2]], 1.0)
    with pytest.raises(ValueError, match="one matrix per delay"):
        NeutralStateSpace([[-1.0]], [[0.1]], [0.1, 0.2], 1.0)
    with pytest.raises(ValueError, match="> 0"):
        NeutralStateSpace([[-1.0]], [[0.1]], 0.1, 0.0)
    with pytest.raises(ValueError, match="finite"):
        NeutralStateSpace([[-1.0]], [[0.1]], np.nan, 1.0)
    with pytest.raises(TypeError):
        NeutralStateSpace([[-1.0]], [[0.1]], "a", 1.0)


def test_a_region_too_close_to_the_essential_spectrum_is_refused_by_its_type():
    """``roots(re_min)`` just right of ``c_D`` would need millions of roots: a ``RegionTooClose`` (a
    ``ValueError``), the type ``spectral_abscissa``'s walk towards ``c_D`` stops at (not its message)."""
    from ddesys.matrix._neutral_types import RegionTooClose

    sys = NeutralStateSpace([[-2.0]], [[0.5]], 0.5, 1.0)              # c_D = ln 0.5
    assert sys.roots(sys.essential_bound() + 1e-3).roots.size == 0
    with pytest.raises(RegionTooClose, match="too close to c_D"):
        sys.roots(sys.essential_bound() + 1e-6)
    assert issubclass(RegionTooClose, ValueError)


def test_immutable():
    sys = NeutralStateSpace([[-1.0]], [[0.1]], 0.5, 1.0)
    with pytest.raises(AttributeError, match="immutable"):
        sys.H = np.zeros((1, 1, 1))
    with pytest.raises(ValueError):
        sys.H[0, 0, 0] = 1.0


def test_complex_h_promotes():
    sys = NeutralStateSpace([[-1.0]], [[0.1]], 0.5j, 2.0)
    assert sys.A.dtype == np.complex128 and sys.H.dtype == np.complex128
    assert sys.essential_bound() == pytest.approx(math.log(0.5) / 2.0, abs=1e-13)


# ----------------------------------------------------------------------------------------- difference operator
@pytest.mark.parametrize("h,tau", [(0.5, 1.0), (-0.9, 2.5), (1.5, 0.3), (0.01, 1.0)])
def test_essential_bound_scalar_closed_form(h, tau):
    """One delay: the zeros of 1 - h e^{-s tau} have Re s = ln|h| / tau (closed form)."""
    e = NeutralStateSpace([[-1.0]], [[0.2]], h, tau).difference_spectrum()
    assert e.c_D == pytest.approx(math.log(abs(h)) / tau, abs=1e-13)
    assert e.C_D == pytest.approx(math.log(abs(h)) / tau, abs=1e-13)
    assert e.gamma0 == pytest.approx(abs(h), abs=1e-15) and e.exact


def test_essential_bound_matrix_one_delay():
    """Triangular H: rho(H) is its largest diagonal entry in modulus."""
    H = np.array([[0.3, 5.0], [0.0, -0.6]])
    sys = NeutralStateSpace(-np.eye(2), np.zeros((2, 2)), H, 2.0)
    assert sys.essential_bound() == pytest.approx(math.log(0.6) / 2.0, abs=1e-12)
    assert NeutralStateSpace(-np.eye(2), np.zeros((2, 2)), np.zeros((2, 2)), 1.0).essential_bound() == -np.inf


def test_michiels_textbook_example_not_robust():
    """The textbook example of a difference operator whose stability is not robust to delay changes
    (Hale and Verduyn Lunel, IMA J. Math. Control Inf. 19 (2002); Michiels and Niculescu, *Stability,
    Control, and Computation for Time-Delay Systems*, SIAM 2014, ch. 1): x'(t) + x'(t - tau1)/2 +
    x'(t - tau2)/2 = -x(t). For (tau1, tau2) = (1, 2) the zeros of 1 + z/2 + z^2/2 (z = e^{-s}) satisfy
    z^2 + z + 2 = 0, complex conjugates with |z|^2 = 2: c_D = -ln(2)/2 = -0.34657..., stable; but
    gamma_0 = 1/2 + 1/2 = 1, so C_D = 0: rationally independent delays (1, pi) put the chains on the
    imaginary axis."""
    sys = NeutralStateSpace([[-1.0]], [[[0.0]], [[0.0]]], [-0.5, -0.5], [1.0, 2.0])
    e = sys.difference_spectrum()
    assert e.c_D == pytest.approx(-math.log(2) / 2, abs=1e-12) and e.commensurate
    assert e.gamma0 == pytest.approx(1.0, abs=1e-15)
    assert e.C_D == pytest.approx(0.0, abs=1e-12)
    st = sys.strong_stability()
    assert not st.strongly_stable and not st.difference_stable and st.certified
    assert not sys.is_stable(method="strong")
    e2 = NeutralStateSpace([[-1.0]], [[[0.0]], [[0.0]]], [-0.5, -0.5], [1.0, math.pi]).difference_spectrum()
    assert not e2.commensurate and e2.c_D == pytest.approx(0.0, abs=1e-12)
    # a small rational change of the delays moves c_D towards C_D = 0
    e3 = NeutralStateSpace([[-1.0]], [[[0.0]], [[0.0]]], [-0.5, -0.5], [1.0, 2.02]).difference_spectrum()
    assert e3.commensurate and -math.log(2) / 2 < e3.c_D < 0


def test_tds_control_example_2_7():
    """TDS-CONTROL manual, eq. (2.20): x'(t) = x/4 - x(t-1)/3 + 3/4 x'(t-1) - 1/2 x'(t-2). Closed forms:
    gamma_0 = 3/4 + 1/2; C_D solves 3/4 u + 1/2 u^2 = 1, u = e^{-C_D}, so C_D = -ln(sqrt(2.5625) - 0.75);
    the zeros of 1 - 3/4 z + 1/2 z^2 are complex conjugates with |z|^2 = 2: c_D = -ln(2)/2."""
    sys = NeutralStateSpace([[0.25]], [[[-1 / 3]], [[0.0]]], [0.75, -0.5], [1.0, 2.0])
    e = sys.difference_spectrum()
    assert e.gamma0 == pytest.approx(1.25, abs=1e-15)
    assert e.C_D == pytest.approx(-math.log(math.sqrt(2.5625) - 0.75), abs=1e-12)
    assert e.c_D == pytest.approx(-math.log(2) / 2, abs=1e-12)
    assert not sys.is_stable(method="strong")
    r = sys.roots(-0.3)
    ref = mp_roots([0.75, -0.5], 0.25, [-1 / 3, 0.0], [1.0, 2.0], -0.3, 1.0, 12.0)
    assert r.certified
    assert_same_roots(r.roots, ref)
    assert sys.is_stable()                         # c_D < 0 and every root in Re s >= -0.3 is left of 0


def test_gamma0_and_cd_matrix_brute_force():
    rng = np.random.default_rng(3)
    H = 0.35 * rng.normal(size=(2, 2, 2))
    A, Ad = -np.eye(2), np.zeros((2, 2, 2))
    e = NeutralStateSpace(A, Ad, H, [1.0, math.sqrt(2)]).difference_spectrum()
    brute = brute_rho_max(H, np.ones(2))
    lo, hi = e.gamma0_bounds
    assert lo <= brute + 1e-9 and brute <= hi * (1 + 1e-12) and lo == pytest.approx(brute, rel=1e-7)
    # C_D: gamma >= 1 at the lower end of its bracket, <= 1 at the upper end (brute force)
    c_lo, c_hi = e.C_D_bounds
    tau = np.array([1.0, math.sqrt(2)])
    assert brute_rho_max(H, np.exp(-c_lo * tau)) >= 1 - 1e-7
    assert brute_rho_max(H, np.exp(-c_hi * tau)) <= 1 + 1e-9
    # commensurate delays (1, 2): c_D from the roots of the scalar polynomial det(I - H1 z - H2 z^2)
    e2 = NeutralStateSpace(A, Ad, H, [1.0, 2.0]).difference_spectrum()
    zs = np.exp(2j * np.pi * np.arange(5) / 5)
    coef = np.polyfit(zs, [np.linalg.det(np.eye(2) - H[0] * z - H[1] * z * z) for z in zs], 4)
    assert e2.exact and e2.c_D == pytest.approx(-math.log(np.abs(np.roots(coef)).min()), abs=1e-10)


# ----------------------------------------------------------------------------------------- roots
@pytest.mark.parametrize("h,a,b,tau", [(0.5, -1.0, -2.0, 1.0), (-0.8, 0.5, -1.5, 1.0), (0.9, -0.1, -1.0, 2.0)])
def test_roots_scalar_against_mpmath(h, a, b, tau):
    sys = NeutralStateSpace([[a]], [[b]], h, tau)
    re_min = math.log(abs(h)) / tau + 0.1
    r = sys.roots(re_min)
    ref = mp_roots(h, a, b, tau, re_min, 3.0, 25.0)
    assert r.certified and r.count == ref.size
    assert_same_roots(r.roots, ref)
    assert np.all(r.residuals < 1e-12)


def test_roots_refuse_left_of_essential_bound():
    sys = NeutralStateSpace([[-1.0]], [[-2.0]], 0.5, 1.0)
    with pytest.raises(ValueError, match="essential bound"):
        sys.roots(math.log(0.5) - 0.01)
    with pytest.raises(ValueError, match="essential bound"):
        sys.roots(math.log(0.5))


def test_roots_block_diagonal_matrix_is_union_of_scalars():
    """Two decoupled scalar equations: the roots of the 2x2 system are the union of theirs (mpmath)."""
    A, Ad, H = np.diag([-1.0, 0.5]), np.diag([-2.0, -1.5]), np.diag([0.5, -0.8])
    P = np.array([[1.0, 1.0], [0.0, 1.0]])                       # a similarity couples the states
    Pi = np.linalg.inv(P)
    sys = NeutralStateSpace(P @ A @ Pi, P @ Ad @ Pi, P @ H @ Pi, 1.0)
    re_min = -0.15
    ref = np.concatenate([mp_roots(0.5, -1.0, -2.0, 1.0, re_min, 3.0, 25.0),
                          mp_roots(-0.8, 0.5, -1.5, 1.0, re_min, 3.0, 25.0)])
    r = sys.roots(re_min)
    assert r.certified
    assert_same_roots(r.roots, ref)


def test_retarded_limit_lambert_w():
    """H = 0: x' = b x(t - tau) has the roots W_k(b tau) / tau (Lambert W, closed form)."""
    b, tau = -1.0, 1.0
    r = NeutralStateSpace([[0.0]], [[b]], 0.0, tau).roots(-2.0)
    ref = np.array([complex(lambertw(b * tau, k)) / tau for k in range(-4, 4)])
    ref = ref[ref.real >= -2.0]
    assert_same_roots(r.roots, ref)


def test_imaginary_crossing_closed_form():
    """x' - x'(t - tau)/2 = -x - 2 x(t - tau): a root s = i w needs w^2 (1 - h^2) = b^2 - a^2, so w = 2,
    and e^{-i w tau} = (2i + 1)/(-2 + i) = -i, tau = pi/4 (closed form). Stable for small delays
    (s = (a + b)/(1 - h) = -6 at tau = 0), unstable just past the crossing."""
    sys = NeutralStateSpace([[-1.0]], [[-2.0]], 0.5, math.pi / 4)
    r = sys.roots(-0.2)
    assert np.min(np.abs(r.roots - 2j)) < 1e-10 and np.min(np.abs(r.roots + 2j)) < 1e-10
    assert NeutralStateSpace([[-1.0]], [[-2.0]], 0.5, 0.7).is_stable()
    unstable = NeutralStateSpace([[-1.0]], [[-2.0]], 0.5, 0.9)
    assert not unstable.is_stable()
    ref = mp_roots(0.5, -1.0, -2.0, 0.9, 0.0, 2.0, 5.0)
    ab = unstable.spectral_abscissa(detail=True)
    assert ab.dominant == "roots" and ab.value == pytest.approx(ref[0].real, abs=1e-10)


def test_spectral_abscissa_essential_dominates():
    """x' - 0.9 x'(t-1) = -5 x: no root right of c_D + margin, the abscissa is c_D = ln(0.9)."""
    sys = NeutralStateSpace([[-5.0]], [[0.0]], 0.9, 1.0)
    ab = sys.spectral_abscissa(detail=True)
    ref = mp_roots(0.9, -5.0, 0.0, 1.0, math.log(0.9) + ab.margin, 1.0, 20.0)
    assert ref.size == 0
    assert ab.dominant == "essential" and ab.value == pytest.approx(math.log(0.9), abs=1e-13)
    assert sys.spectral_abscissa() == ab.value
    assert sys.is_stable() and sys.is_stable(method="strong")


def test_is_stable_method_checks():
    sys = NeutralStateSpace([[-1.0]], [[0.2]], 0.5, 1.0)
    with pytest.raises(ValueError, match="sufficient"):
        sys.is_stable(method="sufficient")
    with pytest.raises(ValueError, match="method"):
        sys.is_stable(method="nope")


# ----------------------------------------------------------------------------------------- frequency domain
def test_freqresp_and_transfer_closed_form():
    h, a, b, tau = 0.5, -2.0, 0.5, 1.3
    sys = NeutralStateSpace([[a]], [[b]], h, tau, B=[2.0], C=[3.0], D=[[0.25]])
    w = np.array([0.0, 0.7, 4.0])
    G = sys.freqresp(w)
    assert G.shape == (1, 1, 3)
    for k, wk in enumerate(w):
        s = 1j * mp.mpf(wk)
        E = mp.e ** (-s * tau)
        ref = 6 / (s * (1 - h * E) - a - b * E) + mp.mpf("0.25")
        assert complex(G[0, 0, k]) == pytest.approx(complex(ref), abs=1e-14)
    s = np.array([0.3 + 1j])
    E = np.exp(-s * tau)
    assert sys.transfer(s)[0, 0, 0] == pytest.approx(6 / (s[0] * (1 - h * E[0]) - a - b * E[0]) + 0.25, abs=1e-13)
    assert sys(s).shape == (1, 1, 1)
