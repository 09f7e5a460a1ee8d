"""``python -m ddesys.experiments.efficiency`` on the shared results store (issue 35, finding 2): one
record per (scale, device, length), saved as each length finishes; a rerun at another scale keeps the
first, Ctrl-C keeps the finished lengths and the same command resumes, a length another process is timing
is skipped, stored records are checked by type before any work, and the earlier single-run files
(tests/data, docs/experiments) still load."""
from __future__ import annotations

import json
import shutil

import pytest
from ddesys.experiments import efficiency as eff
from results_helpers import DOCS, ROOT, _snapshot

TINY = dict(H=8, batch=1, Ls=(16, 32), train_reps=1, dec_warm=1, dec_tokens=1, history=32)


def _fake_measure(scale, device, L, specs=None):
    """The rows of one length without timing anything (the store is under test here; the measurement
    itself is tests/experiments/test_efficiency.py's): the two timings still go through ``interleaved``."""
    t = eff.interleaved([lambda: None] * 3, 1) + eff.interleaved([lambda: None] * 3, 1)
    return [{"model": m, "H": eff.SCALES[scale]["H"], "params": 1000, "L": L, "train_tokens_per_s": 1e3 + t[0],
             "train_peak_bytes": None, "decode_tokens_per_s": 100.0, "decode_cache_bytes": 4096,
             "decode_peak_bytes": None} for m in ("S4D", "DS4D hidden-matched", "DS4D param-matched")]


@pytest.fixture(autouse=True)
def _tiny_scales(monkeypatch):
    monkeypatch.setitem(eff.SCALES, "tiny", TINY)
    monkeypatch.setitem(eff.SCALES, "tiny2", {**TINY, "H": 6, "Ls": (16,)})
    monkeypatch.setattr(eff, "plot", lambda res, path: path.write_text("figure"))
    monkeypatch.setattr(eff, "measure", _fake_measure)


def _records(out):
    return json.loads((out / "efficiency.json").read_text())["runs"]


def _measured(out):
    return sorted((r["config"]["scale"], r["config"]["L"]) for r in _records(out))


def _main(out, *extra):
    return eff.main(["--out", str(out), "--quiet", *extra])


def test_a_rerun_at_another_scale_keeps_the_first(tmp_path, capsys):
    """--scale tiny2 after --scale tiny into the same folder: both scales' lengths stay (finding 2: the
    second run replaced efficiency.json); each length's record holds its three models' rows."""
    assert _main(tmp_path, "--scale", "tiny") == 0
    assert _main(tmp_path, "--scale", "tiny2") == 0
    assert _measured(tmp_path) == [("tiny", 16), ("tiny", 32), ("tiny2", 16)]
    for r in _records(tmp_path):
        assert r["status"] == "done" and [row["L"] for row in r["rows"]] == [r["config"]["L"]] * 3
        assert [row["model"] for row in r["rows"]] == ["S4D", "DS4D hidden-matched", "DS4D param-matched"]
    capsys.readouterr()
    assert _main(tmp_path, "--scale", "tiny") == 0                       # resume: nothing left to time
    assert "2 already in" in capsys.readouterr().out and len(_records(tmp_path)) == 3


def test_ctrl_c_keeps_the_finished_lengths_and_the_rerun_resumes(tmp_path, monkeypatch, capsys):
    """Ctrl-C while the second length is being timed: the first length's record is kept, the CLI exits 130
    and says how to go on; the same command times the second length only."""
    real, calls = eff.interleaved, []

    def interleaved(fns, reps):
        calls.append(len(fns))
        if len(calls) == 3:                                            # the second length's first timing
            raise KeyboardInterrupt
        return real(fns, reps)
    monkeypatch.setattr(eff, "interleaved", interleaved)
    try:
        code = _main(tmp_path, "--scale", "tiny")
    except KeyboardInterrupt:
        code = "KeyboardInterrupt escaped"
    assert code == 130 and _measured(tmp_path) == [("tiny", 16)]
    assert "rerun the same command" in capsys.readouterr().out.lower()
    calls.clear()
    assert _main(tmp_path, "--scale", "tiny") == 0
    assert len(calls) == 2 and _measured(tmp_path) == [("tiny", 16), ("tiny", 32)]     # one length timed


def test_a_length_another_process_is_timing_is_skipped(tmp_path, monkeypatch, capsys):
    real, said = _fake_measure, []

    def measure(*a, **k):
        if not said:
            said.append(None)
            assert _main(tmp_path, "--scale", "tiny") == 0             # a second sweep, meanwhile
            said[0] = capsys.readouterr().out
        return real(*a, **k)
    monkeypatch.setattr(eff, "measure", measure)
    assert _main(tmp_path, "--scale", "tiny") == 0
    assert "another process is timing it now" in said[0]
    assert _measured(tmp_path) == [("tiny", 16), ("tiny", 32)]


@pytest.mark.parametrize("src", [ROOT / "tests/data/efficiency_legacy.json", DOCS / "efficiency-cpu/efficiency.json"])
def test_the_earlier_single_run_files_load_and_resume(tmp_path, monkeypatch, capsys, src):
    """An efficiency.json of the earlier layout (one scale, ``rows``; with or without ``program``) loads as
    one record per length: rerunning its scale times nothing and prints its table; a run at another scale
    then rewrites the file in the current layout with the old records kept."""
    shutil.copy(src, tmp_path / "efficiency.json")
    old = json.loads(src.read_text())
    real, allowed = eff.interleaved, []
    monkeypatch.setattr(eff, "interleaved", lambda *a: real(*a) if allowed else pytest.fail("timed again"))
    assert _main(tmp_path, "--scale", old["scale"]) == 0
    out = capsys.readouterr().out
    assert "4 already in" in out and all(f"{r['train_tokens_per_s']:12.0f}" in out for r in old["rows"])
    allowed.append(True)
    assert _main(tmp_path, "--scale", "tiny2") == 0
    data = json.loads((tmp_path / "efficiency.json").read_text())
    assert data["program"] == "ddesys.experiments.efficiency" and "rows" not in data
    assert sorted((r["config"]["scale"], r["config"]["L"]) for r in data["runs"]) == [
        ("cpu", 1024), ("cpu", 2048), ("cpu", 4096), ("cpu", 8192), ("tiny2", 16)]
    assert [row for r in data["runs"][:4] for row in r["rows"]] == old["rows"]


@pytest.mark.parametrize("field,bad", [("train_tokens_per_s", "fast"), ("H", 243.5), ("model", None)])
def test_a_stored_row_of_the_wrong_type_fails_before_any_work(tmp_path, monkeypatch, field, bad):
    monkeypatch.setattr(eff, "interleaved", lambda *a: pytest.fail("efficiency started work"))
    data = json.loads((ROOT / "tests/data/efficiency_legacy.json").read_text())
    data["rows"][4][field] = bad                                      # L = 2048: the second record, row 1
    (tmp_path / "efficiency.json").write_text(json.dumps(data))
    before = _snapshot(tmp_path)
    with pytest.raises(SystemExit) as exc:
        _main(tmp_path, "--scale", "tiny")
    msg = str(exc.value)
    assert str(tmp_path / "efficiency.json") in msg and "run 1" in msg and "point 1" in msg, msg
    assert repr(field) in msg and repr(bad) in msg and "expected" in msg and _snapshot(tmp_path) == before


def test_a_figure_without_its_results_file_is_left_alone(tmp_path, monkeypatch):
    monkeypatch.setattr(eff, "interleaved", lambda *a: pytest.fail("efficiency started work"))
    (tmp_path / "efficiency.png").write_text("someone's figure")
    with pytest.raises(SystemExit, match=str(tmp_path / "efficiency.png")):
        _main(tmp_path, "--scale", "tiny")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["efficiency.png"]
