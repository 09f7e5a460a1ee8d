"""The shared driver and run loop (experiments/_driver.py, experiments/_train.py) carry an experiment that
is one small module: a toy regression written here against the documented interface (plan, markdown,
figures), run twice into one folder, interrupted and resumed."""
import argparse
import json

import numpy as np
import pytest
import torch

from ddesys.experiments import _ckpt
from ddesys.experiments._dist import single
from ddesys.experiments._driver import Experiment, drive
from ddesys.experiments._runs import SCHEMA_VERSION, RunSchema, add_run_arguments
from ddesys.experiments._train import Job, Trainer, fit

STEPS, TRUE_W = 30, np.array([[1.5], [-2.0]], dtype=np.float32)


def _train(seed, ckpt=None, progress=None, ctx=None, stop_at=None):
    """Least squares y = x W by SGD, evaluated every 10 steps: the whole experiment-specific part."""
    torch.manual_seed(seed)
    model = torch.nn.Linear(2, 1, bias=False)
    tr = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), ctx or single("cpu"))
    st = {"step": 0, "curve": [], "losses": [], "seconds": 0.0}

    def batch(step):
        if step == stop_at:
            _ckpt.STOP.signum = 2                        # as a SIGINT would: checkpoint, then stop
        x = np.random.default_rng([seed, step]).standard_normal((8, 2)).astype(np.float32)
        return x, x @ TRUE_W, 8

    def evaluate(step, loss):
        if step % 10:
            return None
        err = float(np.abs(model.weight.detach().numpy().T - TRUE_W).max())
        st["curve"].append({"step": step, "loss": loss, "w_err": err})
        return {"err": err}

    def record(status):
        return {"key": f"toy|seed{seed}", "config": {"seed": seed}, "status": status, "curve": st["curve"],
                "w": model.weight.detach().numpy().ravel().tolist()}
    return fit(tr, st, STEPS, batch, lambda out, y: ((out - y) ** 2).sum(), evaluate, record, f"toy|seed{seed}",
               ckpt, progress)


def _experiment(stop_at=None):
    def plan(args, ctx):
        return [Job(f"toy|seed{s}", f"toy s{s}", STEPS, lambda ckpt, progress, ctx, s=s: _train(
            s, ckpt, progress, ctx, stop_at if s == 1 else None)) for s in args.seeds], "toy"

    def markdown(runs, meta):
        return "# toy\n\n" + "\n".join(f"- seed {r['config']['seed']}: error {r['curve'][-1]['w_err']:.4f}"
                                       for r in runs if r["status"] == "done") + "\n"
    return Experiment("toy", RunSchema(done=("w",), curve=("w_err",), types={"w": "list"}),
                      lambda r: f"toy|seed{r['config']['seed']}",
                      ("report.md",), plan, markdown, lambda runs, out: None, lambda runs: bool(runs))


def _args(out, seeds):
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+")
    ap.add_argument("--scale", default="toy")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--quiet", action="store_true")
    add_run_arguments(ap, ckpt_every=5)
    return ap.parse_args(["--seeds", *map(str, seeds), "--quiet"]), out


@pytest.fixture(autouse=True)
def _clear_stop():
    yield
    _ckpt.STOP.signum = None


def test_an_experiment_is_its_plan_and_report(tmp_path, capsys):
    args, out = _args(tmp_path, [0, 1])
    assert drive(_experiment(), args, ["--seeds", "0", "1"], out) == 0
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["program"] == "ddesys.experiments.toy" and data["schema"] == SCHEMA_VERSION
    runs = {r["key"]: r for r in data["runs"]}
    assert sorted(runs) == ["toy|seed0", "toy|seed1"]
    for r in runs.values():                              # least squares converged toward the true weights
        assert [p["step"] for p in r["curve"]] == [10, 20, 30]
        np.testing.assert_allclose(r["w"], TRUE_W.ravel(), atol=0.05)
    assert (tmp_path / "report.md").read_text().startswith("# toy")
    assert drive(_experiment(), args, ["--seeds", "0", "1"], out) == 0   # a rerun skips both
    assert "2 runs (2 already in" in capsys.readouterr().out
    assert not list(tmp_path.glob(".*.claim")) and not list(tmp_path.glob("checkpoints/*"))


def test_an_interrupted_toy_run_resumes_to_the_same_weights(tmp_path):
    straight = _train(1)
    args, out = _args(tmp_path, [1])
    assert drive(_experiment(stop_at=12), args, ["--seeds", "1"], out) == 130          # stopped, checkpointed
    assert not (tmp_path / "results.json").exists() or not json.loads((tmp_path / "results.json").read_text())["runs"]
    _ckpt.STOP.signum = None
    assert drive(_experiment(), args, ["--seeds", "1"], out) == 0                     # resumed
    (run,) = json.loads((tmp_path / "results.json").read_text())["runs"]
    assert run["w"] == straight["w"] and run["curve"] == straight["curve"]
