"""Plots render (Agg) with titles and labels; the issue's verification script runs and passes."""
import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402

import ddesys  # noqa: E402
from ddesys import plot  # noqa: E402
from verification.systems import random_delay_system  # noqa: E402


def _labelled(fig):
    for ax in fig.axes:
        assert ax.get_xlabel() or ax.get_ylabel()
    assert any(ax.get_title() for ax in fig.axes)


def test_plots_render(tmp_path):
    sys_ = random_delay_system(np.random.default_rng(0), 3, 4, 0.05, 200)
    cont = ddesys.DelaySystem([-0.5 + 1j], [0.3], [1.0], [1.0], 1.0)
    figs = [plot.plot_kernel(sys_, 200), plot.plot_freqresp(sys_), plot.plot_roots(sys_),
            plot.plot_roots(cont), plot.plot_freqresp(cont), plot.plot_stability_region(3, 0.25, n=41)]
    for i, f in enumerate(figs):
        _labelled(f)
        f.savefig(tmp_path / f"{i}.png")
        assert (tmp_path / f"{i}.png").stat().st_size > 1000


def test_kernel_accuracy_script_quick(capsys):
    from verification import kernel_accuracy
    assert kernel_accuracy.main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "PASS" in out and "paper" in out


def test_verification_quick_run(tmp_path):
    """`python -m verification --quick` (issue 4): every check passes and the report is written."""
    import json

    from verification.__main__ import main
    assert main(["--quick", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "results.json").read_text())
    assert len(res["checks"]) == 6 and all(c["passed"] for c in res["checks"])
    report = (tmp_path / "report.md").read_text()
    assert "torch" in res["machine"] and "PASS" in report
    for c in res["checks"]:
        for p in c["plots"]:
            assert (tmp_path / p).stat().st_size > 5000
