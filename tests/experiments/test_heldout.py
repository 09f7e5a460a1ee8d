"""The held-out protocol of the synthetic experiment: validation chooses the learning rate and each run's
checkpoint, the test set chooses nothing, and the report prints test accuracy at the chosen checkpoint and
at the last step. The runs here are made up so that the test set would choose differently: a report
that selected on test data would print other numbers."""
from __future__ import annotations

import numpy as np
import pytest

from ddesys.experiments.synthetic import report

TASK = {"name": "copy", "kind": "copy", "T": 4, "P_min": 8, "P_max": 8, "vocab": 10, "data_max": 8,
        "window": 1, "length": 16, "protocol": "fixed"}


def _run(lr, seed, curve):
    """A finished run whose curve is ``[(step, val_acc, test_acc), ...]`` (test None: not measured)."""
    pts = [{"step": s, "loss": 1.0, "val_acc": v, **({} if t is None else {"test_acc": t})} for s, v, t in curve]
    best = max(pts, key=lambda p: p["val_acc"])
    cfg = {"task": TASK, "family": "ds4d", "width": 8, "n_layers": 2, "d_state": 8, "lr": lr, "dt_lr": 1e-4,
           "seed": seed, "steps": 30, "batch": 4, "eval_every": 10, "val_size": 16, "test_size": 16}
    return {"key": f"k{lr}{seed}", "config": cfg, "status": "done", "n_params": 100, "curve": pts,
            "best_acc": best["val_acc"], "best_step": best["step"]}


# lr 1e-3: higher validation, lower test; lr 3e-3: lower validation, higher test
RUNS = [_run(1e-3, 0, [(10, 0.5, 0.9), (20, 0.8, 0.6), (30, 0.7, 0.95)]),
        _run(1e-3, 1, [(10, 0.9, 0.5), (20, 0.9, 0.99), (30, 0.6, 0.7)]),
        _run(3e-3, 0, [(10, 0.6, 1.0), (20, 0.7, 1.0), (30, 0.7, 1.0)]),
        _run(3e-3, 1, [(10, 0.6, 1.0), (20, 0.6, 1.0), (30, 0.6, 1.0)])]


def test_the_checkpoint_is_chosen_on_validation():
    h = report.held_out(RUNS[0]["curve"])
    assert h == {"step": 20, "val": 0.8, "test": 0.6, "val_final": 0.7, "test_final": 0.95}
    h = report.held_out(RUNS[1]["curve"])                     # a tie on validation: the first evaluation
    assert (h["step"], h["test"]) == (10, 0.5)
    assert report.held_out([]) is None
    old = report.held_out([{"step": 5, "val_acc": 0.3}])      # a run from before the held-out protocol
    assert old["test"] is None and old["test_final"] is None


def test_the_report_selects_on_validation_and_reports_test():
    (row,) = report.heldout_table(RUNS)
    task, fam, lr, n_lrs, n_seeds, cells = row
    assert (lr, n_lrs, n_seeds) == (1e-3, 2, 2)               # the rate with the better validation
    val, test, val_final, test_final = cells
    assert val == f"{np.mean([0.8, 0.9]):.3f} +- {np.std([0.8, 0.9]):.3f}"
    assert test == f"{np.mean([0.6, 0.5]):.3f} +- {np.std([0.6, 0.5]):.3f}"   # not 0.95 / 0.99 (test's picks)
    assert test_final == f"{np.mean([0.95, 0.7]):.3f} +- {np.std([0.95, 0.7]):.3f}"
    seeds = report.seed_table(RUNS)
    assert [(s, h["step"], h["test"]) for *_, s, h in seeds] == [(0, 20, 0.6), (1, 10, 0.5)]
    md = report.markdown(RUNS, {"scale": "test", "command": "made up"})
    assert "| copy | ds4d | 0.001 | 2 | 0.850 +- 0.050 | 0.550 +- 0.050 |" in md
    assert "1.000" not in md.split("## Best validation accuracy")[0]       # lr 3e-3's test never shows


@pytest.mark.parametrize("measured", [0, 1])
def test_runs_without_test_scores_say_so(measured):
    runs = [_run(1e-3, s, [(10, 0.5, 0.9 if s < measured else None)]) for s in range(2)]
    (row,) = report.heldout_table(runs)
    test = row[-1][1]
    assert test == ("not measured" if measured == 0 else "0.900 +- 0.000 (1/2 runs)")


def test_the_sweep_on_the_test_set_reads_each_rate_at_its_validation_checkpoints():
    lrs, rows = report.heldout_lr_table(RUNS)
    assert lrs == [1e-3, 3e-3]
    (task, fam, chosen, cells), = rows
    assert chosen == 1e-3                                     # still chosen on validation, not on these cells
    assert cells == [f"{np.mean([0.6, 0.5]):.3f} +- {np.std([0.6, 0.5]):.3f}", "1.000 +- 0.000"]
    md = report.markdown(RUNS, {"scale": "test", "command": "made up"})
    assert "| copy | ds4d | 0.001 | 0.550 +- 0.050 | 1.000 +- 0.000 |" in md
    unswept = [r for r in RUNS if r["config"]["lr"] == 1e-3]
    assert report.heldout_lr_table(unswept)[1] == []          # one rate: no sweep to show
    old = [_run(lr, 0, [(10, 0.5, None)]) for lr in (1e-3, 3e-3)]
    assert report.heldout_lr_table(old)[1] == []              # no test scores: nothing to read


def test_a_methods_settings_are_compared_on_validation_over_the_tasks_all_of_them_ran():
    other = {**TASK, "name": "copy2", "P_min": 4, "P_max": 4}

    def run(setting, task, seed, val, test):
        r = _run(1e-3, seed, [(10, val, test)])
        r["config"] = {**r["config"], "task": task, "steps": setting}
        return r
    runs = [run(30, TASK, 0, 0.8, 0.1), run(30, TASK, 1, 0.6, 0.1), run(30, other, 0, 0.4, 0.1),
            run(60, TASK, 0, 0.5, 1.0), run(60, other, 0, 0.5, 1.0), run(90, TASK, 0, 0.9, 0.0)]
    (fam, tasks, common, rows), = report.settings_table(runs)
    assert fam == "ds4d" and tasks == ["copy", "copy2"] and common == ["copy"]
    got = {label: (cells, m) for label, cells, m in rows}
    assert got["ds4d (steps=30)"] == (["0.700 (2)", "0.400 (1)"], pytest.approx(np.mean([0.7])))
    assert got["ds4d (steps=60)"][1] == pytest.approx(0.5)    # validation, not the test's 1.0
    assert got["ds4d (steps=90)"] == (["0.900 (1)", "-"], pytest.approx(0.9))   # copy2: not every setting ran
    md = report.markdown(runs, {"scale": "test", "command": "made up"})
    assert "## ds4d: its settings compared on validation" in md and "every setting ran (copy)" in md
    assert "| ds4d (steps=30) | 0.700 (2) | 0.400 (1) | 0.700 |" in md
    assert report.settings_table(RUNS) == []                  # one setting: nothing to compare
