"""Run machinery of the experiment CLIs (experiments/_runs.py, _ckpt.py, _dist.py, _train.py): results
merge across reruns and are never lost, damaged files and unusable folders stop the CLIs before any
work, arguments are checked at parse time, interrupted runs resume bitwise exactly, diverged runs are
recorded while the sweep goes on, and two torchrun processes train like one."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from ddesys.experiments import _runs, _train
from ddesys.experiments._ckpt import SIGNAL_AT_ENV
from ddesys.experiments.general.__main__ import main as general_main
from ddesys.experiments.synthetic.__main__ import main as synthetic_main

ROOT = Path(__file__).parents[2]
ENV = dict(os.environ, MPLBACKEND="Agg")
SMOKE = ["--scale", "smoke", "--tasks", "copy", "--protocols", "fixed", "--quiet"]


def _runs_of(out):
    return json.loads((Path(out) / "results.json").read_text())["runs"]


def _strip(run):
    return {k: v for k, v in run.items() if k != "seconds"}


# ------------------------------------------------------------------------------------------ results files
def test_reruns_merge_skip_and_replace(tmp_path, capsys):
    base = SMOKE + ["--models", "lstm", "--steps", "2", "--eval-every", "1", "--out", str(tmp_path)]
    assert synthetic_main(base) == 0
    first = _runs_of(tmp_path)
    assert synthetic_main(base + ["--seeds", "1"]) == 0                    # another configuration: kept both
    runs = _runs_of(tmp_path)
    assert [r["config"]["seed"] for r in runs] == [0, 1] and runs[0] == first[0]
    assert synthetic_main(base + ["--tasks", "sum"]) == 0                  # another task: appended
    assert len(_runs_of(tmp_path)) == 3
    mtime = (tmp_path / "results.json").stat().st_mtime_ns
    capsys.readouterr()
    assert synthetic_main(base) == 0                                       # same configuration: skipped
    assert "1 already in" in capsys.readouterr().out
    assert (tmp_path / "results.json").stat().st_mtime_ns == mtime
    assert synthetic_main(base + ["--no-resume"]) == 0                     # replaced in place, others kept
    after = _runs_of(tmp_path)
    assert [r["key"] for r in after] == [r["key"] for r in runs] + [after[2]["key"]]
    assert _strip(after[0]) == _strip(first[0]) and after[0]["seconds"] != first[0]["seconds"]
    report = (tmp_path / "report.md").read_text()
    assert "| copy-fixed | lstm |" in report and "| sum-fixed | lstm |" in report
    assert not list(tmp_path.glob(".*.tmp"))                               # no temporary file left behind
    assert not list(tmp_path.glob("checkpoints/*"))                        # finished runs leave no checkpoint


@pytest.mark.parametrize("main,name", [(synthetic_main, "synthetic"), (general_main, "general")])
@pytest.mark.parametrize("content,message", [
    ('{"meta": {}, "runs": [{"key": "a", "con', "not valid JSON"),
    ('{"mode": "quick", "checks": []}', "not a results file"),
    ('{"meta": {"experiment": "other"}, "runs": []}', "written by ddesys.experiments.other"),
    (b"\xff\xfe\x00garbage", "not a text file")])
def test_bad_results_file_stops_before_training_and_is_untouched(tmp_path, main, name, content, message,
                                                                 monkeypatch):
    def no_training(*a, **k):                      # structural, not timed: the refusal comes before any run
        raise AssertionError("a run started despite the bad results file")
    monkeypatch.setattr(_train, "run_sweep", no_training)
    path = tmp_path / "results.json"
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    before = path.read_bytes()
    args = ["--scale", "smoke", "--quiet", "--out", str(tmp_path)] + (["--models", "lstm"] if name == "synthetic"
                                                                     else ["--tasks", "listops"])
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert str(path) in str(exc.value) and message in str(exc.value) and "--move-bad-results" in str(exc.value)
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]


def test_bad_results_file_can_be_moved_aside(tmp_path, capsys):
    (tmp_path / "results.json").write_text('{"runs": [')
    out = SMOKE + ["--models", "lstm", "--steps", "1", "--out", str(tmp_path)]
    assert synthetic_main(out + ["--move-bad-results"]) == 0
    aside = list(tmp_path.glob("results.json.bad-*"))
    assert len(aside) == 1 and aside[0].read_text() == '{"runs": ['
    assert "moved it to" in capsys.readouterr().out and len(_runs_of(tmp_path)) == 1


def test_older_results_files_keep_their_runs():
    """CPU results written before keys carried a config hash (four runs of the 2026-11-29 report, curves
    cut, in tests/data) load under the current key scheme, and a current config of the same run finds
    its result."""
    from ddesys.experiments.synthetic.train import run_key
    meta, runs = _runs.read_results(ROOT / "tests/data/synthetic_results_2026-11-29.json", "synthetic")
    assert len(runs) == 4 and all("|" not in r["key"].split("steps")[-1] for r in runs)   # the old scheme
    keys = {run_key(r["config"]) for r in runs}
    assert len(keys) == len(runs) and all(k.startswith(r["key"] + "|") for k, r in zip(
        [run_key(r["config"]) for r in runs], runs))


@pytest.mark.parametrize("module", ["ddesys.experiments.synthetic", "ddesys.experiments.general",
                                    "ddesys.verification"])
def test_unusable_out_fails_before_any_work(tmp_path, module):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    cases = [blocker / "sub" / "out", blocker]
    if os.geteuid() != 0:                          # root writes into read-only folders: no such case there
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        cases.append(ro)
    for out in cases:                              # structural, not timed: no progress bar, nothing written
        res = subprocess.run([sys.executable, "-m", module, "--out", str(out)], cwd=ROOT, capture_output=True,
                             text=True, timeout=60, env=ENV)
        assert res.returncode == 1 and str(out) in res.stderr and "error:" in res.stderr, res.stderr[-500:]
        assert "%|" not in res.stderr and "step" not in res.stdout, (res.stdout[-300:], res.stderr[-300:])
    assert blocker.read_text() == "x" and sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["file"] + (["ro"] if os.geteuid() != 0 else []))


def test_prepare_out_probes_by_writing(tmp_path, monkeypatch):
    """A folder the OS refuses writes to (read-only mount, or permissions for non-root) is rejected
    even when its permission bits look fine: the check creates a file."""
    def refuse(*a, **k):
        raise PermissionError(30, "Read-only file system")
    from ddesys import io as outdir                             # the probe's home; experiments._runs re-exports it
    monkeypatch.setattr(outdir.tempfile, "mkstemp", refuse)
    with pytest.raises(_runs.OutError, match="not writable .Read-only file system"):
        _runs.prepare_out(tmp_path)


@pytest.mark.parametrize("main,args", [
    (synthetic_main, ["--steps", "0"]), (synthetic_main, ["--width", "0"]), (synthetic_main, ["--batch", "-1"]),
    (synthetic_main, ["--eval-every", "0"]), (synthetic_main, ["--lrs", "nan"]), (synthetic_main, ["--lrs", "inf"]),
    (synthetic_main, ["--lrs", "-1e-3"]), (synthetic_main, ["--lag-range", "9", "3"]),
    (synthetic_main, ["--checkpoint-every", "0"]), (synthetic_main, ["--tokens", "2", "--tasks", "sum"]),
    (general_main, ["--epochs", "0"]), (general_main, ["--batch", "-1"]), (general_main, ["--width", "0"]),
    (general_main, ["--lr", "inf"]), (general_main, ["--dropout", "1.5"]), (general_main, ["--device", "gpu"]),
    (synthetic_main, ["--device", "cuda0"])])
def test_arguments_are_checked_at_parse_time(tmp_path, main, args, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--scale", "smoke", "--out", str(tmp_path / "out")] + args)
    assert exc.value.code == 2 and "error:" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_task_size_from_the_cli():
    from ddesys.experiments.synthetic.__main__ import _parse
    args = _parse(["--scale", "smoke", "--tasks", "copy", "sum", "--protocols", "fixed", "variable", "--tokens", "6",
                   "--lag", "20", "--lag-range", "5", "30"])
    sizes = {t.name: (t.T, t.P_min, t.P_max, t.window) for t in args.task_list}
    assert sizes == {"copy-fixed": (6, 20, 20, 1), "copy-variable": (6, 5, 30, 1), "sum-fixed": (6, 20, 20, 4),
                     "sum-variable": (6, 5, 30, 4)}


# ------------------------------------------------------------------------------------------ checkpoints
def _final_state(out):
    (path,) = (Path(out) / "checkpoints").glob("*.pt")
    return torch.load(path, map_location="cpu", weights_only=True)


def _same_tensors(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same_tensors(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same_tensors(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.parametrize("which", ["synthetic", "general"])
def test_interrupted_run_resumes_to_the_same_bits(tmp_path, monkeypatch, which):
    """SIGINT after step 3 (sent by the process to itself through the test hook, handled like a real
    one): the run writes a checkpoint (weights_only-loadable) and the CLI exits 130; rerunning resumes
    from it, and the final weights, optimizer state and results equal an uninterrupted run's bit for bit.
    The general run stops mid-epoch with dropout on, so the torch RNG state must be restored too."""
    if which == "synthetic":
        main, args = synthetic_main, SMOKE[:-1] + ["--models", "ds4d", "--steps", "7", "--eval-every", "2"]
    else:
        main, args = general_main, ["--scale", "smoke", "--tasks", "listops", "--models", "ds4d", "--epochs", "2",
                                    "--batch", "128"]                      # 2 steps per epoch: stop mid-epoch 2
    args = args + ["--quiet", "--keep-checkpoints", "--checkpoint-every", "1000"]
    ref, cut = tmp_path / "ref", tmp_path / "cut"
    assert main(args + ["--out", str(ref)]) == 0
    monkeypatch.setenv(SIGNAL_AT_ENV, "3")
    assert main(args + ["--out", str(cut)]) == 130
    mid = _final_state(cut)
    assert mid["run"]["step"] == 3 and _runs_of(cut) == []                 # the folder claimed, nothing recorded
    monkeypatch.delenv(SIGNAL_AT_ENV)
    steps = []
    step = _train.Trainer.step
    monkeypatch.setattr(_train.Trainer, "step", lambda self, *a: (steps.append(a[-1]), step(self, *a))[1])
    assert main(args + ["--out", str(cut)]) == 0
    assert steps[0] == 4 and steps == list(range(4, steps[-1] + 1))        # resumed, not restarted
    a, b = _final_state(ref), _final_state(cut)
    assert a["run"]["step"] == b["run"]["step"] > 3
    assert _same_tensors(a["trainer"]["model"], b["trainer"]["model"])
    assert _same_tensors(a["trainer"]["optimizer"], b["trainer"]["optimizer"])
    assert [_strip(r) for r in _runs_of(ref)] == [_strip(r) for r in _runs_of(cut)]


@pytest.mark.slow
def test_sigterm_from_outside_checkpoints_and_the_rerun_finishes(tmp_path):
    """A real SIGTERM from another process, sent once the run has written its first periodic
    checkpoint: the CLI finishes the step, checkpoints and exits 143; the same command then resumes."""
    cmd = [sys.executable, "-m", "ddesys.experiments.synthetic"] + SMOKE + [
        "--models", "lstm", "--steps", "200", "--eval-every", "100", "--out", str(tmp_path)]
    proc = subprocess.Popen(cmd + ["--checkpoint-every", "1"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV)
    t0 = time.perf_counter()
    while not list(tmp_path.glob("checkpoints/*.pt")) and proc.poll() is None and time.perf_counter() - t0 < 120:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-2000:]
    assert "stopped by SIGTERM" in out and _runs_of(tmp_path) == []
    step = _final_state(tmp_path)["run"]["step"]
    assert 1 <= step < 200
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=ENV)
    assert res.returncode == 0 and "resuming" in res.stdout, res.stderr[-2000:]
    (run,) = _runs_of(tmp_path)
    assert [p["step"] for p in run["curve"]] == [100, 200]


def test_diverging_run_is_recorded_and_the_sweep_goes_on(tmp_path, capsys):
    out = SMOKE + ["--models", "lstm", "--lrs", "1e30", "1e-3", "--steps", "4", "--eval-every", "1",
                   "--checkpoint-every", "1", "--out", str(tmp_path)]
    assert synthetic_main(out) == 0
    runs = _runs_of(tmp_path)
    bad, good = runs
    assert bad["status"] == "diverged" and bad["config"]["lr"] == 1e30 and bad["diverged_step"] >= 1
    assert good["status"] == "done" and len(good["curve"]) == 4
    assert "recorded as diverged" in capsys.readouterr().out
    if bad["diverged_step"] > 1:                                           # its last good checkpoint is kept
        kept = _final_state(tmp_path)
        assert kept["key"] == bad["key"] and kept["run"]["step"] == bad["diverged_step"] - 1
    assert "## Diverged runs" in (tmp_path / "report.md").read_text()
    capsys.readouterr()
    assert synthetic_main(out) == 0 and "2 already in" in capsys.readouterr().out   # not retried on resume
    gen = tmp_path / "general"
    assert general_main(["--scale", "smoke", "--tasks", "listops", "--models", "ds4d", "--lr", "1e30", "--batch",
                         "128", "--quiet", "--out", str(gen)]) == 0
    (run,) = _runs_of(gen)
    assert run["status"] == "diverged" and run["diverged_epoch"] == 1 and run["config"]["lr"] == 1e30


def test_mixed_precision_runs_and_is_its_own_configuration(tmp_path):
    args = SMOKE + ["--models", "ds4d", "--steps", "2", "--eval-every", "1", "--out", str(tmp_path)]
    assert synthetic_main(args) == 0 and synthetic_main(args + ["--amp", "bf16"]) == 0
    plain, amp = _runs_of(tmp_path)
    assert "amp" not in plain["config"] and amp["config"]["amp"] == "bf16" and plain["key"] != amp["key"]
    assert all(np.isfinite(p["loss"]) for p in amp["curve"])


# ------------------------------------------------------------------------------------------ torchrun
def _torchrun(args, out, nproc=2, env=None):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", "-m",
           "ddesys.experiments.synthetic"] + args + ["--out", str(out)]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env={**ENV, **(env or {})})


DDP_ARGS = ["--scale", "smoke", "--tasks", "copy", "--protocols", "variable", "--models", "ds4d", "--steps", "6",
            "--eval-every", "3", "--batch", "7", "--quiet"]


def test_two_torchrun_processes_match_one(tmp_path):
    """gloo, 2 CPU processes, global batch 7 (split 4 + 3): the losses and accuracies equal one process's
    to float tolerance, and the results file says how the run was launched."""
    res = _torchrun(DDP_ARGS, tmp_path / "ddp")
    assert res.returncode == 0, res.stderr[-3000:]
    assert synthetic_main(DDP_ARGS + ["--out", str(tmp_path / "one")]) == 0
    (ddp,), (one,) = _runs_of(tmp_path / "ddp"), _runs_of(tmp_path / "one")
    assert ddp["key"] == one["key"] and ddp["world_size"] == 2 and ddp["backend"] == "gloo"
    assert one["world_size"] == 1
    assert '"world_size": 2' in (tmp_path / "ddp" / "results.json").read_text()
    for a, b in zip(ddp["curve"], one["curve"]):
        assert a["step"] == b["step"] and a["loss"] == pytest.approx(b["loss"], rel=1e-5)
        assert a["val_acc"] == pytest.approx(b["val_acc"], abs=1.5 / (32 * 4))   # at most one token flips
    assert ddp["mechanism"]["mean_delay"] == pytest.approx(one["mechanism"]["mean_delay"], rel=1e-5)
    assert "2 processes (gloo)" in res.stdout


@pytest.mark.slow
def test_torchrun_run_resumes_after_a_signal(tmp_path):
    """Under torchrun, SIGINT on rank 0 alone stops both ranks at the same step (the flag travels with
    the loss), rank 0 writes the checkpoint, and a second torchrun resumes it to the uninterrupted result."""
    out = tmp_path / "cut"
    res = _torchrun(DDP_ARGS + ["--checkpoint-every", "1000"], out, env={SIGNAL_AT_ENV: "4"})
    assert res.returncode != 0 and "stopped by SIGINT after step 4" in res.stdout + res.stderr
    assert _final_state(out)["run"]["step"] == 4
    res = _torchrun(DDP_ARGS, out)
    assert res.returncode == 0, res.stderr[-3000:]
    assert synthetic_main(DDP_ARGS + ["--out", str(tmp_path / "one")]) == 0
    (cut,), (one,) = _runs_of(out), _runs_of(tmp_path / "one")
    for a, b in zip(cut["curve"], one["curve"]):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)


def test_atomic_write_gives_a_normal_files_mode(tmp_path):
    """Results written atomically are readable like any other file (mkstemp alone makes them 0600)."""
    from ddesys.io import atomic_write
    umask = os.umask(0o022)
    try:
        atomic_write(tmp_path / "r.json", "{}")
    finally:
        os.umask(umask)
    assert (tmp_path / "r.json").stat().st_mode & 0o777 == 0o644
