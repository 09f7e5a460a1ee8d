"""Control plots and printing a new user can read at default settings (a PI loop with dead time): the
default frequency grid holds the crossovers with a sane phase, the Nyquist plot keeps ``-1`` in view and
counts its encirclements over the whole contour (checked against closed-loop root counts from
python-control's Pade models and closed forms), ``str`` shows the dead time, ``TimeResponse.plot`` draws
one line per output and input."""
import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import ddesys  # noqa: E402
from ddesys.control.freqplot import MAX_CURVE_MAGNITUDE, default_frequency_range, nyquist_response  # noqa: E402
from ddesys.control.margins import default_omega  # noqa: E402
from ddesys.matrix.plot import unwrap_phase  # noqa: E402
from ddesys.plot import pyplot  # noqa: E402

P = ddesys.tf([1.0], [3.0, 1.0], delay=1.0)
C = ddesys.tf([0.8, 0.3], [1.0, 0.0])
G = ddesys.tf([1.0], [1.0, 1.0], delay=1.0)


def _pi_loop():
    return C * P                                        # P first, then C (the series order of the operators)


def _inside(fig, artist, renderer):
    box = artist.get_window_extent(renderer)
    return fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 and fig.bbox.y0 <= box.y0 and box.y1 <= fig.bbox.y1


def test_default_grid_holds_the_crossovers_with_a_sane_phase():
    L = _pi_loop()
    gm, pm, sm, wpc, wgc, wms = ddesys.stability_margins(L)
    w = default_omega(L)
    assert w[0] < wgc / 10 and wpc < w[-1] <= 10 * wpc          # a decade below, a few times past the crossovers
    phase = unwrap_phase(L.freqresp(w)[0, 0])
    assert -720 < phase.min() and phase.max() <= 0
    assert phase[0] == pytest.approx(-90, abs=3)                 # the integrator starts at -90 deg, not -450
    i = np.searchsorted(w, wgc)
    assert phase[i] == pytest.approx(-180 + pm, abs=1.0)         # the unwrapped phase reads the phase margin
    np.testing.assert_array_equal(w, default_frequency_range(L))


def test_default_bode_of_the_pi_loop_is_readable():
    L = _pi_loop()
    _, pm, _, wpc, wgc, _ = ddesys.stability_margins(L)
    fig = L.bode()
    mag_ax, ph_ax = fig.axes[:2]
    w, ph = ph_ax.lines[0].get_data()
    lo, hi = mag_ax.get_xlim()
    assert lo < wgc < hi and lo < wpc < hi
    assert np.min(ph) > -720                                      # not -6000 deg
    assert any(np.allclose(line.get_ydata(), -180) for line in ph_ax.lines[1:])   # the -180 deg reference
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    for ax in fig.axes:
        for label in (ax.xaxis.label, ax.yaxis.label, ax.title):
            if label.get_text():
                assert _inside(fig, label, r), label.get_text()
    pyplot().close(fig)


def test_default_nyquist_of_the_pi_loop_keeps_minus_one_in_view():
    L = _pi_loop()
    fig = L.nyquist()
    ax = fig.axes[0]
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    assert x0 < -1 < x1 and y0 < 0 < y1
    assert max(x1 - x0, y1 - y0) < 4 * MAX_CURVE_MAGNITUDE            # not a vertical line to -15,000
    for line in ax.lines:
        x, y = (np.asarray(v, float) for v in line.get_data())
        ok = np.isfinite(x) & np.isfinite(y)
        assert np.all(np.hypot(x[ok], y[ok]) <= MAX_CURVE_MAGNITUDE * (1 + 1e-9))
    assert any("drawn at radius" in (line.get_label() or "") for line in ax.lines)   # the clipped part is marked
    assert fig.encirclements == 0 and "0 clockwise encirclements" in ax.get_title()
    assert fig.nyquist_response.closed_loop_rhp_roots == 0
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    for label in (ax.xaxis.label, ax.yaxis.label, ax.title):
        assert _inside(fig, label, r), label.get_text()
    pyplot().close(fig)


def _pade_rhp_roots(L, order=14):
    """Closed-loop roots in the open right half-plane of the loop with every delay a Pade model (python-control)."""
    import control

    cl = control.feedback(L.to_control(pade_order=order), 1)
    return int(np.sum(cl.poles().real > 1e-7))


LOOPS = {
    "pi": lambda: _pi_loop(),                                                  # integrator on the axis
    "pi x 12": lambda: 12.0 * _pi_loop(),
    "fopdt k=3": lambda: 3.0 * G,                                              # past the critical gain 2.26
    "fopdt k=10": lambda: 10.0 * G,                                            # past the second one, 8.04
    "unstable plant": lambda: 2.0 * ddesys.tf([1.0], [1.0, -1.0], delay=0.2),  # P = 1, stabilized: N = -1
    "unstable plant, long delay": lambda: 2.0 * ddesys.tf([1.0], [1.0, -1.0], delay=1.0),
    "oscillator": lambda: 0.5 * ddesys.tf([1.0], [1.0, 0.0, 1.0], delay=0.1),    # poles at +-i on the axis
    "double integrator": lambda: ddesys.tf([1.0, 0.5], [1.0, 0.0, 0.0], delay=0.3),
    "internal delay": lambda: 5.0 * ddesys.feedback(ddesys.tf([1.0], [1.0, 1.0], delay=0.5))
    * ddesys.tf([1.0], [1.0, 0.0], delay=0.3),
}


@pytest.mark.parametrize("name", list(LOOPS))
def test_encirclements_match_the_closed_loop_root_count(name):
    pytest.importorskip("control")
    L = LOOPS[name]()
    r = nyquist_response(L)
    assert r.count is not None, r.reason
    assert r.closed_loop_rhp_roots == r.count + r.open_loop_rhp_poles
    assert r.closed_loop_rhp_roots == _pade_rhp_roots(L)


@pytest.mark.parametrize("k, n", [(2.0, 0), (2.3, 2), (8.0, 2), (8.1, 4)])
def test_encirclements_of_the_fopdt_loop_closed_form(k, n):
    """``k e^{-s} / (s + 1)`` crosses the negative axis at ``|L| = k / sqrt(1 + w^2)``, ``w + atan(w) = (2j + 1) pi``:
    ``-1`` is encircled twice for each such crossing beyond it (critical gains 2.2618 and 8.0411)."""
    crit = []
    from scipy.optimize import brentq

    for j in range(2):
        w = brentq(lambda x: x + np.arctan(x) - (2 * j + 1) * np.pi, 1e-6, 100)
        crit.append(np.sqrt(1 + w * w))
    np.testing.assert_allclose(crit, [2.2618, 8.0411], atol=1e-4)
    assert nyquist_response(k * G).count == n == 2 * sum(k > c for c in crit)


def test_nyquist_with_axis_poles_bridges_them_on_the_circle():
    fig = LOOPS["oscillator"]().nyquist()
    ax = fig.axes[0]
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    assert x0 < -1 < x1 and y0 < 0 < y1 and max(x1 - x0, y1 - y0) < 10
    assert fig.encirclements == 2
    pyplot().close(fig)


def test_str_shows_the_transfer_function_and_its_dead_time():
    s = str(P)
    assert "exp(-1 s)" in s and "3 s + 1" in s and "1 input, 1 output" in s
    assert repr(P) == "DelayIOSystem(n_states=1, n_inputs=1, n_outputs=1, delays=[1.0])"
    s = str(_pi_loop())
    assert "0.8 s + 0.3" in s and "3 s^2 + s" in s and "exp(-1 s)" in s
    s = str(ddesys.tf([1.0], [1.0, 1.0], delay=1.0) + ddesys.tf([1.0], [1.0, 2.0], delay=0.5))
    assert "exp(-0.5 s)" in s and "exp(-1 s)" in s and "s + 2" in s
    s = str(ddesys.ss([[-1.0, 0.5], [0.0, -2.0]], np.eye(2), np.eye(2)))
    assert "Input 1 to output 0:" in s and "s^2 + 3 s + 2" in s
    s = str(ddesys.feedback(_pi_loop()))
    assert "internal delays" in s and "[1]" in s and len(s.splitlines()) <= 4
    assert str(ddesys.tf([2.0], [1.0])).splitlines()[-1].strip() == "2"


@pytest.mark.parametrize("kind", ["step", "simulate"])
def test_time_response_plot_draws_one_line_per_output_and_input(kind):
    t = np.linspace(0.0, 10.0, 201)
    S = ddesys.ss([[-1.0, 0.5], [0.0, -2.0]], np.eye(2), [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    if kind == "step":
        r, shape = S.step(t), (3, 2)
    else:
        r, shape = S.simulate(lambda tt: np.vstack([np.sin(tt), np.ones_like(tt)]), t), (3, 1)
    fig = r.plot()
    assert len(fig.axes) == shape[0] * shape[1]
    for k, ax in enumerate(fig.axes):
        assert len(ax.lines) == 1
        i, j = divmod(k, shape[1])
        x, y = ax.lines[0].get_data()
        np.testing.assert_array_equal(y, r.y[i, j] if r.y.ndim == 3 else r.y[i])
    assert fig.axes[0].get_title() == ("input u0" if shape[1] > 1 else "response")
    assert fig.axes[0].get_ylabel() == "y0" and fig.axes[-1].get_xlabel().startswith("t")
    pyplot().close(fig)


def test_time_response_plot_refuses_the_wrong_axes():
    r = G.step(np.linspace(0.0, 3.0, 31))
    fig, axes = pyplot().subplots(1, 2)
    with pytest.raises(ValueError, match="axes"):
        r.plot(axes=axes)
    pyplot().close(fig)
