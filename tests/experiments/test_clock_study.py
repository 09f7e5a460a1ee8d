"""``python -m ddesys.experiments.synthetic.clock_study``: --stop-at ends a run and says when, a rerun into the
same folder keeps its runs, bad arguments are refused."""
from __future__ import annotations

import json

import pytest

from ddesys.experiments.synthetic import clock_study


def test_stop_at_rerun_and_bad_arguments(tmp_path, capsys):
    args = ["--quick", "--diag-steps", "0", "--candidates", "hard-warm", "--stop-at", "0.01", "--out", str(tmp_path)]
    assert clock_study.main(args) == 0
    first = json.loads((tmp_path / "results.json").read_text())
    (run,) = first["candidates"]["hard-warm"]
    assert run["status"] == "done" and run["stopped_step"] == run["curve"][-1]["step"] < 6
    assert (tmp_path / "table.md").exists()
    assert clock_study.main(args) == 0                                         # the same command again
    assert json.loads((tmp_path / "results.json").read_text())["candidates"] == first["candidates"]
    for bad in (["--threads", "0"], ["--stop-at", "5"], ["--candidates", "nope"]):
        with pytest.raises(SystemExit) as err:
            clock_study.main(bad + ["--out", str(tmp_path)])
        assert err.value.code == 2
