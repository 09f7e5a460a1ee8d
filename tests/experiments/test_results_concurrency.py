"""Results that cannot be lost when sweeps run at once (issue 24, finding 2): concurrent sweeps into one
folder keep every run, a run is trained once, older results files migrate and newer ones are refused."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from ddesys.experiments import _runs
from ddesys.experiments.synthetic.__main__ import main as synthetic_main
from results_helpers import ENV, ROOT, SYN, _key, _run, _runs_of


# ------------------------------------------------------------------------------------------ concurrency
@pytest.mark.parametrize("experiment,name", [("synthetic", "results.json"), ("s4_recipe", "results.json"),
                                             ("efficiency", "efficiency.json")])
def test_two_stores_opened_together_both_keep_their_runs(tmp_path, experiment, name):
    """The race of finding 2a, step by step: both sweeps read the empty folder, then each records a run;
    the second write must keep the first one's run (it reads the file again under the lock). The same
    store carries the two CLIs that once wrote their own files (issue 35, findings 1 and 2)."""
    a = _runs.Store(tmp_path, experiment, _key, {"command": "A"}, name=name)
    b = _runs.Store(tmp_path, experiment, _key, {"command": "B"}, name=name)
    a.put({**_run("a1"), "key": "a1"})
    b.put({**_run("b1"), "key": "b1"})
    a.put({**_run("a2"), "key": "a2"})
    data = json.loads((tmp_path / name).read_text())
    assert [r["key"] for r in data["runs"]] == ["a1", "b1", "a2"]
    assert data["meta"]["commands"] == ["A", "B"] and data["program"] == f"ddesys.experiments.{experiment}"
    b.put({**_run("a1"), "key": "a1", "extra": 1})                     # the same key: replaced in place
    assert [r.get("extra") for r in json.loads((tmp_path / name).read_text())["runs"]] == [1, None, None]


WRITER = textwrap.dedent("""
    import sys
    from ddesys.experiments._runs import Store
    out, who, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = Store(out, "synthetic", lambda r: r["config"]["name"], {"command": who})
    sys.stdin.readline()                                 # every writer has read the folder: go
    for i in range(n):
        store.put({"key": f"{who}{i}", "config": {"name": f"{who}{i}"}, "curve": [], "status": "done"})
""")


@pytest.mark.integration
def test_concurrent_processes_into_one_folder_keep_every_run(tmp_path):
    """Four processes open the folder, then record 25 runs each as fast as they can: all 100 remain."""
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), w, "25"], stdin=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=ENV, cwd=ROOT) for w in "abcd"]
    for p in procs:
        p.stdin.write("\n")
        p.stdin.flush()
    for p in procs:
        p.stdin.close()
        assert p.wait(timeout=120) == 0, p.stderr.read()
    keys = sorted(r["key"] for r in _runs_of(tmp_path))
    assert keys == sorted(f"{w}{i}" for w in "abcd" for i in range(25))
    assert not list(tmp_path.glob(".*.tmp"))


def _during_first_run(monkeypatch, tmp_path, seed, check):
    """Sweep A's first run starts by running sweep B (another process, ``--seeds seed``) into the same
    folder to its end; ``check(B's CompletedProcess)`` then runs, and A goes on."""
    from ddesys.experiments.synthetic import train
    real, other = train.train_run, []

    def train_run(*a, **k):
        if not other:
            cmd = [sys.executable, "-m", "ddesys.experiments.synthetic", *SYN, "--seeds", str(seed),
                   "--out", str(tmp_path)]
            other.append(subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300))
            assert other[0].returncode == 0, other[0].stderr
            check(other[0])
        return real(*a, **k)
    monkeypatch.setattr(train, "train_run", train_run)


@pytest.mark.integration
def test_a_sweep_that_finishes_during_another_keeps_its_run(tmp_path, monkeypatch):
    """Sweep A opens the folder and starts training; sweep B (another process) runs into the same folder
    and finishes before A records its run. Both exit 0 and both runs are in results.json."""
    def check(_):
        assert [r["config"]["seed"] for r in _runs_of(tmp_path)] == [1]
    _during_first_run(monkeypatch, tmp_path, 1, check)
    assert synthetic_main(SYN + ["--seeds", "0", "--out", str(tmp_path)]) == 0
    runs = _runs_of(tmp_path)
    assert sorted(r["config"]["seed"] for r in runs) == [0, 1]
    assert "| copy-fixed | lstm |" in (tmp_path / "report.md").read_text()


@pytest.mark.integration
def test_two_sweeps_of_the_same_run_train_it_once(tmp_path, monkeypatch):
    """Sweep A claims its run and starts training; sweep B (another process) is asked for the same run
    meanwhile: B skips it (A holds the claim), exits 0 and records nothing; A records the run."""
    def check(b):
        assert "another process is training it now" in b.stdout
        assert _runs_of(tmp_path) == []                                      # B recorded nothing (A's claim)
    _during_first_run(monkeypatch, tmp_path, 0, check)
    assert synthetic_main(SYN + ["--seeds", "0", "--out", str(tmp_path)]) == 0
    assert [r["config"]["seed"] for r in _runs_of(tmp_path)] == [0]
    assert not list(tmp_path.glob(".*.claim")) and not (tmp_path / "checkpoints").exists()   # nothing left


def test_a_run_another_process_recorded_meanwhile_is_not_trained_again(tmp_path):
    """The sweep opened the folder before another process recorded the run: the claim's re-check of the
    file skips it instead of training it twice."""
    from ddesys.experiments._ckpt import Checkpoints
    from ddesys.experiments._dist import single
    from ddesys.experiments._train import Job, run_sweep
    mine = _runs.Store(tmp_path, "synthetic", _key, {"command": "A"})
    _runs.Store(tmp_path, "synthetic", _key, {"command": "B"}).put({**_run("r"), "key": "r"})

    def never(**_):
        raise AssertionError("trained a run that was already recorded")
    said = []
    ctx = single("cpu")
    code = run_sweep([Job("r", "run r", 1, never)], mine, Checkpoints(tmp_path / "checkpoints", 10, ctx), ctx,
                     quiet=True, log=said.append)
    assert code == 0 and any("recorded it while this sweep ran" in m for m in said)
    assert [r["key"] for r in _runs_of(tmp_path)] == ["r"]


def test_older_results_files_migrate_and_newer_ones_are_refused(tmp_path):
    """The results schema is versioned: a version-1 file (program, no schema) and a version-0 file (neither)
    are read through ``migrate`` (a run without ``status`` is a finished one) and written back at the
    current version with the runs kept; a file from a newer version is refused before anything is written."""
    for old in ({"program": "ddesys.experiments.synthetic", "meta": {}, "runs": [_run("a")]},
                {"meta": {"experiment": "synthetic"}, "runs": [_run("a")]}):
        del old["runs"][0]["status"]
        (tmp_path / "results.json").write_text(json.dumps(old))
        store = _runs.Store(tmp_path, "synthetic", _key, {"command": "A"})
        assert store.get("a")["status"] == "done"
        store.put({**_run("b"), "key": "b"})
        data = json.loads((tmp_path / "results.json").read_text())
        assert data["schema"] == _runs.SCHEMA_VERSION and [r["key"] for r in data["runs"]] == ["a", "b"]
    newer = json.dumps({"program": "ddesys.experiments.synthetic", "schema": _runs.SCHEMA_VERSION + 1, "meta": {},
                        "runs": []})
    (tmp_path / "results.json").write_text(newer)
    with pytest.raises(_runs.ResultsError, match="newer ddesys"):
        _runs.Store(tmp_path, "synthetic", _key, {})
    assert (tmp_path / "results.json").read_text() == newer


def test_a_file_replaced_during_the_sweep_is_not_overwritten(tmp_path):
    store = _runs.Store(tmp_path, "synthetic", _key, {})
    foreign = json.dumps({"program": "ddesys.verification", "mode": "quick", "checks": []})
    (tmp_path / "results.json").write_text(foreign)
    with pytest.raises(_runs.ResultsError, match="written by ddesys.verification.*was not recorded"):
        store.put({**_run("a"), "key": "a"})
    assert (tmp_path / "results.json").read_text() == foreign


def test_a_folder_is_one_programs_whatever_its_results_file_is_called(tmp_path):
    """A folder holding another program's results under another file name (efficiency.json beside a
    driver's results.json) is refused before any work, both ways; the verification CLI's owner check too."""
    from ddesys.io import OutError, check_owner
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    eff = _runs.Store(tmp_path / "a", "efficiency", _key, {"command": "E"}, name="efficiency.json")
    assert eff.path.is_file()
    with pytest.raises(_runs.ResultsError,
                       match="efficiency.json is not a results file of ddesys.experiments.synthetic"):
        _runs.Store(tmp_path / "a", "synthetic", _key, {"command": "S"})
    assert sorted(p.name for p in (tmp_path / "a").iterdir() if not p.name.startswith(".")) == ["efficiency.json"]
    _runs.Store(tmp_path / "b", "synthetic", _key, {"command": "S"})
    with pytest.raises(_runs.ResultsError, match="results.json is not a results file of ddesys.experiments.efficiency"):
        _runs.Store(tmp_path / "b", "efficiency", _key, {"command": "E"}, name="efficiency.json")
    with pytest.raises(OutError):
        check_owner(tmp_path / "a", "ddesys.verification")
