"""The LSTM baseline learns: its documented initialization (chrono forget and input biases over the
context, orthogonal recurrent and Glorot input weights, per gate), and a tiny fixed-lag copy that it
learns in 200 steps where PyTorch's default initialization stays at chance; the control preset of the
synthetic CLI runs every baseline on a short fixed lag at three learning rates."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ddesys.experiments._models import ModelSpec
from ddesys.experiments.synthetic import __main__ as cli
from ddesys.experiments.synthetic.models import LSTM_INIT, TokenLSTM, build
from ddesys.experiments.synthetic.tasks import IGNORE, Task
from ddesys.experiments.synthetic.train import RunConfig


def _gates(t, H):
    return {g: t[k * H:(k + 1) * H] for k, g in enumerate("ifgo")}          # PyTorch's gate order


def test_chrono_init_is_the_documented_one():
    torch.manual_seed(0)
    H, horizon = 24, 48
    m = TokenLSTM(10, H, 2, horizon=horizon)
    assert LSTM_INIT == "chrono" and m.init == "chrono"
    for k in range(2):
        b_ih = _gates(getattr(m.lstm, f"bias_ih_l{k}").detach(), H)
        b_hh = getattr(m.lstm, f"bias_hh_l{k}").detach()
        assert torch.equal(b_hh, torch.zeros(4 * H))
        u = torch.exp(b_ih["f"])                                 # forget bias log(u), u in [1, horizon - 1]
        assert u.min() >= 1 - 1e-6 and u.max() <= horizon - 1 + 1e-4 and u.std() > 1
        assert torch.equal(b_ih["i"], -b_ih["f"])                # input bias: its negative
        assert torch.equal(b_ih["g"], torch.zeros(H)) and torch.equal(b_ih["o"], torch.zeros(H))
        w_hh = _gates(getattr(m.lstm, f"weight_hh_l{k}").detach(), H)
        for w in w_hh.values():                                  # orthogonal per gate
            assert torch.allclose(w @ w.T, torch.eye(H), atol=1e-5)
        bound = math.sqrt(6 / (2 * H))                           # Glorot-uniform, per gate (H x H)
        for w in _gates(getattr(m.lstm, f"weight_ih_l{k}").detach(), H).values():
            assert w.abs().max() <= bound and w.abs().max() > 0.8 * bound


def test_unit_forget_and_torch_inits():
    torch.manual_seed(0)
    H = 16
    b = _gates(TokenLSTM(8, H, 1, init="unit-forget").lstm.bias_ih_l0.detach(), H)
    assert torch.equal(b["f"], torch.ones(H)) and all(torch.equal(b[g], torch.zeros(H)) for g in "igo")
    torch.manual_seed(0)
    torch.nn.Embedding(8, H)                                      # TokenLSTM draws its embedding first
    ref = torch.nn.LSTM(H, H, 1, batch_first=True)                # then PyTorch's own initialization
    torch.manual_seed(0)
    old = TokenLSTM(8, H, 1, init="torch").lstm
    assert all(torch.equal(a, b) for a, b in zip(ref.parameters(), old.parameters()))
    with pytest.raises(ValueError, match="init must be one of"):
        TokenLSTM(8, H, 1, init="zeros")


def test_build_and_run_config_carry_the_init():
    task = Task("copy", 4, 4, 4, 8)
    m = build(ModelSpec("lstm"), task.vocab, 16, 2, task.length, lstm_init="unit-forget")
    assert m.init == "unit-forget"
    lstm = RunConfig(task, ModelSpec("lstm"), 16, init="chrono").to_dict()
    s4d = RunConfig(task, ModelSpec("s4d"), 16).to_dict()
    assert lstm["init"] == "chrono" and "init" not in s4d                 # other models' keys unchanged
    assert "init" not in RunConfig(task, ModelSpec("lstm"), 16).to_dict()  # PyTorch's, as in older files
    assert RunConfig(task, ModelSpec("lstm"), 16).key() != RunConfig(task, ModelSpec("lstm"), 16,
                                                                      init="chrono").key()
    with pytest.raises(ValueError, match="init is an LSTM's"):
        RunConfig(task, ModelSpec("s4d"), 16, init="chrono")


def _copy_accuracy(init, steps=200, seed=0):
    """A 1-layer, H = 16 LSTM on copy of 4 tokens after a lag of 12 (look-back 16 steps): Adam at 1e-2,
    batch 32; accuracy on 512 fresh sequences (chance 1/6)."""
    task = Task("copy", 4, 12, 12, 8)
    torch.manual_seed(seed)
    m = TokenLSTM(task.vocab, 16, 1, horizon=task.length, init=init)
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    for s in range(steps):
        x, y, _ = (torch.from_numpy(a) for a in task.sample(32, np.random.default_rng([seed, s])))
        loss = F.cross_entropy(m(x).flatten(0, 1), y.flatten(), ignore_index=IGNORE)
        opt.zero_grad()
        loss.backward()
        opt.step()
    x, y, _ = (torch.from_numpy(a) for a in task.sample(512, np.random.default_rng(999)))
    with torch.no_grad():
        pred = m(x).argmax(-1)
    sup = y != IGNORE
    return float((pred[sup] == y[sup]).float().mean()), 1 / task.data_max


def test_chrono_lstm_learns_a_short_copy_where_the_default_stays_at_chance():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)                  # tiny matrices: more threads only contend (2 shared cores)
    try:
        with torch.random.fork_rng():
            new, chance = _copy_accuracy("chrono")
            old, _ = _copy_accuracy("torch")
    finally:
        torch.set_num_threads(threads)
    assert old < chance + 0.08                # PyTorch's default: forget gate 0.5, nothing reaches 16 back
    assert new > 0.6 > 3 * chance             # measured 0.86 (seeds 0-2: 0.86, 0.88, 0.68)


def test_control_preset_is_short_fixed_copy_with_every_baseline_and_the_lr_sweep():
    args = cli._parse(["--scale", "control"])
    s = cli._settings(args)
    assert [(t.name, t.T, t.P_min, t.length) for t in args.task_list] == [("copy-fixed", 16, 16, 48)]
    assert {"s4d", "ds4d", "lstm", "gpt2", "llama", "mamba"} <= set(s["models"])
    assert set(s["lrs"]) == {2e-4, 1e-3, 3e-3} and s["steps"] >= 800
    assert args.lstm_init == LSTM_INIT
    assert cli._parse(["--scale", "control", "--lstm-init", "torch"]).lstm_init == "torch"


def _run(family, lr, seed, accs, every=50):
    curve = [{"step": every * (i + 1), "loss": 1.0, "val_acc": a} for i, a in enumerate(accs)]
    best = max(range(len(accs)), key=lambda i: (accs[i], -i))
    cfg = {"task": {"name": "copy-fixed", "kind": "copy", "T": 2, "P_min": 2, "P_max": 2, "vocab": 6,
                    "data_max": 4, "length": 6},
           "family": family, "width": 8, "lr": lr, "seed": seed, "steps": every * len(accs)}
    return {"config": cfg, "status": "done", "curve": curve, "best_acc": accs[best],
            "best_step": curve[best]["step"], "n_params": 100}


def test_report_sweeps_the_rates_and_breaks_ties_by_steps():
    from ddesys.experiments.synthetic import report as R
    runs = [_run("s4d", 2e-4, 0, [0.5, 0.8, 1.0, 1.0]), _run("s4d", 1e-3, 0, [0.95, 1.0, 1.0, 1.0]),
            _run("mamba", 1e-3, 0, [0.1, 0.1, 0.3, 0.5]), _run("mamba", 1e-3, 1, [0.1, 0.2, 0.5, 0.7]),
            _run("mamba", 3e-3, 0, [0.2, 0.92, 0.9, 0.97])]
    best = R.best_lr_runs(runs)
    assert best[("copy-fixed", "s4d")][0] == 1e-3              # both 1.000: the faster rate
    assert best[("copy-fixed", "mamba")][0] == 3e-3
    lrs, rows = R.lr_table(runs)
    assert lrs == [2e-4, 1e-3, 3e-3]
    assert rows[0] == ("copy-fixed", "s4d", 1e-3, ["1.000 +- 0.000 (90% at 150)", "1.000 +- 0.000 (90% at 50)", "-"])
    assert rows[1] == ("copy-fixed", "mamba", 3e-3, ["-", "0.600 +- 0.100 (never 90%)", "0.970 +- 0.000 (90% at 100)"])
    assert "| copy-fixed | mamba | 0.003 | - | 0.600 +- 0.100 (never 90%) |" in R.markdown(runs, {})


def test_report_tells_apart_runs_with_and_without_a_setting():
    from ddesys.experiments.synthetic import report as R
    old = [_run("lstm", 1e-3, s, [0.07, 0.08]) for s in (0, 1)]            # stored before "init" existed
    new = [_run("lstm", 1e-3, s, [0.2, 0.3]) for s in (0, 1)]
    for r in new:
        r["config"]["init"] = "chrono"
    best = R.best_lr_runs(old + new)
    assert set(best) == {("copy-fixed", "lstm (init=None)"), ("copy-fixed", "lstm (init=chrono)")}
    assert all(len(runs) == 2 for _, runs in best.values())                # never averaged together
