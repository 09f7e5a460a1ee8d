"""Error control of the matrix time responses (``rtol`` / ``atol``, ``TimeResponse.error_estimate``).

References, none computed by ddesys:

* the scalar ``x' = a x + b x(t - tau) + u`` (``a < 0``, zero history) in closed form, from the Laplace
  transform ``1 / (s - a - b e^{-s tau}) = sum_k b^k e^{-k s tau} / (s - a)^{k + 1}``: the step response is
  ``sum_{k tau <= t} b^k (-a)^{-(k+1)} P(k + 1, -a (t - k tau))`` (``P`` the regularized lower incomplete
  gamma function, ``scipy.special.gammainc``) and the impulse response
  ``sum_{k tau <= t} b^k (t - k tau)^k e^{a (t - k tau)} / k!``;
* a 2-state system with the delays 25 and 50 by the method of steps segment by segment
  (``ddesys.verification.reference.mos_reference``: ``solve_ivp`` DOP853, ``rtol = 1e-12``,
  ``atol = 1e-14``, each segment started from the previous one's end).
"""
import pickle
import re
import warnings

import numpy as np
import pytest
from scipy.special import gammainc, gammaln

from ddesys import DelayStateSpace
from ddesys.budget import BudgetError
from ddesys.matrix.charmatrix import check_statespace
from ddesys.matrix.timeresp import TimeResponse, impulse, simulate, step
from ddesys.verification.reference import mos_reference

A1, B1, TAU1 = -2.0, 1.0, 50.0                  # ||A|| + ||Ad|| = 3: the old default step was 1/3
T1 = np.linspace(0.0, 400.0, 801)


def scalar_step(t, a=A1, b=B1, tau=TAU1):
    k = np.arange(int(t.max() // tau) + 1)[:, None]
    u = t[None, :] - k * tau
    return np.sum(np.where(u >= 0, b ** k * (-a) ** (-(k + 1.0)) * gammainc(k + 1, -a * np.maximum(u, 0)), 0), 0)


def scalar_impulse(t, a=A1, b=B1, tau=TAU1):
    k = np.arange(int(t.max() // tau) + 1)[:, None]
    u = np.maximum(t[None, :] - k * tau, 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        log = k * np.log(u) + a * u - gammaln(k + 1.0)
    term = np.where(t[None, :] - k * tau >= 0, b ** k * np.exp(np.where(k == 0, a * u, log)), 0)
    return term.sum(0)


def check_bound(est, true, rtol, peak):
    """The error within the tolerance, the estimate an upper bound of it within a factor 10."""
    assert true <= rtol * peak, (true, rtol * peak)
    assert true <= est <= 10 * true, (est, true)


def test_scalar_closed_form_matches_an_independent_method_of_steps():
    """The two references agree (the closed form is the one the other tests use)."""
    xr, _ = mos_reference([[A1]], [[[B1]]], [1], TAU1, np.zeros(1), 4, g=lambda s: [1.0])
    t = np.linspace(0, 200, 41)
    assert np.abs(xr(t)[0] - scalar_step(t)).max() < 1e-10
    xi, _ = mos_reference([[A1]], [[[B1]]], [1], TAU1, np.ones(1), 4)
    assert np.abs(xi(t)[0] - scalar_impulse(t)).max() < 1e-10


@pytest.mark.parametrize("rtol", [1e-4, 1e-6, 1e-8])
def test_scalar_step_at_delay_50_meets_rtol(rtol):
    d = check_statespace([[A1]], [[B1]], TAU1, [[1.0]], [[1.0]])
    ref = scalar_step(T1)
    r = step(*d, T1, rtol=rtol)
    check_bound(r.error_estimate, np.abs(r.y[0, 0] - ref).max(), rtol, np.abs(ref).max())


def test_default_step_is_error_controlled_where_the_fixed_default_step_was_not():
    d = check_statespace([[A1]], [[B1]], TAU1, [[1.0]], [[1.0]])
    ref = scalar_step(T1)
    fixed = step(*d, T1, h=1 / 3)                    # the former default step: no control, no estimate
    assert fixed.error_estimate is None and np.abs(fixed.y[0, 0] - ref).max() > 1e-4
    r = DelayStateSpace([[A1]], [[B1]], TAU1, B=[1.0], C=[1.0]).step(T1)    # default rtol 1e-6
    check_bound(r.error_estimate, np.abs(r.y[0, 0] - ref).max(), 1e-6, np.abs(ref).max())


def test_scalar_impulse_and_atol():
    d = check_statespace([[A1]], [[B1]], TAU1, [[1.0]], [[1.0]])
    ref = scalar_impulse(T1)
    r = impulse(*d, T1, rtol=1e-6)
    check_bound(r.error_estimate, np.abs(r.y[0, 0] - ref).max(), 1e-6, 1.0)
    r = impulse(*d, T1, rtol=0, atol=1e-5)           # an absolute tolerance alone
    check_bound(r.error_estimate, np.abs(r.y[0, 0] - ref).max(), 1e-5, 1.0)


A2 = np.array([[-1.0, 0.4], [-0.6, -1.5]])
AD2 = [np.array([[0.3, -0.2], [0.1, 0.2]]), np.array([[-0.2, 0.1], [0.3, -0.4]])]
B2 = np.array([[1.0, 0.0], [0.5, 1.0]])
C2 = np.array([[1.0, -1.0], [0.0, 2.0]])
T2 = np.linspace(0.0, 300.0, 601)


@pytest.fixture(scope="module")
def two_delay_refs():
    """Step (two inputs) and forced responses of the 2-state system with delays 25 and 50."""
    xs, _ = mos_reference(A2, AD2, [1, 2], 25.0, np.zeros((2, 2)), 12, g=lambda s: B2)
    xu, _ = mos_reference(A2, AD2, [1, 2], 25.0, np.zeros(2), 12, g=lambda s: B2[:, 0] * np.cos(0.3 * s))
    return np.einsum("pn,nmt->pmt", C2, xs(T2)), C2 @ xu(T2)


@pytest.mark.parametrize("rtol", [1e-4, 1e-6])
def test_two_state_two_delay_step_meets_rtol_per_channel(two_delay_refs, rtol):
    ref = two_delay_refs[0]                                       # (2 outputs, 2 inputs, T)
    d = check_statespace(A2, AD2, [25.0, 50.0], B2, C2)
    r = step(*d, T2, rtol=rtol)
    err = np.abs(r.y - ref).max(axis=-1)
    assert np.all(err <= rtol * np.abs(ref).max(axis=-1)), err   # each channel within its own tolerance
    check_bound(r.error_estimate, err.max(), rtol, np.abs(ref).max())


def test_two_state_two_delay_simulate_meets_rtol(two_delay_refs):
    ref = two_delay_refs[1]
    d = check_statespace(A2, AD2, [25.0, 50.0], B2[:, :1], C2)
    r = simulate(*d, lambda s: np.cos(0.3 * s), T2, rtol=1e-6)
    check_bound(r.error_estimate, np.abs(r.y - ref).max(), 1e-6, np.abs(ref).max(axis=-1).min())


def test_budget_bounds_the_refinement_and_warns_with_the_error_reached():
    d = check_statespace([[A1]], [[B1]], TAU1, [[1.0]], [[1.0]])
    ref = scalar_step(T1)
    with pytest.warns(RuntimeWarning, match="was not met: estimated error .* memory budget") as rec:
        r = step(*d, T1, rtol=1e-8, max_bytes=300_000)           # the first pair fits, no halving does
    named = float(re.search(r"estimated error (\S+)", str(rec[0].message)).group(1))
    assert named == pytest.approx(r.error_estimate, rel=1e-2)
    assert np.abs(r.y[0, 0] - ref).max() <= r.error_estimate  # a bound still, not a silent wrong number
    with pytest.raises(BudgetError, match="over the budget"):
        step(*d, T1, rtol=1e-6, max_bytes=50_000)                 # not even the first pair fits


def test_tolerance_below_rounding_warns():
    d = check_statespace([[A1]], [[B1]], 1.0, [[1.0]], [[1.0]])
    t = np.linspace(0, 5, 51)
    with pytest.warns(RuntimeWarning, match="rounding errors"):
        r = step(*d, t, rtol=1e-16)
    assert np.abs(r.y[0, 0] - scalar_step(t, tau=1.0)).max() <= r.error_estimate


def test_explicit_step_is_one_fixed_solve_and_h_with_rtol_is_controlled():
    d = check_statespace([[A1]], [[B1]], TAU1, [[1.0]], [[1.0]])
    ref = scalar_step(T1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fixed = step(*d, T1, h=0.25)
    assert fixed.error_estimate is None
    r = step(*d, T1, h=0.25, rtol=1e-5)
    check_bound(r.error_estimate, np.abs(r.y[0, 0] - ref).max(), 1e-5, np.abs(ref).max())


@pytest.mark.parametrize("kw, msg", [(dict(rtol=-1e-3), "rtol must be a finite number >= 0"),
                                     (dict(atol=np.inf), "atol must be a finite number >= 0"),
                                     (dict(rtol="1e-3"), "rtol must be"),
                                     (dict(rtol=0, atol=0), "cannot both be 0")])
def test_bad_tolerances(kw, msg):
    d = check_statespace([[A1]], [[B1]], 1.0, [[1.0]], [[1.0]])
    with pytest.raises(ValueError, match=msg):
        step(*d, [1.0], **kw)


def test_time_response_unpacks_as_three_and_carries_the_estimate():
    r = DelayStateSpace([[-1.0]], [[0.5]], 1.0, B=[1.0], C=[1.0]).impulse([0.0, 1.0], rtol=1e-8)
    t, y, x = r
    assert len(r) == 3 and r._fields == ("t", "y", "x") and y is r.y
    assert isinstance(r.error_estimate, float) and r.error_estimate >= 0
    q = pickle.loads(pickle.dumps(r))
    assert isinstance(q, TimeResponse) and q.error_estimate == r.error_estimate
    assert r._replace(t=t + 1).error_estimate == r.error_estimate
    assert TimeResponse(t, y, x).error_estimate is None
    with pytest.raises(AttributeError, match="immutable"):
        r.error_estimate = 0.0
