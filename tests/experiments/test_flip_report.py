"""The report's table of the clocks learned by flip tests, from made-up runs whose decisions and flip
tests are written out by hand: the ids paused at the end, the evaluation from which they stay, and the
flip tests the paused entries got up to it."""
from __future__ import annotations

from ddesys.experiments.synthetic import report

TASK = {"name": "copy", "kind": "copy", "T": 4, "P_min": 8, "P_max": 8, "vocab": 10, "data_max": 8,
        "window": 1, "length": 16, "protocol": "fixed"}


def _run(family, seed, flips, **cfg):
    """A finished run whose evaluations at steps 10, 20, ... carry the ``flip`` records ``flips``."""
    pts = [{"step": 10 * (i + 1), "loss": 1.0, "val_acc": 0.5, "test_acc": 0.5, "flip": f}
           for i, f in enumerate(flips)]
    config = {"task": TASK, "family": family, "width": 8, "n_layers": 2, "d_state": 8, "lr": 1e-3,
              "dt_lr": 1e-4, "seed": seed, "steps": 10 * len(flips), "batch": 4, "eval_every": 10,
              "val_size": 16, "test_size": 16, **cfg}
    return {"key": f"{family}{seed}", "config": config, "status": "done", "n_params": 100, "curve": pts,
            "best_acc": 0.5, "best_step": 10}


def _t(**n):                                        # entry -> [tests, mean delta, tests towards a pause]
    return {k[1:]: [v, -0.1, v] for k, v in n.items()}


RUN = _run("s4d-runclock", 0, [
    {"pauses": [0], "pauses_after_pause": [0], "tests": _t(e0=5, e10=3, e13=2)},
    {"pauses": [0], "pauses_after_pause": [0, 3], "tests": _t(e13=4, e10=1)},
    {"pauses": [0], "pauses_after_pause": [0, 1, 3], "tests": _t(e11=7, e13=1, e5=9)},
    {"pauses": [0], "pauses_after_pause": [0, 1, 3], "tests": _t(e11=100)}], flip_tests=32)


def test_a_run_clock_is_read_at_its_last_decisions_and_the_tests_up_to_them():
    (task, label, lr, seed, tests, after_tick, after_pause, settled, least, median), = report.flip_table([RUN])
    assert (task, seed, tests) == ("copy", 0, 32) and "s4d-runclock" in label
    assert (after_tick, after_pause, settled) == ("0", "0-1, 3", 30)
    # entries paused at the end: 0 (after a tick), 10, 11, 13 (vocab 10 + ids 0, 1, 3); tests up to step 30:
    # 0: 5; 10: 3 + 1; 11: 7; 13: 2 + 4 + 1 (the 100 tests of step 40 come after it settled, entry 5 ticks)
    assert (least, median) == (4, 6)
    md = report.markdown([RUN], {"scale": "test", "command": "made up"})
    assert "## The clocks learned by flip tests" in md
    assert "| 32 | 0 | 0-1, 3 | 30 | 4 | 6 |" in md


def test_a_clock_per_id_and_runs_without_tallies():
    per_id = _run("s4d-flipclock", 1, [{"pauses": [2, 3]}, {"pauses": [2, 3, 4, 7]}])
    row, = report.flip_table([per_id])
    assert row[4:] == (1, "2-4, 7", None, 20, None, None)       # one test per step (the config's None)
    md = report.markdown([per_id], {"scale": "test", "command": "made up"})
    assert "| 1 | 2-4, 7 | - | 20 | - | - |" in md
    nothing = _run("s4d-flipclock", 2, [{"pauses": []}])
    assert report.flip_table([nothing])[0][5] == "none"
    unfinished = {**RUN, "status": "diverged"}
    assert report.flip_table([unfinished]) == []
