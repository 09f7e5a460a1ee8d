"""Stability charts (ddesys.matrix.chart) against independent references: the closed-form boundary of
x' = -k x(t - tau) and a brute-force search for the rightmost root of a scalar two-delay equation."""
import time

import numpy as np
import pytest

from ddesys.matrix.chart import StabilityChart, delay_chart, stability_chart


def rightmost_scalar(a, b1, b2, t1, t2, re_min=-1.2, h=0.2):
    """Rightmost zero of f(s) = s - a - b1 e^{-s t1} - b2 e^{-s t2} (real coefficients) by Newton from a
    grid over the box holding every zero with Re s >= re_min (|s| <= |a| + sum |b_k| e^{-re_min t_k})."""
    R = abs(a) + abs(b1) * np.exp(-re_min * t1) + abs(b2) * np.exp(-re_min * t2)
    X, Y = np.meshgrid(np.arange(re_min, R + h, h), np.arange(0.0, R + h, h))   # conjugate symmetry
    s = (X + 1j * Y).ravel()
    f = lambda s: s - a - b1 * np.exp(-s * t1) - b2 * np.exp(-s * t2)          # noqa: E731
    df = lambda s: 1 + t1 * b1 * np.exp(-s * t1) + t2 * b2 * np.exp(-s * t2)   # noqa: E731
    with np.errstate(all="ignore"):
        for _ in range(80):
            s = s - f(s) / df(s)
        ok = np.isfinite(s) & (np.abs(f(s) / df(s)) < 1e-13 * (1 + np.abs(s)))
    assert ok.any() and s[ok].real.max() > re_min + 0.1          # the rightmost root is inside the box
    return float(s[ok].real.max())


def test_scalar_two_delays_vs_brute_force():
    a, b1, b2 = -0.5, -0.8, 0.6
    t1 = np.linspace(0.1, 3.0, 12)
    t2 = np.linspace(0.1, 2.5, 9)
    ch = delay_chart([[a]], [[[b1]], [[b2]]], t1, t2, workers=1)
    assert ch.abscissa.shape == ch.stable.shape == (9, 12) and ch.converged.all()
    assert ch.stable.any() and not ch.stable.all()
    for j, i in [(0, 0), (0, 11), (4, 6), (8, 0), (8, 11), (2, 9), (6, 3)]:
        ref = rightmost_scalar(a, b1, b2, t1[i], t2[j])
        assert ch.abscissa[j, i] == pytest.approx(ref, abs=1e-9), (i, j)
        assert ch.stable[j, i] == (ref < 0)


def test_one_delay_boundary_closed_form():
    # x' = -k x(t - tau), k > 0: stable iff k tau < pi/2 (the roots s = +-i k cross at k tau = pi/2)
    tau = np.linspace(0.05, 3.0, 25)
    k = np.linspace(0.1, 2.0, 20)
    ch = stability_chart(lambda t, g: ([[0.0]], [[-g]], [t]), tau, k, workers=2, xlabel="tau", ylabel="k")
    kt = k[:, None] * tau[None, :]
    far = np.abs(kt - np.pi / 2) > 1e-3
    assert far.sum() > 400
    np.testing.assert_array_equal(ch.stable[far], (kt < np.pi / 2)[far])


def test_matrix_system_workers_agree_and_plot():
    rng = np.random.default_rng(1)
    A = rng.standard_normal((3, 3)) / 2 - np.eye(3)
    Ad = rng.standard_normal((2, 3, 3)) / 3
    t = np.linspace(0.1, 2.0, 9)
    c1 = delay_chart(A, Ad, t, t[:7], workers=1)
    c2 = delay_chart(A, Ad, t, t[:7], workers=2)
    np.testing.assert_array_equal(c1.abscissa, c2.abscissa)
    assert isinstance(c1, StabilityChart) and "StabilityChart(7 x 9" in repr(c1)
    with pytest.raises(AttributeError):
        c1.stable = None
    fig = c1.plot()
    ax = fig.axes[0]
    assert ax.get_xlabel().startswith("tau1") and ax.get_ylabel().startswith("tau2") and ax.get_title()


def test_bad_input():
    with pytest.raises(TypeError, match="system_fn"):
        stability_chart(None, [1.0], [1.0])
    with pytest.raises(ValueError, match="x"):
        stability_chart(lambda a, b: ([[0.0]], [[-1.0]], [1.0]), [], [1.0])
    with pytest.raises(ValueError, match="one shape"):
        stability_chart(lambda a, b: (np.eye(int(a)), np.eye(int(a)), [1.0]), [1, 2], [1.0])
    with pytest.raises(ValueError, match="tau"):
        stability_chart(lambda a, b: ([[0.0]], [[-1.0]], [a]), [-1.0], [1.0])
    with pytest.raises(ValueError, match="tau2"):
        delay_chart([[0.0]], [[[1.0]], [[1.0]]], [1.0], [0.0])
    with pytest.raises(ValueError, match="workers"):
        delay_chart([[0.0]], [[[1.0]], [[1.0]]], [1.0], [1.0], workers=0)
    with pytest.raises(ValueError, match="n_grid"):
        delay_chart([[0.0]], [[[1.0]], [[1.0]]], [1.0], [1.0], n_grid=1)
    one = delay_chart([[0.0]], [[[-0.5]], [[-0.5]]], [1.0], [1.0])
    with pytest.raises(ValueError, match="2 points"):
        one.plot()


@pytest.mark.slow
def test_speed_100x100_four_states_two_delays():
    rng = np.random.default_rng(1)
    A = rng.standard_normal((4, 4)) / 2 - np.eye(4)
    Ad = rng.standard_normal((2, 4, 4)) / 3
    tau = np.linspace(0.05, 3.0, 100)
    t = time.perf_counter()
    ch = delay_chart(A, Ad, tau, tau)
    assert time.perf_counter() - t < 30 and ch.converged.all()
