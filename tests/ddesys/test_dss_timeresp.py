"""ddesys.matrix.timeresp (simulate / impulse / step of matrix delay systems) against independent references.

The reference is the method of steps of verification/reference/matrix.py (an ODE of size J n per delay interval,
DOP853 at rtol 1e-12), written without ddesys; the DC gain is the closed form -C (A + sum Ad)^-1 B + D.
"""
import itertools

import numpy as np
import pytest

from ddesys.verification.reference import mos_reference
from ddesys.matrix.charmatrix import check_statespace
from ddesys.matrix.timeresp import breakpoints, impulse, simulate, step

A2 = np.array([[-1.0, 0.5], [-0.3, -0.8]])
AD2 = np.array([[0.2, -0.4], [0.5, 0.1]])
B2 = np.array([[1.0], [0.5]])
C2 = np.array([[1.0, -1.0]])


def u_smooth(t):
    return np.sin(2 * t) + 0.5


def test_simulate_matches_method_of_steps_reference():
    tau = 1.0
    d = check_statespace(A2, AD2, tau, B2, C2, [[0.3]])
    xr, _ = mos_reference(A2, [AD2], [1], tau, np.zeros(2), 6, g=lambda t: B2[:, 0] * u_smooth(t))
    t = np.linspace(0, 6, 61)
    r = simulate(*d, u_smooth, t, h=0.005)
    x_ref = xr(t)
    assert r.t.shape == (61,) and r.x.shape == (2, 61) and r.y.shape == (1, 61)
    assert np.abs(r.x - x_ref).max() < 1e-10
    assert np.abs(r.y - (C2 @ x_ref + 0.3 * u_smooth(t))).max() < 1e-10
    # any order of the output times, repeated times
    perm = np.array([5, 0, 60, 5, 33])
    assert np.abs(simulate(*d, u_smooth, t[perm], h=0.005).x - x_ref[:, perm]).max() < 1e-10


def _triangular():
    """x1' = a1 x1 + b1 x1(t - tau1) + u,  x2' = a2 x2 + b2 x2(t - tau2) + c x1(t - tau2) + 0.5 u."""
    a1, b1, a2, b2, c = -1.0, 0.6, -0.7, -0.4, 0.8
    tau1, tau2 = 1.0, np.sqrt(0.5)                            # incommensurate
    A = np.diag([a1, a2])
    Ad = [np.array([[b1, 0.0], [0.0, 0.0]]), np.array([[0.0, 0.0], [c, b2]])]
    T_end = 5.0
    J1, J2 = int(np.ceil(T_end / tau1)), int(np.ceil(T_end / tau2))
    x1, _ = mos_reference([[a1]], [[[b1]]], [1], tau1, np.zeros(1), J1, g=lambda t: [u_smooth(t)])

    def g2(t):
        return [c * x1(t - tau2)[0] + 0.5 * u_smooth(t) if t >= tau2 else 0.5 * u_smooth(t)]

    kinks = [tau2 + k * tau1 for k in range(J1 + 1)]        # where x1(t - tau2) is not smooth
    x2, _ = mos_reference([[a2]], [[[b2]]], [1], tau2, np.zeros(1), J2, g=g2, kinks=kinks)
    d = check_statespace(A, Ad, [tau1, tau2], [[1.0], [0.5]], np.eye(2))
    t = np.linspace(0, T_end, 41)
    return d, t, np.vstack([x1(t), x2(t)])


@pytest.fixture(scope="module")
def triangular():
    return _triangular()


def test_two_delay_triangular_system_matches_its_scalar_pieces(triangular):
    d, t, x_ref = triangular
    r = simulate(*d, u_smooth, t, h=0.005)
    assert np.abs(r.x - x_ref).max() < 1e-9
    assert np.abs(r.y - x_ref).max() < 1e-9                  # C = I, D = 0


def test_convergence_order_is_four(triangular):
    """Error ratio on halving h: 2^4 = 16 for a fourth-order method (incommensurate breakpoints)."""
    d, t, x_ref = triangular
    errs = [np.abs(simulate(*d, u_smooth, t, h=h).x - x_ref).max() for h in (0.1, 0.05, 0.025)]
    orders = np.log2(np.array(errs[:-1]) / np.array(errs[1:]))
    assert np.all(orders > 3.7), (errs, orders)


def test_initial_state_with_zero_history():
    """x(0) = x0, x(0-) = 0: x itself jumps at 0, so x' jumps at tau (a grid breakpoint)."""
    tau = 0.8
    x0 = np.array([1.0, -2.0])
    d = check_statespace(A2, AD2, tau, B2, C2)
    xr, _ = mos_reference(A2, [AD2], [1], tau, x0, 7)
    t = np.linspace(0, 5.6, 57)
    errs = [np.abs(simulate(*d, lambda s: 0 * s, t, x0=x0, h=h).x - xr(t)).max() for h in (0.04, 0.02)]
    assert errs[1] < 2e-8 and errs[0] / errs[1] > 12


def test_complex_system():
    A = np.array([[-0.5 + 2j, 0.3], [0.1j, -1.0 - 0.5j]])
    Ad = [np.array([[0.2 - 0.1j, 0.0], [0.3, -0.2j]]), np.array([[0.1, 0.2j], [0.0, 0.1 + 0.1j]])]
    B = np.array([[1.0], [1j]])
    C = np.array([[1.0, 0.5 - 0.5j]])
    tau0 = 0.6
    d = check_statespace(A, Ad, [tau0, 2 * tau0], B, C)      # commensurate: tau0 and 2 tau0
    xr, _ = mos_reference(A, Ad, [1, 2], tau0, np.zeros(2, complex), 8, g=lambda t: B[:, 0] * np.cos(t))
    t = np.linspace(0, 4.8, 49)
    r = simulate(*d, np.cos, t, h=0.004)
    assert np.iscomplexobj(r.x) and np.abs(r.x - xr(t)).max() < 1e-9
    assert np.abs(r.y - C @ xr(t)).max() < 1e-9


def test_impulse_matches_reference_column_by_column():
    B = np.array([[1.0, 0.0], [0.5, 1.0]])
    C = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    tau = 1.0
    d = check_statespace(A2, AD2, tau, B, C, np.ones((3, 2)))     # D excluded from the impulse response
    xr, _ = mos_reference(A2, [AD2], [1], tau, B, 5)
    t = np.linspace(0, 5, 26)
    r = impulse(*d, t, h=0.005)
    x_ref = xr(t)                                                 # (n, m, T)
    assert r.x.shape == (2, 2, 26) and r.y.shape == (3, 2, 26)
    assert np.abs(r.x - x_ref).max() < 1e-10
    assert np.abs(r.y - np.einsum("pn,nmt->pmt", C, x_ref)).max() < 1e-10
    np.testing.assert_allclose(r.x[:, :, 0], B)


def test_step_settles_to_dc_gain():
    Ad = [AD2, np.array([[0.1, 0.0], [0.0, -0.2]])]
    B = np.array([[1.0, 0.0], [0.5, 1.0]])
    D = np.array([[0.0, 0.25]])
    d = check_statespace(A2, Ad, [1.0, 1.7], B, C2, D)
    r = step(*d, [0.0, 60.0])
    dc = -C2 @ np.linalg.solve(A2 + sum(Ad), B) + D            # closed form
    assert r.y.shape == (1, 2, 2)
    np.testing.assert_allclose(r.y[:, :, 0], D, atol=1e-15)
    np.testing.assert_allclose(r.y[:, :, 1], dc, atol=1e-8)
    # the step response is simulate with u = e_j
    for j in range(2):
        s = simulate(*d, lambda t, j=j: np.vstack([np.ones_like(t) * (j == 0), np.ones_like(t) * (j == 1)]),
                     [0.0, 60.0])
        np.testing.assert_allclose(s.y, r.y[:, j], atol=1e-12)


def test_breakpoints_are_the_sums_of_up_to_four_delays():
    tau = np.array([1.0, 1.3])
    want = {0.0} | {round(i * 1.0 + j * 1.3, 9) for i, j in itertools.product(range(5), repeat=2)
                    if 1 <= i + j <= 4 and i * 1.0 + j * 1.3 < 4.5}
    got = breakpoints(tau, 4.5)
    assert sorted(want) == [round(float(x), 9) for x in got]


def test_bad_inputs_raise_clear_errors():
    d = check_statespace(A2, AD2, 1.0, B2, C2)
    d2 = check_statespace(A2, AD2, 1.0, np.eye(2), C2)           # m = 2
    with pytest.raises(ValueError, match="t must be >= 0"):
        simulate(*d, u_smooth, [-1.0, 1.0])
    with pytest.raises(ValueError, match="t must be finite"):
        impulse(*d, [np.nan])
    with pytest.raises(TypeError, match="t must hold real"):
        step(*d, [1j])
    with pytest.raises(TypeError, match="u must be a callable"):
        simulate(*d, np.ones(3), [1.0])
    with pytest.raises(ValueError, match=r"u\(times\) must return shape \(m, len\(times\)\) = \(2, "):
        simulate(*d2, np.ones_like, [1.0, 2.0])                   # (len,) is only for m = 1
    with pytest.raises(ValueError, match="u returned non-finite"):
        simulate(*d, lambda t: np.full_like(t, np.nan), [1.0])
    with pytest.raises(ValueError, match=r"x0 must have shape \(n,\) = \(2,\)"):
        simulate(*d, u_smooth, [1.0], x0=[1.0])
    with pytest.raises(ValueError, match="h must be a finite step > 0"):
        simulate(*d, u_smooth, [1.0], h=0.0)
    with pytest.raises(ValueError, match="over the budget"):
        simulate(*d, u_smooth, [1e6], h=1e-3, max_bytes=2**20)   # refused before allocating
    with pytest.warns(RuntimeWarning, match="RK4 may be unstable"):
        stiff = check_statespace([[-100.0]], [[0.5]], 1.0, [[1.0]], [[1.0]])
        simulate(*stiff, u_smooth, [0.1], h=0.05)


def test_large_step_is_capped_at_the_smallest_delay():
    """A step above min(tau) is reduced (delayed values must come from the stored past)."""
    d = check_statespace(A2, [AD2, 0.5 * AD2], [0.3, 1.0], B2, C2)
    t = np.linspace(0, 3, 7)
    a = simulate(*d, u_smooth, t, h=5.0).y
    b = simulate(*d, u_smooth, t, h=0.3).y
    np.testing.assert_array_equal(a, b)
