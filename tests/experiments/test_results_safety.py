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
from unittest import mock

import numpy as np
import pytest
from ddesys.experiments import _runs, _train
from ddesys.experiments._ckpt import _filename
from ddesys.experiments.delay.__main__ import SCHEMA as DELAY_SCHEMA
from ddesys.experiments.general.__main__ import SCHEMA as GENERAL_SCHEMA
from ddesys.experiments.synthetic.__main__ import SCHEMA as SYNTHETIC_SCHEMA
from ddesys.experiments.synthetic.__main__ import main as synthetic_main
from ddesys import io as outdir
from results_helpers import CLIS, COMMITTED, DOCS, ENV, ROOT, SYN, _key, _run, _runs_of, _snapshot


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
    monkeypatch.setattr(efficiency, "measure", lambda *a, **k: pytest.fail("efficiency started work"))
    before = _copy_committed("synthetic", tmp_path / "syn")
    with pytest.raises(SystemExit, match="written by ddesys.experiments.synthetic"):
        s4_recipe.main(["--out", str(tmp_path / "syn")])
    assert _snapshot(tmp_path / "syn") == before
    (tmp_path / "eff").mkdir()
    (tmp_path / "eff" / "efficiency.json").write_text('{"program": "ddesys.verification", "checks": []}')
    with pytest.raises(SystemExit, match="written by ddesys.verification"):
        efficiency.main(["--out", str(tmp_path / "eff"), "--quiet"])
    old = json.loads((ROOT / "tests/data/efficiency_legacy.json").read_text())    # written before 'program'
    assert outdir.written_by(old) == "ddesys.experiments.efficiency"


def test_efficiency_records_its_command(tmp_path, monkeypatch):
    """efficiency.json says which program and which command wrote it (the measurement itself stubbed)."""
    from ddesys.experiments import efficiency
    monkeypatch.setattr(efficiency, "measure", lambda scale, device, L, specs=None: [])
    monkeypatch.setattr(efficiency, "matched_width", lambda H: H)
    monkeypatch.setattr(efficiency, "plot", lambda res, path: None)
    monkeypatch.setattr(efficiency, "table", lambda res: "")
    assert efficiency.main(["--out", str(tmp_path), "--quiet"]) == 0
    res = json.loads((tmp_path / "efficiency.json").read_text())
    assert res["program"] == "ddesys.experiments.efficiency"
    assert res["meta"]["commands"] == [f"python -m ddesys.experiments.efficiency --out {tmp_path} --quiet"]


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
