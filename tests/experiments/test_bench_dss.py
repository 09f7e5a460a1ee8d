"""``python -m ddesys.experiments.bench.dss``: runs, meets its accuracy goals, writes twice into one folder, and
refuses an unusable ``--out`` before any work."""
import json

import pytest

from ddesys.experiments.bench import dss as bench_dss


def test_quick_run_twice_into_one_folder(tmp_path, capsys):
    out = tmp_path / "dss"
    for _ in range(2):
        bench_dss.main(["--quick", "--out", str(out)])
    res = json.loads((out / "bench_dss.json").read_text())
    assert res["accuracy"] and all(r["met"] for r in res["accuracy"]), res["accuracy"]
    assert {r["task"].split(",")[0] for r in res["timing"]} == {"roots", "stability chart 30 x 30", "crossings in (0"}
    assert all(r["seconds"] > 0 for r in res["timing"])
    assert "## accuracy" in (out / "bench_dss.md").read_text() and "nilpotent" in capsys.readouterr().out


def test_out_that_is_a_file_is_refused(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(SystemExit, match="error"):
        bench_dss.main(["--quick", "--out", str(f)])
