"""The GPU check's machinery, in process and fast: the incremental report, the environment it restores,
the preflight that stops a run on a machine without array-api-compat (or without CUDA). The full check
runs under the interpreter in test_gpu.py."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddesys.verification.gpu_report import Report, env_vars

ROOT = Path(__file__).parents[2]


def _row(status="pass", error=1e-9):
    return {"kind": "correctness", "check": "x", "dtype": "float32", "error": error, "bound": 1e-6,
            "bound_from": "test", "status": status}


def test_report_saves_every_row_as_soon_as_it_is_added(tmp_path):
    printed = []
    rep = Report(tmp_path, {"seed": 7}, echo=lambda *a, **k: printed.append(a[0]))
    read = lambda: json.loads((tmp_path / "gpu_check.json").read_text())  # noqa: E731
    assert read()["status"] == "running" and read()["rows"] == []
    rep.add(_row())
    assert read()["rows"] == [_row()] and len(printed) == 1 and "PASS" in printed[0]
    rep.add({"kind": "decode", "status": "info", "impl": "DS4D fused", "batch": 64, "position": 10,
             "relative_to_delay": "after", "tokens_per_s": 1e5, "seconds_per_step": 6.4e-4, "cache_bytes": 1024})
    assert len(read()["rows"]) == 2 and "| DS4D fused | 64 | 10 | after |" in (tmp_path / "gpu_check.md").read_text()
    assert rep.ok
    rep.finish("done")
    assert read()["ok"] is True and not list(tmp_path.glob("*.tmp"))


def test_a_section_that_raises_is_an_error_row_and_the_run_goes_on(tmp_path):
    rep = Report(tmp_path, {}, echo=lambda *a, **k: None)
    rep.add(_row())

    def crash():
        raise RuntimeError("Expected all tensors to be on the same device")
    assert rep.guarded("decode timing", crash) is None
    rep.add(_row())
    rows = json.loads((tmp_path / "gpu_check.json").read_text())["rows"]
    assert [r["kind"] for r in rows] == ["correctness", "error", "correctness"]
    assert "same device" in rows[1]["error"] and "crash" in rows[1]["traceback"]
    rep.finish("done")
    assert rep.ok is False and json.loads((tmp_path / "gpu_check.json").read_text())["ok"] is False
    assert "## Errors" in (tmp_path / "gpu_check.md").read_text()


def test_a_failed_check_makes_the_report_not_ok(tmp_path):
    rep = Report(None, {}, echo=lambda *a, **k: None)
    rep.add(_row(status="fail", error=1.0))
    assert not rep.ok


def test_env_vars_restores_set_and_unset_values(monkeypatch):
    monkeypatch.setenv("DDESYS_REFERENCE", "1")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ValueError):
        with env_vars(DDESYS_REFERENCE="0", TRITON_INTERPRET="1"):
            assert os.environ["DDESYS_REFERENCE"] == "0" and os.environ["TRITON_INTERPRET"] == "1"
            raise ValueError
    assert os.environ["DDESYS_REFERENCE"] == "1" and "TRITON_INTERPRET" not in os.environ


def test_without_cuda_the_check_stops_at_the_preflight_and_restores_the_environment(tmp_path, monkeypatch):
    import torch

    from ddesys.verification import gpu as check
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    monkeypatch.setenv("DDESYS_REFERENCE", "1")
    assert check.main(["--out", str(tmp_path), "--seed", "11"]) == 2
    assert os.environ["DDESYS_REFERENCE"] == "1"
    data = json.loads((tmp_path / "gpu_check.json").read_text())
    assert data["status"] == "preflight failed" and data["ok"] is False and data["meta"]["seed"] == 11
    assert any("no CUDA device" in p for p in data["preflight"]["problems"])


@pytest.mark.integration
def test_without_array_api_compat_the_check_stops_with_the_wheel_to_carry(tmp_path):
    """The GPU image lacks array-api-compat: ddesys would silently fall back to NumPy. The preflight
    names the package, says to carry its wheel, and stops (exit 2) before any row."""
    code = ("import sys; sys.modules['array_api_compat'] = None\n"        # import array_api_compat -> ImportError
            "from ddesys.verification.gpu import main\n"
            f"sys.exit(main(['--interpret', '--skip-timing', '--out', {str(tmp_path)!r}]))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    assert "PREFLIGHT FAILED" in res.stdout and "array-api-compat is not importable" in res.stdout
    assert "carry its wheel" in res.stdout
    data = json.loads((tmp_path / "gpu_check.json").read_text())
    assert data["preflight"]["ok"] is False and data["rows"] == []
