"""``python -m ddesys.verification`` owns its folder from the start and writes its results under the
folder's lock, re-checking the owner (issue 35's goal: one owner check and one locked write for every CLI).
The checks themselves are stubbed: these tests are about the files."""
from __future__ import annotations

import json

import pytest
from ddesys.experiments import _runs
from ddesys.verification import __main__ as vmain


def _result(name="stub"):
    return dict(name=name, passed=True, rows=[{"x": 1.0}], plots=[], criterion="always", setup="none")


def _with_checks(monkeypatch, *fns):
    monkeypatch.setattr(vmain, "_checks", lambda: list(fns))


def test_an_experiment_started_meanwhile_is_refused(tmp_path, monkeypatch):
    """While the verification runs, an experiment CLI opening the same (new) folder stops at once: the
    folder is the verification's from its first second, so neither program's work is thrown away."""
    seen = []

    def check(cfg, out, update):
        with pytest.raises(_runs.ResultsError, match="written by ddesys.verification"):
            _runs.Store(out, "synthetic", lambda r: r["config"]["name"], {})
        seen.append(True)
        return _result()
    _with_checks(monkeypatch, check)
    assert vmain.main(["--quick", "--out", str(tmp_path)]) == 0
    assert seen == [True]
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["program"] == "ddesys.verification" and [c["name"] for c in data["checks"]] == ["stub"]


def test_a_results_file_replaced_during_the_run_is_not_overwritten(tmp_path, monkeypatch, capsys):
    """Another program's results appear in the folder while the checks run (its placeholder moved away):
    the verification's write re-reads the owner under the lock and refuses, leaving that file alone."""
    foreign = json.dumps({"program": "ddesys.experiments.synthetic", "schema": 2, "meta": {}, "runs": []})

    def check(cfg, out, update):
        (out / "results.json").write_text(foreign)
        return _result()
    _with_checks(monkeypatch, check)
    assert vmain.main(["--quick", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "written by ddesys.experiments.synthetic" in err and str(tmp_path) in err
    assert (tmp_path / "results.json").read_text() == foreign and not (tmp_path / "report.md").exists()


def test_its_own_folder_is_rewritten(tmp_path, monkeypatch):
    _with_checks(monkeypatch, lambda cfg, out, update: _result("first"))
    assert vmain.main(["--quick", "--out", str(tmp_path)]) == 0
    _with_checks(monkeypatch, lambda cfg, out, update: _result("second"))
    assert vmain.main(["--quick", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "results.json").read_text())
    assert [c["name"] for c in data["checks"]] == ["second"]
    assert "## 1. second: PASS" in (tmp_path / "report.md").read_text()
    assert not list(tmp_path.glob(".*.tmp"))
