"""ddesys.matrix.norms (freqresp, H2, Hinf of matrix delay systems) against independent references.

References: the scalar delay Lyapunov function (a 2x2 boundary value problem solved with expm), the
Lyapunov equation without delayed coupling, sums / maxima over the blocks of block-diagonal systems hidden
by similarity and unitary transforms, the time-domain integral of ||C Phi(t) B||_F^2 from the DOP853
method of steps of verification/reference/matrix.py, and frequency maxima found in the tests from closed-form
|G(i w)| with scipy's bracketing solvers.
"""
import numpy as np
import pytest
from scipy.linalg import expm, solve_continuous_lyapunov
from scipy.optimize import brentq, minimize_scalar

from ddesys.verification.reference import mos_reference
from random_systems import random_similarity, random_unitary
from ddesys.matrix.charmatrix import check_statespace
from ddesys.matrix.norms import HinfNorm, freqresp, h2_norm, hinf_norm


def scalar_h2_squared(a, b, tau):
    """H2^2 = U(0) of x' = a x + b x(t - tau) + u, y = x.

    The delay Lyapunov function U(theta) = int_0^inf K(t) K(t + theta) dt satisfies U' = a U(theta) +
    b U(theta - tau) with U even and the jump 2 U'(0+) = -1 (Kharitonov & Zhabko 2003, Automatica 39(1),
    15-20; Jarlebring, Vanbiervliet & Michiels 2011, IEEE TAC 56(4), 814-825, for the H2 norm). With
    V(theta) = U(theta), W(theta) = U(tau - theta) on [0, tau]: V' = a V + b W, W' = -b V - a W,
    W(0) = V(tau) and 2 a V(0) + 2 b W(0) = -1.
    """
    P = expm(tau * np.array([[a, b], [-b, -a]]))
    M = np.array([[P[0, 0], P[0, 1] - 1.0], [2 * a, 2 * b]])
    return np.linalg.solve(M, [0.0, -1.0])[0]


def complex_scalar_h2_squared(a, b, tau):
    """H2^2 of the complex scalar x' = a x + b x(t - tau) + u, y = x (same argument, complex).

    U(theta) = int conj(K(t)) K(t + theta) dt has U(-theta) = conj(U(theta)); with V = U(theta),
    W = conj(U(tau - theta)): V' = a V + b W, W' = -conj(a) W - conj(b) V, W(0) = conj(V(tau)),
    Re(a V(0) + b W(0)) = -1/2 and Im V(0) = 0 (U(0) is real), a real-linear 4x4 problem.
    """
    ar, ai, br, bi = a.real, a.imag, b.real, b.imag
    M = np.array([[ar, -ai, br, -bi], [ai, ar, bi, br], [-br, -bi, -ar, -ai], [bi, -br, ai, -ar]])
    P = expm(tau * M)                                   # acts on [Re V, Im V, Re W, Im W]
    E = np.array([P[0] - [0, 0, 1, 0], P[1] + [0, 0, 0, 1], [ar, -ai, br, -bi], [0, 1, 0, 0]])
    return np.linalg.solve(E, [0.0, 0.0, -0.5, 0.0])[0]


def scalar_peak(a, b, tau, d=0.0, cb=1.0, w_max=60.0):
    """max_w |d + cb / (i w - a - b e^{-i w tau})| over w >= 0: dense grid, then Brent on the bracket."""
    def mag(w):
        return np.abs(d + cb / (1j * w - a - b * np.exp(-1j * w * tau)))
    w = np.linspace(0, w_max, 600_001)
    i = int(np.argmax(mag(w)))
    if i == 0:
        return float(mag(0.0)), 0.0
    r = minimize_scalar(lambda x: -mag(x), bounds=(w[i - 1], w[i + 1]), method="bounded",
                        options={"xatol": 1e-12})
    return float(-r.fun), float(r.x)


SCALARS = [(-1.0, 0.5, 1.0), (-2.0, -1.5, 0.7), (-1.0, 0.9, 5.0), (-1.0, -0.9, 20.0), (-0.3, 0.2, 2.0)]


# ------------------------------------------------------------------------------------ freqresp
def test_freqresp_matches_closed_forms():
    a, b, tau = -1.0, 0.5, 1.0
    w = np.array([-3.0, 0.0, 0.7, 10.0])
    G = freqresp(*check_statespace([[a]], [[b]], tau, [[2.0]], [[3.0]], [[0.5]]), w)
    assert G.shape == (1, 1, 4)
    np.testing.assert_allclose(G[0, 0], 0.5 + 6.0 / (1j * w - a - b * np.exp(-1j * w * tau)), rtol=1e-14)
    rng = np.random.default_rng(1)
    A, B, C, D = (rng.standard_normal(s) + 1j * rng.standard_normal(s) for s in ((3, 3), (3, 2), (4, 3), (4, 2)))
    Ad = rng.standard_normal((2, 3, 3))
    tau = np.array([0.5, 1.3])
    G = freqresp(*check_statespace(A, Ad, tau, B, C, D), w)
    assert G.shape == (4, 2, 4)
    for f, wf in enumerate(w):
        M = 1j * wf * np.eye(3) - A - Ad[0] * np.exp(-1j * wf * 0.5) - Ad[1] * np.exp(-1j * wf * 1.3)
        np.testing.assert_allclose(G[:, :, f], C @ np.linalg.inv(M) @ B + D, rtol=1e-11)


def test_freqresp_rejects_bad_omega():
    d = check_statespace([[-1.0]], [[0.5]], 1.0)
    with pytest.raises(TypeError, match="omega must hold real"):
        freqresp(*d, [1j])
    with pytest.raises(ValueError, match="omega must be finite"):
        freqresp(*d, [np.inf])


# ------------------------------------------------------------------------------------ H2
def test_scalar_h2_reference_has_the_delay_free_limit():
    for a in (-0.5, -2.0):
        assert abs(scalar_h2_squared(a, 0.0, 1.3) - 1 / (-2 * a)) < 1e-15


@pytest.mark.parametrize("a,b,tau", SCALARS + [(0.0, -1.0, np.pi / 2 - 1e-6)])   # last: roots at -3e-7 +- i
def test_h2_scalar_matches_delay_lyapunov_closed_form(a, b, tau):
    got = h2_norm(*check_statespace([[a]], [[b]], tau, [[1.0]], [[1.0]]))
    want = np.sqrt(scalar_h2_squared(a, b, tau))
    assert abs(got / want - 1) < 1e-8


def test_complex_h2_reference_reduces_to_the_real_one():
    assert abs(complex_scalar_h2_squared(-1.0 + 0j, 0.5 + 0j, 1.0) - scalar_h2_squared(-1.0, 0.5, 1.0)) < 1e-14
    assert abs(complex_scalar_h2_squared(-2.0 + 3j, 0j, 1.0) - 0.25) < 1e-15


@pytest.mark.parametrize("a,b,tau", [(-0.5 + 2j, 0.3 - 0.2j, 1.0),
                                     (-2e-3 + 5j, 1e-3 * np.exp(1j), 1.3),      # peak of width ~2e-3
                                     (-1e-4 + 5j, 5e-5 * np.exp(1j), 1.3)])     # width ~1e-4
def test_h2_complex_scalar_matches_closed_form(a, b, tau):
    got = h2_norm(*check_statespace([[a]], [[b]], tau, [[1.0]], [[1.0]]))
    assert abs(got / np.sqrt(complex_scalar_h2_squared(a, b, tau)) - 1) < 1e-8


def test_h2_warns_when_the_quadrature_cap_binds():
    with pytest.warns(RuntimeWarning, match="quadrature not converged"):
        h2_norm(*check_statespace([[-1e-3 + 5j]], [[1e-4]], 1.3), max_panels=5)


def test_h2_without_delayed_coupling_is_the_lyapunov_value():
    rng = np.random.default_rng(3)
    for cplx in (False, True):
        A = rng.standard_normal((4, 4)) + (1j * rng.standard_normal((4, 4)) if cplx else 0)
        A -= (np.abs(np.linalg.eigvals(A).real).max() + 0.5) * np.eye(4)      # Hurwitz
        B, C = rng.standard_normal((4, 2)), rng.standard_normal((3, 4))
        X = solve_continuous_lyapunov(A, -B @ B.T)                           # A X + X A^H = -B B^H
        want = np.sqrt(np.trace(C @ X @ C.T).real)
        got = h2_norm(*check_statespace(A, np.zeros((4, 4)), 1.0, B, C))
        assert abs(got / want - 1) < 1e-8


def _hidden_block_diagonal(rng, blocks, d=None, complex_=False):
    """diag(blocks) (scalar a, b with their own delay) behind a similarity T and unitary U, V."""
    n = len(blocks)
    taus = sorted({tau for _, _, tau in blocks})
    A = np.diag([a for a, _, _ in blocks]).astype(complex if complex_ else float)
    Ad = np.zeros((len(taus), n, n))
    for i, (_, b, tau) in enumerate(blocks):
        Ad[taus.index(tau), i, i] = b
    T = random_similarity(rng, n, complex_)
    Ti = np.linalg.inv(T)
    U, V = random_unitary(rng, n), random_unitary(rng, n)
    D = np.zeros((n, n)) if d is None else np.diag(d)
    return check_statespace(T @ A @ Ti, [T @ m @ Ti for m in Ad], taus, T @ V, U @ Ti, U @ D @ V)


def test_h2_hidden_block_diagonal_mimo_is_the_root_sum_of_squares():
    blocks = [(-1.0, 0.5, 1.0), (-2.0, -1.5, 0.7), (-0.8, 0.3, 1.0)]
    d = _hidden_block_diagonal(np.random.default_rng(5), blocks)
    want = np.sqrt(sum(scalar_h2_squared(*blk) for blk in blocks))
    assert abs(h2_norm(*d) / want - 1) < 1e-8


def test_h2_matches_time_domain_brute_force():
    """H2^2 = int_0^inf ||C Phi(t) B||_F^2 dt (Parseval), coupled system with delays tau0 and 2 tau0."""
    A = np.array([[-2.0, 0.5], [-0.4, -1.5]])
    Ad = [np.array([[0.3, -0.2], [0.4, 0.1]]), np.array([[-0.2, 0.0], [0.1, 0.3]])]
    B = np.array([[1.0, 0.0], [0.5, 1.0]])
    C = np.array([[1.0, -1.0], [0.0, 2.0], [1.0, 0.5]])
    tau0, J = 0.8, 30                                         # decays as exp(-0.9 t): e^-43 at 24
    _, q = mos_reference(A, Ad, [1, 2], tau0, B, J, C=C)
    got = h2_norm(*check_statespace(A, Ad, [tau0, 2 * tau0], B, C))
    assert abs(got / np.sqrt(q) - 1) < 1e-8


def test_h2_complex_system_matches_time_domain_brute_force():
    A = np.array([[-1.5 + 2j, 0.3], [0.2j, -1.2 - 1j]])
    Ad = [np.array([[0.3 - 0.2j, 0.1], [0.0, 0.4j]])]
    B = np.array([[1.0], [1j]])
    C = np.array([[1.0, 0.5 - 0.5j]])
    tau0, J = 1.0, 25
    _, q = mos_reference(A, Ad, [1], tau0, B, J, C=C)
    got = h2_norm(*check_statespace(A, Ad, tau0, B, C))
    assert abs(got / np.sqrt(q) - 1) < 1e-8


def test_h2_conventions_and_errors():
    assert h2_norm(*check_statespace([[-1.0]], [[0.5]], 1.0, [[1.0]], [[1.0]], [[0.1]])) == np.inf
    with pytest.raises(ValueError, match="needs a stable system"):
        h2_norm(*check_statespace([[0.5]], [[0.2]], 1.0))                     # root s > 0
    with pytest.raises(ValueError, match="is_stable says it is not"):
        h2_norm(*check_statespace([[-1.0]], [[0.5]], 1.0), is_stable=lambda: False)
    with pytest.raises(ValueError, match="rtol must be in"):
        h2_norm(*check_statespace([[-1.0]], [[0.5]], 1.0), rtol=0.0)
    # an exact verdict from the caller replaces the spectral screen
    a, b, tau = SCALARS[1]
    got = h2_norm(*check_statespace([[a]], [[b]], tau), is_stable=True)
    assert abs(got / np.sqrt(scalar_h2_squared(a, b, tau)) - 1) < 1e-8


# ------------------------------------------------------------------------------------ Hinf
def test_hinf_delay_free_first_order():
    res = hinf_norm(*check_statespace([[-4.0]], [[0.0]], 1.0, [[1.0]], [[1.0]]))
    assert isinstance(res, HinfNorm)
    assert abs(res.value - 0.25) < 1e-15 and res.omega_peak == 0.0


@pytest.mark.parametrize("a,b,tau", SCALARS)
def test_hinf_scalar_delayed_matches_brute_force_peak(a, b, tau):
    v, w = hinf_norm(*check_statespace([[a]], [[b]], tau, [[1.0]], [[1.0]]))
    v_ref, w_ref = scalar_peak(a, b, tau)
    assert abs(v / v_ref - 1) < 1e-9
    assert abs(w - w_ref) < 1e-4 * (1 + w_ref)


def test_hinf_lightly_damped_resonance_is_found():
    """q'' + 2 zeta w0 q' + w0^2 q + k q(t - tau) = u with zeta = 1e-3: a peak of width ~ 5e-3."""
    w0, zeta, k, tau = 5.0, 1e-3, 0.02, 0.37
    A = np.array([[0.0, 1.0], [-w0**2, -2 * zeta * w0]])
    Ad = np.array([[0.0, 0.0], [-k, 0.0]])
    d = check_statespace(A, Ad, tau, [[0.0], [1.0]], [[1.0, 0.0]])

    def mag(w):
        return 1 / np.abs(-w**2 + 2j * zeta * w0 * w + w0**2 + k * np.exp(-1j * w * tau))
    g = np.linspace(4.9, 5.1, 2_000_001)
    i = int(np.argmax(mag(g)))
    r = minimize_scalar(lambda x: -mag(x), bounds=(g[i - 1], g[i + 1]), method="bounded", options={"xatol": 1e-13})
    v, w = hinf_norm(*d)
    assert abs(v / -r.fun - 1) < 1e-9 and abs(w - r.x) < 1e-6


def test_hinf_nearly_marginal_delay_equation():
    """x' = -x(t - tau), tau = pi/2 - 1e-4: roots about -6e-5 +- i, a peak of height ~1e4 and width ~1e-4."""
    tau = np.pi / 2 - 1e-4
    # |M(i w)|^2 = |i w + e^{-i w tau}|^2 = 1 + w^2 - 2 w sin(w tau): its derivative vanishes at the peak
    w_ref = brentq(lambda w: 2 * w - 2 * np.sin(w * tau) - 2 * w * tau * np.cos(w * tau), 0.999, 1.001, xtol=1e-15)
    v_ref = 1 / np.hypot(np.cos(w_ref * tau), w_ref - np.sin(w_ref * tau))      # no cancellation
    v, w = hinf_norm(*check_statespace([[0.0]], [[-1.0]], tau))
    assert v_ref > 1e4 and abs(v / v_ref - 1) < 1e-9 and abs(w - w_ref) < 1e-8


def test_hinf_hidden_block_diagonal_mimo_with_feedthrough():
    """sigma_max of U diag(G_i) V is max_i |G_i|, G_i = d_i + 1 / (s - a_i - b_i e^{-s tau_i})."""
    blocks = [(-1.0, 0.5, 1.0), (-2.0, -1.5, 0.7), (-0.5, 0.3, 1.0)]
    dd = [0.3, -0.2, 0.1]
    d = _hidden_block_diagonal(np.random.default_rng(7), blocks, d=dd)
    refs = [scalar_peak(a, b, tau, d=di) for (a, b, tau), di in zip(blocks, dd)]
    v_ref, w_ref = max(refs)
    v, w = hinf_norm(*d)
    assert abs(v / v_ref - 1) < 1e-9 and abs(w - w_ref) < 1e-4


def test_hinf_supremum_at_infinity_is_the_feedthrough():
    """G = 1 - 0.5 / (s + 1): |G(i w)|^2 = (w^2 + 1/4) / (w^2 + 1) increases to ||D|| = 1."""
    v, w = hinf_norm(*check_statespace([[-1.0]], [[0.0]], 1.0, [[1.0]], [[-0.5]], [[1.0]]))
    assert v == 1.0 and w == np.inf


def test_hinf_complex_system_peak_at_negative_frequency():
    """x' = (-0.2 - 3i) x + 0.1 x(t - 1) + u peaks near w = -3 (no conjugate symmetry)."""
    a, b, tau = -0.2 - 3j, 0.1, 1.0
    v, w = hinf_norm(*check_statespace([[a]], [[b]], tau, [[1.0]], [[1.0]]))

    def mag(x):
        return np.abs(1 / (1j * x - a - b * np.exp(-1j * x * tau)))
    g = np.linspace(-20, 20, 800_001)
    i = int(np.argmax(mag(g)))
    r = minimize_scalar(lambda x: -mag(x), bounds=(g[i - 1], g[i + 1]), method="bounded", options={"xatol": 1e-12})
    assert w < 0 and abs(v / -r.fun - 1) < 1e-9 and abs(w - r.x) < 1e-5


def test_hinf_rejects_unstable():
    with pytest.raises(ValueError, match="needs a stable system"):
        hinf_norm(*check_statespace([[0.0]], [[-2.0]], 1.0))                   # x' = -2 x(t-1): unstable


# ------------------------------------------------------------------------------------ Bode plot
def test_plot_bode_returns_a_figure_with_magnitude_and_phase():
    pytest.importorskip("matplotlib")
    from ddesys.lti import FrequencyResponse
    from ddesys.plot import pyplot
    from ddesys.matrix.plot import plot_bode

    d = check_statespace(np.array([[-1.0, 0.2], [0.0, -2.0]]), np.eye(2) * 0.3, 1.0, np.eye(2), np.ones((3, 2)))
    w = np.concatenate([[0.0], np.logspace(-2, 2, 50)])          # w = 0 is dropped on the log axis
    G = freqresp(*d, w)
    fig = plot_bode(FrequencyResponse(w, G), title="test")
    try:
        assert len(fig.axes) == 4 and fig.axes[0].get_xscale() == "log"
        lines = [ln for ln in fig.axes[0].get_lines() if len(ln.get_xdata()) > 2]    # not the 0 dB guide
        assert len(lines) == 3                                        # one per output, input 0
        np.testing.assert_allclose(lines[1].get_ydata(), 20 * np.log10(np.abs(G[1, 0, 1:])))
        assert fig.axes[0].get_title() == "input u0" and fig._suptitle.get_text() == "test"
    finally:
        pyplot().close(fig)
    with pytest.raises(ValueError, match="shape"):
        plot_bode(w, G[..., :-1])
    with pytest.raises(ValueError, match="no positive frequency"):
        plot_bode(-w, G)
