"""Margins follow python-control's conventions at the ends of the frequency axis and give no rounding-driven
numbers; delay margins of systems with several delays.

References: closed forms, mpmath roots of the crossover equations of ``L(i w)`` (30 digits), python-control's
published margin test values (``control/tests/margin_test.py``: the ``tsys_zmoresystems`` fixture, examples
from Bavafi-Toosi 2015), and for the delay margins a brute-force scan of the delay with an independent
eigenvalue test (the spectral abscissa of a Chebyshev collocation of the delay equation) or closed forms.
"""
from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest

import ddesys

try:
    import control
except ImportError:                                 # the delay-margin tests below do not need it
    control = None
needs_control = pytest.mark.skipif(control is None, reason="python-control is not installed")


# ---------------------------------------------------------------- 1. the phase crossover at omega = 0

def _fo_unstable(w):
    """``L(i w) = 1.5 e^{-0.5 i w} / (i w - 1)`` at 30 digits."""
    return mp.mpf("1.5") * mp.exp(-mp.mpf("0.5") * 1j * w) / (1j * w - 1)


@needs_control
def test_static_gain_on_the_negative_axis_is_a_phase_crossover():
    """``L(0) = -1.5``: python-control counts ``omega = 0`` (gm ``2/3``); the crossover at ``atan w = w / 2``
    (gm 1.691) is farther from 0 dB."""
    mp.mp.dps = 30
    gm, pm, sm, wpc, wgc, wms = ddesys.stability_margins(ddesys.tf([1.5], [1.0, -1.0], delay=0.5))
    assert wpc == 0.0 and abs(gm - 2.0 / 3.0) < 1e-14
    wg = mp.findroot(lambda w: abs(_fo_unstable(w)) - 1, 1.0)                        # sqrt(5) / 2
    assert abs(wgc - float(wg)) < 1e-12
    assert abs(pm - float(180 + mp.degrees(mp.arg(_fo_unstable(wg))))) < 1e-9
    GM, _, _, w180, _, _ = ddesys.stability_margins(ddesys.tf([1.5], [1.0, -1.0], delay=0.5), returnall=True)
    assert w180[0] == 0.0 and abs(GM[0] - 2.0 / 3.0) < 1e-14
    w1 = mp.findroot(lambda w: mp.im(_fo_unstable(w)), 2.3)                           # atan(w) = w / 2
    assert abs(w180[1] - float(w1)) < 1e-12
    assert abs(GM[1] - float(1 / abs(_fo_unstable(w1)))) < 1e-12
    # the same convention in python-control, on a Pade model of the delay
    ref = control.stability_margins(control.tf([1.5], [1.0, -1.0]) * control.tf(*control.pade(0.5, 8)))
    assert ref[3] == 0.0 and abs(ref[0] - gm) < 1e-12


def _example21():
    s = control.tf("s")
    return 0.002 * (s + 0.02) * (s + 0.05) * (s + 5) * (s + 10) / (
        (s - 0.0005) * (s + 0.0001) * (s + 0.01) * (s + 0.2) * (s + 1) * (s + 100) ** 2)


@needs_control
@pytest.mark.parametrize("how", ["tf", "from_control"])
def test_python_control_example21(how):
    """python-control's published values (margin_test.py, example21, K = 1); ``L(0) = -100`` exactly."""
    L = _example21()
    sys = ddesys.tf(L.num[0][0], L.den[0][0]) if how == "tf" else ddesys.from_control(L)
    gm, pm, wpc, wgc = ddesys.margin(sys)
    np.testing.assert_allclose([gm, pm, wpc, wgc], [0.0100, -14.5640, 0, 0.0022], atol=1e-2)
    assert wpc == 0.0 and abs(gm - 0.01) < 1e-12
    res = ddesys.stability_margins(sys, returnall=True)
    published = ([0.01, 179.2931, 2.2798e+4, 1.5946e+07, 7.2477e+08], [-14.5640], [0.2496],
                 [0, 0.0243, 0.4385, 6.8640, 84.9323], [0.0022], [0.0022])
    for a, d in zip((res[0], res[1], res[2][-1:], res[3], res[4], res[5][-1:]), published):
        np.testing.assert_allclose(a, d, rtol=1e-3, atol=1e-3)


# ---------------------------------------------------------------- 2. integrators and the rounding floor

def _type2_exact(w):
    """python-control's ``type2`` loop ``(s + 0.1) / (s^2 (s + 1))`` at ``s = i w``, 30 digits."""
    s = 1j * w
    return (s + mp.mpf("0.1")) / (s ** 2 * (s + 1))


def _lead_exact(w):
    """``(s + 1) / (s^2 (0.1 s + 1))`` at ``s = i w``."""
    s = 1j * w
    return (s + 1) / (s ** 2 * (mp.mpf("0.1") * s + 1))


TRANSFORMS = [np.array([[1.0, 2.0, 0.0], [0.3, 1.0, 1.0], [1.0, 0.0, 3.0]]),
              np.array([[1.0, 0.5, 0.0], [0.1, 1.0, 0.2], [0.3, 0.0, 1.0]]),
              np.array([[2.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 4.0]])]


@needs_control
@pytest.mark.parametrize("T", range(len(TRANSFORMS)))
@pytest.mark.parametrize("loop", ["type2", "lead"])
def test_double_integrator_realizations_have_no_phase_crossover(loop, T):
    """A double integrator's phase is exactly -180 deg as ``omega -> 0``: no crossing (python-control: gm inf).
    A realization that is not triangular splits the double zero eigenvalue into ``+-1e-8`` by rounding; the
    loop computed there must still give gm = inf, and the phase margin of the exact loop (mpmath)."""
    mp.mp.dps = 30
    s = control.tf("s")
    L, exact = ((s + 0.1) / s ** 2 / (s + 1), _type2_exact) if loop == "type2" else \
        (control.tf([1.0], [1.0, 0.0, 0.0]) * control.tf([1.0, 1.0], [0.1, 1.0]), _lead_exact)
    realized = control.similarity_transform(control.ss(L), TRANSFORMS[T])
    sys = ddesys.from_control(realized)
    assert np.max(np.abs(np.linalg.eigvals(realized.A))[1:]) > 0          # zero split by rounding
    wg = mp.findroot(lambda w: abs(exact(w)) - 1, 1.0)
    pm_ref = float(180 + mp.degrees(mp.arg(exact(wg))))
    for G in (sys, ddesys.from_control(L), ddesys.tf(L.num[0][0], L.den[0][0])):
        gm, pm, sm, wpc, wgc, wms = ddesys.stability_margins(G)
        assert gm == np.inf and np.isnan(wpc)
        assert abs(wgc - float(wg)) < 1e-9 and abs(pm - pm_ref) < 1e-8
        GM, _, _, w180, _, _ = ddesys.stability_margins(G, returnall=True)
        assert GM.size == 0 and w180.size == 0
    if loop == "type2":
        np.testing.assert_allclose(ddesys.margin(sys), [np.inf, 44.4594, np.nan, 0.7907], atol=1e-4)


@needs_control
def test_integrator_loop_keeps_its_crossings_above_the_floor():
    """``type3`` of python-control's tests, ``(s + 0.1)^2 / (s^3 (s + 1))`` (published gm 0.0626 at 0.1119),
    in a realization that splits the triple zero by rounding: the crossover above the floor is kept (mpmath)."""
    mp.mp.dps = 30
    s = control.tf("s")
    L = (s + 0.1) * (s + 0.1) / s ** 3 / (s + 1)
    sys = ddesys.from_control(control.similarity_transform(control.ss(L), np.eye(4) + 0.3 * np.eye(4, k=1)))
    exact = lambda w: (1j * w + mp.mpf("0.1")) ** 2 / ((1j * w) ** 3 * (1j * w + 1))     # noqa: E731
    w1 = mp.findroot(lambda w: mp.im(exact(w)) / abs(exact(w)), 0.11)
    gm, pm, sm, wpc, wgc, wms = ddesys.stability_margins(sys)
    assert abs(wpc - float(w1)) < 1e-9 and abs(gm - float(1 / abs(exact(w1)))) < 1e-9
    np.testing.assert_allclose(ddesys.margin(sys), [0.0626, 37.1748, 0.1119, 0.7951], atol=1.5e-3)


# ---------------------------------------------------------------- 3. |L| = 1 everywhere: no rounding-driven margin

@needs_control
def test_pure_delay_has_no_gain_crossover_and_touches_minus_one():
    """``e^{-s}``: ``|L| = 1`` at every frequency, so ``|L| - 1`` never changes sign: ``pm = inf`` as
    python-control reports for the rational all-pass ``(1 - s) / (1 + s)``. ``L(i pi) = -1``: gm 1 at ``pi``,
    and the Nyquist curve passes through -1 (``sm = 2 |cos(w / 2)| = 0`` at odd multiples of ``pi``)."""
    gm, pm, sm, wpc, wgc, wms = ddesys.stability_margins(ddesys.tf([1.0], [1.0], delay=1.0))
    ref = control.stability_margins(control.tf([-1.0, 1.0], [1.0, 1.0]))
    assert ref[1] == np.inf and np.isnan(ref[4])
    assert pm == np.inf and np.isnan(wgc)
    assert abs(gm - 1.0) < 1e-14 and abs(wpc - np.pi) < 1e-14
    k = wms / np.pi
    assert sm < 1e-12 and abs(k - round(k)) < 1e-12 and round(k) % 2 == 1
    _, PM, _, _, WC, _ = ddesys.stability_margins(ddesys.tf([1.0], [1.0], delay=1.0), returnall=True)
    assert PM.size == 0 and WC.size == 0
    for c in (0.5, 2.0):                                # |L| = c: no gain crossover either; gm = 1 / c at pi
        gm, pm, _, wpc, wgc, _ = ddesys.stability_margins(ddesys.tf([c], [1.0], delay=1.0))
        assert pm == np.inf and abs(gm - 1 / c) < 1e-14 and abs(wpc - np.pi) < 1e-14


@needs_control
def test_critical_gain_touch_gives_a_stability_margin_at_rounding():
    """At the critical gain ``K = sqrt(1 + w^2)``, ``w + atan w = pi``, of ``e^{-s} / (s + 1)`` the Nyquist curve
    passes through -1: ``sm`` is 0 to rounding (the V-shaped minimum of ``|1 + L|`` refined to ``eps``)."""
    mp.mp.dps = 30
    w = mp.findroot(lambda x: x + mp.atan(x) - mp.pi, 2.0)
    K = float(mp.sqrt(1 + w ** 2))
    gm, pm, sm, wpc, wgc, wms = ddesys.stability_margins(K * ddesys.tf([1.0], [1.0, 1.0], delay=1.0))
    assert sm < 1e-12 and abs(wms - float(w)) < 1e-9
    assert abs(gm - 1.0) < 1e-14 and abs(pm) < 1e-9


# ---------------------------------------------------------------- 4. delay margins of systems with several delays

def _cheb_abscissa(A, Ad, tau, N=40):
    """Spectral abscissa of ``x' = A x + sum Ad_j x(t - tau_j)`` from a Chebyshev collocation of its
    infinitesimal generator on ``[-max tau, 0]`` (Breda, Maset, Vermiglio): an eigenvalue test independent of
    the crossing sweeps. Only the rightmost eigenvalues are accurate, which is what the sign needs."""
    A, Ad, tau = np.asarray(A, float), np.asarray(Ad, float), np.asarray(tau, float)
    n, T = A.shape[0], float(tau.max())
    x = np.cos(np.pi * np.arange(N + 1) / N)                    # 1 .. -1
    c = np.r_[2.0, np.ones(N - 1), 2.0] * (-1.0) ** np.arange(N + 1)
    X = x[:, None] - x[None, :]
    D = np.outer(c, 1 / c) / (X + np.eye(N + 1))
    D -= np.diag(D.sum(axis=1))
    theta = T * (x - 1) / 2                                     # 0 .. -T
    D *= 2 / T
    bw = (-1.0) ** np.arange(N + 1) * np.r_[0.5, np.ones(N - 1), 0.5]      # barycentric weights

    def interp_row(t):
        d = t - theta
        if np.any(d == 0):
            return (d == 0).astype(float)
        q = bw / d
        return q / q.sum()
    M = np.kron(D, np.eye(n))
    row = np.kron(np.eye(N + 1)[0], A)
    for Aj, tj in zip(Ad, tau):
        row = row + np.kron(interp_row(-tj), Aj)
    M[:n] = row
    return float(np.max(np.linalg.eigvals(M).real))


def _first_unstable(abscissa, p_hi, n=200):
    """The first parameter in ``(0, p_hi]`` where ``abscissa(p) >= 0``: a scan, then bisection to 1e-9."""
    from scipy.optimize import brentq

    ps = np.linspace(p_hi / n, p_hi, n)
    vals = [abscissa(p) for p in ps]
    k = next(i for i, v in enumerate(vals) if v >= 0)
    return brentq(abscissa, ps[k - 1], ps[k], xtol=1e-10)


A2 = np.array([[-2.0, 1.0], [0.5, -1.5]])
AD2 = np.array([[[-1.0, 0.3], [0.2, -0.5]], [[0.2, -0.4], [-0.6, -0.8]]])


@pytest.mark.parametrize("A, Ad, tau, k, hi", [
    ([[0.0]], [[[-1.0]], [[-0.5]]], [1.0, 1.0], 0, 6.0),        # x' = -x(t - tau_1) - x(t - 1) / 2
    ([[0.0]], [[[-1.0]], [[-0.5]]], [1.2, 1.0], 1, 6.0),
    (A2, 3 * AD2, [0.3, 0.7], 0, 3.0),
    (A2, 3 * AD2, [0.3, 0.7], 1, 3.0),
])
def test_per_delay_margin_against_a_chebyshev_scan(A, Ad, tau, k, hi):
    dm = ddesys.DelayStateSpace(A, Ad, tau).delay_margin(which=k)

    def absc(t):
        tt = np.array(tau, float)
        tt[k] = t
        return _cheb_abscissa(A, Ad, tt)
    ref = _first_unstable(absc, hi)
    assert abs(dm - ref) < 1e-7 * (1 + ref)
    assert _cheb_abscissa(A, Ad, np.where(np.arange(len(tau)) == k, 0.999 * dm, tau)) < 0


def test_per_delay_margin_infinite_where_the_scan_stays_stable():
    """``x' = -x(t - 0.5) - x(t - tau_2) / 2``: no crossing in ``tau_2`` (the Chebyshev abscissa stays negative)."""
    Ad = [[[-1.0]], [[-0.5]]]
    assert ddesys.DelayStateSpace([[0.0]], Ad, [0.5, 1.0]).delay_margin(which=1) == np.inf
    assert all(_cheb_abscissa([[0.0]], Ad, [0.5, t]) < 0 for t in np.linspace(0.1, 30.0, 40))


def test_direction_margins_closed_forms_and_the_one_delay_sweep():
    """``(1, 1)``: ``x' = -(a + b) x(t - t)``, margin ``pi / (2 (a + b))``; ``(1, 0)``: one delay, the QEP sweep of
    :func:`ddesys.matrix.crossings.delay_margin` (a different algorithm)."""
    from ddesys.matrix.crossings import delay_margin
    from ddesys.matrix.delay_margins import delay_margins

    assert abs(delay_margins([[0.0]], [[[-1.0]], [[-0.5]]], [1.0, 1.0], direction=[1.0, 1.0]) - np.pi / 3) < 1e-12
    ref = delay_margin(A2 + 3 * AD2[1], 3 * AD2[0])
    assert abs(delay_margins(A2, 3 * AD2, [1.0, 1.0], direction=[1.0, 0.0]) - ref) < 1e-10
    sys = ddesys.DelayStateSpace(A2, 3 * AD2, [0.3, 0.7])
    per = sys.delay_margin()
    assert len(per) == 2 and all(abs(p - sys.delay_margin(which=i)) == 0 for i, p in enumerate(per))


@pytest.mark.parametrize("d, t_max", [((1.0, 2.0), None), ((0.3, 0.7), None), ((1.0, np.sqrt(2.0)), 3.0)])
def test_direction_margin_against_a_chebyshev_scan(d, t_max):
    sys = ddesys.DelayStateSpace(A2, 3 * AD2, [0.3, 0.7])
    t = sys.delay_margin(direction=d, t_max=t_max)
    ref = _first_unstable(lambda s: _cheb_abscissa(A2, 3 * AD2, s * np.asarray(d)), 3.0)
    assert abs(t - ref) < 1e-7 * (1 + ref)


def test_several_delay_margins_refuse_bad_questions():
    from ddesys.matrix.delay_margins import delay_margins

    with pytest.raises(ValueError, match="not both"):
        delay_margins(A2, AD2, [1.0, 1.0], which=0, direction=[1.0, 1.0])
    with pytest.raises(ValueError, match="commensurate"):
        delay_margins(A2, 3 * AD2, [1.0, 1.0], direction=[1.0, np.sqrt(2.0)])
    with pytest.raises(ValueError, match="Hurwitz"):
        delay_margins([[1.0]], [[[-0.5]], [[0.2]]], [1.0, 1.0], direction=[1.0, 1.0])
    with pytest.raises(ValueError, match="not stable"):
        delay_margins([[1.0]], [[[-0.5]], [[-2.0]]], [1.0, 1.0], which=0)
