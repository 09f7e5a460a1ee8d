"""One model specification for every experiment (experiments._models): labels derived from it and read
back once, stored results still read (their labels, keys and models), and the builders give the models
the labels gave before."""
from __future__ import annotations

import dataclasses
import inspect
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from ddesys import nn as dnn
from ddesys.experiments._models import (EXPLORE_RULES, FAMILIES, FLIP_EXPLORE, FLIP_EXPLORE_P, FLIP_PAUSE_BELOW,
                                        FLIP_TESTS, ModelSpec, TapSchedule, model_of, parse_models)

ROOT = Path(__file__).parents[2]
STORED = [ROOT / "tests/data/synthetic_results_2026-11-29.json"] + sorted(
    p for p in (ROOT / "docs/experiments").glob("*/results.json"))


def test_labels_are_derived_and_read_back():
    assert [m.label for m in parse_models(FAMILIES)] == list(FAMILIES)
    assert ModelSpec("ds4d", tap=TapSchedule()).label == "ds4d-tap"
    assert ModelSpec("s4d", clock="given").label == "s4d-clock"
    assert ModelSpec("ds4d", clock="learned").label == "ds4d-gate"
    assert ModelSpec.from_label("ds4d-tap").tap == TapSchedule(64.0, 0.6)
    assert ModelSpec.from_label("ds4d-tap", tap=TapSchedule(8.0)).tap.w0 == 8.0
    assert ModelSpec("ds4d", options={"p0": 0.1, "init": "lin"}).options == (("init", "lin"), ("p0", 0.1))
    for bad in ("ds4", "ds4d-clk", "ds4d-clock-tap", "s4d-tap", "lstm-clock", ""):
        with pytest.raises(ValueError):
            ModelSpec.from_label(bad)
    with pytest.raises(ValueError):
        ModelSpec("s4d", tap=TapSchedule())
    with pytest.raises(ValueError):
        ModelSpec("ds4d", clock="sometimes")


@pytest.mark.parametrize("path", STORED, ids=lambda p: str(p.relative_to(ROOT)))
def test_stored_results_read_their_models(path):
    """The migration of stored runs: every run's label names a specification that gives the label back
    (older files are read, their keys and reports unchanged)."""
    data = json.loads(path.read_text())
    runs = data.get("runs", [])
    for r in runs:
        spec = model_of(r["config"])
        arch = r["config"].get("arch", r["config"])
        assert spec.label == arch["family"]
        if spec.tap is not None:                 # the delay task stores its schedule, synthetic runs the default
            stored = (arch["tap_w0"], arch["tap_frac"]) if "tap_w0" in arch else (
                r["tap_schedule"]["w0"], r["tap_schedule"]["frac"])
            assert (spec.tap.w0, spec.tap.frac) == stored


def _configs(program_free_field):
    for path in STORED:
        for r in json.loads(path.read_text()).get("runs", []):
            if program_free_field(r["config"]):
                yield r["config"]


def test_configs_store_the_label_as_before():
    """A run's config built from the specification is the stored dict, in its order (hence its key)."""
    import dataclasses

    from ddesys.experiments.general.train import RunConfig as GeneralRun
    from ddesys.experiments.synthetic.tasks import Task
    from ddesys.experiments.synthetic.train import RunConfig, run_key
    fields = [f.name for f in dataclasses.fields(Task)]
    n = 0
    for c in _configs(lambda c: isinstance(c.get("task"), dict) and "family" in c):
        task = Task(**{k: v for k, v in c["task"].items() if k in fields})
        cfg = RunConfig(task, model_of(c), **{k: v for k, v in c.items() if k not in ("task", "family")})
        assert cfg.to_dict() == c and list(cfg.to_dict()) == list(c) and cfg.key() == run_key(c)
        n += 1
    for c in _configs(lambda c: "epochs" in c):
        cfg = GeneralRun(model=model_of(c), **{k: v for k, v in c.items() if k != "family"})
        assert cfg.to_dict() == c and list(cfg.to_dict()) == list(c)
        n += 1
    assert n > 100


def _same(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    return list(sa) == list(sb) and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("label", ["ds4d", "ds4d-tap", "s4d", "ds4d-clock", "s4d-clock", "ds4d-gate", "s4d-gate",
                                   "ds4d-tick", "s4d-tick"])
def test_the_spec_builds_what_the_label_built(label):
    """``ModelSpec.sequence_model`` is the model the synthetic experiment built from the label before:
    the same layer keywords (the tap on the base rate), the same clock, the same parameters."""
    spec = ModelSpec.from_label(label)
    kw = {"d_state": 8, "init": "lin", "dt_lr": 1e-4, "seed": 0}
    if spec.is_ds4d:
        kw["l_max"] = 24
    old = dict(kw, **({"tap": True, "tap_lr": None} if spec.tap is not None else {}))
    clock = {None: None, "given": dnn.TokenClock((0,)), "learned": "learned", "binary": "binary"}[spec.clock]
    torch.manual_seed(0)
    ref = dnn.SequenceModel(12, 12, d_model=8, n_layers=2, layer=spec.layer, layer_kw=old, embedding=True, clock=clock)
    torch.manual_seed(0)
    new = spec.sequence_model(12, 12, kw, pad=(0,), d_model=8, n_layers=2, embedding=True)
    assert _same(ref, new)
    x = torch.randint(0, 12, (2, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(ref(x), new(x))


def test_one_tap_schedule():
    """The synthetic and the delay experiments step the same schedule object (w0 -> 1 at frac)."""
    from ddesys.experiments.delay.models import Arch, tap_schedule
    spec = ModelSpec.from_label("ds4d-tap", tap=TapSchedule(8.0, 0.5))
    model = spec.sequence_model(1, 1, {"d_state": 4, "l_max": 16}, d_model=4, n_layers=1)
    sched = spec.tap.schedule(model, 10)
    assert type(sched) is dnn.TapWidthSchedule and [m.tap_width for m in model.modules()
                                                      if isinstance(m, dnn.DS4D)] == [pytest.approx(8.0)]
    assert type(tap_schedule(Arch(spec), model, 10)) is dnn.TapWidthSchedule
    assert ModelSpec("ds4d").sequence_model(1, 1, {"d_state": 4, "l_max": 16}, d_model=4, n_layers=1) is not None
    assert tap_schedule(Arch(), model, 10) is None


def test_binary_clock_trains_with_its_time_cost():
    """``-tick`` runs carry the time cost in their config (and key) and add it to the loss; others have none."""
    from ddesys.experiments._models import TIME_COST
    from ddesys.experiments.synthetic.tasks import preset
    from ddesys.experiments.synthetic.train import RunConfig, loss_with
    from ddesys.nn.learned_clock import TimeCost
    task = preset("copy", "variable", "smoke")
    spec = ModelSpec.from_label("s4d-tick")
    assert spec.clock == "binary" and spec.counts_ticks
    cfg = RunConfig(task, spec, 8)
    assert cfg.time_cost == TIME_COST and cfg.to_dict()["time_cost"] == TIME_COST
    assert RunConfig(task, spec, 8, time_cost={**TIME_COST, "after": 0.0}).key() != cfg.key()
    assert "time_cost" not in RunConfig(task, ModelSpec.from_label("s4d-gate"), 8).to_dict()
    with pytest.raises(ValueError, match="time_cost"):
        RunConfig(task, ModelSpec.from_label("s4d-gate"), 8, time_cost=TIME_COST)
    model = spec.sequence_model(12, 12, {"d_state": 4, "seed": 0}, d_model=8, n_layers=2, embedding=True)
    cost = TimeCost(model, **cfg.time_cost)
    assert cost.n_clocks == 2
    x = torch.randint(0, 12, (2, 10), generator=torch.Generator().manual_seed(0))
    labels = torch.full((2, 10), -100)
    labels[:, 6:] = 3
    now = {"step": 1}
    loss = loss_with(cost, lambda: now["step"])
    logits = model(x)
    ticks = [float(blk.layer.gate(blk.norm(h)).mean()) for blk, h in _block_inputs(model, x)]
    plain = torch.nn.functional.cross_entropy(logits.reshape(-1, 12), labels.reshape(-1), reduction="sum")
    assert abs(float(loss(logits, labels) - plain) - TIME_COST["weight"] * 8 * np.mean(ticks)) < 1e-4
    now["step"] = TIME_COST["steps"] + 1
    model(x)
    assert abs(float(loss(logits, labels) - plain) - TIME_COST["after"] * 8 * np.mean(ticks)) < 1e-4


def _block_inputs(model, x):
    h = model.encoder(x)
    for blk in model.blocks:
        yield blk, h
        h = blk(h)


def test_time_cost_on_the_command_line_reaches_only_the_binary_clocks(capsys):
    from ddesys.experiments.synthetic import __main__ as cli
    args = cli._parse(["--tasks", "copy", "--protocols", "variable", "--models", "s4d-tick", "s4d",
                       "--time-cost", "0.9", "200", "0.01", "--seeds", "0"])
    jobs, _ = cli._plan(args, None)
    keys = [j.key for j in jobs]
    tick = next(k for k in keys if "s4d-tick" in k)
    default = cli._plan(cli._parse(["--tasks", "copy", "--protocols", "variable", "--models", "s4d-tick",
                                    "--seeds", "0"]), None)[0][0].key
    assert tick != default                                           # the cost is part of the run's identity
    assert any("|s4d|" in k for k in keys)                           # S4D runs without a cost, as always
    for bad in (["-1", "10", "0"], ["0.3", "1.5", "0"], ["0.3", "10", "-0.1"]):
        with pytest.raises(SystemExit):
            cli._parse(["--models", "s4d-tick", "--time-cost", *bad])
        assert "--time-cost" in capsys.readouterr().err
    with pytest.raises(SystemExit):                                  # no model it would reach
        cli._parse(["--models", "s4d", "llama", "--time-cost", "0.3", "100", "0.03"])
    assert "-tick or -idclock model" in capsys.readouterr().err


def test_gate_lr_gives_the_binary_gates_their_own_rate(monkeypatch, capsys):
    """``gate_lr`` puts every binary gate's ``w`` and ``b`` (and nothing else) in a group of their own, at
    the base rate during the time cost's first phase and at ``gate_lr`` after it; it is part of the run's
    identity when set, absent from the config (old keys) when not, refused for models without a binary
    clock, on the command line too."""
    import torch

    from ddesys.experiments.synthetic import __main__ as cli
    from ddesys.experiments.synthetic.tasks import preset
    from ddesys.experiments.synthetic.train import RunConfig, train_run
    from ddesys.nn.learned_clock import HardGateClock
    task = preset("copy", "variable", "smoke")
    spec = ModelSpec.from_label("s4d-tick")
    base = RunConfig(task, spec, 8, n_layers=2, d_state=4, steps=1, batch=2, eval_every=1, val_size=4)
    slow = RunConfig(task, spec, 8, n_layers=2, d_state=4, steps=3, batch=2, eval_every=3, val_size=4, gate_lr=1e-5,
                     time_cost={"weight": 0.3, "steps": 2, "after": 0.03})
    assert "gate_lr" not in base.to_dict() and slow.to_dict()["gate_lr"] == 1e-5 and slow.key() != base.key()
    with pytest.raises(ValueError, match="gate_lr"):
        RunConfig(task, ModelSpec("s4d"), 8, gate_lr=1e-4)
    with pytest.raises(ValueError, match="gate_lr"):
        RunConfig(task, spec, 8, gate_lr=-1e-4)
    assert RunConfig(task, spec, 8, gate_lr=0.0).gate_lr == 0.0                # frozen after the cost's phase
    seen = []
    adamw = torch.optim.AdamW

    rates = []

    def spy(groups, **kw):
        opt = adamw(groups, **kw)
        seen.append(opt)
        step = opt.step

        def step_and_see(*a, **k):                                     # the gates' rate at each step
            rates.append(next(g["lr"] for g in opt.param_groups if len(g["params"]) == 4))
            return step(*a, **k)
        opt.step = step_and_see
        return opt
    monkeypatch.setattr(torch.optim, "AdamW", spy)
    models = []
    real = HardGateClock.__init__

    def keep(self, *a, **k):
        real(self, *a, **k)
        models.append(self)
    monkeypatch.setattr(HardGateClock, "__init__", keep)
    train_run(slow)
    gates = {id(p) for g in models for p in (g.w, g.b)}
    assert len(gates) == 4
    for group in seen[0].param_groups:
        ids = {id(p) for p in group["params"]}
        assert ids.isdisjoint(gates) or ids == gates
    assert any({id(p) for p in g["params"]} == gates for g in seen[0].param_groups)
    assert rates == [1e-3, 1e-3, 1e-5]
    args = cli._parse(["--tasks", "copy", "--protocols", "variable", "--models", "s4d-tick", "s4d",
                       "--gate-lr", "1e-4", "--seeds", "0"])
    jobs, _ = cli._plan(args, None)
    (tick,) = [j.key for j in jobs if "s4d-tick" in j.key]
    plain = cli._plan(cli._parse(["--tasks", "copy", "--protocols", "variable", "--models", "s4d-tick",
                                  "--seeds", "0"]), None)[0][0].key
    assert tick != plain                                             # the rate reached the -tick run
    for bad in (["--models", "s4d", "--gate-lr", "1e-4"], ["--models", "s4d-tick", "--gate-lr", "-1"]):
        with pytest.raises(SystemExit):
            cli._parse(bad)
        assert "--gate-lr" in capsys.readouterr().err


def test_gate_detach_reaches_the_gates_and_is_part_of_the_run(monkeypatch, capsys):
    """``gate_detach`` makes every binary gate read its input detached in the run's model; it is part of the
    run's identity when set, absent from the config when not, refused for models without a binary clock
    (on the command line too)."""
    from ddesys.experiments.synthetic import __main__ as cli
    from ddesys.experiments.synthetic.tasks import preset
    from ddesys.experiments.synthetic.train import RunConfig, train_run
    from ddesys.nn.learned_clock import HardGateClock
    task = preset("copy", "variable", "smoke")
    spec = ModelSpec.from_label("s4d-tick")
    kw = dict(n_layers=2, d_state=4, steps=1, batch=2, eval_every=1, val_size=4)
    base, det = RunConfig(task, spec, 8, **kw), RunConfig(task, spec, 8, gate_detach=True, **kw)
    assert "gate_detach" not in base.to_dict() and det.to_dict()["gate_detach"] is True and det.key() != base.key()
    for bad in (dict(model=ModelSpec("s4d"), gate_detach=True), dict(model=spec, gate_detach=False)):
        with pytest.raises(ValueError, match="gate_detach"):
            RunConfig(task, bad.pop("model"), 8, **bad)
    gates = []
    real = HardGateClock.forward

    def spy(self, x):
        gates.append(self.input_grad)
        return real(self, x)
    monkeypatch.setattr(HardGateClock, "forward", spy)
    train_run(det)
    assert gates and not any(gates)
    gates.clear()
    train_run(base)
    assert gates and all(gates)
    args = cli._parse(["--tasks", "copy", "--protocols", "variable", "--models", "s4d-tick", "--gate-detach",
                       "--seeds", "0"])
    plain = cli._parse(["--tasks", "copy", "--protocols", "variable", "--models", "s4d-tick", "--seeds", "0"])
    assert cli._plan(args, None)[0][0].key != cli._plan(plain, None)[0][0].key     # the flag reached the run
    with pytest.raises(SystemExit):
        cli._parse(["--models", "s4d", "--gate-detach"])
    assert "-tick model" in capsys.readouterr().err


def test_gate_hidden_reaches_the_gates_and_is_part_of_the_run(monkeypatch, capsys):
    """``gate_hidden`` builds every binary gate of the run's model with a hidden layer of that width (its
    parameters in the gates' own learning-rate group); part of the run's identity when set, absent when
    not, refused for other models and bad widths (on the command line too)."""
    from ddesys.experiments.synthetic import __main__ as cli
    from ddesys.experiments.synthetic.tasks import preset
    from ddesys.experiments.synthetic.train import RunConfig, train_run
    from ddesys.nn.learned_clock import HardGateClock
    task = preset("copy", "variable", "smoke")
    spec = ModelSpec.from_label("s4d-tick")
    kw = dict(n_layers=2, d_state=4, steps=1, batch=2, eval_every=1, val_size=4)
    base, mlp = RunConfig(task, spec, 8, **kw), RunConfig(task, spec, 8, gate_hidden=6, gate_lr=0.0, **kw)
    assert "gate_hidden" not in base.to_dict() and mlp.to_dict()["gate_hidden"] == 6 and mlp.key() != base.key()
    for bad in (dict(model=ModelSpec("s4d"), gate_hidden=4), dict(model=spec, gate_hidden=0)):
        with pytest.raises(ValueError, match="gate_hidden"):
            RunConfig(task, bad.pop("model"), 8, **bad)
    widths = []
    real = HardGateClock.forward

    def spy(self, x):
        widths.append(self.hidden)
        return real(self, x)
    monkeypatch.setattr(HardGateClock, "forward", spy)
    train_run(mlp)
    assert widths and set(widths) == {6}
    widths.clear()
    train_run(base)
    assert widths and set(widths) == {0}
    args = cli._parse(["--tasks", "copy", "--protocols", "variable", "--models", "s4d-tick", "--gate-hidden", "16",
                       "--seeds", "0"])
    plain = cli._parse(["--tasks", "copy", "--protocols", "variable", "--models", "s4d-tick", "--seeds", "0"])
    assert cli._plan(args, None)[0][0].key != cli._plan(plain, None)[0][0].key     # the option reached the run
    for bad, msg in ((["--models", "s4d", "--gate-hidden", "8"], "-tick model"),
                     (["--models", "s4d-tick", "--gate-hidden", "0"], "--gate-hidden")):
        with pytest.raises(SystemExit):
            cli._parse(bad)
        assert msg in capsys.readouterr().err


def test_time_cost_start_reaches_the_cost_and_is_part_of_the_run(capsys):
    """``--time-cost-start N``: the run's time cost gains ``start`` (with the default weights, or those of
    ``--time-cost``), which changes its key; runs without it keep theirs; a negative count and models
    without a binary clock are refused."""
    from ddesys.experiments.synthetic import __main__ as cli
    from ddesys.experiments._models import TIME_COST
    base = ["--tasks", "copy", "--protocols", "variable", "--models", "s4d-tick", "--seeds", "0"]
    plain, late = cli._parse(base), cli._parse(base + ["--time-cost-start", "200"])
    both = cli._parse(base + ["--time-cost", "0.9", "50", "0", "--time-cost-start", "10"])
    assert plain.time_cost is None and late.time_cost == {**TIME_COST, "start": 200}
    assert both.time_cost == {"weight": 0.9, "steps": 50, "after": 0.0, "start": 10}
    keys = [cli._plan(a, None)[0][0].key for a in (plain, late, both)]
    assert len(set(keys)) == 3
    for bad, msg in ((base + ["--time-cost-start", "-1"], "--time-cost-start"),
                     (["--models", "s4d", "--time-cost-start", "5"], "-tick or -idclock model")):
        with pytest.raises(SystemExit):
            cli._parse(bad)
        assert msg in capsys.readouterr().err


def test_clock_learned_per_id_takes_its_cost_gain_and_noise(capsys):
    """``-idclock`` models train a ``nn.LearnedTokenClock`` under the time cost; ``--clock-gain`` and
    ``--clock-noise`` reach its runs (part of their identity) and are refused for other models."""
    from ddesys import nn as dnn
    from ddesys.experiments.synthetic import __main__ as cli
    spec = ModelSpec.from_label("s4d-idclock")
    assert spec.clock == "token" and spec.time_cost and spec.counts_ticks
    m = spec.sequence_model(16, 16, {"d_state": 4}, d_model=8, n_layers=1, embedding=True)
    assert isinstance(m.clock, dnn.LearnedTokenClock) and m.clock.vocab_size == 16
    base = ["--tasks", "copy", "--protocols", "variable", "--models", "s4d-idclock", "--seeds", "0"]
    keys = {cli._plan(cli._parse(base + extra), None)[0][0].key
            for extra in ([], ["--clock-gain", "32"], ["--clock-noise", "1"], ["--time-cost", "0.3", "0", "0"])}
    assert len(keys) == 4
    for bad, msg in ((["--models", "s4d-tick", "--clock-gain", "32"], "-idclock model"),
                     (["--models", "s4d-idclock", "--clock-noise", "0"], "> 0"),
                     (["--models", "s4d", "--clock-noise", "1"], "-idclock model")):
        with pytest.raises(SystemExit):
            cli._parse(bad)
        assert msg in capsys.readouterr().err


def test_clock_learned_by_flip_tests_trains_in_the_synthetic_runs():
    """``-flipclock`` models carry a ``nn.FlipTokenClock`` (no time cost of ``nn.TimeCost``: the clock has its
    own); a run trains it on the step's batch (its decisions move, the evaluations record each padding
    id's logit; the logged loss stays the task's) and refuses the ``-idclock`` options."""
    import torch

    from ddesys import nn as dnn
    from ddesys.experiments.synthetic import __main__ as cli
    from ddesys.experiments.synthetic.tasks import preset
    from ddesys.experiments.synthetic.train import RunConfig, train_run
    spec = ModelSpec.from_label("s4d-flipclock")
    assert spec.clock == "flip" and not spec.time_cost and spec.counts_ticks
    m = spec.sequence_model(16, 16, {"d_state": 4}, d_model=8, n_layers=1, embedding=True)
    assert isinstance(m.clock, dnn.FlipTokenClock) and m.clock.vocab_size == 16
    task = preset("copy", "variable", "smoke")
    cfg = RunConfig(task, spec, 8, n_layers=1, d_state=4, steps=4, batch=2, eval_every=2, val_size=4)
    assert cfg.time_cost is None
    seen, tested = [], []
    orig = dnn.FlipTokenClock.loss

    def spy(self, tokens, loss_of):
        out = orig(self, tokens, loss_of)
        seen.append((tuple(tokens.shape), len(self.last_tests)))
        tested.append([(t["id"], t["delta"]) for t in self.last_tests])
        return out
    torch.manual_seed(0)
    dnn.FlipTokenClock.loss = spy
    try:
        out = train_run(cfg)
    finally:
        dnn.FlipTokenClock.loss = orig
    assert seen == [((2, task.length), 1)] * 4                         # one flip test per step, on its batch
    pt = out["curve"][-1]
    assert set(pt["flip"]) == {"pad_logits", "data_logit", "pauses", "logits", "tests"}
    assert len(pt["flip"]["pad_logits"]) == task.pads and len(pt["flip"]["logits"]) == 16
    since = [t for step in tested[2:] for t in step]                   # the tests of steps 3 and 4
    want = {}
    for e, d in since:
        n, s, neg = want.get(str(e), (0, 0.0, 0))
        want[str(e)] = (n + 1, s + d, neg + (d < 0))
    assert {e: (c[0], c[2]) for e, c in pt["flip"]["tests"].items()} == {e: (n, g) for e, (n, s, g) in want.items()}
    for e, (n, s, g) in want.items():
        assert pt["flip"]["tests"][e][1] == pytest.approx(s / n, abs=1e-6)
    assert pt["loss"] < 10                                             # the logged loss is the task's
    for bad in (["--models", "s4d-flipclock", "--clock-gain", "32"], ["--models", "s4d-flipclock", "--time-cost",
                                                                      "0.3", "100", "0.03"],
                ["--models", "s4d-flipclock", "--flip-cost", "-1", "0"], ["--models", "s4d", "--flip-cost", "0", "0"],
                ["--models", "s4d-flipclock", "--flip-tests", "0"], ["--models", "s4d", "--flip-tests", "2"],
                ["--models", "s4d-flipclock", "--flip-pause-below", "1.5"],
                ["--models", "s4d", "--flip-pause-below", "0"]):
        with pytest.raises(SystemExit):
            cli._parse(["--tasks", "copy", "--protocols", "variable"] + bad)
    base = ["--tasks", "copy", "--protocols", "variable", "--models", "s4d-flipclock", "--seeds", "0"]
    plans = [cli._plan(cli._parse(base + extra), None)[0][0]
             for extra in ([], ["--flip-cost", "0", "0.3"], ["--flip-tests", "1"], ["--flip-tests", "8"],
                           ["--flip-pause-below", "-1"], ["--flip-pause-below", "0"])]
    assert len({p.key for p in plans}) == 4                            # the costs, tests, threshold: the identity
    assert plans[0].key == plans[3].key != plans[2].key                # the command line's default: the clock's
    assert plans[4].key != plans[5].key and plans[0].key in (plans[4].key, plans[5].key)
    sig = inspect.signature(dnn.FlipTokenClock).parameters
    assert FLIP_TESTS == sig["tests"].default
    assert FLIP_PAUSE_BELOW == sig["pause_below"].default
    assert "flip_pause_below" not in cfg.to_dict()                     # -1: as the files written before
    assert RunConfig(task, spec, 8, flip_pause_below=-1.0).key() == RunConfig(task, spec, 8).key()
    assert RunConfig(task, spec, 8, flip_pause_below=0).to_dict()["flip_pause_below"] == 0.0
    for bad in (1.5, float("nan"), True, "0"):
        with pytest.raises(ValueError, match="flip_pause_below"):
            RunConfig(task, spec, 8, flip_pause_below=bad)
    with pytest.raises(ValueError, match="flip_pause_below"):
        RunConfig(task, ModelSpec("s4d", clock="token"), 8, flip_pause_below=0.0)
    soft = RunConfig(task, spec, 8, flip_cost=(0, 0.3))
    assert soft.to_dict()["flip_cost"] == [0.0, 0.3] and "flip_cost" not in cfg.to_dict()
    with pytest.raises(ValueError, match="flip_cost"):
        RunConfig(task, ModelSpec("s4d", clock="token"), 8, flip_cost=(0.3, 0))
    for bad in (0, True, 2.0):
        with pytest.raises(ValueError, match="flip_tests"):
            RunConfig(task, spec, 8, flip_tests=bad)
    with pytest.raises(ValueError, match="flip_tests"):
        RunConfig(task, ModelSpec("s4d", clock="token"), 8, flip_tests=2)
    assert RunConfig(task, spec, 8, flip_tests=8).to_dict()["flip_tests"] == 8 and "flip_tests" not in cfg.to_dict()
    assert RunConfig(task, spec, 8, flip_tests=1).key() == RunConfig(task, spec, 8).key()   # one test: as recorded
    built = []
    orig_init = dnn.FlipTokenClock.__init__

    def spy_init(self, *a, **kw):
        built.append(kw)
        orig_init(self, *a, **kw)
    dnn.FlipTokenClock.__init__ = spy_init
    try:
        train_run(RunConfig(task, spec, 8, n_layers=1, d_state=4, steps=1, batch=2, eval_every=1, val_size=4,
                            flip_cost=(0.1, 0.2)))
        dnn.FlipTokenClock.loss = spy
        train_run(RunConfig(task, spec, 8, n_layers=1, d_state=4, steps=2, batch=4, eval_every=1, val_size=4,
                            flip_tests=3, flip_pause_below=0.0))
    finally:
        dnn.FlipTokenClock.__init__ = orig_init
        dnn.FlipTokenClock.loss = orig
    assert {"cost": 0.1, "soft_cost": 0.2, "tests": 1, "pause_below": -1.0}.items() <= built[0].items()  # as before
    assert built[-1]["pause_below"] == 0.0
    assert built[-1]["tests"] == 3 and seen[-2:] == [((4, task.length), 3)] * 2      # three tests on a step's rows


def test_clock_learned_by_flip_tests_in_context_trains_in_the_synthetic_runs():
    """``-runclock`` models carry a ``nn.FlipRunClock`` (two decisions per id); the flip options and their
    defaults are the ``-flipclock`` models'; a run records each padding id's logit after a tick and the ids
    paused inside a run of pauses."""
    import torch

    from ddesys import nn as dnn
    from ddesys.experiments.synthetic import __main__ as cli
    from ddesys.experiments.synthetic.tasks import preset
    from ddesys.experiments.synthetic.train import RunConfig, train_run
    spec = ModelSpec.from_label("s4d-runclock")
    assert spec.clock == "run" and spec.flip_tested and not spec.time_cost and spec.counts_ticks
    assert spec.label == "s4d-runclock" and not ModelSpec.from_label("s4d-flipclock").clock == "run"
    m = spec.sequence_model(16, 16, {"d_state": 4}, d_model=8, n_layers=1, embedding=True)
    assert type(m.clock) is dnn.FlipRunClock and m.clock.vocab_size == 16 and m.clock.u.shape == (32,)
    with pytest.raises(ValueError, match="flip tests"):
        ModelSpec.from_label("s4d-idclock").flip_clock(16)
    task = dataclasses.replace(preset("copy", "variable", "smoke"), noise=0.2)
    cfg = RunConfig(task, spec, 8, n_layers=1, d_state=4, steps=4, batch=2, eval_every=2, val_size=4,
                    flip_tests=2, flip_pause_below=0.0)
    torch.manual_seed(0)
    out = train_run(cfg)
    pt = out["curve"][-1]
    assert set(pt["flip"]) == {"pad_logits", "data_logit", "pauses", "pauses_after_pause", "logits", "tests"}
    assert len(pt["flip"]["logits"]) == 32                             # both contexts' entries
    assert sum(c[0] for c in pt["flip"]["tests"].values()) == 2 * 2    # two tests a step since the last evaluation
    assert pt["loss"] < 10
    base = ["--tasks", "copy", "--protocols", "variable", "--models", "s4d-runclock", "--seeds", "0"]
    keys = [cli._plan(cli._parse(base + extra), None)[0][0].key
            for extra in ([], ["--flip-tests", str(FLIP_TESTS)], ["--flip-tests", "4"],
                          ["--flip-pause-below", str(FLIP_PAUSE_BELOW)], ["--flip-pause-below", "-1"])]
    assert keys[0] == keys[1] == keys[3] and len(set(keys)) == 3       # the flip options reach the run's identity
    flip = cli._plan(cli._parse(["--tasks", "copy", "--protocols", "variable", "--models", "s4d-flipclock",
                                 "--seeds", "0"]), None)[0][0]
    default = cli._plan(cli._parse(base), None)[0][0]
    assert flip.key != default.key                                     # another model, another run


def test_the_exploration_rule_of_a_flip_tested_clock_is_part_of_the_run(monkeypatch):
    """``--flip-explore`` / ``RunConfig.flip_explore`` names the clock's exploration rule: the command line's
    default is the clock's own, ``"each"`` keeps the identity of the runs recorded before the choice, the
    rule reaches the clock the run trains, and it is refused where no clock is learned by flip tests."""
    from ddesys.experiments.synthetic import __main__ as cli
    from ddesys.experiments.synthetic.tasks import preset
    from ddesys.experiments.synthetic.train import RunConfig, train_run
    default = inspect.signature(dnn.FlipTokenClock).parameters["explore"].default
    assert default == getattr(dnn, EXPLORE_RULES[FLIP_EXPLORE])(FLIP_EXPLORE_P)
    task, spec = preset("copy", "variable", "smoke"), ModelSpec.from_label("s4d-flipclock")
    assert RunConfig(task, spec, 8, flip_explore="each").key() == RunConfig(task, spec, 8).key()
    rows = RunConfig(task, spec, 8, flip_explore="rows")
    assert rows.to_dict()["flip_explore"] == "rows" and rows.key() != RunConfig(task, spec, 8).key()
    for bad_spec, bad in ((spec, "row"), (spec, 0.2), (ModelSpec("s4d"), "rows"), (ModelSpec("s4d", clock="token"),
                                                                                   "rows")):
        with pytest.raises(ValueError, match="flip_explore"):
            RunConfig(task, bad_spec, 8, flip_explore=bad)
    base = ["--tasks", "copy", "--protocols", "variable", "--models", "s4d-flipclock", "--seeds", "0"]
    keys = [cli._plan(cli._parse(base + extra), None)[0][0].key
            for extra in ([], ["--flip-explore", FLIP_EXPLORE], ["--flip-explore", "rows"], ["--flip-explore", "each"])]
    assert keys[0] == keys[1] and len(set(keys)) == 2 and keys[2] != keys[3]
    for bad in (["--models", "s4d", "--flip-explore", "rows"], ["--models", "s4d-flipclock", "--flip-explore", "x"]):
        with pytest.raises(SystemExit):
            cli._parse(["--tasks", "copy", "--protocols", "variable"] + bad)
    made = []
    orig = ModelSpec.flip_clock
    monkeypatch.setattr(ModelSpec, "flip_clock", lambda self, vocab, **kw: made.append(kw["explore"])
                        or orig(self, vocab, **kw))
    for label, rule in (("s4d-flipclock", "rows"), ("s4d-runclock", "rows"), ("s4d-flipclock", None)):
        cfg = RunConfig(task, ModelSpec.from_label(label), 8, n_layers=1, d_state=4, steps=2, batch=2, eval_every=2,
                        val_size=4, flip_tests=2, flip_pause_below=0.0, flip_explore=rule)
        train_run(cfg)
    assert made == [dnn.ExploreRows(FLIP_EXPLORE_P)] * 2 + [dnn.ExploreEach(FLIP_EXPLORE_P)]


def test_where_a_run_clocks_decisions_after_a_pause_start_is_part_of_the_run(monkeypatch):
    """``--flip-init-after-pause`` / ``RunConfig.flip_init_after_pause``: the clock's default keeps the identity
    of the runs recorded before the choice; another value reaches the clock; refused off ``-runclock``."""
    from ddesys.experiments.synthetic import __main__ as cli
    from ddesys.experiments.synthetic.tasks import preset
    from ddesys.experiments.synthetic.train import RunConfig
    assert inspect.signature(dnn.FlipRunClock).parameters["init_after_pause"].default == 0.55
    task, spec = preset("copy", "variable", "smoke"), ModelSpec.from_label("s4d-runclock")
    assert RunConfig(task, spec, 8, flip_init_after_pause=0.55).key() == RunConfig(task, spec, 8).key()
    assert RunConfig(task, spec, 8, flip_init_after_pause=0.45).to_dict()["flip_init_after_pause"] == 0.45
    for bad_spec, bad in ((spec, 0.0), (spec, 1.0), (spec, True), (ModelSpec.from_label("s4d-flipclock"), 0.45)):
        with pytest.raises(ValueError, match="flip_init_after_pause"):
            RunConfig(task, bad_spec, 8, flip_init_after_pause=bad)
    base = ["--tasks", "copy", "--protocols", "variable", "--models", "s4d-runclock", "--seeds", "0"]
    keys = [cli._plan(cli._parse(base + extra), None)[0][0].key
            for extra in ([], ["--flip-init-after-pause", "0.55"], ["--flip-init-after-pause", "0.45"])]
    assert keys[0] == keys[1] != keys[2]
    for bad in (["--models", "s4d-flipclock", "--flip-init-after-pause", "0.45"],
                ["--models", "s4d-runclock", "--flip-init-after-pause", "1"]):
        with pytest.raises(SystemExit):
            cli._parse(["--tasks", "copy", "--protocols", "variable"] + bad)
    assert _clock_the_run_trains(monkeypatch, task, spec, flip_init_after_pause=0.45).init_after_pause == 0.45


def test_the_share_of_flip_tests_drawn_per_entry_is_part_of_the_run(monkeypatch):
    """``--flip-by-entry`` / ``RunConfig.flip_by_entry``: 0 (the clock's default) keeps the identity of the runs
    recorded before the choice; another value reaches the clock; refused off a flip-tested clock."""
    from ddesys.experiments.synthetic import __main__ as cli
    from ddesys.experiments.synthetic.tasks import preset
    from ddesys.experiments.synthetic.train import RunConfig
    assert inspect.signature(dnn.FlipTokenClock).parameters["by_entry"].default == 0.0
    task, spec = preset("copy", "variable", "smoke"), ModelSpec.from_label("s4d-runclock")
    assert RunConfig(task, spec, 8, flip_by_entry=0).key() == RunConfig(task, spec, 8).key()
    assert RunConfig(task, spec, 8, flip_by_entry=0.5).to_dict()["flip_by_entry"] == 0.5
    for bad_spec, bad in ((spec, -0.1), (spec, 1.5), (spec, True), (ModelSpec("s4d"), 0.5)):
        with pytest.raises(ValueError, match="flip_by_entry"):
            RunConfig(task, bad_spec, 8, flip_by_entry=bad)
    base = ["--tasks", "copy", "--protocols", "variable", "--models", "s4d-flipclock", "--seeds", "0"]
    keys = [cli._plan(cli._parse(base + extra), None)[0][0].key
            for extra in ([], ["--flip-by-entry", "0"], ["--flip-by-entry", "0.5"])]
    assert keys[0] == keys[1] != keys[2]
    for bad in (["--models", "s4d", "--flip-by-entry", "0.5"], ["--models", "s4d-flipclock", "--flip-by-entry", "2"]):
        with pytest.raises(SystemExit):
            cli._parse(["--tasks", "copy", "--protocols", "variable"] + bad)
    assert _clock_the_run_trains(monkeypatch, task, spec, flip_by_entry=0.5).by_entry == 0.5


def _clock_the_run_trains(monkeypatch, task, spec, **flip):
    """The flip-tested clock a two-step run of ``spec`` with the RunConfig fields ``flip`` builds."""
    from ddesys.experiments.synthetic.train import RunConfig, train_run
    made = []
    orig = ModelSpec.flip_clock
    monkeypatch.setattr(ModelSpec, "flip_clock", lambda self, vocab, **kw: made.append(orig(self, vocab, **kw))
                        or made[-1])
    train_run(RunConfig(task, spec, 8, n_layers=1, d_state=4, steps=2, batch=2, eval_every=2, val_size=4,
                        flip_tests=2, flip_pause_below=0.0, **flip))
    return made[0]
