"""Closed loops built with ``feedback``: design and norms read the whole transfer function (delayed
inputs and outputs included); ``tf`` takes python-control's MIMO lists or refuses them by name; ``ss``
checks shapes. Every reference is independent: closed-form transfer functions evaluated in NumPy or
mpmath, integrated by scipy's quad per period."""
import mpmath as mp
import numpy as np
import pytest
from scipy.integrate import quad

import ddesys


def _pi_loop(p):
    """``P / (1 + P C)``: disturbance at the input of ``P = e^{-s} / (3 s + 1)`` under PI ``C``."""
    return ddesys.feedback(ddesys.tf([1.0], [3.0, 1.0], delay=1.0), ddesys.tf([p[0], p[1]], [1.0, 0.0]))


def _pi_loop_ref(p, w):
    s = 1j * np.asarray(w, dtype=float)
    P = np.exp(-s) / (3 * s + 1)
    return P / (1 + P * (p[0] + p[1] / s))


def _peak_ref(p):
    """Independent Hinf norm: a dense sweep of the closed form, refined by mpmath at 30 digits."""
    w = np.linspace(1e-4, 40, 400_001)
    g = np.abs(_pi_loop_ref(p, w))
    w0 = w[np.argmax(g)]
    mp.mp.dps = 30

    def mag(x):
        s = 1j * x
        P = mp.exp(-s) / (3 * s + 1)
        return abs(P / (1 + P * (p[0] + p[1] / s)))

    wp = mp.findroot(lambda x: mp.diff(mag, x), w0)
    return float(mag(wp)), float(wp)


def test_hinf_norm_of_a_feedback_loop_matches_the_closed_form():
    val, w = _pi_loop([1.5, 0.5]).hinf_norm()
    ref, wref = _peak_ref([1.5, 0.5])
    assert val == pytest.approx(ref, rel=1e-9)          # 0.5614...
    assert w == pytest.approx(wref, rel=1e-6)


def test_hinf_design_optimizes_the_loop_built_with_feedback():
    res = ddesys.hinf_design(_pi_loop, [1.5, 0.5])
    assert res.initial_value == pytest.approx(_peak_ref([1.5, 0.5])[0], rel=1e-8)    # not 0.0
    assert res.value == pytest.approx(_peak_ref(res.params)[0], rel=1e-7)
    assert res.value < res.initial_value - 0.05
    assert isinstance(res.system, ddesys.DelayIOSystem)


def test_h2_norm_of_a_feedback_loop_matches_quadrature_of_the_closed_form():
    T = 2 * np.pi
    f = lambda w: float(np.abs(_pi_loop_ref([1.5, 0.5], w)) ** 2) if w > 0 else 0.0      # noqa: E731
    K = 4000
    I = sum(quad(f, k * T, (k + 1) * T, epsabs=1e-15, epsrel=1e-13, limit=200)[0] for k in range(K))
    ref = np.sqrt((I + 1 / (9 * K * T)) / np.pi)                       # tail: |G|^2 ~ 1 / (9 w^2)
    assert _pi_loop([1.5, 0.5]).h2_norm(rtol=1e-10) == pytest.approx(ref, rel=1e-8)


def test_norms_refuse_an_unstable_loop_and_h2_of_a_biproper_one_is_infinite():
    with pytest.raises(ValueError, match="unstable"):
        _pi_loop([30.0, 0.5]).hinf_norm()
    S = ddesys.feedback(1.0, 0.5 * ddesys.tf([1.0], [1.0, 1.0], delay=1.0))
    assert S.h2_norm() == np.inf


def test_static_output_feedback_accepts_a_plant_with_input_dead_time():
    P = ddesys.ss([[0.0, 1.0], [-1.0, -0.2]], [[0.0], [1.0]], [[1.0, 0.0]], input_delay=0.3)
    res = ddesys.static_output_feedback(P, [[-0.1]])
    k = float(res.gain[0, 0])
    # independent check of the abscissa: the rightmost root of s^2 + 0.2 s + 1 - k e^{-0.3 s} by mpmath
    mp.mp.dps = 30
    roots = [mp.findroot(lambda s: s**2 + 0.2 * s + 1 - k * mp.exp(-0.3 * s), complex(z))
             for z in ddesys.feedback(P, k, sign=1).poles(re_min=-3.0)]
    assert res.success and res.value < 0
    assert res.value == pytest.approx(max(float(mp.re(r)) for r in roots), abs=1e-8)


def test_tf_takes_python_control_mimo_lists_with_a_delay_per_entry():
    num = [[[12.8], [-18.9]], [[6.6], [-19.4]]]              # Wood and Berry (1973)
    den = [[[16.7, 1.0], [21.0, 1.0]], [[10.9, 1.0], [14.4, 1.0]]]
    delay = [[1.0, 3.0], [7.0, 3.0]]
    G = ddesys.tf(num, den, delay=delay)
    assert (G.n_outputs, G.n_inputs) == (2, 2)
    w = np.array([0.01, 0.3, 2.0])
    for i in range(2):
        for j in range(2):
            ref = num[i][j][0] * np.exp(-1j * w * delay[i][j]) / (den[i][j][0] * 1j * w + 1)
            np.testing.assert_allclose(G.freqresp(w)[i, j], ref, rtol=1e-13)


def test_tf_refuses_a_two_dimensional_polynomial_by_name():
    with pytest.raises(ValueError, match="2-D num"):
        ddesys.tf([[1.0], [2.0]], [[1.0, 1.0], [1.0, 2.0]])
    with pytest.raises(ValueError, match="2-D den"):
        ddesys.tf([1.0], [[1.0, 1.0]])
    with pytest.raises(ValueError, match="den is 1x1"):
        ddesys.tf([[[1.0], [1.0]]], [[[1.0, 1.0]]])
    with pytest.raises(ValueError, match="delay"):
        ddesys.tf([[[1.0], [1.0]]], [[[1.0, 1.0], [1.0, 2.0]]], delay=[1.0, 2.0, 3.0])


@pytest.mark.parametrize("B, C, bad", [(np.ones((3, 2)), np.ones((1, 2)), "B"), (np.ones((2, 1)), np.ones((2, 3)), "C"),
                                       (np.ones(3), np.ones((1, 2)), "B")])
def test_ss_refuses_matrices_of_the_wrong_shape(B, C, bad):
    with pytest.raises(ValueError, match=f"^{bad} "):
        ddesys.ss([[-1.0, 0.0], [0.0, -2.0]], B, C)


# --------------------------------------------------------------------- neutral parts in interconnections
N = ddesys.NeutralStateSpace([[-2.0]], [[0.5]], [[0.5]], [1.0], [[1.0]], [[1.0]])    # x' - x'(t-1)/2 = ...


def _n_ref(w, k=0.0):
    """``N / (1 + k N)`` with ``N(s) = 1 / (s (1 - e^{-s}/2) + 2 - e^{-s}/2)``, closed form."""
    s = 1j * np.asarray(w, dtype=float)
    return 1 / (s * (1 - 0.5 * np.exp(-s)) + 2 + k - 0.5 * np.exp(-s))


@pytest.mark.parametrize("build, ref", [
    (lambda: ddesys.feedback(N, 0.5), lambda w: _n_ref(w, 0.5)),
    (lambda: ddesys.series(N, 1.0), _n_ref),
    (lambda: ddesys.parallel(N, N), lambda w: 2 * _n_ref(w)),
    (lambda: ddesys.ss(N, input_delay=0.2), lambda w: np.exp(-0.2j * np.asarray(w)) * _n_ref(w)),
])
def test_a_neutral_system_keeps_its_neutral_term_in_every_interconnection(build, ref):
    w = np.array([0.0, 0.3, 1.7, 9.0])
    np.testing.assert_allclose(build().freqresp(w)[0, 0], ref(w), rtol=1e-13)


def test_neutral_feedback_loop_roots_and_essential_spectrum():
    loop = ddesys.feedback(N, 3.0)                      # s (1 - e^{-s}/2) + 5 - e^{-s}/2: c_D = ln 1/2
    assert loop.spectral_abscissa() == pytest.approx(np.log(0.5), abs=1e-9)      # not -3.08
    assert loop.poles(re_min=-0.65).size == 0
    mp.mp.dps = 30
    f = lambda s: s * (1 - mp.exp(-s) / 2) + 0.8 - mp.exp(-s) / 2     # noqa: E731   (gain -1.2)
    z = ddesys.feedback(N, -1.2).poles(re_min=-0.6)
    assert z.size == 1
    assert abs(complex(mp.findroot(f, complex(z[0]))) - z[0]) < 1e-10


def test_a_biproper_loop_with_dead_time_has_roots_and_strong_stability():
    T = ddesys.feedback(ddesys.tf([0.5, 1.0], [1.0, 1.0], delay=1.0))    # (s+1) + (s/2+1) e^{-s} = 0
    mp.mp.dps = 30
    f = lambda s: (s + 1) + (0.5 * s + 1) * mp.exp(-s)     # noqa: E731
    r = T.roots(-0.6)
    assert r.certified and r.roots.size == 2
    for z in r.roots:
        assert abs(complex(mp.findroot(f, complex(z))) - z) < 1e-10
    assert T.spectral_abscissa() == pytest.approx(max(z.real for z in r.roots), abs=1e-12)
    st = T.strong_stability()
    assert st.strongly_stable and st.gamma0 == pytest.approx(0.5)      # |D22| = 1/2 on the loop channel
    unstable = ddesys.feedback(ddesys.tf([2.0, 1.0], [1.0, 1.0], delay=1.0))  # |2 e^{-s}| loop: c_D = ln 2
    assert unstable.spectral_abscissa() >= np.log(2.0) - 1e-9 and not unstable.is_stable()


def test_margins_of_a_neutral_loop_read_its_neutral_term():
    N2 = ddesys.NeutralStateSpace([[-1.0]], [[0.0]], [[0.5]], [1.0], [[4.0]], [[1.0]])
    w = np.linspace(1e-3, 50, 500_001)
    L = 4 / (1j * w * (1 - 0.5 * np.exp(-1j * w)) + 1)
    cross = np.flatnonzero(np.diff(np.sign(np.abs(L) - 1)))
    pm_ref = min(180 + np.degrees(np.angle(L[i])) for i in cross)
    assert ddesys.stability_margins(N2)[1] == pytest.approx(pm_ref, abs=0.01)


def test_to_control_keeps_the_neutral_term_and_takes_integer_orders_only():
    w = np.array([0.1, 0.5, 1.0])
    G = ddesys.to_control(N, pade_order=8)(1j * w).reshape(-1)
    np.testing.assert_allclose(G, _n_ref(w), rtol=1e-6)
    with pytest.raises(TypeError, match="integer"):
        ddesys.to_control(N, pade_order=2.5)
    with pytest.raises(ValueError, match=r"\[1, 20\]"):
        ddesys.to_control(N, pade_order=200)


def _rhp_zero_count(f, R=60.0, Y=400.0, n=400_000):
    """Zeros of the entire ``f`` in ``0 <= Re s <= R``, ``|Im s| <= Y`` by the argument principle on the
    rectangle's boundary (dense NumPy samples; independent of ddesys)."""
    t = np.linspace(0, 1, n)
    edges = [1j * Y * (1 - 2 * t), -1j * Y + R * t, R - 1j * Y + 2j * Y * t, R + 1j * Y - R * t]
    path = np.concatenate(edges)          # counter-clockwise: down the axis, right, up, left
    v = f(path)
    return int(round(np.sum(np.angle(v[1:] / v[:-1])) / (2 * np.pi)))


def test_stabilize_strongly_stabilizes_a_biproper_loop_with_dead_time():
    P = ddesys.tf([1.0, 2.0], [1.0, -1.0], delay=1.0)        # (s + 2) e^{-s} / (s - 1): unstable, biproper
    res = ddesys.stabilize(lambda p: ddesys.feedback(P, p[0]), [0.3], target=-0.1)
    k = float(res.params[0])
    assert res.success and res.objective == "strong spectral abscissa"
    assert res.initial_value > 0 and res.value <= -0.1
    # independent: the difference operator 1 + k e^{-s} is strongly stable (|k| < 1) and
    # (s - 1) + k (s + 2) e^{-s} has no zero in the right half-plane
    assert abs(k) < 1
    assert _rhp_zero_count(lambda s: (s - 1) + k * (s + 2) * np.exp(-s)) == 0
    assert _rhp_zero_count(lambda s: (s - 1) + 0.3 * (s + 2) * np.exp(-s)) > 0          # the start was not


def test_transfer_of_a_large_loop_matches_the_closed_form_at_many_points():
    rng = np.random.default_rng(3)
    n = 18
    A = -np.diag(np.linspace(0.5, 5.0, n)) + 0.1 * rng.standard_normal((n, n))
    A[0, :], A[:, 0] = 0.0, 0.0                                    # an integrator: s = 0 is an eigenvalue of A
    B, C = rng.standard_normal((n, 1)), rng.standard_normal((1, n))
    P = ddesys.ss(A, B, C, input_delay=0.7)
    loop = ddesys.feedback(P, 0.4)                                 # n + q > 12: the Schur path
    s = np.concatenate([[0.0], 1j * np.logspace(-3, 3, 400), 0.3 + 1j * np.linspace(-5, 5, 41)])
    G = loop.transfer(s)[0, 0]
    for z, g in zip(s, G):
        Pz = (C @ np.linalg.solve(z * np.eye(n) - A + 1e-300 * np.eye(n), B))[0, 0] * np.exp(-0.7 * z) if z != 0 \
            else np.inf
        ref = 1 / 0.4 if z == 0 else Pz / (1 + 0.4 * Pz)           # at s = 0 the integrator makes P infinite
        assert abs(g - ref) <= 1e-11 * max(1.0, abs(ref))


def test_transmission_zeros_where_finitely_many():
    assert ddesys.tf([1.0, 2.0], [1.0, 3.0, 1.0], delay=0.5).zeros() == pytest.approx([-2.0])
    A, C, D = [[-1.0, 0.5], [0.0, -2.0]], [[1.0, 1.0], [0.0, 1.0]], [[0.0, 0.0], [0.0, 1.0]]
    G = ddesys.ss(A, np.eye(2), C, D, input_delay=[0.3, 0.0], output_delay=[0.0, 0.7])
    # the rational part's zeros: det [[A - sI, I], [C, D]] = 0, by hand: s = -3
    np.testing.assert_allclose(G.zeros(), [-3.0], atol=1e-12)
    WB = ddesys.tf([[[12.8], [-18.9]], [[6.6], [-19.4]]], [[[16.7, 1.0], [21.0, 1.0]], [[10.9, 1.0], [14.4, 1.0]]],
                   delay=[[0.0, 0.0], [0.0, 0.0]])
    ref = np.roots(np.polysub(12.8 * -19.4 * np.polymul([21.0, 1.0], [10.9, 1.0]),
                              -18.9 * 6.6 * np.polymul([16.7, 1.0], [14.4, 1.0])))     # det R(s) cleared
    np.testing.assert_allclose(np.sort_complex(WB.zeros()), np.sort_complex(ref), rtol=1e-10)
    with pytest.raises(ValueError, match="quasi-polynomial"):
        ddesys.feedback(ddesys.tf([1.0], [1.0, 1.0], delay=1.0)).zeros()
    with pytest.raises(ValueError, match="square"):
        ddesys.tf([[[1.0], [1.0]]], [[[1.0, 1.0], [1.0, 2.0]]]).zeros()


def test_io_simulate_refuses_complex_and_misshapen_inputs_by_name():
    G = ddesys.tf([[[1.0], [1.0]]], [[[1.0, 1.0], [1.0, 2.0]]], delay=[[0.5, 0.0]])      # 2 inputs
    t = np.linspace(0.0, 2.0, 21)
    with pytest.raises(TypeError, match="real"):
        G.simulate(lambda tt: np.ones((2, tt.size)) * (1 + 1j), t)
    with pytest.raises(ValueError, match="shape"):
        G.simulate(lambda tt: np.ones((tt.size, 2)), t)          # (T, m): refused, not scrambled
    y = G.simulate(lambda tt: np.vstack([np.ones(tt.size), np.zeros(tt.size)]), t).y[0]
    ref = np.where(t >= 0.5, 1 - np.exp(-(t - 0.5)), 0.0)        # the step on input 0 through e^{-0.5 s}/(s+1)
    np.testing.assert_allclose(y, ref, atol=1e-7)


def test_hinf_design_refuses_bad_options_by_name():
    with pytest.raises((TypeError, ValueError), match="max_eval"):
        ddesys.hinf_design(_pi_loop, [1.5, 0.5], max_eval=-5)


def test_margins_of_a_high_relative_degree_loop_on_the_schur_path():
    """14 first-order lags and dead time (n + q > 12: the Schur path, whose basis turns the exact zeros of
    C B into rounding at high frequency): margins against mpmath."""
    den = np.array([1.0])
    for k in range(14):
        den = np.polymul(den, [0.1 * (k + 1), 1.0])
    gm, pm, sm, wpc, wgc, wms = ddesys.stability_margins(ddesys.tf([200.0], den, delay=0.3))
    mp.mp.dps = 30

    def L(w):
        s = 1j * w
        return 200 * mp.exp(-0.3 * s) / mp.fprod(0.1 * (k + 1) * s + 1 for k in range(14))

    wg = mp.findroot(lambda w: abs(L(w)) - 1, 1.4)
    wp = mp.findroot(lambda w: mp.im(L(w)), 1.1)
    assert wgc == pytest.approx(float(wg), rel=1e-10) and wpc == pytest.approx(float(wp), rel=1e-10)
    assert gm == pytest.approx(float(1 / abs(L(wp))), rel=1e-9)
    assert pm == pytest.approx(float(mp.degrees(mp.arg(L(wg)))) + 180 - 360, abs=1e-8)


def test_strong_stability_of_a_retarded_loop_is_its_stability():
    G = ddesys.tf([1.0], [1.0, 1.0], delay=1.0)           # (s + 1) + k e^{-s}: critical gain 2.26
    for k in (2.0, 3.0):
        st = ddesys.feedback(k * G).strong_stability()
        n = _rhp_zero_count(lambda s: (s + 1) + k * np.exp(-s))
        assert st.gamma0 == 0.0 and st.n_unstable == n and st.strongly_stable == (n == 0) and st.certified
