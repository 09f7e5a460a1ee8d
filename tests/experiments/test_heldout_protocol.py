"""The held-out protocol (issue 50) of the delay task, the general benchmarks and the S4 recipe: the
validation set chooses the learning rate and each run's checkpoint (step or epoch), the test set chooses
nothing, and every report prints the test score at the validation-chosen checkpoint and at the last one.
The runs here are made up so that the test set would choose differently: a report that selected on test
data would print other numbers. Records written before the protocol still load and say "not measured";
configurations built before it keep their keys. (The synthetic experiment's: test_heldout.py.)"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ddesys.experiments import s4_recipe
from ddesys.experiments.delay import report as delay_report
from ddesys.experiments.delay import tables as delay_tables
from ddesys.experiments.delay.data import Task
from ddesys.experiments.delay.models import Arch, ModelSpec
from ddesys.experiments.delay.train import RunConfig as DelayRun
from ddesys.experiments.delay.train import held_out_set, run_key, train_run, validation_set
from ddesys.experiments.general import report as general_report
from ddesys.experiments.general.data import Dataset, Split
from ddesys.experiments.general.train import VAL_FRACTION, VAL_SEED, data_info, with_validation
from ddesys.experiments.general.train import RunConfig as GeneralRun

ROOT = Path(__file__).parents[2]
DOCS = ROOT / "docs" / "experiments"


def ms(values, fmt="{:.3f}"):
    return f"{fmt.format(np.mean(values))} +- {fmt.format(np.std(values))}"


# ------------------------------------------------------------------------------------------ delay
TASK = Task(64, (16,), 100.0)


def _delay_run(lr, seed, curve, test_size=4):
    """A finished delay run whose curve is ``[(step, val, test), ...]`` of relative RMSE (lower is better;
    test None: not measured)."""
    cfg = DelayRun(TASK, Arch(ModelSpec("s4d")), 8, lr=lr, seed=seed, steps=30, eval_every=10,
                   val_size=4, test_size=test_size).to_dict()
    pts = [{"step": s, "loss": 1.0, "val_rel_rmse": v, "by_lag": [v], **({} if t is None else {"test_rel_rmse": t})}
           for s, v, t in curve]
    best = min(pts, key=lambda p: p["val_rel_rmse"])
    return {"key": run_key(cfg), "config": cfg, "status": "done", "n_params": 100, "curve": pts,
            "rel_rmse": pts[-1]["val_rel_rmse"], "by_lag": pts[-1]["by_lag"], "best_rel_rmse": best["val_rel_rmse"],
            "best_step": best["step"], "seconds": 1.0, "diagnosis": {}}


# lr 1e-3: lower validation error, higher test error; lr 3e-3: higher validation error, far lower test error
DELAY_RUNS = [_delay_run(1e-3, 0, [(10, 0.5, 0.1), (20, 0.2, 0.4), (30, 0.3, 0.05)]),
              _delay_run(1e-3, 1, [(10, 0.1, 0.5), (20, 0.1, 0.01), (30, 0.4, 0.3)]),
              _delay_run(3e-3, 0, [(10, 0.4, 0.007), (20, 0.4, 0.007), (30, 0.4, 0.007)]),
              _delay_run(3e-3, 1, [(10, 0.45, 0.007), (20, 0.45, 0.007), (30, 0.45, 0.007)])]


def test_delay_checkpoint_is_chosen_on_validation():
    h = delay_tables.held_out(DELAY_RUNS[0]["curve"])
    assert h == {"step": 20, "val": 0.2, "test": 0.4, "val_final": 0.3, "test_final": 0.05}
    h = delay_tables.held_out(DELAY_RUNS[1]["curve"])                  # a tie on validation: the first
    assert (h["step"], h["test"]) == (10, 0.5)
    assert delay_tables.held_out([]) is None
    old = delay_tables.held_out([{"step": 5, "val_rel_rmse": 0.3}])    # a run from before the protocol
    assert old["test"] is None and old["test_final"] is None


def test_delay_report_selects_on_validation_and_reports_test():
    (row,) = delay_tables.heldout_table(DELAY_RUNS)
    task, label, width, lr, n_lrs, n_seeds, cells = row
    assert (label, lr, n_lrs, n_seeds) == ("s4d", 1e-3, 2, 2)         # the rate with the lower validation error
    val, test, val_final, test_final = cells
    assert val == ms([0.2, 0.1]) and test == ms([0.4, 0.5])           # not 0.01 / 0.05 (the test set's picks)
    assert val_final == ms([0.3, 0.4]) and test_final == ms([0.05, 0.3])
    seeds = delay_tables.seed_table(DELAY_RUNS)
    assert [(s, h["step"], h["test"]) for *_, s, h in seeds] == [(0, 20, 0.4), (1, 10, 0.5)]
    md = delay_report.markdown(DELAY_RUNS, {"scale": "test", "command": "made up"})
    held = md.split("## Relative RMSE at the end of training")[0]
    assert f"| {TASK.name} | s4d | 8 | 0.001 | 2 | 0.150 +- 0.050 | 0.450 +- 0.050 | 0.350 +- 0.050 | " \
           f"0.175 +- 0.125 | 2 |" in held
    assert f"| {TASK.name} | s4d | 0.001 | 0 | 20 | 0.200 | 0.400 | 0.300 | 0.050 |" in held     # per seed
    assert "0.007" not in held and "Test not measured" not in held    # lr 3e-3's test scores never show


def test_delay_runs_without_test_scores_say_so():
    old = [_delay_run(1e-3, s, [(10, 0.5, None), (20, 0.4, None)], test_size=None) for s in range(2)]
    (row,) = delay_tables.heldout_table(old)
    assert row[-1] == ["0.400 +- 0.000", "not measured", "0.400 +- 0.000", "not measured"]
    assert "**Test not measured**" in delay_report.markdown(old, {"scale": "test"})
    new = _delay_run(1e-3, 0, [(10, 0.5, 0.9), (20, 0.4, 0.8)])          # beside them: another configuration
    rows = delay_tables.heldout_table(old + [new])
    assert [(r[1], r[5], r[-1][1]) for r in rows] == [("s4d [test_size=None]", 2, "not measured"),
                                                      ("s4d [test_size=4]", 1, "0.800 +- 0.000")]
    assert "**Test not measured**" not in delay_report.markdown(old + [new], {"scale": "test"})


def test_delay_old_configs_keep_their_keys_and_new_ones_name_the_test_set():
    data = json.loads((DOCS / "delay" / "results.json").read_text())
    for r in data["runs"]:
        cfg = DelayRun.from_dict(r["config"])
        assert cfg.test_size is None and list(cfg.to_dict()) == list(r["config"])
        assert cfg.to_dict() == r["config"] and cfg.key() == r["key"]
    new = DelayRun.from_dict({**data["runs"][0]["config"], "test_size": 32})
    assert new.to_dict()["test_size"] == 32 and new.key() != data["runs"][0]["key"]
    assert DelayRun.from_dict(json.loads(json.dumps(new.to_dict()))).key() == new.key()
    with pytest.raises(ValueError, match="test_size"):
        DelayRun(TASK, Arch(ModelSpec("s4d")), 8, test_size=0)


def test_delay_training_scores_a_test_set_that_chooses_nothing():
    vx, _ = validation_set(TASK, 4)
    tx, _ = held_out_set(TASK, 4)
    assert not np.allclose(vx.numpy(), tx.numpy())                     # other signals than the validation set's
    cfg = DelayRun(TASK, Arch(ModelSpec("s4d"), d_state=8), 6, steps=4, batch=2, eval_every=2, val_size=4,
                   test_size=4)
    res = train_run(cfg)
    assert all(isinstance(p["test_rel_rmse"], float) for p in res["curve"]) and res["config"]["test_size"] == 4
    assert delay_tables.held_out(res["curve"])["step"] == res["best_step"]
    assert res["best_rel_rmse"] == min(p["val_rel_rmse"] for p in res["curve"])


def test_the_committed_delay_report_says_test_was_not_measured():
    text = (DOCS / "delay" / "report.md").read_text()
    assert "**Test not measured**" in text and "| test at the chosen step |" in text


# ------------------------------------------------------------------------------------------ general
def _general_run(lr, seed, curve, metric="acc", val=True):
    """A finished general run whose curve is ``[(epoch, val, test), ...]`` (``val=False``: no validation
    scores, a run from before the protocol on a data set without a split)."""
    carve = {"val_fraction": VAL_FRACTION, "val_seed": VAL_SEED} if val else {}
    cfg = GeneralRun(width=8, n_layers=1, lr=lr, seed=seed, epochs=len(curve), **carve).to_dict()
    pts = [{"epoch": e, "train_loss": 1.0, "test_loss": 1.0, f"test_{metric}": t,
            **({f"val_{metric}": v} if val else {})} for e, v, t in curve]
    r = {"key": f"k{lr}{seed}{metric}", "task": "made-up", "config": cfg, "status": "done", "n_params": 100,
         "curve": pts, f"final_{metric}": pts[-1][f"test_{metric}"], "seconds": 1.0,
         "data": {"n_train": 90, "n_test": 20, "length": 8, **({"n_val": 10} if val else {})}}
    if metric != "acc":
        r["metric"] = metric
    return r


# lr 1e-3: higher validation accuracy, lower test accuracy; lr 3e-3: lower validation, test 0.987 throughout
GENERAL_RUNS = [_general_run(1e-3, 0, [(1, 0.5, 0.9), (2, 0.8, 0.6), (3, 0.7, 0.95)]),
                _general_run(1e-3, 1, [(1, 0.9, 0.5), (2, 0.9, 0.99), (3, 0.6, 0.7)]),
                _general_run(3e-3, 0, [(1, 0.6, 0.987), (2, 0.7, 0.987), (3, 0.7, 0.987)]),
                _general_run(3e-3, 1, [(1, 0.6, 0.987), (2, 0.6, 0.987), (3, 0.6, 0.987)])]


def test_general_epoch_is_chosen_on_validation():
    h = general_report.held_out(GENERAL_RUNS[0]["curve"])
    assert h == {"epoch": 2, "val": 0.8, "test": 0.6, "val_final": 0.7, "test_final": 0.95}
    assert general_report.held_out(GENERAL_RUNS[1]["curve"])["epoch"] == 1          # a tie: the first
    rmse = [{"epoch": 1, "val_rmse": 2.0, "test_rmse": 1.0}, {"epoch": 2, "val_rmse": 1.0, "test_rmse": 3.0}]
    assert general_report.held_out(rmse, "rmse")["test"] == 3.0                     # lower is better
    old = general_report.held_out([{"epoch": 1, "test_acc": 0.4}])
    assert old == {"epoch": None, "val": None, "test": None, "val_final": None, "test_final": 0.4}


def test_general_report_selects_on_validation_and_never_prints_best_test():
    (row,) = general_report.heldout_table(GENERAL_RUNS)
    task, label, w, n, bidir, lr, n_lrs, k, sec, cells = row
    assert (lr, n_lrs, k) == (1e-3, 2, 2)
    assert cells == [ms([0.8, 0.9], "{:.4f}"), ms([0.6, 0.5], "{:.4f}"), ms([0.7, 0.6], "{:.4f}"),
                     ms([0.95, 0.7], "{:.4f}")]                        # not 0.95 / 0.99: the test split's picks
    md = general_report.markdown(GENERAL_RUNS, {"scale": "test"})
    assert "| made-up | ds4d | 8 |" in md and "| 0.001 | 2 | 0.8500 +- 0.0500 | 0.5500 +- 0.0500 |" in md
    assert "| made-up | ds4d | 0.001 | 1 | 1 | 0.9000 | 0.5000 | 0.6000 | 0.7000 |" in md        # per seed
    assert "0.987" not in md and "0.99" not in md and "best test" not in md.lower()


def test_general_regression_selects_the_lowest_validation_rmse():
    runs = [_general_run(1e-3, 0, [(1, 2.0, 1.0), (2, 1.0, 3.0)], "rmse"),
            _general_run(3e-3, 0, [(1, 5.0, 0.5), (2, 5.0, 0.5)], "rmse")]
    (row,) = general_report.heldout_table(runs, "rmse")
    assert row[5] == 1e-3 and row[-1][:2] == ["1.0000 +- 0.0000", "3.0000 +- 0.0000"]
    md = general_report.markdown(runs, {"scale": "test"})
    assert "Regression (lower is better)" in md and "0.5000" not in md


def test_general_runs_without_validation_say_so_and_are_not_chosen_from():
    old = [_general_run(lr, 0, [(1, None, 0.3), (2, None, 0.4)], val=False) for lr in (1e-3, 3e-3)]
    rows = general_report.heldout_table(old)
    assert [r[5] for r in rows] == [1e-3, 3e-3] and all("not chosen: no validation" in r[1] for r in rows)
    assert all(r[-1] == ["not measured", "not measured", "not measured", "0.4000 +- 0.0000"] for r in rows)
    md = general_report.markdown(old[:1], {"scale": "test"})
    assert "**Test at the chosen epoch not measured** for 1 of 1 runs" in md
    text = (DOCS / "general-cpu" / "report.md").read_text()               # the committed runs: old ones
    assert "**Test at the chosen epoch not measured** for 12 of 12 runs" in text and "best test" not in text


def _dataset(n=50, val=None):
    x = np.arange(n, dtype=np.float32).reshape(n, 1, 1)
    return Dataset("made-up", Split(x, np.arange(n) % 3), Split(x[:5], np.zeros(5, np.int64)), 3, "pixels", val=val)


def test_general_validation_is_carved_from_training_by_a_fixed_seed():
    data = _dataset()
    cfg = GeneralRun(val_fraction=0.2, val_seed=7)
    a, b = with_validation(data, cfg), with_validation(data, cfg)
    assert len(a.val.y) == 10 and len(a.train.y) == 40 and np.array_equal(a.val.x, b.val.x)   # reproducible
    assert not set(a.val.x.ravel()) & set(a.train.x.ravel())                                # disjoint
    assert set(a.val.x.ravel()) | set(a.train.x.ravel()) == set(data.train.x.ravel())
    assert np.array_equal(a.test.x, data.test.x)                                            # test untouched
    other = with_validation(data, GeneralRun(val_fraction=0.2, val_seed=8))
    assert not np.array_equal(other.val.x, a.val.x)
    assert cfg.key(data).split("|")[-1] != GeneralRun().key(data).split("|")[-1]
    assert data_info(a) == {"n_train": 40, "n_test": 5, "length": 1, "n_val": 10}
    assert with_validation(data, GeneralRun()) is data                                       # none asked for
    with pytest.raises(ValueError, match="validation split of its own"):
        with_validation(_dataset(val=Split(data.train.x[:2], data.train.y[:2])), cfg)
    for bad in ({"val_fraction": 0.1}, {"val_fraction": 1.0, "val_seed": 0}):
        with pytest.raises(ValueError, match="val_"):
            GeneralRun(**bad)


def test_general_old_configs_keep_their_fields():
    data = json.loads((DOCS / "general-cpu" / "results.json").read_text())
    from ddesys.experiments._models import model_of
    from ddesys.experiments.general.train import run_key as general_key
    for r in data["runs"]:
        cfg = GeneralRun(model=model_of(r["config"]), **{k: v for k, v in r["config"].items() if k != "family"})
        assert cfg.to_dict() == r["config"] and list(cfg.to_dict()) == list(r["config"])
        assert general_key(r["task"], cfg.to_dict(), r["data"]) == r["key"]
    new = GeneralRun(val_fraction=VAL_FRACTION, val_seed=VAL_SEED).to_dict()
    assert list(new)[-2:] == ["val_fraction", "val_seed"]


def test_general_training_chooses_the_epoch_on_the_carved_validation_split():
    from ddesys.experiments.general import listops as LO
    from ddesys.experiments.general.train import train_run
    data = LO.listops(48, 16, 32)
    cfg = GeneralRun(width=8, n_layers=1, d_state=4, epochs=2, batch=16, bidirectional=True, val_fraction=0.25,
                     val_seed=VAL_SEED)
    r = train_run(cfg, data)
    assert r["data"] == {"n_train": 36, "n_test": 16, "length": 32, "n_val": 12} and r["key"] == cfg.key(data)
    assert "best_acc" not in r and "best_epoch" not in r and all("val_acc" in p for p in r["curve"])
    h = general_report.held_out(r["curve"])
    assert (r["best_val_epoch"], r["test_at_best_val"]) == (h["epoch"], h["test"])


# ------------------------------------------------------------------------------------------ S4 recipe
def _recipe_run(seed, val, test, arm="s4d"):
    r = {"arm": arm, "seed": seed, "final": test[-1], "curve": test, "ms_per_step": 1.0, "status": "done",
         "config": {"arm": arm, "seed": seed}}
    if val is not None:
        r.update(val_curve=val, val_epoch=s4_recipe.chosen_epoch(val))
    return r


def test_s4_recipe_reports_test_at_the_validation_chosen_epoch():
    runs = [_recipe_run(0, [50.0, 80.0, 70.0], [90.0, 60.0, 95.0]),
            _recipe_run(1, [90.0, 90.0, 60.0], [50.0, 99.5, 70.0])]
    assert [s4_recipe.chosen_epoch(r["val_curve"]) for r in runs] == [2, 1]         # a tie: the first
    assert s4_recipe.held_out(runs[0]) == {"epoch": 2, "val": 80.0, "test": 60.0, "final": 95.0}
    md = s4_recipe.summarize(runs, ["s4d"])
    assert "| `s4d` | nn.s4compat.S4D (the reference) | 1 | 85.0 +- 7.1 | 55.0 +- 7.1 | 82.5 +- 17.7 |" in md
    assert "| `s4d` | 0 | 2 | 80.0 | 60.0 | 95.0 |" in md and "| `s4d` | 1 | 1 | 90.0 | 50.0 | 70.0 |" in md
    assert "99.5" not in md and "best" not in md.lower()               # the test split's best never shows
    old = {**_recipe_run(0, None, [40.0, 30.0]), "best": 40.0}          # recorded before the protocol
    md = s4_recipe.summarize([old], ["s4d"])
    assert "| 1 | not measured | not measured | 30.0 +- 0.0 |" in md and "40.0" not in md


def test_s4_recipe_configs_before_the_protocol_keep_their_keys():
    path = DOCS / "s4-recipe" / "results-5ep-C.json"
    legacy = s4_recipe._legacy(json.loads(path.read_text()), path)
    recipe = {**s4_recipe.RECIPE_DEFAULTS, **json.loads(path.read_text())["config"]}
    for r in legacy["runs"]:
        assert r["config"] == s4_recipe.run_config(r["arm"], r["seed"], {**recipe, "val_fraction": 0.0})
    new = s4_recipe.run_config("s4d", 0, {**recipe, "val_fraction": 0.1})
    assert (new["val_fraction"], new["val_seed"]) == (0.1, s4_recipe.VAL_SEED)
    assert s4_recipe.run_key(new) != s4_recipe.run_key(legacy["runs"][0]["config"])


def test_s4_recipe_carves_validation_from_training_and_chooses_on_it():
    pytest.importorskip("sklearn")
    xtr, ytr, xte, yte, xva, yva = s4_recipe.load_data(val_fraction=0.1)
    full = s4_recipe.load_data()
    assert full[4] is None and len(full[1]) == len(ytr) + len(yva) and len(yva) == round(0.1 * len(full[1]))
    assert len(yte) == len(full[3])                                      # the test split untouched
    rows = lambda x: sorted(tuple(v.ravel().tolist()) for v in x.numpy())    # noqa: E731
    assert sorted(rows(xtr) + rows(xva)) == rows(full[0])                # a partition of the training split
    data = s4_recipe.load_data(64, 0.1)
    r = s4_recipe.run("s4d", 0, data, epochs=2, d_model=8, n_layers=1)
    assert "best" not in r and len(r["val_curve"]) == 2 and r["val_epoch"] == s4_recipe.chosen_epoch(r["val_curve"])
    assert r["test_at_val"] == r["curve"][r["val_epoch"] - 1] and r["final"] == r["curve"][-1]
