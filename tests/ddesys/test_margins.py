"""Classical margins of loops with dead time, exact: against closed forms of the first-order plant with dead
time (mpmath roots of the crossover equations), a brute-force frequency grid, python-control on delay-free loops,
and the delay sweep of the closed loop (a different algorithm) for the dead time tolerated."""
from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest

import ddesys

G = ddesys.tf([1.0], [1.0, 1.0], delay=1.0)            # e^{-s} / (s + 1)


def test_fopdt_gain_margin_is_the_critical_gain():
    """``w + atan(w) = pi``; ``gm = sqrt(1 + w^2)`` (2.2619)."""
    mp.mp.dps = 30
    w = mp.findroot(lambda x: x + mp.atan(x) - mp.pi, 2.0)
    gm, pm, sm, wpc, wgc, wms = ddesys.stability_margins(G)
    assert abs(wpc - float(w)) < 1e-10
    assert abs(gm - float(mp.sqrt(1 + w**2))) < 1e-10
    assert pm == np.inf and np.isnan(wgc)                # |L| < 1 for every w > 0: no gain crossover


def test_phase_margin_of_twice_the_plant():
    """``|2 / (1 + i w)| = 1`` at ``w = sqrt 3``; ``pm = 180 - (atan(sqrt 3) + sqrt 3) 180 / pi`` (20.76 deg)."""
    gm, pm, sm, wpc, wgc, wms = ddesys.stability_margins(2.0 * G)
    w = np.sqrt(3.0)
    assert abs(wgc - w) < 1e-10
    assert abs(pm - (180.0 - np.degrees(np.arctan(w) + w))) < 1e-8
    assert abs(pm - 20.76) < 5e-3
    assert abs(gm - float(mp.sqrt(1 + mp.findroot(lambda x: x + mp.atan(x) - mp.pi, 2.0) ** 2)) / 2) < 1e-10


def test_delay_margin_of_the_loop_and_the_dead_time_it_tolerates():
    """The closed loop ``x' = -x - 2 x(t - tau)`` loses stability at ``tau = (pi - atan(sqrt 3)) / sqrt 3``;
    the margins predict the same through ``pm / wgc`` (different algorithms: a delay sweep, a frequency search)."""
    loop = ddesys.feedback(2.0 * G)
    ref = (np.pi - np.arctan(np.sqrt(3.0))) / np.sqrt(3.0)
    assert abs(loop.delay_margin() - ref) < 1e-10
    _, pm, _, _, wgc, _ = (2.0 * G).stability_margins()
    assert abs(1.0 + np.radians(pm) / wgc - ref) < 1e-9


def test_stability_margin_against_a_brute_force_grid():
    from scipy.optimize import minimize_scalar

    L = 1.5 * G
    f = lambda w: abs(1.0 + 1.5 * np.exp(-1j * w) / (1.0 + 1j * w))        # noqa: E731
    w = np.linspace(1e-6, 60.0, 2_000_001)
    i = int(np.argmin(f(w)))
    ref = minimize_scalar(f, bounds=(w[i - 1], w[i + 1]), method="bounded", options={"xatol": 1e-13})
    _, _, sm, _, _, wms = ddesys.stability_margins(L)
    assert abs(sm - ref.fun) < 1e-10 and abs(wms - ref.x) < 1e-6
    peaks = ddesys.sensitivity_peaks(L)
    assert abs(peaks.ms - 1.0 / ref.fun) < 1e-9
    t = np.abs(1.5 * np.exp(-1j * w) / (1.0 + 1j * w) / (1 + 1.5 * np.exp(-1j * w) / (1.0 + 1j * w)))
    assert abs(peaks.mt - t.max()) < 1e-8


def test_returnall_lists_every_crossing():
    GM, PM, SM, w180, wc, ws = ddesys.stability_margins(2.0 * G, returnall=True)
    assert len(GM) == len(w180) > 10 and len(PM) == len(wc) == 1
    # the phase crossovers of e^{-i w} / (1 + i w): w + atan(w) = (2k + 1) pi
    mp.mp.dps = 30
    for k, wk in enumerate(sorted(w180)[:5]):
        ref = mp.findroot(lambda x: x + mp.atan(x) - (2 * k + 1) * mp.pi, float(wk))
        assert abs(wk - float(ref)) < 1e-9


control = pytest.importorskip("control")


def test_delay_free_loops_agree_with_python_control():
    num, den = [4.0, 2.0], [1.0, 3.0, 3.0, 1.0]
    ours = ddesys.stability_margins(ddesys.tf(num, den))
    theirs = control.stability_margins(control.tf(num, den))
    np.testing.assert_allclose(ours, np.array(theirs, dtype=float), rtol=1e-7)


def test_mimo_is_refused_and_nyquist_draws_the_exact_curve():
    import matplotlib

    matplotlib.use("Agg")
    with pytest.raises(ValueError, match="SISO"):
        ddesys.stability_margins(ddesys.ss(-np.eye(2), np.eye(2), np.eye(2)))
    w = np.linspace(0.1, 5.0, 50)
    fig = G.nyquist(omega=w)
    x, y = fig.axes[0].lines[0].get_data()
    ref = np.exp(-1j * w) / (1 + 1j * w)
    np.testing.assert_allclose(x + 1j * y, ref, rtol=1e-12)
    import matplotlib.pyplot as plt

    plt.close(fig)
