"""The compiled RK4 method of steps (ddesys/cpu/dde_rk4.py) against the NumPy loop it replaces, and both
against an independent reference (SciPy's solve_ivp, interval by interval, at rtol 1e-12)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import ddesys
from ddesys.cpu import dde_rk4
from ddesys.matrix._timeresp_steps import input_breaks, solve_fixed

needs_numba = pytest.mark.skipif(not dde_rk4.available(), reason="the compiled loop needs Numba")


def _loop(n, seed=0):
    rng = np.random.default_rng(seed)
    A = -np.diag(np.linspace(0.5, 5.0, n)) + 0.1 * rng.standard_normal((n, n))
    L = ddesys.tf([0.5, 0.3], [1.0, 0.0]) * ddesys.ss(A, rng.standard_normal((n, 1)),
                                                       rng.standard_normal((1, n)) / n, input_delay=0.7)
    return ddesys.feedback(0.5 * L)


def _both(*args, **kw):
    return solve_fixed(*args, compiled=True, **kw), solve_fixed(*args, compiled=False, **kw)


def _close(a, b, tol=1e-12):
    assert a.shape == b.shape and a.dtype == b.dtype
    assert np.abs(a - b).max() <= tol * max(1.0, np.abs(b).max())


@needs_numba
@pytest.mark.parametrize("n", [2, 20])
def test_compiled_equals_numpy_on_a_loop_with_dead_time(n):
    """The explicit form of a PI loop around a plant with dead time: a rank-one delayed matrix (the
    factored path), two right-hand sides, constant forcing."""
    f = _loop(n).explicit_form()
    B = np.concatenate([f.B0, f.Bd[0]], axis=1)
    args = (f.A, f.Ad, f.state_delays, B, np.zeros((f.A.shape[0], 2)), ("const", np.eye(2)),
            np.linspace(0.0, 30.0, 777), 0.03, None, "step")
    for split in (1, 2):
        _close(*_both(*args, split=split))


@needs_numba
def test_compiled_equals_numpy_with_full_rank_and_zero_delays_complex_and_an_input_with_jumps():
    rng = np.random.default_rng(3)
    n, K = 5, 3
    A = -2 * np.eye(n) + 0.3 * rng.standard_normal((n, n))
    Ad = 0.2 * rng.standard_normal((K, n, n))
    Ad[1] = 0                                                # a zero delayed matrix among full-rank ones
    tau = np.array([0.4, 0.9, 1.3])
    B = rng.standard_normal((n, 2))
    t = np.linspace(0.0, 6.0, 301)
    x0 = rng.standard_normal((n, 1))

    def u(times):                                            # (m, r, T): a jump at 1.234, a kink at 2.5
        v = np.stack([np.where(times < 1.234, 1.0, -0.5), np.abs(times - 2.5) + np.sin(3 * times)])
        return v[:, None, :]

    jumps = input_breaks(A, Ad, tau, B, x0, ("call", u, 1), t, 0.05, None, "simulate")
    assert jumps.size >= 2
    _close(*_both(A, Ad, tau, B, x0, ("call", u, 1), t, 0.05, None, "simulate", jumps=jumps))
    _close(*_both(A, Ad, tau, B, np.zeros((n, 2)), ("const", np.eye(2)), t, 0.05, None, "step", split=2))
    Ac = A + 0.5j * rng.standard_normal((n, n))               # a complex system, impulse (no forcing)
    _close(*_both(Ac, Ad * (1 - 0.3j), tau, B, B.astype(complex), None, t, 0.05, None, "impulse"))
    _close(*_both(A, np.zeros((1, n, n)), np.array([7.0]), B, B.copy(), None, t, 0.05, None, "impulse"))


@needs_numba
def test_low_rank_factors_reproduce_the_matrices_and_full_rank_is_left_alone():
    rng = np.random.default_rng(1)
    u, v = rng.standard_normal((2, 8, 1)), rng.standard_normal((2, 1, 8))
    Ad = u @ v
    Ad[1] *= 0
    U, V = dde_rk4.low_rank(Ad)
    assert U.shape == V.shape == (2, 1, 8)
    assert np.abs(np.einsum("kqa,kqb->kab", U, V) - Ad).max() <= 1e-14 * np.abs(Ad).max()
    assert dde_rk4.low_rank(rng.standard_normal((1, 8, 8))) is None


def _reference_scalar(a, b, tau, t_end, t_out):
    """``x' = a x + b x(t - tau) + 1``, zero history: solve_ivp on ``[k tau, (k + 1) tau]`` with the last
    interval's dense output as the delayed term (each interval smooth), rtol 1e-12."""
    pieces, x = [], 0.0
    for k in range(int(np.ceil(t_end / tau))):
        lo, hi = k * tau, min((k + 1) * tau, t_end)
        prev = pieces[-1] if pieces else None

        def rhs(s, y, prev=prev):
            xd = prev(s - tau)[0] if prev is not None else 0.0
            return [a * y[0] + b * xd + 1.0]

        sol = solve_ivp(rhs, (lo, hi), [x], method="DOP853", rtol=1e-12, atol=1e-14, dense_output=True)
        pieces.append(sol.sol)
        x = sol.y[0, -1]
    return np.array([pieces[min(int(s // tau), len(pieces) - 1)](s)[0] for s in t_out])


@pytest.mark.parametrize("compiled", [pytest.param(True, marks=needs_numba), False])
def test_against_solve_ivp_interval_by_interval(compiled):
    a, b, tau = -1.0, 0.5, 1.0
    t = np.linspace(0.0, 8.0, 161)
    ref = _reference_scalar(a, b, tau, 8.0, t)
    X = solve_fixed(np.array([[a]]), np.array([[[b]]]), np.array([tau]), np.eye(1), np.zeros((1, 1)),
                    ("const", np.eye(1)), t, 1 / 64, None, "step", compiled=compiled)
    assert np.abs(X[:, 0, 0] - ref).max() < 1e-9


def test_step_of_a_loop_against_solve_ivp_and_its_estimate():
    """The closed loop's step response (through the error control, default tolerance) is within its
    estimate of SciPy's; the state form integrated interval by interval (one delay)."""
    cl = _loop(2)
    f = cl.explicit_form()
    tau = float(f.state_delays[0])
    t = np.linspace(0.0, 10.0, 201)
    r = cl.step(t, rtol=1e-9)
    n = f.A.shape[0]
    pieces, x = [], np.zeros(n)
    for k in range(int(np.ceil(10.0 / tau))):
        lo, hi = k * tau, min((k + 1) * tau, 10.0)
        prev = pieces[-1] if pieces else None

        def rhs(s, y, prev=prev):
            xd = prev(s - tau) if prev is not None else np.zeros(n)
            u_late = 1.0 if s >= tau else 0.0                    # the input delay: u(t - tau)
            return f.A @ y + f.Ad[0] @ xd + f.B0[:, 0] + f.Bd[0][:, 0] * u_late

        sol = solve_ivp(rhs, (lo, hi), x, method="DOP853", rtol=1e-12, atol=1e-14, dense_output=True)
        pieces.append(sol.sol)
        x = sol.y[:, -1]
    xs = np.stack([pieces[min(int(s // tau), len(pieces) - 1)](s) for s in t], axis=1)     # (n, T)
    y = f.C0 @ xs + f.D0 @ np.ones((1, t.size))
    err = np.abs(r.y[0, 0] - y[0]).max()
    assert err <= max(r.error_estimate, 1e-12) and err < 1e-8


def test_without_numba_the_step_response_is_the_same():
    """DDESYS_DISABLE_NUMBA=1: the NumPy loop, equal to the compiled one to rounding."""
    code = ("import json, numpy as np, ddesys\n"
            "from tests.ddesys.test_timeresp_fast import _loop\n"
            "r = _loop(5).step(np.linspace(0, 12, 121))\n"
            "print(json.dumps(dict(numba=ddesys.cpu.available(), y=r.y.ravel().tolist(), e=r.error_estimate)))\n")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, DDESYS_DISABLE_NUMBA="1", DDESYS_QUIET="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["numba"] is False
    r = _loop(5).step(np.linspace(0, 12, 121))
    y = np.array(got["y"])
    assert np.abs(y - r.y.ravel()).max() <= 1e-12 * np.abs(y).max()
    assert got["e"] == pytest.approx(r.error_estimate, rel=1e-6, abs=1e-15)
