"""Records checked by type before any work, a folder owned from the first second, and runs that go wrong
recorded instead of crashing the sweep (issue 35, findings 3-5): a stored value of the wrong type, a
malformed ``meta`` block, a second experiment started into a folder another one has just claimed, a
checkpoint whose best-so-far weights are NaN, and a learned clock that diverges."""
from __future__ import annotations

import copy
import json
import math

import pytest
import torch
from ddesys.experiments import _runs
from ddesys.experiments._ckpt import SIGNAL_AT_ENV, Diverged
from ddesys.experiments._dist import single
from ddesys.experiments._train import Trainer
from ddesys.experiments.synthetic.__main__ import main as synthetic_main
from results_helpers import CLIS, COMMITTED, DOCS, _key, _run, _runs_of, _snapshot

SMOKE = ["--scale", "smoke", "--tasks", "copy", "--protocols", "fixed", "--quiet"]


# ------------------------------------------------------------------------------------------ finding 4: types
@pytest.mark.parametrize("name,field,where", [
    ("synthetic", "best_acc", "run"), ("synthetic", "val_acc", "curve"), ("synthetic", "n_params", "run"),
    ("general", "final_acc", "run"), ("general", "test_acc", "curve"), ("general", "task", "run"),
    ("delay", "best_rel_rmse", "run"), ("delay", "val_rel_rmse", "curve"), ("delay", "diagnosis", "run")])
def test_a_record_of_the_wrong_type_fails_before_any_work(tmp_path, no_training, name, field, where):
    """One stored value becomes a string (a dict for ``task``): the CLI names the file, the record (index
    and key), the field, the value and the type it expected, before any training step, and leaves the
    folder as it was (finding 4: the run used to train, be saved, and the report crash after it)."""
    main, args = CLIS[name]
    data = json.loads((DOCS / COMMITTED[name] / "results.json").read_text())
    victim = data["runs"][1]
    bad = {"text": "x"} if field == "task" else "0.9"
    if where == "run":
        victim[field] = bad
    else:
        victim["curve"][2][field] = bad
    (tmp_path / "results.json").write_text(json.dumps(data))
    before = _snapshot(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(args + ["--out", str(tmp_path)])
    msg = str(exc.value)
    assert str(tmp_path / "results.json") in msg and f"run 1 ({victim['key']})" in msg, msg
    assert repr(field) in msg and repr(bad) in msg and "expected" in msg, msg
    assert ("curve point 2" in msg) == (where == "curve")
    assert _snapshot(tmp_path) == before


@pytest.mark.filterwarnings("ignore::RuntimeWarning")                 # the reports meet the garbage values
@pytest.mark.parametrize("name", list(COMMITTED))
def test_a_value_the_report_cannot_read_is_refused_by_the_schema(tmp_path, monkeypatch, name):
    """The type analog of test_results_safety's schema test: for one run of each model family of a committed
    file, any field (of the run or of its curve points) whose value, replaced by a string, null or a list,
    makes the report of the whole file fail is one the store refuses before any work."""
    import ddesys.plot
    from test_results_safety import _FakePyplot, _reports
    monkeypatch.setattr(ddesys.plot, "pyplot", _FakePyplot)
    import importlib
    exp = importlib.import_module(f"ddesys.experiments.{name}.__main__")._experiment()
    data = json.loads((DOCS / COMMITTED[name] / "results.json").read_text())
    firsts = {}
    for r in data["runs"]:
        firsts.setdefault(r["config"].get("family") or r["config"]["arch"]["family"], r)
    runs = list(firsts.values())                                 # a file of one run per family (quicker)
    for i in range(len(runs)):
        for field in [*runs[i], *[f"curve.{f}" for f in runs[i]["curve"][0]]]:
            for bad in ("x", None, []):
                cut = copy.deepcopy(runs)
                for rec, f in ([(p, field[6:]) for p in cut[i]["curve"]] if field.startswith("curve.")
                               else [(cut[i], field)]):
                    rec[f] = bad
                try:
                    _reports(name, cut, data["meta"], tmp_path)
                except (KeyError, TypeError, IndexError, ValueError, AttributeError):
                    with pytest.raises(_runs.ResultsError):
                        exp.schema.check(cut[i], i, "results.json")


@pytest.mark.parametrize("value,expected", [("0.9", "a number"), (True, "a number"), (None, "a number")])
def test_the_store_names_the_value_and_the_expected_type(tmp_path, value, expected):
    schema = _runs.RunSchema(done=("best_acc",), curve=("step",))
    (tmp_path / "results.json").write_text(json.dumps({"runs": [{**_run("a"), "key": "a", "best_acc": value}]}))
    with pytest.raises(_runs.ResultsError) as exc:
        _runs.Store(tmp_path, "synthetic", _key, {}, schema=schema)
    msg = str(exc.value)
    assert "run 0 (a)" in msg and "'best_acc'" in msg and repr(value) in msg and expected in msg, msg


def test_a_diverged_record_may_hold_null_but_not_a_string(tmp_path):
    schema = _runs.RunSchema(done=("best_acc",))
    runs = [{**_run("a"), "status": "diverged", "best_acc": None}]
    (tmp_path / "results.json").write_text(json.dumps({"runs": runs}))
    _runs.Store(tmp_path, "synthetic", _key, {}, schema=schema)                      # accepted
    runs[0]["best_acc"] = "nan"
    (tmp_path / "results.json").write_text(json.dumps({"runs": runs}))
    with pytest.raises(_runs.ResultsError, match="'best_acc' is 'nan'"):
        _runs.Store(tmp_path, "synthetic", _key, {}, schema=schema)


@pytest.mark.parametrize("meta", [["a list"], "text", {"commands": "python -m x"}, {"commands": [1, 2]},
                                  {"command": 3}])
def test_a_malformed_meta_block_is_refused_not_replaced(tmp_path, meta):
    """Finding 4: a ``meta`` that is not an object (or whose ``commands`` is not a list of strings) used to
    be replaced by a new one on the next write; now the file is refused, untouched, naming ``meta``."""
    text = json.dumps({"program": "ddesys.experiments.synthetic", "meta": meta, "runs": [_run("a")]})
    (tmp_path / "results.json").write_text(text)
    with pytest.raises(_runs.ResultsError, match="'meta'") as exc:
        _runs.Store(tmp_path, "synthetic", _key, {"command": "B"})
    assert str(tmp_path / "results.json") in str(exc.value)
    assert (tmp_path / "results.json").read_text() == text


def test_a_malformed_meta_block_can_be_moved_aside(tmp_path, capsys):
    text = json.dumps({"program": "ddesys.experiments.synthetic", "meta": "text", "runs": []})
    (tmp_path / "results.json").write_text(text)
    assert synthetic_main(SMOKE + ["--models", "lstm", "--steps", "1", "--move-bad-results",
                                   "--out", str(tmp_path)]) == 0
    (aside,) = tmp_path.glob("results.json.bad-*")
    assert aside.read_text() == text and "moved it to" in capsys.readouterr().out
    assert len(_runs_of(tmp_path)) == 1


# ------------------------------------------------------------------------------------------ finding 3: owner
@pytest.mark.parametrize("name", list(CLIS))
def test_a_folder_claimed_by_another_experiment_is_refused_before_any_work(tmp_path, no_training, name):
    """Experiment A opens a new folder (and has recorded nothing yet); experiment B started into it
    meanwhile stops at once naming A, instead of training fully and then being refused (finding 3)."""
    other = "delay" if name != "delay" else "synthetic"
    _runs.Store(tmp_path, other, _key, {"command": "A"})                    # A has started: the folder is A's
    main, args = CLIS[name]
    with pytest.raises(SystemExit) as exc:
        main(args + ["--out", str(tmp_path)])
    assert f"written by ddesys.experiments.{other}" in str(exc.value)
    assert _runs_of(tmp_path) == [] and not (tmp_path / "report.md").exists()


def test_a_new_store_claims_its_folder_at_once(tmp_path):
    _runs.Store(tmp_path, "synthetic", _key, {"command": "A"})
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["program"] == "ddesys.experiments.synthetic" and data["runs"] == []
    assert data["meta"]["commands"] == ["A"]
    with pytest.raises(_runs.ResultsError, match="written by ddesys.experiments.synthetic"):
        _runs.Store(tmp_path, "delay", _key, {})


@pytest.mark.parametrize("stray", ["report.md", "curves.png"])
def test_a_report_without_its_results_file_is_not_overwritten(tmp_path, no_training, stray):
    """A report or figure in a folder without a results file was not written by this program: refused,
    untouched."""
    (tmp_path / stray).write_text("someone's notes\n")
    with pytest.raises(SystemExit, match=f"{tmp_path / stray}"):
        synthetic_main(CLIS["synthetic"][1] + ["--out", str(tmp_path)])
    assert sorted(p.name for p in tmp_path.iterdir()) == [stray]


# ------------------------------------------------------------------------------------------ finding 4: NaN best
def test_a_checkpoint_with_nan_best_weights_is_recorded_not_a_crash(tmp_path, monkeypatch, capsys):
    """The best-so-far weights in a checkpoint are NaN (and no later evaluation beats their accuracy): the
    resumed run used to crash at its end, every time. It is recorded as diverged and the sweep ends."""
    args = SMOKE + ["--models", "ds4d", "--steps", "4", "--eval-every", "1", "--checkpoint-every", "1000",
                    "--out", str(tmp_path)]
    monkeypatch.setenv(SIGNAL_AT_ENV, "2")
    assert synthetic_main(args) == 130
    monkeypatch.delenv(SIGNAL_AT_ENV)
    (path,) = (tmp_path / "checkpoints").glob("*.pt")
    ck = torch.load(path, map_location="cpu", weights_only=True)
    ck["best_state"] = {k: torch.full_like(v, math.nan) if v.is_floating_point() or v.is_complex() else v
                        for k, v in ck["best_state"].items()}
    ck["run"]["best_acc"] = 1.0                                             # no later evaluation beats it
    torch.save(ck, path)
    capsys.readouterr()
    assert synthetic_main(args) == 0
    (run,) = _runs_of(tmp_path)
    assert run["status"] == "diverged" and "NaN" in capsys.readouterr().out
    assert synthetic_main(args) == 0                                        # not retried, no crash


# ------------------------------------------------------------------------------------------ finding 5
def test_a_diverging_learned_clock_is_recorded_and_the_sweep_goes_on(tmp_path, capsys):
    """``ds4d-gate`` at lr 1e37: the clock becomes NaN and the scan refuses it with a ValueError; the run is
    recorded as diverged (as the given clock's is) and the next learning rate still runs (finding 5)."""
    args = SMOKE + ["--models", "ds4d-gate", "--lrs", "1e37", "1e-3", "--steps", "2", "--eval-every", "1",
                    "--out", str(tmp_path)]
    assert synthetic_main(args) == 0
    bad, good = _runs_of(tmp_path)
    assert bad["status"] == "diverged" and bad["config"]["lr"] == 1e37 and bad["diverged_step"] >= 1
    assert good["status"] == "done" and good["config"]["lr"] == 1e-3
    assert "recorded as diverged" in capsys.readouterr().out


class _Refuses(torch.nn.Module):
    def __init__(self, message):
        super().__init__()
        self.w, self.message = torch.nn.Parameter(torch.ones(1)), message

    def forward(self, x):
        raise ValueError(self.message)


def test_only_a_refused_non_finite_value_counts_as_divergence():
    """A layer's ValueError that names a NaN or inf is a diverged step; any other ValueError is a bug and
    propagates."""
    x = torch.zeros(2, 1).numpy()
    for message, diverged in [("the clock c must lie in [0, 1], got [nan, nan]", True),
                              ("input holds inf at position 3", True), ("expected shape (B, L), got (3,)", False),
                              ("information missing", False)]:
        model = _Refuses(message)
        tr = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), single("cpu"))
        with pytest.raises(Diverged if diverged else ValueError) as exc:
            tr.step(x, x, lambda out, y: out.sum(), 2, 1)
        assert isinstance(exc.value, Diverged) == diverged, message
