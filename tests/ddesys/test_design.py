"""Fixed-order design (ddesys.control.design): gradients, spectral abscissa and Hinf minimization.

References, all independent of the code under test: characteristic roots refined by mpmath's findroot at
40 digits on closed-form characteristic functions written here, finite differences of those roots (and of
an mpmath Hinf norm) at 40 digits, and closed-form optima (double and triple roots, Lambert W).
"""
import mpmath as mp
import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from ddesys import DelayStateSpace
from ddesys.control.design import (abscissa_gradient, fopdt_pi_loop, hinf_design, hinf_gradient, pi_closed_loop,
                                  sof_closed_loop, stabilize, static_output_feedback)

mp.mp.dps = 40


def mp_root(char, s0):
    """A root of the scalar characteristic function ``char(s)`` (mpmath) refined from ``s0``."""
    return complex(mp.findroot(char, mp.mpc(s0), tol=mp.mpf(10) ** -35))


def mp_root_fd(char_p, p, s0, j):
    """Central difference (step 1e-15) of the root of ``char_p(s, p)`` with respect to ``p[j]``, at 40 digits."""
    h = mp.mpf(10) ** -15
    def root(pp):
        return mp.findroot(lambda s: char_p(s, pp), mp.mpc(s0), tol=mp.mpf(10) ** -38)
    pp = [mp.mpf(x) for x in p]
    pm = list(pp)
    pp[j] += h
    pm[j] -= h
    return complex((root(pp) - root(pm)) / (2 * h))


# ------------------------------------------------------------------------------------ systems
def pi_char(s, p):                 # PI on e^{-s}/(s+1): det M of the (x, z) loop
    kp, ki = p
    return s * s + s + (kp * s + ki) * mp.exp(-s)


def osc_fn(p):                     # x1' = x2, x2' = -p0 x1 - 0.5 x2 - p1 x1(t - p2)
    return DelayStateSpace([[0.0, 1.0], [-p[0], -0.5]], [[0.0, 0.0], [-p[1], 0.0]], p[2], B=[0.0, 1.0],
                           C=[1.0, 0.0])


def osc_char(s, p):
    return s * (s + mp.mpf(1) / 2) + p[0] + p[1] * mp.exp(-s * p[2])


# ------------------------------------------------------------------------------------ gradients
@pytest.mark.parametrize("p", [(0.3, 0.2), (0.5, 0.5), (0.6, 0.1)])
def test_abscissa_gradient_pi_matches_mpmath(p):
    r = abscissa_gradient(lambda q: fopdt_pi_loop(1.0, 1.0, 1.0, *q), p)
    s_ref = mp_root(lambda s: pi_char(s, [mp.mpf(x) for x in p]), r.root)
    assert abs(r.root - s_ref) < 1e-11
    assert r.value == pytest.approx(s_ref.real, abs=1e-11)
    for j in range(2):
        ref = mp_root_fd(pi_char, p, s_ref, j).real
        assert r.gradient[j] == pytest.approx(ref, rel=1e-7, abs=1e-9)
    assert r.simple
    rc = abscissa_gradient(lambda q: fopdt_pi_loop(1.0, 1.0, 1.0, *q), p, certify=True)
    assert rc.value == pytest.approx(s_ref.real, abs=1e-11)


def test_abscissa_gradient_with_delay_parameter_and_derivative_modes():
    p = (1.0, 0.6, 1.3)
    r = abscissa_gradient(osc_fn, p)
    s_ref = mp_root(lambda s: osc_char(s, [mp.mpf(x) for x in p]), r.root)
    assert abs(r.root - s_ref) < 1e-11
    ref = np.array([mp_root_fd(osc_char, p, s_ref, j).real for j in range(3)])
    np.testing.assert_allclose(r.gradient, ref, rtol=1e-7, atol=1e-9)
    # the delay depends on p: the complex step must refuse, the analytic derivative must agree
    with pytest.raises(ValueError, match="central"):
        abscissa_gradient(osc_fn, p, method="complex")

    def deriv(q):
        dA = np.zeros((3, 2, 2))
        dA[0, 1, 0] = -1.0
        dAd = np.zeros((3, 1, 2, 2))
        dAd[1, 0, 1, 0] = -1.0
        dtau = np.zeros((3, 1))
        dtau[2, 0] = 1.0
        return {"A": dA, "Ad": dAd, "tau": dtau}

    r2 = abscissa_gradient(osc_fn, p, derivative=deriv)
    np.testing.assert_allclose(r2.gradient, ref, rtol=1e-9, atol=1e-12)
    # fixed delay: complex step agrees too
    r3 = abscissa_gradient(lambda q: osc_fn([q[0], q[1], 1.3]), p[:2], method="complex")
    np.testing.assert_allclose(r3.gradient, ref[:2], rtol=1e-9, atol=1e-12)


def test_abscissa_gradient_rejects_bad_system_fn():
    with pytest.raises(TypeError, match="DelayStateSpace"):
        abscissa_gradient(lambda p: np.eye(2), [1.0])
    def grows(p):                                  # one state at p = 1, two just above: a changing structure
        n = 1 + int(p[0] > 1.0)
        return DelayStateSpace(-np.eye(n), np.zeros((n, n)), 1.0)

    with pytest.raises(ValueError, match="structure"):
        abscissa_gradient(grows, [1.0])


def _mp_hinf(a, k):
    """Hinf norm of 1 / (s + a + k e^{-s}) at 40 digits: 1 / sqrt(min_w f(w)), f = |i w + a + k e^{-i w}|^2."""
    a, k = mp.mpf(a), mp.mpf(k)

    def f(w):
        return (a + k * mp.cos(w)) ** 2 + (w - k * mp.sin(w)) ** 2

    def df(w):
        return -2 * k * mp.sin(w) * (a + k * mp.cos(w)) + 2 * (w - k * mp.sin(w)) * (1 - k * mp.cos(w))

    grid = np.linspace(0.0, 20.0, 4001)                    # float64 grid for the starting point only
    af, kf = float(a), float(k)
    i = int(np.argmin((af + kf * np.cos(grid)) ** 2 + (grid - kf * np.sin(grid)) ** 2))
    best = f(0)
    if i > 0:
        w = mp.findroot(df, mp.mpf(grid[i]), tol=mp.mpf(10) ** -36)
        best = min(best, f(w))
    return 1 / mp.sqrt(best)


def test_hinf_gradient_matches_mpmath():
    a, k = 0.2, 1.0
    fn = lambda q: DelayStateSpace([[-q[0]]], [[-q[1]]], 1.0, B=[1.0], C=[1.0])
    r = hinf_gradient(fn, [a, k])
    assert r.value == pytest.approx(float(_mp_hinf(a, k)), rel=1e-9)
    h = mp.mpf(10) ** -12
    ref = [float((_mp_hinf(a + h, k) - _mp_hinf(a - h, k)) / (2 * h)),
           float((_mp_hinf(a, k + h) - _mp_hinf(a, k - h)) / (2 * h))]
    np.testing.assert_allclose(r.gradient, ref, rtol=1e-6)
    unstable = hinf_gradient(fn, [0.0, 2.0])                 # k > pi/2 with a = 0: unstable
    assert unstable.value == np.inf and np.all(np.isnan(unstable.gradient))


# ------------------------------------------------------------------------------------ stabilize
@pytest.mark.parametrize("tau", [1.0, 2.0])
def test_stabilize_input_delay_integrator_literature(tau):
    """x' = u(t - tau), u = k x: the smallest spectral abscissa is -1/tau at k = -1/(e tau), a double root
    (the classic result, e.g. Michiels & Niculescu, Stability, Control, and Computation for Time-Delay
    Systems, SIAM 2014). Hand-tuned k = -1/(2 tau) (SIMC with tau_c = tau) leaves Re W_0(-1/2) / tau."""
    fn = lambda p: DelayStateSpace([[0.0]], [[p[0]]], tau)
    res = stabilize(fn, [-0.1 / tau])
    k_ref, a_ref = -1 / (np.e * tau), -1 / tau
    assert res.success
    assert res.params[0] == pytest.approx(k_ref, rel=1e-6)
    # the abscissa at the found gain, refined independently: s e^{s tau} = k near the double root
    s_ref = mp_root(lambda s: s - res.params[0] * mp.exp(-s * tau), a_ref + 1e-3j)
    assert res.value == pytest.approx(a_ref, abs=1e-4)
    assert s_ref.real == pytest.approx(a_ref, abs=1e-4)
    hand = float(mp.re(mp.lambertw(-0.5))) / tau
    print(f"tau = {tau}: designed k = {res.params[0]:.6f} (published -1/(e tau) = {k_ref:.6f}), abscissa "
          f"{res.value:.6f} (published {a_ref:.6f}); hand-tuned k = {-0.5 / tau:.4f}: abscissa {hand:.6f}; "
          f"improvement {hand - res.value:.4f}")
    assert res.value < hand - 0.2 / tau
    assert res.history[0] == pytest.approx(res.initial_value) and res.history[-1] == pytest.approx(res.value)


def test_stabilize_pi_dead_time_triple_root():
    """PI on e^{-s}/(s+1): the closed form optimum is the triple root s = -1 of s^2 + s + (kp s + ki) e^{-s}
    (g = -(s^2 + s) e^s has g'' = 0 at s = -1: kp = g'(-1) = 1/e, ki = g(-1) + kp = 1/e)."""
    res = stabilize(lambda q: fopdt_pi_loop(1.0, 1.0, 1.0, *q), [0.3, 0.2])
    assert res.success
    np.testing.assert_allclose(res.params, [1 / np.e, 1 / np.e], atol=1e-4)
    assert res.value == pytest.approx(-1.0, abs=1e-3)
    hand = float(mp.re(mp.lambertw(-0.5)))                 # SIMC kp = ki = 0.5: roots of s + 0.5 e^{-s}, -1
    print(f"PI: designed (kp, ki) = {res.params.round(5)}, abscissa {res.value:.6f} (closed form -1); "
          f"SIMC (0.5, 0.5): {hand:.6f}; improvement {hand - res.value:.4f}")
    assert res.value < hand - 0.2


def test_stabilize_target_stops_early():
    res = stabilize(lambda q: fopdt_pi_loop(1.0, 1.0, 1.0, *q), [0.3, 0.2], target=-0.5)
    assert res.success and res.value <= -0.5 and res.value > -0.99
    assert "target" in res.message


# ------------------------------------------------------------------------------------ Hinf design
def test_hinf_design_matches_brute_force():
    a = 0.2
    fn = lambda q: DelayStateSpace([[-a]], [[-q[0]]], 1.0, B=[1.0], C=[1.0])
    res = hinf_design(fn, [0.3])
    ks = np.linspace(0.05, 1.5, 59)
    vals = [float(_mp_hinf(a, k)) for k in ks]
    i = int(np.argmin(vals))
    ref = minimize_scalar(lambda k: float(_mp_hinf(a, k)), bracket=(ks[i - 1], ks[i], ks[i + 1]),
                          tol=1e-10)
    print(f"Hinf: start {res.initial_value:.6f}, designed {res.value:.8f} at k = {res.params[0]:.6f}; "
          f"brute force {ref.fun:.8f} at k = {ref.x:.6f}")
    assert res.success
    assert res.value == pytest.approx(ref.fun, rel=1e-6)
    assert float(_mp_hinf(a, res.params[0])) == pytest.approx(res.value, rel=1e-8)


def test_hinf_design_refuses_unstable_start_or_stabilizes_first():
    fn = lambda q: DelayStateSpace([[-0.2]], [[-q[0]]], 1.0, B=[1.0], C=[1.0])
    with pytest.raises(ValueError, match="stabilizing start"):
        hinf_design(fn, [-0.5])                                           # a + k < 0: a real root > 0
    res = hinf_design(fn, [-0.5], stabilize_first=True, max_iter=20)
    assert res.success and np.isfinite(res.value)
    assert float(_mp_hinf(0.2, res.params[0])) == pytest.approx(res.value, rel=1e-8)


# ------------------------------------------------------------------------------------ loops
def test_static_output_feedback_design():
    """x1' = x2(t - 1), x2' = u, u = K x: the loop's roots solve s (s - k2) - k1 e^{-s} = 0."""
    plant = DelayStateSpace(np.zeros((2, 2)), [[0.0, 1.0], [0.0, 0.0]], 1.0, B=[0.0, 1.0], C=np.eye(2))
    res = static_output_feedback(plant, [[-0.1, -0.5]])
    assert res.gain.shape == (1, 2) and res.success
    k1, k2 = res.gain[0]
    z = res.system.roots().roots[0]
    s_ref = mp_root(lambda s: s * (s - k2) - k1 * mp.exp(-s), z)
    assert abs(s_ref - z) < 1e-6
    assert res.value == pytest.approx(s_ref.real, abs=1e-6)
    s0 = mp_root(lambda s: s * (s + mp.mpf("0.5")) + mp.mpf("0.1") * mp.exp(-s), -0.19 + 0.1j)
    assert res.initial_value == pytest.approx(s0.real, abs=1e-8)
    assert res.value < res.initial_value - 0.25
    print(f"SOF: gain {res.gain.round(4)}, abscissa {res.initial_value:.4f} -> {res.value:.6f}")


def test_static_output_feedback_hinf_objective():
    """Hinf from w (at the plant input) to y = x of x1' = x2(t - 1), x2' = u + w, u = K x:
    sigma_max(G(i w)) = sqrt(1 + w^2) / |(i w)^2 - k2 i w - k1 e^{-i w}|."""
    plant = DelayStateSpace(np.zeros((2, 2)), [[0.0, 1.0], [0.0, 0.0]], 1.0, B=[0.0, 1.0], C=np.eye(2))
    with pytest.raises(ValueError, match="stabilizing start"):
        static_output_feedback(plant, [[0.1, 0.0]], objective="hinf")
    with pytest.raises(ValueError, match="objective"):
        static_output_feedback(plant, [[-0.1, -0.5]], objective="h2")
    res = static_output_feedback(plant, [[-0.1, -0.5]], objective="hinf", max_iter=15, sampling=False)
    assert res.success and res.value < 0.5 * res.initial_value
    w = np.linspace(0.0, 20.0, 400001)
    for K, v in ((np.array([[-0.1, -0.5]]), res.initial_value), (res.gain, res.value)):
        k1, k2 = K[0]
        sig = np.sqrt(1 + w**2) / np.abs((1j * w) ** 2 - k2 * 1j * w - k1 * np.exp(-1j * w))
        assert sig.max() <= v * (1 + 1e-9) and sig.max() >= v * (1 - 1e-6)
    print(f"SOF Hinf: gain {res.gain.round(4)}, norm {res.initial_value:.4f} -> {res.value:.6f}")


def test_sof_closed_loop_with_feedthrough():
    plant = DelayStateSpace([[-1.0, 0.5], [0.0, -2.0]], [[0.1, 0.0], [0.0, 0.2]], 1.0, B=[[1.0], [1.0]],
                            C=[[1.0, 0.0]], D=[[0.5]])
    K = np.array([[0.8]])
    cl = sof_closed_loop(plant, K)
    f = 1 / (1 - 0.8 * 0.5)                       # u = f (K C x + w)
    np.testing.assert_allclose(cl.A, plant.A + f * 0.8 * np.array([[1.0, 0.0], [1.0, 0.0]]), rtol=1e-14)
    np.testing.assert_allclose(cl.D, [[0.5 * f]], rtol=1e-14)
    with pytest.raises(ValueError, match="singular"):
        sof_closed_loop(plant, [[2.0]])
    with pytest.raises(ValueError, match="shape"):
        sof_closed_loop(plant, [[1.0, 2.0]])



def test_the_closed_loop_builders_are_the_loops_feedback_builds():
    """The builders write the loop's matrices themselves (the module docstring says why they do not call
    ``feedback``); each is the loop ``ddesys.feedback`` builds: static output feedback with the same matrices
    (the plant's coordinates and delays), the PI loops with the same roots, and the PI loop with the same
    transfer function from the reference (``fopdt_pi_loop`` leaves out the proportional path's delayed
    reference by design)."""
    import ddesys

    S = np.array([0.3 + 0.7j, -0.2 + 5.0j, 2.0 + 0.0j])
    plants = [DelayStateSpace([[-1.0, 0.5], [0.0, -2.0]], [[0.1, 0.0], [0.0, 0.2]], 1.0, B=[[1.0], [1.0]],
                              C=[[1.0, 0.0]], D=[[0.5]]),
              DelayStateSpace(np.zeros((2, 2)), [[0.0, 1.0], [0.0, 0.0]], 1.0, B=[0.0, 1.0], C=np.eye(2))]
    for plant, K in zip(plants, ([[0.8]], [[-0.1, -0.5]])):
        ours, theirs = sof_closed_loop(plant, K), ddesys.feedback(plant, K, sign=1).internal_dynamics()
        for name in ("A", "Ad", "tau", "B", "C", "D"):
            np.testing.assert_allclose(getattr(theirs, name), getattr(ours, name), rtol=1e-14, atol=1e-15)
    plant = DelayStateSpace([[0.0, 1.0], [-1.0, -0.5]], [[0.0, 0.0], [-0.6, 0.0]], 1.0, B=[0.0, 1.0], C=[1.0, 0.0])
    pi = ddesys.tf([0.8, 0.3], [1.0, 0.0])
    fopdt = ddesys.tf([1.0], [2.0, 1.0], delay=0.5)
    pairs = [(pi_closed_loop(plant, 0.8, 0.3), ddesys.feedback(pi * plant)),
             (fopdt_pi_loop(1.0, 2.0, 0.5, 0.8, 0.3), ddesys.feedback(pi * fopdt))]
    for ours, theirs in pairs:
        a, b = ours.roots(-8.0).roots, theirs.roots(-8.0)
        b = b if isinstance(b, np.ndarray) else b.roots
        assert a.size == b.size >= 5
        assert max(np.min(np.abs(b - z)) / (1 + abs(z)) for z in a) < 1e-9
    np.testing.assert_allclose(pairs[0][1].transfer(S), pairs[0][0].transfer(S), rtol=1e-12)

@pytest.mark.parametrize("kd", [0.0, 0.4])
def test_pi_closed_loop_roots_solve_loop_equation(kd):
    """Roots of the augmented loop solve 1 + (kp + ki/s + kd s) G(s) = 0, G(s) = 1 / (s^2 + 0.5 s + 1 + 0.6 e^{-s})."""
    plant = DelayStateSpace([[0.0, 1.0], [-1.0, -0.5]], [[0.0, 0.0], [-0.6, 0.0]], 1.0, B=[0.0, 1.0],
                            C=[1.0, 0.0])
    kp, ki = 0.8, 0.3
    cl = pi_closed_loop(plant, kp, ki, kd)
    for z in cl.roots().roots[:4]:
        s_ref = mp_root(lambda s: s * (s * s + s / 2 + 1 + mp.mpf("0.6") * mp.exp(-s)) + kp * s + ki + kd * s * s,
                        z)
        assert abs(s_ref - z) < 1e-8 * (1 + abs(z))
    with pytest.raises(ValueError, match="C B = 0"):
        pi_closed_loop(DelayStateSpace([[-1.0]], [[0.1]], 1.0, B=[1.0], C=[1.0]), 1.0, 1.0, kd=0.5)
