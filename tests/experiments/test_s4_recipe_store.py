"""``python -m ddesys.experiments.s4_recipe`` on the shared results store (issue 35, finding 1): runs into
one folder at the same time all keep their runs, a run is trained once, a ``results.md`` it did not write
is left alone, an interrupted sweep resumes, stored records are checked by type before any work, and the
committed results files (an older layout) still load."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from ddesys.experiments import s4_recipe
from results_helpers import DOCS, ENV, ROOT, _snapshot

TINY = ["--epochs", "1", "--n-train", "64", "--d-model", "8", "--n-layers", "1", "--arms", "s4d", "--seeds", "1"]


def _runs(out):
    return json.loads((out / "results.json").read_text())["runs"]


def _seeds(out):
    return sorted((r["arm"], r["seed"]) for r in _runs(out))


def _during_first_run(monkeypatch, inner):
    """The sweep's first run starts by calling ``inner()`` (another sweep into the same folder), then
    trains as usual."""
    real, calls = s4_recipe.run, []

    def run(*a, **k):
        if not calls:
            calls.append(None)                                  # the inner sweep's runs go straight through
            calls[0] = inner()
        return real(*a, **k)
    monkeypatch.setattr(s4_recipe, "run", run)
    return calls


@pytest.mark.integration
def test_two_recipes_into_one_folder_at_once_keep_both_runs(tmp_path, monkeypatch):
    """Sweep B (another process, seed 1) runs into the folder while sweep A (seed 0) trains: both exit 0
    and results.json keeps both runs (finding 1: it kept the last writer's)."""
    out = tmp_path / "o"

    def other():
        res = subprocess.run([sys.executable, "-m", "ddesys.experiments.s4_recipe", *TINY, "--seed0", "1",
                              "--out", str(out)], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-2000:]
        return res
    _during_first_run(monkeypatch, other)
    assert s4_recipe.main(TINY + ["--out", str(out)]) == 0
    assert _seeds(out) == [("s4d", 0), ("s4d", 1)]
    md = (out / "results.md").read_text()
    assert "| `s4d` |" in md and "| 0, 1 |" in md


def test_a_run_another_sweep_is_training_is_skipped_not_trained_twice(tmp_path, monkeypatch, capsys):
    out = tmp_path / "o"
    said = _during_first_run(monkeypatch, lambda: (s4_recipe.main(TINY + ["--out", str(out)]),
                                                   capsys.readouterr().out)[1])
    assert s4_recipe.main(TINY + ["--out", str(out)]) == 0
    assert "another process is training it now" in said[0]
    assert _seeds(out) == [("s4d", 0)] and not list(out.glob(".*.claim"))


@pytest.mark.parametrize("results", [False, True])
def test_a_results_md_it_did_not_write_is_left_alone(tmp_path, monkeypatch, results):
    """A ``results.md`` in a folder without the recipe's results file is someone else's: refused before
    any work, untouched (finding 1). A results file of another program is refused as before."""
    monkeypatch.setattr(s4_recipe, "load_data", lambda *a, **k: pytest.fail("the recipe started work"))
    (tmp_path / "results.md").write_text("# my notes\n")
    if results:
        (tmp_path / "results.json").write_text('{"program": "ddesys.experiments.delay", "meta": {}, "runs": []}')
    before = _snapshot(tmp_path)
    with pytest.raises(SystemExit) as exc:
        s4_recipe.main(TINY + ["--out", str(tmp_path)])
    assert str(exc.value).startswith("error:") and _snapshot(tmp_path) == before
    assert ("written by ddesys.experiments.delay" if results else str(tmp_path / "results.md")) in str(exc.value)


def test_an_interrupted_recipe_keeps_its_runs_and_resumes(tmp_path, monkeypatch, capsys):
    """Ctrl-C during the second run: the first is kept, the CLI exits 130 and says how to go on; the same
    command then trains only the missing run."""
    out, trained, stopped = tmp_path / "o", [], []
    real = s4_recipe.run

    def run(arm, seed, *a, **k):
        if seed == 1 and not stopped:
            stopped.append(seed)
            raise KeyboardInterrupt
        trained.append(seed)
        return real(arm, seed, *a, **k)
    monkeypatch.setattr(s4_recipe, "run", run)
    args = TINY[:-1] + ["2", "--out", str(out)]
    try:
        code = s4_recipe.main(args)
    except KeyboardInterrupt:
        code = "KeyboardInterrupt escaped"
    assert code == 130 and _seeds(out) == [("s4d", 0)]
    assert "rerun the same command" in capsys.readouterr().out.lower()
    assert s4_recipe.main(args) == 0
    assert trained == [0, 1] and _seeds(out) == [("s4d", 0), ("s4d", 1)]


@pytest.mark.parametrize("field,bad", [("final", "94.4"), ("seed", 1.5), ("arm", 3)])
def test_a_stored_run_of_the_wrong_type_fails_before_any_work(tmp_path, monkeypatch, field, bad):
    monkeypatch.setattr(s4_recipe, "load_data", lambda *a, **k: pytest.fail("the recipe started work"))
    shutil.copy(DOCS / "s4-recipe" / "results-5ep-C.json", tmp_path / "results.json")
    data = json.loads((tmp_path / "results.json").read_text())
    data["results"][2][field] = bad
    (tmp_path / "results.json").write_text(json.dumps(data))
    before = _snapshot(tmp_path)
    with pytest.raises(SystemExit) as exc:
        s4_recipe.main(TINY + ["--out", str(tmp_path)])
    msg = str(exc.value)
    assert str(tmp_path / "results.json") in msg and "run 2" in msg and repr(field) in msg and repr(bad) in msg
    assert "expected" in msg and _snapshot(tmp_path) == before


@pytest.mark.parametrize("name", ["results-10ep-A", "results-10ep-B", "results-5ep-A", "results-5ep-B",
                                  "results-5ep-C"])
def test_the_committed_results_load_and_resume(tmp_path, monkeypatch, capsys, name):
    """The committed files (the recipe's earlier layout: ``config`` + ``results``) load with every run;
    rerunning their recipe (no validation split: ``--val-fraction 0``, as before the held-out protocol)
    trains nothing and reports what they hold: the final test accuracy, and "not measured" at a
    validation-chosen epoch (their "best" was chosen on the test split: never printed)."""
    monkeypatch.setattr(s4_recipe, "run", lambda *a, **k: pytest.fail("a recorded run was trained again"))
    old = json.loads((DOCS / "s4-recipe" / f"{name}.json").read_text())
    shutil.copy(DOCS / "s4-recipe" / f"{name}.json", tmp_path / "results.json")
    c = old["config"]
    arms = list(dict.fromkeys(r["arm"] for r in old["results"]))
    assert s4_recipe.main(["--seeds", str(c["seeds"]), "--epochs", str(c["epochs"]), "--arms", *arms,
                           "--val-fraction", "0", "--out", str(tmp_path)]) == 0
    md = (tmp_path / "results.md").read_text()
    for arm in arms:
        finals = [r["final"] for r in old["results"] if r["arm"] == arm]
        assert f"| `{arm}` |" in md and f"{sum(finals) / len(finals):.1f} +- " in md
        assert f"| `{arm}` | {s4_recipe.ARMS[arm].description} | 1 | not measured | not measured |" in md
    assert f"({len(old['results'])} already in" in capsys.readouterr().out
