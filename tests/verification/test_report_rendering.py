"""What the verification report prints: check 1's M column is the FFT length each row's forward used (the
layer's own ``DS4D.contour`` for that row's settings, seen at the synthesis itself), the paper's row is
labelled informational, no cell reads ``None``, and the stability plot's title carries the number of
its table row. The checks run directly at a tiny size (the CLI end to end is test_plot_and_scripts.py)."""
import json

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from ddesys import nn as dnn  # noqa: E402
from ddesys.contour import next_pow2  # noqa: E402
from ddesys.verification import __main__ as vmain  # noqa: E402
from ddesys.verification import checks_model, checks_system  # noqa: E402

TINY = dict(Ls=[128, 256], seeds=1, H=8, stab_samples=60, decode_H=8, decode_lmax=256, decode_len=64,
            decode_positions=[64, 256])
#: check 1's rows: setting -> (input dtype, eps, kernel_dtype), the settings the check states
SETTINGS = {checks_model.PAPER: (torch.float32, 1e-3, torch.float32),
            checks_model.AUTO32: (torch.float32, "auto", torch.float64),
            checks_model.AUTO64: (torch.float64, "auto", torch.float64)}


@pytest.fixture(scope="module")
def check1(tmp_path_factory):
    """Check 1 at a tiny size, with the FFT length of every kernel synthesis its forwards ran recorded
    by (L, input dtype, eps): what the forward actually used."""
    from ddesys.nn import ds4d as ds4d_mod
    seen, key = {}, {}
    kernel, synth = dnn.DS4D.kernel, ds4d_mod.synthesize_kernel

    def spy_kernel(self, L, eps=None, M=None, out_dtype=None, branches=True):
        key["now"] = (L, out_dtype, self.eps if eps is None else eps)
        return kernel(self, L, eps=eps, M=M, out_dtype=out_dtype, branches=branches)

    def spy_synth(lam, mu, cb, k, alpha, L, M, *a, **kw):
        seen.setdefault(key["now"], set()).add(int(M))
        return synth(lam, mu, cb, k, alpha, L, M, *a, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dnn.DS4D, "kernel", spy_kernel)
        mp.setattr(ds4d_mod, "synthesize_kernel", spy_synth)
        res = checks_model.check_fft_vs_recurrent(TINY, tmp_path_factory.mktemp("c1"), lambda *a: None)
    return res, seen


def test_check1_M_is_the_length_the_forward_used(check1):
    res, seen = check1
    assert res["passed"], res["rows"]
    rows = [r for r in res["rows"] if r["setting"] in SETTINGS]
    assert len(rows) == 3 * len(TINY["Ls"])
    for r in rows:
        dtype, eps, kdt = SETTINGS[r["setting"]]
        L = r["L"]
        assert seen[(L, dtype, eps)] == {r["M"]}, (r, seen)            # the synthesis itself ran at M
        layer = dnn.DS4D(TINY["H"], 64, l_max=L, eps=eps, kernel_dtype=kdt)
        assert r["M"] == layer.contour(L, out_dtype=dtype)[0], r         # and the layer says so
        # the documented rule (docs/theory.md §5.4): the default float32 forward synthesizes in float64 at
        # nextpow2(L); the paper's eps and float64 at nextpow2(2L)
        assert r["M"] == (next_pow2(L) if r["setting"] == checks_model.AUTO32 else next_pow2(2 * L)), r
    assert all(r["M"] is None for r in res["rows"] if r["setting"] == checks_model.ANCHOR)


def test_check1_labels_the_papers_row_informational(check1):
    res, _ = check1
    crit = {r["setting"]: r["criterion"] for r in res["rows"]}
    assert crit[checks_model.PAPER] == "informational (paper's setting)"
    assert all("<=" in c for s, c in crit.items() if s != checks_model.PAPER)
    assert any("informational" in n and "not judged" in n for n in res["notes"])


@pytest.fixture(scope="module")
def disc(tmp_path_factory):
    """Check 4 (its result and its figure, kept open to inspect)."""
    import matplotlib.pyplot as plt
    figs = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plt, "close", figs.append)
        res = checks_system.check_discretization({}, tmp_path_factory.mktemp("c4"), lambda *a: None)
    (fig,) = figs
    return res, fig


def _rendered(tmp_path, results):
    for r in results:
        r.setdefault("seconds", 0.5)
    info = dict(date="2026-01-01T00:00:00+00:00", platform="test", cpus=None)
    vmain.write_report(tmp_path, "quick", info, results, 1.0)
    return (tmp_path / "report.md").read_text(), json.loads((tmp_path / "results.json").read_text())


def _table_rows(md, first_header):
    lines = md.splitlines()
    i = next(n for n, ln in enumerate(lines) if ln.startswith(f"| {first_header} |"))
    head = [c.strip() for c in lines[i].strip("|").split(" | ")]
    out = []
    for ln in lines[i + 2:]:
        if not ln.startswith("|"):
            break
        out.append(dict(zip(head, [c.strip() for c in ln.strip().strip("|").split(" | ")])))
    return out


def test_rendered_report_has_no_none_and_marks_rows(tmp_path, check1, disc):
    res, _ = check1
    blank = dict(name="A check with empty cells", passed=True, plots=[], setup="s", criterion="c",
                 rows=[dict(case="a | b", value=None, bound=float("nan")), dict(case="c", value=1.0)])
    md, payload = _rendered(tmp_path, [dict(res), dict(disc[0]), blank])
    assert "None" not in md and "nan" not in md.lower()
    t1 = _table_rows(md, "L")
    assert {r["criterion"] for r in t1 if r["setting"] == checks_model.PAPER} == {"informational (paper's setting)"}
    assert all(r["M"] == "\u2014" for r in t1 if r["setting"] == checks_model.ANCHOR)
    assert all(r["M"].isdigit() for r in t1 if r["setting"] != checks_model.ANCHOR)
    orders = [r["order"] for r in _table_rows(md, "method")]
    assert orders.count("\u2014") == 2 and len(orders) == 10               # the first dt of each method
    # every table with a dash says what it means
    sections = md.split("\n## ")[2:]
    assert len(sections) == 3
    for sec in sections:
        table = [ln for ln in sec.splitlines() if ln.startswith("|")]
        if any("| \u2014 |" in ln or ln.endswith("| \u2014 |") for ln in table):
            assert any(ln.startswith("*Note:*") and "\u2014" in ln for ln in sec.splitlines()), sec
    assert "| a \\| b |" in md                                          # a literal | does not split a cell
    assert "cpus \u2014" in md
    # results.json keeps the raw values (None stays null)
    assert payload["checks"][2]["rows"][0]["value"] is None


def test_stability_plot_title_matches_its_table_row(tmp_path):
    import re

    from ddesys import plot as dplot
    res = checks_system.check_stability(TINY, tmp_path, lambda *a: None)
    row = next(r for r in res["rows"] if r["quantity"].startswith("plot (left)"))
    fig = dplot.plot_stability_region(checks_system.GRID_K, 0.0, n=checks_system.GRID_N)
    pct = float(re.search(r"(\d+)%", fig.axes[0].get_title()).group(1))   # the library's own count
    assert pct == round(100 * row["value"])
    assert any("two populations" in n.lower() for n in res["notes"])
    assert (tmp_path / "stability.png").stat().st_size > 5000


def test_discretization_ticks_do_not_collide(disc):
    fig = disc[1]
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    ax = fig.axes[0]
    boxes = [t.get_window_extent(r) for t in ax.get_xticklabels() + ax.get_xminorticklabels()
             if t.get_visible() and t.get_text() and ax.get_xlim()[0] <= t.get_position()[0] <= ax.get_xlim()[1]]
    assert len(boxes) >= 4
    boxes.sort(key=lambda b: b.x0)
    assert all(a.x1 <= b.x0 for a, b in zip(boxes, boxes[1:])), [(b.x0, b.x1) for b in boxes]
    for label in (ax.xaxis.label, ax.yaxis.label, ax.title):
        assert fig.bbox.contains(*label.get_window_extent(r).min) and fig.bbox.contains(*label.get_window_extent(r).max)
    np.testing.assert_equal(sorted(t.get_position()[0] for t in ax.get_xticklabels()),
                            [0.005, 0.01, 0.02, 0.04, 0.08])
