"""experiments/synthetic metrics: accuracy by output position and lag bucket against a loop over the
sequences, sample-efficiency numbers (accuracy within a step budget, steps to an accuracy) by hand,
and the report's tables for them."""
import numpy as np
import pytest
import torch

from ddesys.experiments.synthetic import report as R
from ddesys.experiments.synthetic.tasks import IGNORE, preset
from ddesys.experiments.synthetic.train import accuracy, evaluate


class Oracle(torch.nn.Module):
    """Predicts the right token where ``mask(b, position)`` says so and token 0 elsewhere (the labels are
    looked up from a table, so no training is involved)."""

    def __init__(self, tokens, labels, wrong):
        super().__init__()
        self.table = {tuple(t.tolist()): (l, w) for t, l, w in zip(tokens, labels, wrong)}
        self.V = 16

    def forward(self, x):
        out = torch.zeros(*x.shape, self.V)
        for b, row in enumerate(x):
            lab, wrong = self.table[tuple(row.tolist())]
            pred = torch.where((lab != IGNORE) & ~wrong, lab, torch.zeros_like(lab))
            out[b].scatter_(1, pred[:, None], 1.0)
        return out


def test_accuracy_by_position_and_lag_against_a_loop():
    task = preset("copy", "variable", "smoke")                       # T = 4, P in [6, 12]
    tokens, labels, lags = (torch.from_numpy(a) for a in task.sample(40, np.random.default_rng(0)))
    wrong = torch.from_numpy(np.random.default_rng(1).random(labels.shape) < 0.4)
    model = Oracle(tokens, labels, wrong)
    got = evaluate(model, tokens, labels, lags, task, chunk=7)
    T, mid = task.T, (task.P_min + task.P_max) // 2
    hit = np.zeros((40, T), dtype=bool)                              # by hand: output i of sequence b
    for b in range(40):
        for i in range(T):
            pos = T + int(lags[b]) + i
            hit[b, i] = labels[b, pos] != IGNORE and not wrong[b, pos]
    assert got["acc"] == pytest.approx(hit.mean()) and got["acc"] == accuracy(model, tokens, labels)
    assert got["by_position"] == pytest.approx(hit.mean(0).tolist())
    short = lags.numpy() <= mid
    assert got["by_lag"]["bounds"] == [[6, mid], [mid + 1, 12]] and got["by_lag"]["n"] == [short.sum(), (~short).sum()]
    assert got["by_lag"]["acc"] == pytest.approx([hit[short].mean(), hit[~short].mean()])
    fixed = preset("copy", "fixed", "smoke")
    t2, l2, p2 = (torch.from_numpy(a) for a in fixed.sample(8, np.random.default_rng(2)))
    assert "by_lag" not in evaluate(Oracle(t2, l2, torch.zeros_like(l2, dtype=torch.bool)), t2, l2, p2, fixed)


def _run(seed, accs, lr=1e-3, status="done"):
    task = preset("copy", "variable", "smoke").to_dict()
    return {"key": f"k{seed}{lr}", "status": status, "n_params": 10, "best_acc": max(accs),
            "config": {"task": task, "family": "ds4d", "width": 8, "lr": lr, "seed": seed, "steps": 400},
            "curve": [{"step": 100 * (i + 1), "loss": 1.0, "val_acc": a} for i, a in enumerate(accs)],
            "by_position": [0.5, 1.0, 0.0, 0.5], "by_lag": {"bounds": [[6, 9], [10, 12]], "acc": [0.8, 0.4]}}


def test_sample_efficiency_by_hand():
    r = _run(0, [0.5, 0.92, 0.9, 0.97])
    assert R.acc_within(r, 50) is None and R.acc_within(r, 100) == 0.5 and R.acc_within(r, 300) == 0.92
    assert R.steps_to(r, 0.90) == 200 and R.steps_to(r, 0.95) == 400 and R.steps_to(r, 0.99) is None
    runs = [r, _run(1, [0.91, 0.93, 0.94, 0.94]), _run(2, [0.2, 0.3, 0.4, 0.5], lr=1.0),
            _run(3, [0.1], status="diverged")]
    ((task, fam, steps, acc, reach),) = R.efficiency_table(runs)     # best lr: 1e-3; the diverged run left out
    assert (task, fam, steps) == ("copy-variable", "ds4d", 400)
    assert acc == ["0.705 +- 0.205", "0.925 +- 0.005", "0.955 +- 0.015"]     # budgets 100, 200, 400
    assert reach == ["150 +- 50", "400 +- 0 (1/2 seeds)"]
    assert R.efficiency_table([_run(0, [0.1, 0.2])])[0][4] == ["not reached", "not reached"]
    (lag,) = R.lag_table(runs)
    assert lag[3] == ["0.800 +- 0.000", "0.400 +- 0.000"]
    (pos,) = R.position_table(runs)
    assert pos[2] == [(1, 1), (2, 2), (3, 3), (4, 4)] and pos[3][1] == "1.000 +- 0.000"
    text = R.markdown(runs, {"scale": "smoke", "commands": ["a", "b"]})
    assert "steps to 90%" in text and "not reached" not in text and "## Diverged runs" in text
    assert "| copy-variable | ds4d | P in [6, 9] | 0.800 +- 0.000 |" in text and "`a`; `b`" in text


def test_clock_figure_only_for_runs_that_record_clocks(tmp_path, monkeypatch):
    """``clocks.png`` and its line in the report come with runs whose curve records learned clocks (one
    panel each, a solid line per layer at the padding and a dotted one elsewhere, plus the accuracy)."""
    plain = [_run(0, [0.5, 0.9])]
    R.plot_clocks(plain, tmp_path / "none.png")
    assert not (tmp_path / "none.png").exists() and "clocks.png" not in R.markdown(plain, {"scale": "smoke"})
    tick = _run(1, [0.5, 0.9])
    tick["config"]["family"] = "s4d-tick"
    for p, (pad, tok) in zip(tick["curve"], [(0.9, 1.0), (0.0, 0.98)]):
        p["clock"] = [{"pad": pad, "tokens": tok}, {"pad": 1.0, "tokens": 1.0}]
    assert R.clocked_runs(plain + [tick]) == [tick]
    drawn = []
    import matplotlib.axes
    orig = matplotlib.axes.Axes.plot
    monkeypatch.setattr(matplotlib.axes.Axes, "plot", lambda self, x, y, *a, **k: drawn.append((list(x), list(y)))
                        or orig(self, x, y, *a, **k))
    R.plot_clocks(plain + [tick], tmp_path / "clocks.png")
    assert (tmp_path / "clocks.png").stat().st_size > 0
    assert drawn == [([100, 200], [0.9, 0.0]), ([100, 200], [1.0, 0.98]), ([100, 200], [1.0, 1.0]),
                     ([100, 200], [1.0, 1.0]), ([100, 200], [0.5, 0.9])]
    assert "![learned clocks](clocks.png)" in R.markdown(plain + [tick], {"scale": "smoke"})


def test_a_setting_that_tells_groups_apart_names_the_family_on_every_task():
    """A family run with two values of a setting on one task is labelled by that setting on every task
    of the file, so that a group run with one value alone reads as that value, not as the family."""
    copy = _run(0, [0.5])
    other = _run(1, [0.5])
    other["key"], other["config"]["steps"] = "k-other", 800
    fixed = _run(2, [0.5])
    fixed["key"], fixed["config"]["task"] = "k-fixed", preset("copy", "fixed", "smoke").to_dict()
    fixed["config"]["steps"] = 800
    labels = sorted(R._groups([copy, other, fixed]))
    assert sorted(m for _, m in labels) == ["ds4d (steps=400)", "ds4d (steps=800)", "ds4d (steps=800)"]
    assert sorted(m for _, m in R._groups([copy, fixed])) == ["ds4d", "ds4d"]   # no task varies: the family
