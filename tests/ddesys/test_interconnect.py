"""Dead time and interconnection (``tf``, ``ss``, ``series``, ``parallel``, ``feedback``, operators, python-control
conversion), each against an independent reference: closed-form transfer functions evaluated directly, Lambert W
and mpmath roots of the closed loop's quasi-polynomial, a hand-written RK4 loop of the closed-loop delay equation,
and scipy's rational step responses shifted by the dead time."""
from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest
from scipy import signal

import ddesys

S = np.array([0.3 + 0.7j, 1.1 - 2.0j, -0.2 + 5.0j, 0.05j, 2.0 + 0.0j])


def fopdt(s, K=1.0, T=1.0, L=1.0):
    return K * np.exp(-L * s) / (T * s + 1.0)


def G_of(sys, s=S):
    return sys.transfer(s)[0, 0]


def test_tf_with_dead_time_is_exact():
    G = ddesys.tf([2.0], [3.0, 1.0], delay=0.7)
    np.testing.assert_allclose(G_of(G), fopdt(S, 2.0, 3.0, 0.7), rtol=1e-13)
    H = ddesys.tf([1.0, 2.0, 0.5], [1.0, 3.0, 3.0], delay=0.2)               # proper: a feedthrough
    np.testing.assert_allclose(G_of(H), np.exp(-0.2 * S) * (S**2 + 2 * S + 0.5) / (S**2 + 3 * S + 3), rtol=1e-12)
    assert ddesys.tf([1.0], [1.0, 1.0]).n_channels == 0


def test_series_parallel_feedback_match_the_algebra_of_transfer_functions():
    G1 = ddesys.tf([1.0], [1.0, 1.0], delay=0.5)
    G2 = ddesys.tf([2.0, 1.0], [1.0, 3.0], delay=0.25)                      # proper, delayed feedthrough
    g1, g2 = np.exp(-0.5 * S) / (S + 1), np.exp(-0.25 * S) * (2 * S + 1) / (S + 3)
    np.testing.assert_allclose(G_of(ddesys.series(G1, G2)), g1 * g2, rtol=1e-12)
    np.testing.assert_allclose(G_of(G2 * G1), g1 * g2, rtol=1e-12)
    np.testing.assert_allclose(G_of(ddesys.parallel(G1, G2)), g1 + g2, rtol=1e-12)
    np.testing.assert_allclose(G_of(G1 - G2), g1 - g2, rtol=1e-12)
    np.testing.assert_allclose(G_of(3.0 * G1 + 1.0), 3 * g1 + 1, rtol=1e-12)
    np.testing.assert_allclose(G_of(ddesys.feedback(G1, G2)), g1 / (1 + g1 * g2), rtol=1e-12)
    np.testing.assert_allclose(G_of(ddesys.feedback(G1, G2, sign=1)), g1 / (1 - g1 * g2), rtol=1e-12)
    np.testing.assert_allclose(G_of(G1.feedback(0.5)), g1 / (1 + 0.5 * g1), rtol=1e-12)


def test_mimo_state_space_with_input_output_and_state_delays():
    A = np.array([[-1.0, 0.2], [0.1, -2.0]])
    Ad = np.array([[-0.3, 0.0], [0.2, -0.1]])
    B = np.array([[1.0, 0.0], [0.5, 1.0]])
    C = np.array([[1.0, 1.0], [0.0, 2.0]])
    D = np.array([[0.0, 0.1], [0.2, 0.0]])
    sys = ddesys.ss(A, B, C, D, Ad=Ad, tau=0.9, input_delay=[0.3, 0.0], output_delay=[0.0, 0.4])
    for s in S:
        M = s * np.eye(2) - A - Ad * np.exp(-0.9 * s)
        G = np.diag([1.0, np.exp(-0.4 * s)]) @ (C @ np.linalg.solve(M, B) + D) @ np.diag([np.exp(-0.3 * s), 1.0])
        np.testing.assert_allclose(sys.transfer([s])[:, :, 0], G, rtol=1e-12, atol=1e-14)
    K = np.array([[0.5, 0.0], [0.1, 0.3]])
    loop = ddesys.feedback(sys, K)
    for s in S[:3]:
        Gs = sys.transfer([s])[:, :, 0]
        np.testing.assert_allclose(loop.transfer([s])[:, :, 0], np.linalg.solve(np.eye(2) + Gs @ K, Gs), rtol=1e-11)
    assert loop.difference_loop() is not None          # D feeds u1(t-.3) to y2(t-.4) to u1: a neutral loop
    for z in loop.poles(re_min=-1.0):                   # zeros of det M(s) det(I + G(s) K), entire in s
        Mz = z * np.eye(2) - A - Ad * np.exp(-0.9 * z)
        Gz = np.diag([1.0, np.exp(-0.4 * z)]) @ (C @ np.linalg.solve(Mz, B) + D) @ np.diag([np.exp(-0.3 * z), 1.0])
        assert abs(np.linalg.det(Mz) * np.linalg.det(np.eye(2) + Gz @ K)) < 1e-9 * (1 + abs(z)) ** 2
    with pytest.raises(ddesys.AlgebraicLoopError, match="channel"):
        loop.step([1.0])
    # without the feedthrough the loop is retarded; its roots zero the closed loop's M(s), built by hand
    sys0 = ddesys.ss(A, B, C, Ad=Ad, tau=0.9, input_delay=[0.3, 0.0], output_delay=[0.0, 0.4])
    loop0 = ddesys.feedback(sys0, K)

    def M(s):
        return (s * np.eye(2) - A - Ad * np.exp(-0.9 * s)
                + B @ np.diag([np.exp(-0.3 * s), 1.0]) @ K @ np.diag([1.0, np.exp(-0.4 * s)]) @ C)

    roots = loop0.poles()
    assert roots.size >= 2
    for z in roots[:6]:
        assert np.linalg.svd(M(z), compute_uv=False)[-1] < 1e-10 * (1 + abs(z))


def test_closed_loop_roots_are_the_lambert_w_roots():
    """``s + 1 + k e^{-s} = 0``: ``s = -1 + W_j(-k e)``."""
    k = 2.0
    loop = ddesys.feedback(ddesys.tf([k], [1.0, 1.0], delay=1.0))
    ref = sorted((complex(-1 + mp.lambertw(-k * mp.e, j)) for j in range(-3, 4)), key=lambda z: -z.real)
    got = loop.poles(re_min=ref[-1].real - 0.01)
    for z in ref:
        assert np.min(np.abs(got - z)) < 1e-11, (z, got[:6])
    assert abs(loop.spectral_abscissa() - ref[0].real) < 1e-12


def test_pi_loop_rightmost_root_against_mpmath():
    """PI control of ``e^{-s} / (s + 1)``: ``s (s + 1) + (kp s + ki) e^{-s} = 0``."""
    kp, ki = 0.6, 0.4
    loop = ddesys.feedback(ddesys.tf([kp, ki], [1.0, 0.0]) * ddesys.tf([1.0], [1.0, 1.0], delay=1.0))
    mp.mp.dps = 40
    z0 = complex(loop.poles()[0])
    ref = mp.findroot(lambda s: s * (s + 1) + (kp * s + ki) * mp.exp(-s), mp.mpc(z0))
    assert abs(z0 - complex(ref)) < 1e-12
    assert abs(loop.spectral_abscissa() - float(mp.re(ref))) < 1e-12
    assert loop.is_stable() == (float(mp.re(ref)) < 0)


def _rk4_closed_loop(k, t_end, h=1e-3):
    """``x' = -x - k x(t - 1) + k``, ``x = 0`` before 0 (unit step reference), by RK4 on a grid with the
    delay a whole number of steps: the independent reference of the closed loop's step response."""
    lag = int(round(1.0 / h))
    N = int(round(t_end / h))
    x = np.zeros(N + 1)
    for i in range(N):
        # the delayed term and the step reference are piecewise smooth on the grid: midpoints by averaging
        xd0 = x[i - lag] if i >= lag else 0.0
        xd1 = x[i + 1 - lag] if i + 1 >= lag else 0.0
        xdm = 0.5 * (xd0 + xd1) if i + 1 > lag else (0.0 if i + 1 <= lag else 0.0)
        r0 = k if i >= lag else 0.0
        f = lambda xv, xd, r: -xv - k * xd + r          # noqa: E731
        k1 = f(x[i], xd0, r0)
        k2 = f(x[i] + h / 2 * k1, xdm, r0)
        k3 = f(x[i] + h / 2 * k2, xdm, r0)
        k4 = f(x[i] + h * k3, xd1, r0)
        x[i + 1] = x[i] + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return np.arange(N + 1) * h, x


def test_closed_loop_step_response_against_an_independent_loop():
    k = 0.8
    loop = ddesys.feedback(ddesys.tf([k], [1.0, 1.0], delay=1.0))
    t_ref, x_ref = _rk4_closed_loop(k, 12.0)
    t = np.array([0.5, 1.0, 1.5, 2.5, 4.0, 7.25, 12.0])
    y = loop.step(t, h=1e-3).y[0, 0]
    np.testing.assert_allclose(y, np.interp(t, t_ref, x_ref), atol=2e-6)
    assert abs(y[-1] - k / (1 + k)) < 0.05                # settling to the DC gain


def test_series_with_feedthrough_steps_like_the_shifted_rational_product():
    """``e^{-0.5 s} (s + 2)/(s + 1)`` then ``e^{-0.3 s} (2 s + 1)/(s + 3)``: the step response is the
    rational product's (scipy) delayed by 0.8."""
    G = ddesys.series(ddesys.tf([1.0, 2.0], [1.0, 1.0], delay=0.5), ddesys.tf([2.0, 1.0], [1.0, 3.0], delay=0.3))
    num, den = np.polymul([1.0, 2.0], [2.0, 1.0]), np.polymul([1.0, 1.0], [1.0, 3.0])
    tt = 0.1 * np.arange(53)                                   # time after the dead time
    _, y_rat = signal.step((num, den), T=tt)
    y = G.step(np.concatenate([[0.0, 0.4, 0.79], 0.8 + tt]), h=1e-3).y[0, 0]
    np.testing.assert_allclose(y[:3], 0.0, atol=0)
    np.testing.assert_allclose(y[3:], y_rat, atol=1e-8)
    np.testing.assert_allclose(G.poles(re_min=-5.0), [-1.0, -3.0], atol=1e-12)


def test_a_delay_only_loop_keeps_its_frequency_response_and_its_essential_spectrum():
    loop = ddesys.feedback(ddesys.tf([0.5], [1.0], delay=1.0))                 # w = r(t-1) - 0.5 w(t-1)
    np.testing.assert_allclose(G_of(loop), 0.5 * np.exp(-S) / (1 + 0.5 * np.exp(-S)), rtol=1e-13)
    assert loop.poles().size == 0                      # every root on Re s = ln 0.5: 1 + 0.5 e^{-s} = 0
    assert loop.spectral_abscissa() == pytest.approx(np.log(0.5), abs=1e-12)
    assert loop.is_stable() and loop.strong_stability().strongly_stable
    with pytest.raises(ddesys.AlgebraicLoopError, match="channel 0"):
        loop.step([1.0])
    with pytest.raises(ddesys.AlgebraicLoopError, match="algebraic loop"):
        ddesys.feedback(1.0, 1.0, sign=1)                                        # 1 - 1 = 0, no delay


def test_bad_input_is_refused_by_name():
    with pytest.raises(ValueError, match="improper"):
        ddesys.tf([1.0, 0.0, 0.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="delay"):
        ddesys.tf([1.0], [1.0, 1.0], delay=-1.0)
    with pytest.raises(ValueError, match="den"):
        ddesys.tf([1.0], [0.0])
    with pytest.raises(ValueError, match="series"):
        ddesys.series(ddesys.ss(np.eye(2) * -1, np.eye(2), np.eye(2)), ddesys.tf([1.0], [1.0, 1.0]))
    with pytest.raises(TypeError, match="discrete"):
        ddesys.feedback(ddesys.DelayStateSpace([[-1.0]], [[0.5]], 1.0).discretize(0.1))
    with pytest.raises(ValueError, match="sign"):
        ddesys.feedback(ddesys.tf([1.0], [1.0, 1.0]), 1.0, sign=2)


def test_a_delay_state_space_and_a_diagonal_system_take_part():
    P = ddesys.DelayStateSpace([[-1.0]], [[0.5]], 1.0, B=[1.0], C=[1.0])
    loop = ddesys.feedback(P, 0.25)
    np.testing.assert_allclose(G_of(loop), 1 / (S + 1 - 0.5 * np.exp(-S) + 0.25), rtol=1e-12)
    assert abs(loop.spectral_abscissa() - P.spectral_abscissa()) > 0.05


def test_ss_of_a_delay_state_space_is_its_io_system_and_the_loop_functions_take_either():
    """python-control's ``ss(sys)``: a DelayStateSpace becomes the DelayIOSystem with its transfer function and
    roots, which has the loop methods; the loop functions take the state-space system itself."""
    P = ddesys.DelayStateSpace([[-1.0]], [[0.5]], 1.0, B=[1.0], C=[2.0])
    G = ddesys.ss(P)
    assert type(G) is ddesys.DelayIOSystem and (G.n_states, G.n_inputs, G.n_outputs) == (1, 1, 1)
    np.testing.assert_allclose(G_of(G), 2 / (S + 1 - 0.5 * np.exp(-S)), rtol=1e-13)
    assert abs(G.spectral_abscissa() - P.spectral_abscissa()) < 1e-10
    assert not any(hasattr(P, name) for name in ("stability_margins", "sensitivity_peaks", "nyquist"))
    np.testing.assert_allclose(ddesys.stability_margins(P), G.stability_margins(), rtol=1e-12)
    gm, pm, wpc, wgc = ddesys.margin(P)
    assert np.isfinite(pm) and wgc > 0
    np.testing.assert_allclose(ddesys.sensitivity_peaks(P), G.sensitivity_peaks(), rtol=1e-12)
    from ddesys.plot import pyplot

    fig_p, fig_g = ddesys.nyquist_plot(P), G.nyquist()
    assert fig_p.encirclements == fig_g.encirclements == 0
    pyplot().close(fig_p)
    pyplot().close(fig_g)
    with pytest.raises(ValueError, match="SISO"):
        ddesys.stability_margins(ddesys.DelayStateSpace(-np.eye(2), 0.1 * np.eye(2), 1.0))


def test_the_continuous_matrix_systems_share_their_shapes_and_repr():
    """DelayStateSpace, NeutralStateSpace and DelayIOSystem take ``n_states``, ``n_inputs``, ``n_outputs`` and
    ``repr`` from one base; the IO system's repr lists its distinct delays (its ``tau`` holds one per channel)."""
    from ddesys.matrix.base import MatrixLTI

    A, Ad, B, C = -np.eye(3), 0.1 * np.eye(3), np.ones((3, 2)), np.ones((4, 3))
    systems = [ddesys.DelayStateSpace(A, Ad, 0.5, B, C), ddesys.NeutralStateSpace(A, Ad, 0.2 * np.eye(3), 0.5, B, C)]
    systems.append(ddesys.ss(systems[0], input_delay=[0.0, 0.25]))
    for sys in systems:
        assert isinstance(sys, MatrixLTI)
        assert not {"n_states", "n_inputs", "n_outputs", "__repr__"} & set(vars(type(sys)))
        assert (sys.n_states, sys.n_inputs, sys.n_outputs) == (3, 2, 4)
    assert [repr(s) for s in systems] == ["DelayStateSpace(n_states=3, n_inputs=2, n_outputs=4, tau=[0.5])",
                                          "NeutralStateSpace(n_states=3, n_inputs=2, n_outputs=4, tau=[0.5])",
                                          "DelayIOSystem(n_states=3, n_inputs=2, n_outputs=4, delays=[0.25, 0.5])"]


control = pytest.importorskip("control")


def test_python_control_round_trip():
    G = ddesys.from_control(control.tf([1.0], [1.0, 1.0]), delay=1.0)
    np.testing.assert_allclose(G_of(G), fopdt(S), rtol=1e-12)
    P = G.to_control(pade_order=8)
    w = np.array([0.01, 0.1, 0.5, 1.0])
    exact = fopdt(1j * w)
    np.testing.assert_allclose(np.squeeze(P(1j * w)), exact, rtol=1e-6)       # Pade(8) at w tau <= 1
    with pytest.raises(ValueError, match="pade_order"):
        G.to_control()
    with pytest.raises(TypeError, match="continuous"):
        ddesys.from_control(control.tf([1.0], [1.0, 0.5], 0.1))


def test_a_loop_built_by_feedback_is_designed_by_stabilize():
    """PI control of ``e^{-s} / (s + 1)``: the closed form optimum ``kp = ki = 1/e`` (a triple root at ``-1``)."""
    P = ddesys.tf([1.0], [1.0, 1.0], delay=1.0)
    res = ddesys.stabilize(lambda p: ddesys.feedback(ddesys.tf([p[0], p[1]], [1.0, 0.0]) * P), [0.5, 0.5])
    np.testing.assert_allclose(res.params, [np.exp(-1.0)] * 2, atol=1e-4)
    assert abs(res.value + 1.0) < 1e-4 and res.success


def test_closed_loop_step_with_error_control_reports_its_error():
    k = 0.8
    loop = ddesys.feedback(ddesys.tf([k], [1.0, 1.0], delay=1.0))
    t_ref, x_ref = _rk4_closed_loop(k, 12.0)
    t = np.array([0.5, 1.5, 2.5, 4.0, 7.25, 12.0])
    r = loop.step(t, rtol=1e-7)
    assert r.error_estimate is not None and r.error_estimate < 1e-5
    assert np.max(np.abs(r.y[0, 0] - np.interp(t, t_ref, x_ref))) <= 10 * r.error_estimate + 2e-8
