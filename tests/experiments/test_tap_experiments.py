"""The DS4D input tap in the experiments (family ``ds4d-tap`` of experiments/delay and
experiments/synthetic): both CLIs run it parameter-matched, the window schedule is stepped once per
optimizer step down to width 1 at 60% of the steps, interrupted runs resume bit for bit, the older
variants' results keys do not change, and the Trainer takes several schedulers."""
import json
from pathlib import Path

import pytest
import torch

from ddesys.experiments import _train
from ddesys.experiments._ckpt import SIGNAL_AT_ENV
from ddesys.experiments._dist import single
from ddesys.experiments.delay import models as M
from ddesys.experiments.delay.__main__ import main as delay_main
from ddesys.experiments.delay.train import run_key
from ddesys.experiments.synthetic.__main__ import SCALES
from ddesys.experiments.synthetic.__main__ import main as synthetic_main

ROOT = Path(__file__).parents[2]
DELAY = ["--scale", "smoke", "--quiet"]
SYNTH = ["--scale", "smoke", "--tasks", "copy", "--protocols", "fixed", "--quiet"]


def _runs_of(out):
    return json.loads((Path(out) / "results.json").read_text())["runs"]


def _strip(run):
    return {k: v for k, v in run.items() if k != "seconds"}


def _final_state(out):
    (path,) = list((Path(out) / "checkpoints").glob("*.pt"))
    return torch.load(path, map_location="cpu", weights_only=True)


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _record_widths(monkeypatch):
    """Patch Trainer.step to record, per optimizer step, the tap widths the forward pass sees."""
    seen = []
    step = _train.Trainer.step

    def spy(self, *a):
        seen.append((a[-1], [float(m.tap_width) for m in self.raw.modules() if getattr(m, "has_tap", False)]))
        return step(self, *a)
    monkeypatch.setattr(_train.Trainer, "step", spy)
    return seen


def _expected_width(i, steps, w0=64.0, frac=0.6):
    return max(1.0, w0 ** (1 - min(1.0, i / (frac * steps))))


# ------------------------------------------------------------------------------------------ delay
def test_arch_keeps_older_dicts_and_keys():
    tap = M.Arch(M.ModelSpec("ds4d", tap=M.TapSchedule()))
    assert "tap_w0" not in M.Arch().to_dict() and "tap_frac" not in M.Arch(M.ModelSpec("s4d")).to_dict()
    assert tap.to_dict()["tap_w0"] == 64.0 and tap.to_dict()["tap_frac"] == 0.6 and tap.label() == "ds4d-tap"
    assert M.Arch(M.ModelSpec("ds4d", tap=M.TapSchedule(w0=8.0))).label() == "ds4d-tap (tap_w0=8.0)"
    assert M.Arch.from_dict(tap.to_dict()) == tap and list(tap.to_dict())[0] == "family"
    for bad in (dict(w0=0.5), dict(frac=0.0), dict(frac=1.5)):
        with pytest.raises(ValueError):
            M.TapSchedule(**bad)
    with pytest.raises(ValueError, match="ds4d-clock"):
        M.Arch(M.ModelSpec("ds4d", clock="given"))                 # the delay task has no clocked models
    runs = json.loads((ROOT / "docs/experiments/delay/results.json").read_text())["runs"]
    assert runs and all(run_key(r["config"]) == r["key"] for r in runs)       # committed results still merge


def test_delay_cli_runs_ds4d_tap_matched_with_width_one_at_the_end(tmp_path, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")
    seen = _record_widths(monkeypatch)
    assert delay_main(DELAY + ["--models", "s4d", "ds4d", "ds4d-tap", "--steps", "5", "--out", str(tmp_path)]) == 0
    s4d, ds4d, tap = _runs_of(tmp_path)
    assert [r["config"]["arch"]["family"] for r in (s4d, ds4d, tap)] == ["s4d", "ds4d", "ds4d-tap"]
    assert tap["n_params"] == pytest.approx(s4d["n_params"], rel=0.1)
    assert "tap_w0" not in ds4d["config"]["arch"] and tap["config"]["arch"]["tap_frac"] == 0.6
    dg = tap["diagnosis"]
    assert dg["tap_width"] == [1.0, 1.0] and "tap_delays" not in ds4d["diagnosis"]
    width = tap["config"]["width"]
    assert [len(s) for s in dg["tap_delays"]] == [width, width] == [len(s) for s in dg["tap_delay_init"]]
    assert dg["tap_summary"][0]["lag"] == 16 and dg["tap_mean_abs_dtau"] >= 0 and dg["rel_rmse_tap_zero"] > 0
    widths = [w for step, w in seen if w]                       # the ds4d-tap run's steps 1..5
    assert [w[0] for w in widths] == pytest.approx([_expected_width(i, 5) for i in range(5)])
    text = (tmp_path / "report.md").read_text()
    label = "ds4d-tap (d_state=8)"                               # the smoke scale's N differs from the default
    assert f"| {label}, tap delays | 16 |" in text and " tap=0 |" in text
    assert text.count(f"| {label} |") >= 6          # error, budget, delays, kernels (2 layers), ablation, response
    assert (tmp_path / "delays.png").stat().st_size > 0


def test_delay_ds4d_tap_resumes_to_the_same_bits(tmp_path, monkeypatch):
    """SIGINT after step 3 (width still > 1): the schedule is saved with the optimizer and the resumed
    run ends with the uninterrupted run's weights, optimizer, schedule and results, bit for bit."""
    args = DELAY + ["--models", "ds4d-tap", "--steps", "7", "--eval-every", "2", "--keep-checkpoints",
                    "--checkpoint-every", "1000"]
    ref, cut = tmp_path / "ref", tmp_path / "cut"
    assert delay_main(args + ["--out", str(ref)]) == 0
    monkeypatch.setenv(SIGNAL_AT_ENV, "3")
    assert delay_main(args + ["--out", str(cut)]) == 130
    mid = _final_state(cut)
    assert mid["run"]["step"] == 3 and mid["trainer"]["scheduler"] == {"i": 3}
    monkeypatch.delenv(SIGNAL_AT_ENV)
    seen = _record_widths(monkeypatch)
    assert delay_main(args + ["--out", str(cut)]) == 0
    assert [s for s, _ in seen] == [4, 5, 6, 7]                 # resumed, not restarted
    assert seen[0][1][0] == pytest.approx(_expected_width(3, 7)) and seen[0][1][0] > 1.0   # width restored too
    a, b = _final_state(ref), _final_state(cut)
    assert a["trainer"]["scheduler"] == b["trainer"]["scheduler"] == {"i": 7}
    assert _same(a["trainer"]["model"], b["trainer"]["model"])
    assert _same(a["trainer"]["optimizer"], b["trainer"]["optimizer"])
    assert [_strip(r) for r in _runs_of(ref)] == [_strip(r) for r in _runs_of(cut)]


# ------------------------------------------------------------------------------------------ synthetic
def test_synthetic_scales_and_cli_run_ds4d_tap(tmp_path, monkeypatch):
    assert "ds4d-tap" in SCALES["cpu"]["models"] and "ds4d-tap" not in SCALES["paper"]["models"]
    assert "ds4d-tap" not in SCALES["smoke"]["models"]
    monkeypatch.setenv("MPLBACKEND", "Agg")
    seen = _record_widths(monkeypatch)
    args = SYNTH + ["--models", "ds4d", "ds4d-tap", "s4d", "--steps", "5", "--eval-every", "5", "--out", str(tmp_path)]
    assert synthetic_main(args) == 0
    ds4d, tap, s4d = _runs_of(tmp_path)
    assert [r["config"]["family"] for r in (ds4d, tap, s4d)] == ["ds4d", "ds4d-tap", "s4d"]
    assert tap["n_params"] == pytest.approx(s4d["n_params"], rel=0.1)
    assert tap["tap_schedule"] == {"w0": 64.0, "frac": 0.6, "final_width": [1.0, 1.0]}
    assert "tap_schedule" not in ds4d and "acc_tap_zero" not in ds4d["mechanism"]
    mech = tap["mechanism"]
    assert mech["acc"] == tap["best_acc"] and mech["tap_width"] == 1.0      # evaluated at step 5: width 1
    assert {"mean_tap_delay", "mean_abs_dtap", "acc_tap_zero"} <= set(mech)
    widths = [w[0] for _, w in seen if w]
    assert widths == pytest.approx([_expected_width(i, 5) for i in range(5)])
    text = (tmp_path / "report.md").read_text()
    assert "| copy-fixed | ds4d-tap |" in text and "| acc tap=0 |" in text


def test_synthetic_ds4d_tap_resumes_to_the_same_bits(tmp_path, monkeypatch):
    args = SYNTH + ["--models", "ds4d-tap", "--steps", "7", "--eval-every", "2", "--keep-checkpoints",
                    "--checkpoint-every", "1000"]
    ref, cut = tmp_path / "ref", tmp_path / "cut"
    assert synthetic_main(args + ["--out", str(ref)]) == 0
    monkeypatch.setenv(SIGNAL_AT_ENV, "3")
    assert synthetic_main(args + ["--out", str(cut)]) == 130
    monkeypatch.delenv(SIGNAL_AT_ENV)
    assert synthetic_main(args + ["--out", str(cut)]) == 0
    a, b = _final_state(ref), _final_state(cut)
    assert a["trainer"]["scheduler"] == b["trainer"]["scheduler"] == {"i": 7}
    assert _same(a["trainer"]["model"], b["trainer"]["model"]) and _same(a["best_state"], b["best_state"])
    assert [_strip(r) for r in _runs_of(ref)] == [_strip(r) for r in _runs_of(cut)]


# ------------------------------------------------------------------------------------------ Trainer
class _Count:
    def __init__(self):
        self.i = 0

    def step(self):
        self.i += 1

    def state_dict(self):
        return {"i": self.i}

    def load_state_dict(self, s):
        self.i = s["i"]


def test_trainer_steps_saves_and_restores_several_schedulers():
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    lr = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    tr = _train.Trainer(model, opt, single("cpu"), sched=[lr, _Count()])
    x, y = torch.ones(3, 2).numpy(), torch.zeros(3, 1).numpy()
    for s in (1, 2):
        tr.step(x, y, lambda out, t: ((out - t) ** 2).sum(), 3, s)
    state = tr.state_dict()
    assert isinstance(state["scheduler"], list) and state["scheduler"][1] == {"i": 2}
    assert opt.param_groups[0]["lr"] == pytest.approx(0.025)
    opt2 = torch.optim.SGD(model.parameters(), lr=0.1)
    tr2 = _train.Trainer(model, opt2, single("cpu"),
                         sched=(torch.optim.lr_scheduler.StepLR(opt2, step_size=1, gamma=0.5), _Count()))
    tr2.load_state_dict(state)
    assert tr2.scheds[1].i == 2 and tr2.scheds[0].last_epoch == 2
    one = _train.Trainer(model, opt, single("cpu"), sched=_Count())
    assert one.state_dict()["scheduler"] == {"i": 0}                       # one scheduler: saved as before
    with pytest.raises(ValueError, match="scheduler states"):
        one.load_state_dict(state)
