"""Plots read without clipping or washed-out colours: a figure made by ddesys.plot keeps its labels
inside the saved image, and the stability chart scales each sign of the abscissa to its own range."""
import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from ddesys import plot  # noqa: E402
from ddesys.matrix.chart import StabilityChart  # noqa: E402
from ddesys.verification.systems import random_delay_system  # noqa: E402


def _inside(fig, artist, renderer):
    box = artist.get_window_extent(renderer)
    return fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 and fig.bbox.y0 <= box.y0 and box.y1 <= fig.bbox.y1


@pytest.mark.parametrize("make", ["kernel", "freqresp", "roots", "region"])
def test_new_figures_keep_their_labels_inside(make):
    sys_ = random_delay_system(np.random.default_rng(0), 4, 4, 0.01, 256)
    fig = {"kernel": lambda: plot.plot_kernel(sys_, 256), "freqresp": lambda: plot.plot_freqresp(sys_),
           "roots": lambda: plot.plot_roots(random_delay_system(np.random.default_rng(0), 1, 2, 0.1, 16)),
           "region": lambda: plot.plot_stability_region(3, n=21)}[make]()
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    for ax in fig.axes:
        for label in (ax.xaxis.label, ax.yaxis.label, ax.title):
            if label.get_text():
                assert _inside(fig, label, r), (make, label.get_text())
    matplotlib.pyplot.close(fig)


def _chart(absc):
    absc = np.asarray(absc, float)
    ny, nx = absc.shape
    return StabilityChart(x=np.linspace(0, 1, nx), y=np.linspace(0, 1, ny), abscissa=absc, stable=absc < 0,
                          converged=np.ones(absc.shape, bool), n_grid=np.full(absc.shape, 12), xlabel="x",
                          ylabel="y", seconds=0.0)


def _colours(fig, values):
    (cs,) = [c for c in fig.axes[0].collections if hasattr(c, "levels") and c.filled]
    return cs.cmap(cs.norm(np.asarray(values, float))), cs


def test_chart_colours_scale_each_sign_to_its_range():
    """Unstable abscissae of 0.05 beside stable ones of -2: the largest of each sign takes the far end of
    its half of the diverging map (fully red / fully blue), 0 the white middle."""
    a = np.array([[-2.0, -1.0, 0.01], [-0.5, 0.02, 0.05]])
    fig = _chart(a).plot()
    (lo, mid, hi), cs = _colours(fig, [-2.0, 0.0, 0.05])
    np.testing.assert_allclose(hi, cs.cmap(1.0))
    np.testing.assert_allclose(lo, cs.cmap(0.0))
    np.testing.assert_allclose(mid, cs.cmap(0.5), atol=0.02)
    assert 0.0 in cs.levels and cs.levels.min() < -1.0 and cs.levels.max() >= 0.05     # (very negative: clipped)
    assert sum(lv > 0 for lv in cs.levels) >= 5                           # the unstable side has its own levels
    assert len(fig.axes) == 2                                             # and a colour bar
    matplotlib.pyplot.close(fig)


@pytest.mark.parametrize("a", [[[-2.0, -1.0], [-0.5, -0.1]], [[0.1, 0.3], [0.2, 0.05]], [[0.0, 0.0], [0.0, 0.0]]])
def test_chart_of_one_sign_plots(a):
    fig = _chart(a).plot()
    (c,), cs = _colours(fig, [np.max(a)])
    if np.max(a) > 0:
        np.testing.assert_allclose(c, cs.cmap(1.0))                       # all unstable: reds up to the max
    elif np.min(a) < 0:
        np.testing.assert_allclose(_colours(fig, [np.min(a)])[0][0], cs.cmap(0.0))
    matplotlib.pyplot.close(fig)
