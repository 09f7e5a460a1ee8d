"""Results that cannot be lost (issue 24, finding 2): concurrent sweeps into one folder keep every run;
a results file names the program that wrote it and other programs refuse it; every path a sweep writes
(checkpoints included) and every stored record is checked before any training step."""
from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

from ddesys.experiments import _runs, _train
from ddesys.experiments._ckpt import _filename
from ddesys.experiments.delay.__main__ import SCHEMA as DELAY_SCHEMA
from ddesys.experiments.delay.__main__ import main as delay_main
from ddesys.experiments.general.__main__ import SCHEMA as GENERAL_SCHEMA
from ddesys.experiments.general.__main__ import main as general_main
from ddesys.experiments.synthetic.__main__ import SCHEMA as SYNTHETIC_SCHEMA
from ddesys.experiments.synthetic.__main__ import main as synthetic_main
from ddesys.verification import outdir

ROOT = Path(__file__).parents[2]
DOCS = ROOT / "docs" / "experiments"
ENV = dict(os.environ, MPLBACKEND="Agg")
SYN = ["--scale", "smoke", "--tasks", "copy", "--protocols", "fixed", "--models", "lstm", "--steps", "2",
       "--eval-every", "1", "--quiet"]
GEN = ["--scale", "smoke", "--tasks", "listops", "--models", "s4d", "--epochs", "1", "--quiet"]
DLY = ["--scale", "smoke", "--models", "s4d", "--quiet"]
CLIS = {"synthetic": (synthetic_main, SYN), "general": (general_main, GEN), "delay": (delay_main, DLY)}
COMMITTED = {"synthetic": "synthetic-cpu", "general": "general-cpu", "delay": "delay"}


def _runs_of(out):
    return json.loads((Path(out) / "results.json").read_text())["runs"]


def _snapshot(folder):
    """``{relative path: bytes}`` of every file under ``folder`` (folders as ``None``)."""
    folder = Path(folder)
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))}


@pytest.fixture
def no_training(monkeypatch):
    """Fail the test if any optimizer step is taken."""
    def refuse(*a, **k):
        raise AssertionError("a training step ran")
    monkeypatch.setattr(_train.Trainer, "step", refuse)


def _key(run):
    return run["config"]["name"]


def _run(name):
    return {"config": {"name": name}, "curve": [], "status": "done"}


# ------------------------------------------------------------------------------------------ concurrency
def test_two_stores_opened_together_both_keep_their_runs(tmp_path):
    """The race of finding 2a, step by step: both sweeps read the empty folder, then each records a run;
    the second write must keep the first one's run (it reads the file again under the lock)."""
    a = _runs.Store(tmp_path, "synthetic", _key, {"command": "A"})
    b = _runs.Store(tmp_path, "synthetic", _key, {"command": "B"})
    a.put({**_run("a1"), "key": "a1"})
    b.put({**_run("b1"), "key": "b1"})
    a.put({**_run("a2"), "key": "a2"})
    data = json.loads((tmp_path / "results.json").read_text())
    assert [r["key"] for r in data["runs"]] == ["a1", "b1", "a2"]
    assert data["meta"]["commands"] == ["A", "B"] and data["program"] == "ddesys.experiments.synthetic"
    b.put({**_run("a1"), "key": "a1", "extra": 1})                     # the same key: replaced in place
    assert [r.get("extra") for r in _runs_of(tmp_path)] == [1, None, None]


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
        assert not (tmp_path / "results.json").exists()                     # B recorded nothing
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


# ------------------------------------------------------------------------------------------ ownership
def _copy_committed(name, dest):
    dest.mkdir(parents=True, exist_ok=True)
    for f in ("results.json", "report.md"):
        shutil.copy(DOCS / COMMITTED[name] / f, dest / f)
    return _snapshot(dest)


def test_verification_refuses_an_experiments_folder(tmp_path, monkeypatch):
    from ddesys.verification import __main__ as vmain
    monkeypatch.setattr(vmain, "_checks", lambda: pytest.fail("a check ran"))
    for name in COMMITTED:
        out = tmp_path / name
        before = _copy_committed(name, out)
        with pytest.raises(SystemExit) as exc:
            vmain.main(["--quick", "--out", str(out)])
        msg = str(exc.value)
        assert msg.startswith("error:") and str(out / "results.json") in msg
        assert f"written by ddesys.experiments.{name}" in msg
        assert _snapshot(out) == before


def test_verification_refuses_a_report_of_another_program(tmp_path, monkeypatch):
    from ddesys.verification import __main__ as vmain
    monkeypatch.setattr(vmain, "_checks", lambda: pytest.fail("a check ran"))
    shutil.copy(DOCS / "synthetic-cpu" / "report.md", tmp_path / "report.md")
    with pytest.raises(SystemExit, match="report.md was not written by ddesys.verification"):
        vmain.main(["--quick", "--out", str(tmp_path)])


@pytest.mark.integration
def test_python_m_verification_on_an_experiments_folder_exits_nonzero_untouched(tmp_path):
    before = _copy_committed("synthetic", tmp_path)
    res = subprocess.run([sys.executable, "-m", "ddesys.verification", "--quick", "--out", str(tmp_path)], cwd=ROOT,
                         env=ENV, capture_output=True, text=True, timeout=120)
    assert res.returncode != 0 and "written by ddesys.experiments.synthetic" in res.stderr
    assert "Traceback" not in res.stderr and _snapshot(tmp_path) == before


def test_verification_accepts_its_own_folder_old_and_new():
    """Its committed results.json (written before the program field) and a new one are its own."""
    outdir.check_owner(ROOT / "docs" / "verification", "ddesys.verification", report="report.md",
                       heading="# DSSM verification report")
    assert outdir.written_by({"program": "ddesys.verification"}) == "ddesys.verification"
    assert outdir.written_by(json.loads((ROOT / "docs/verification/results.json").read_text())) == "ddesys.verification"


@pytest.mark.parametrize("name", list(CLIS))
@pytest.mark.parametrize("content,writer", [
    (None, "ddesys.verification"),                                      # the committed verification results
    ('{"program": "ddesys.experiments.s4_recipe", "config": {}, "runs": []}', "ddesys.experiments.s4_recipe"),
    ('{"meta": {"experiment": "other"}, "runs": []}', "ddesys.experiments.other")])    # before 'program'
def test_an_experiment_refuses_another_programs_folder(tmp_path, no_training, name, content, writer):
    main, args = CLIS[name]
    path = tmp_path / "results.json"
    if content is None:
        shutil.copy(ROOT / "docs/verification/results.json", path)
    else:
        path.write_text(content)
    before = _snapshot(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(args + ["--out", str(tmp_path)])
    assert str(path) in str(exc.value) and f"written by {writer}" in str(exc.value)
    assert _snapshot(tmp_path) == before


def test_s4_recipe_and_efficiency_refuse_another_programs_folder(tmp_path, monkeypatch):
    """The two stand-alone CLIs check their folder's owner before any work (finding 2's leftover)."""
    from ddesys.experiments import efficiency, s4_recipe
    monkeypatch.setattr(s4_recipe, "load_data", lambda *a, **k: pytest.fail("s4_recipe started work"))
    monkeypatch.setattr(efficiency, "run", lambda *a, **k: pytest.fail("efficiency started work"))
    before = _copy_committed("synthetic", tmp_path / "syn")
    with pytest.raises(SystemExit, match="written by ddesys.experiments.synthetic"):
        s4_recipe.main(["--out", str(tmp_path / "syn")])
    assert _snapshot(tmp_path / "syn") == before
    (tmp_path / "eff").mkdir()
    (tmp_path / "eff" / "efficiency.json").write_text('{"program": "ddesys.verification", "checks": []}')
    with pytest.raises(SystemExit, match="written by ddesys.verification"):
        efficiency.main(["--out", str(tmp_path / "eff"), "--quiet"])
    old = json.loads((ROOT / "docs/experiments/efficiency-cpu/efficiency.json").read_text())   # before 'program'
    assert outdir.written_by(old) == "ddesys.experiments.efficiency"


# ------------------------------------------------------------------------------------------ paths
@pytest.mark.parametrize("name", list(CLIS))
def test_a_file_in_place_of_the_checkpoints_folder_fails_before_training(tmp_path, no_training, name):
    main, args = CLIS[name]
    (tmp_path / "checkpoints").write_text("not a folder")
    before = _snapshot(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(args + ["--out", str(tmp_path)])
    assert str(tmp_path / "checkpoints") in str(exc.value) and "is a file" in str(exc.value)
    assert _snapshot(tmp_path) == before


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_checkpoints_folder_fails_before_training(tmp_path, no_training):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints").chmod(0o500)
    try:
        with pytest.raises(SystemExit, match=f"{tmp_path / 'checkpoints'} is not writable"):
            synthetic_main(SYN + ["--out", str(tmp_path)])
    finally:
        (tmp_path / "checkpoints").chmod(0o700)


def test_a_folder_in_place_of_a_checkpoint_or_report_fails_before_training(tmp_path, monkeypatch):
    assert synthetic_main(SYN + ["--out", str(tmp_path)]) == 0
    key = _runs_of(tmp_path)[0]["key"]
    monkeypatch.setattr(_train.Trainer, "step", lambda *a, **k: pytest.fail("a training step ran"))
    (tmp_path / "checkpoints" / _filename(key)).mkdir(parents=True)
    with pytest.raises(SystemExit, match=f"{tmp_path / 'checkpoints' / _filename(key)} is a folder"):
        synthetic_main(SYN + ["--no-resume", "--out", str(tmp_path)])
    (tmp_path / "curves.png").unlink()
    (tmp_path / "curves.png").mkdir()
    with pytest.raises(SystemExit, match=f"{tmp_path / 'curves.png'} is a folder"):
        synthetic_main(SYN + ["--seeds", "1", "--out", str(tmp_path)])


def test_prepare_out_checks_named_files_and_folders(tmp_path):
    (tmp_path / "a").write_text("")
    with pytest.raises(outdir.OutError, match=f"{tmp_path / 'a'} is a file"):
        outdir.prepare_out(tmp_path, folders=("a/b",))
    (tmp_path / "r.json").mkdir()
    with pytest.raises(outdir.OutError, match=f"{tmp_path / 'r.json'} is a folder"):
        outdir.prepare_out(tmp_path, files=("r.json",))
    outdir.prepare_out(tmp_path, files=("s.json",), folders=("c", "r.json"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "r.json"]     # nothing created for them


# ------------------------------------------------------------------------------------------ records
@pytest.mark.parametrize("name,field,where", [
    ("synthetic", "best_acc", "run"), ("synthetic", "val_acc", "curve"),
    ("general", "final_acc", "run"), ("general", "task", "run"), ("general", "test_acc", "curve"),
    ("delay", "diagnosis", "run"), ("delay", "val_rel_rmse", "curve"), ("delay", "config", "run")])
def test_a_record_missing_a_field_fails_before_any_work(tmp_path, no_training, name, field, where):
    """One record of a committed results file loses a field: the CLI names the file, the record (index
    and key) and the field, exits before any training step and leaves the folder as it was."""
    main, args = CLIS[name]
    data = json.loads((DOCS / COMMITTED[name] / "results.json").read_text())
    victim = data["runs"][1]
    if where == "run":
        del victim[field]
    else:
        del victim["curve"][2][field]
    (tmp_path / "results.json").write_text(json.dumps(data))
    before = _snapshot(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(args + ["--out", str(tmp_path)])
    msg = str(exc.value)
    assert f"run 1 ({victim['key']})" in msg and repr(field) in msg and str(tmp_path / "results.json") in msg
    assert ("curve point 2" in msg) == (where == "curve")
    assert _snapshot(tmp_path) == before


def test_a_record_with_an_unknown_status_is_refused(tmp_path):
    (tmp_path / "results.json").write_text(json.dumps({"runs": [{**_run("a"), "status": "runnning"}]}))
    with pytest.raises(_runs.ResultsError, match="run 0: status 'runnning'"):
        _runs.Store(tmp_path, "synthetic", _key, {})


@pytest.mark.parametrize("name", list(COMMITTED))
def test_the_committed_results_files_load_with_every_run(tmp_path, name):
    """Backward compatibility: every committed results.json passes its experiment's checks, and each
    run keeps its stored key (the rekeyed key equals the one in the file)."""
    from ddesys.experiments.delay.__main__ import _rekey as rekey_d
    from ddesys.experiments.general.__main__ import _rekey as rekey_g
    from ddesys.experiments.synthetic.__main__ import _rekey as rekey_s
    rekey = {"synthetic": rekey_s, "general": rekey_g, "delay": rekey_d}[name]
    schema = {"synthetic": SYNTHETIC_SCHEMA, "general": GENERAL_SCHEMA, "delay": DELAY_SCHEMA}[name]
    path = DOCS / COMMITTED[name] / "results.json"
    stored = json.loads(path.read_text())["runs"]
    shutil.copy(path, tmp_path / "results.json")
    store = _runs.Store(tmp_path, name, rekey, {}, schema=schema)
    assert [r["key"] for r in store.all()] == [r["key"] for r in stored]


class _FakePyplot:
    """``matplotlib.pyplot`` without drawing: the figure code reads every field it plots, fast."""

    def subplots(self, nrows=1, ncols=1, **kw):
        axes = np.empty((nrows, ncols), dtype=object)
        for i in np.ndindex(axes.shape):
            axes[i] = mock.MagicMock()
            axes[i].plot.return_value = [mock.MagicMock()]                 # line, = ax.plot(...)
        return mock.MagicMock(), axes

    def __getattr__(self, name):
        return mock.MagicMock()


def _reports(name, runs, meta, out):
    """Everything the experiment writes from its runs: report text and figures (not drawn)."""
    import importlib
    exp = importlib.import_module(f"ddesys.experiments.{name}.__main__")._experiment()
    exp.markdown(runs, meta)
    exp.figures(runs, out)


@pytest.mark.parametrize("name", list(COMMITTED))
def test_the_schema_lists_every_field_the_report_needs(tmp_path, monkeypatch, name):
    """For one run of each model family of a committed file: a field (of the run or of the run's curve
    points) whose removal from that run alone makes the report of the whole file fail is one the schema
    requires, so a record the CLI accepts can always be reported (finding 2d: a KeyError after
    training). The figures' code runs against a stand-in pyplot (it reads the same fields, draws nothing)."""
    import ddesys.plot
    monkeypatch.setattr(ddesys.plot, "pyplot", _FakePyplot)
    schema = {"synthetic": SYNTHETIC_SCHEMA, "general": GENERAL_SCHEMA, "delay": DELAY_SCHEMA}[name]
    data = json.loads((DOCS / COMMITTED[name] / "results.json").read_text())
    runs, firsts = data["runs"], {}
    for i, r in enumerate(runs):
        firsts.setdefault(r["config"].get("family") or r["config"]["arch"]["family"], i)
    _reports(name, copy.deepcopy(runs), data["meta"], tmp_path)                 # the intact runs report
    assert not list(tmp_path.glob("*.png"))                                     # (nothing drawn)
    needed = schema.names("fields") | schema.names("done")
    for i in firsts.values():
        run = runs[i]
        for field in [f for f in run if f not in needed]:                      # each unchecked field
            cut = copy.deepcopy(runs)
            del cut[i][field]
            try:
                _reports(name, cut, data["meta"], tmp_path)
            except (KeyError, TypeError, IndexError):
                assert field in needed, f"{name}: the report needs {field!r}, the schema does not check it"
        for field in [f for f in run["curve"][0] if f not in schema.names("curve")]:
            cut = copy.deepcopy(runs)
            for p in cut[i]["curve"]:
                del p[field]
            try:
                _reports(name, cut, data["meta"], tmp_path)
            except (KeyError, TypeError, IndexError):
                assert field in schema.names("curve"), f"{name}: the report needs curve {field!r}, unchecked"


def _committed_results():
    out = []
    for f in sorted(DOCS.glob("*/results.json")):
        data = json.loads(f.read_text())
        name = data.get("program", "").rsplit(".", 1)[-1] or data["meta"]["command"].split()[2].rsplit(".", 1)[-1]
        out.append(pytest.param(f.parent, name, id=f.parent.name))
    return out


@pytest.mark.parametrize("folder, name", _committed_results())
def test_every_committed_report_regenerates_from_its_results(folder, name):
    """Each committed ``report.md`` is what the experiment's driver writes from the committed
    ``results.json``: the reports and the code that writes them have not drifted apart."""
    import importlib
    exp = importlib.import_module(f"ddesys.experiments.{name}.__main__")._experiment()
    data = json.loads((folder / "results.json").read_text())
    assert exp.markdown(data["runs"], data["meta"]) == (folder / "report.md").read_text()
