"""experiments/synthetic: task data against loop-built references, model plumbing (shapes, causality,
parameter matching), DS4D ablations against brute-force kernels, the resumable CLI."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from ddesys.experiments._models import ModelSpec
from ddesys.experiments.synthetic import models as M
from ddesys.experiments.synthetic.tasks import IGNORE, Task, preset
from ddesys.experiments.synthetic.train import RunConfig, ablate, train_run

try:  # tests/ on sys.path (pytest's rootdir-relative import), as in the other test files
    from nn_helpers import spec_discrete
    from ddesys.verification.reference import impulse_response
except ImportError:
    from tests.nn_helpers import spec_discrete
    from ddesys.verification.reference import impulse_response

ROOT = Path(__file__).parents[2]


def _loop_targets(kind, data, window, sigma):
    """Targets written out term by term (independent of the vectorized implementation)."""
    out = []
    for i in range(len(data)):
        if kind == "copy":
            out.append(int(data[i]))
            continue
        acc = 0.0
        for j in range(window):
            if i - j >= 0:
                acc += (math.exp(-j * j / (2 * sigma * sigma)) if kind == "wsum" else 1.0) * int(data[i - j])
        out.append(int(math.floor(acc + 0.5)))
    return out


@pytest.mark.parametrize("kind", ["copy", "sum", "wsum"])
@pytest.mark.parametrize("protocol", ["fixed", "variable"])
def test_sequences_match_the_layout_built_by_hand(kind, protocol):
    task = preset(kind, protocol, "smoke")
    tokens, labels, P = task.sample(64, np.random.default_rng(3))
    T, L = task.T, task.length
    assert tokens.shape == labels.shape == (64, L)
    for b in range(64):
        data = tokens[b, :T]
        tgt = _loop_targets(kind, data, task.window, task.sigma)
        seq = list(data) + [0] * int(P[b]) + [task.go] + tgt[:-1]
        seq += [0] * (L - len(seq))
        lab = [IGNORE] * L
        for i in range(T):
            lab[T + int(P[b]) + i] = tgt[i]                          # predicted at go / at target[i-1]
        assert tokens[b].tolist() == seq and labels[b].tolist() == lab
        assert all(1 <= v <= task.data_max for v in data) and all(1 <= v <= task.vocab - 2 for v in tgt)
    if protocol == "fixed":
        assert set(P.tolist()) == {task.P_min}
    else:
        assert P.min() >= task.P_min and P.max() <= task.P_max and len(set(P.tolist())) > 1


@pytest.mark.parametrize("protocol", ["fixed", "variable"])
def test_selective_copy_spreads_the_data_in_order_over_the_first_t_plus_p_tokens(protocol):
    task = preset("select", protocol, "smoke")
    tokens, labels, P = task.sample(200, np.random.default_rng(4))
    T, L = task.T, task.length
    starts = set()
    for b in range(200):
        span = T + int(P[b])
        where = [i for i in range(span) if tokens[b, i] != 0]          # the data, found by a loop
        assert len(where) == T and all(1 <= tokens[b, i] <= task.data_max for i in where)
        data = [int(tokens[b, i]) for i in where]
        seq = list(tokens[b, :span]) + [task.go] + data[:-1]
        seq += [0] * (L - len(seq))
        lab = [IGNORE] * L
        for i in range(T):
            lab[span + i] = data[i]
        assert tokens[b].tolist() == seq and labels[b].tolist() == lab
        starts.add(where[0])
    assert len(starts) > 1                                             # not always at the start
    with pytest.raises(ValueError, match="select"):
        Task("select", T=4, P_min=4, P_max=4, vocab=16, gap=2)


def test_weighted_sum_worked_example():
    """By hand: weights 1, e^{-1/4.5}, e^{-4/4.5}, e^{-9/4.5} = 1, 0.8007, 0.4111, 0.1353 on data
    11, 8, 7, 4 give 11, 8 + 8.81 = 16.81 -> 17, 7 + 6.41 + 4.52 = 17.93 -> 18,
    4 + 5.61 + 3.29 + 1.49 = 14.38 -> 14."""
    task = Task("wsum", T=4, P_min=3, P_max=3, vocab=32, window=4, sigma=1.5)
    assert task.targets(np.array([[11, 8, 7, 4]])).tolist() == [[11, 17, 18, 14]]


@pytest.mark.parametrize("kind,window", [("copy", 1), ("sum", 4), ("sum", 3), ("wsum", 4), ("wsum", 6)])
def test_data_max_is_the_largest_value_that_fits(kind, window):
    task = Task(kind, T=8, P_min=2, P_max=2, vocab=40, window=window, sigma=2.0)
    m = task.data_max
    full = np.full((1, 8), m)
    assert task.targets(full).max() <= task.vocab - 2                # every window full of m fits
    assert task.targets(full + 1).max() > task.vocab - 2             # m + 1 would not


def test_bad_configurations_are_rejected():
    with pytest.raises(ValueError, match="vocabulary"):
        Task("sum", T=8, P_min=4, P_max=4, vocab=8, window=4)
    with pytest.raises(ValueError, match="kind"):
        Task("reverse", T=8, P_min=4, P_max=4, vocab=16)
    with pytest.raises(ValueError, match="P_min"):
        Task("copy", T=8, P_min=5, P_max=4, vocab=16)
    with pytest.raises(ValueError, match="window"):
        Task("sum", T=4, P_min=1, P_max=1, vocab=64, window=5)


def _families():
    fams = ["ds4d", "s4d", "lstm", "ds4d-clock", "s4d-clock", "ds4d-gate", "ds4d-tick"]
    try:
        import transformers  # noqa: F401
        fams += ["gpt2", "llama"]           # Mamba's CPU reference scan is covered by the same wrapper
    except ImportError:
        pass
    return fams


@pytest.mark.parametrize("family", _families())
def test_models_are_causal_token_predictors_with_matched_size(family):
    V, L, n_layers, N = 12, 24, 2, 8
    spec = ModelSpec.from_label(family)
    budget = M.n_params(M.build(ModelSpec("s4d"), V, 32, n_layers, L, N))
    w = M.match_width(spec, budget, V, n_layers, L, N)
    model = M.build(spec, V, w, n_layers, L, N, seed=0).eval()
    assert abs(M.n_params(model) - budget) <= 0.1 * budget      # widths move in steps of 2 (8 for attention)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(1, V, (3, L), generator=g)
    x[:, 3:9] = 0                                                    # padding: a clocked model pauses there
    x2 = x.clone()
    x2[:, 15:] = torch.randint(1, V, (3, L - 15), generator=g)      # change only the future
    with torch.no_grad():
        y, y2 = model(x), model(x2)
    assert y.shape == (3, L, V)
    assert torch.allclose(y[:, :15], y2[:, :15], atol=1e-5)          # teacher forcing needs causality
    assert not torch.allclose(y[:, 15:], y2[:, 15:], atol=1e-5)


def test_ablations_give_the_brute_force_kernels():
    """``mu_zero``: the kernel of h_t = lam h_{t-1} + bbar x_t; ``tau_min``: of a one-step delay
    (k = 1, alpha = 0); both from the loop oracle, float64; and the layer is restored afterwards."""
    model = M.build(ModelSpec("ds4d"), 8, 4, 1, 40, 8, seed=1).double()
    layer = [m for m in model.modules() if m.__class__.__name__ == "DS4D"][0]
    lam, mu, bbar, c, delay, _ = spec_discrete(layer)
    L = 40
    K0 = layer.kernel(L, M=8 * L).detach().numpy()
    cases = {"mu_zero": (0 * mu, delay), "tau_min": (mu, np.ones_like(delay))}
    for kind, (mu_k, delay_k) in cases.items():
        with ablate(model, kind):
            K = layer.kernel(L, M=8 * L).detach().numpy()
        ref = impulse_response(lam, mu_k, bbar, c, delay_k, L)
        assert np.abs(K - ref).max() <= 1e-9 * np.abs(ref).max(), kind
    assert np.abs(layer.kernel(L, M=8 * L).detach().numpy() - impulse_response(lam, mu, bbar, c, delay, L)).max() \
        <= 1e-9 * np.abs(K0).max()
    with ablate(model, "mu_zero"):                                   # nested: both, then the outer one again
        with ablate(model, "tau_min"):
            K_both = layer.kernel(L, M=8 * L).detach().numpy()
        K_outer = layer.kernel(L, M=8 * L).detach().numpy()
    ref = impulse_response(lam, 0 * mu, bbar, c, np.ones_like(delay), L)
    assert np.abs(K_both - ref).max() <= 1e-9 * np.abs(ref).max()
    ref = impulse_response(lam, 0 * mu, bbar, c, delay, L)
    assert np.abs(K_outer - ref).max() <= 1e-9 * np.abs(ref).max()
    assert layer.ablation is None


def test_training_run_reports_curve_and_mechanism_and_stops_on_divergence(monkeypatch):
    task = preset("copy", "fixed", "smoke")
    res = train_run(RunConfig(task, ModelSpec("ds4d"), 8, n_layers=1, d_state=4, steps=6, batch=4, eval_every=3,
                              val_size=16))
    assert [p["step"] for p in res["curve"]] == [3, 6]
    assert 0.0 <= res["best_acc"] <= 1.0 and res["best_step"] in (3, 6)
    mech = res["mechanism"]
    assert set(mech) >= {"mean_delay", "mean_abs_dtau", "mean_abs_dmu", "acc", "acc_tau_min", "acc_mu_zero"}
    assert mech["acc"] == pytest.approx(res["best_acc"])             # measured at the best checkpoint
    json.dumps(res)
    from types import SimpleNamespace

    from ddesys.experiments.synthetic import train as train_mod
    ce = torch.nn.functional.cross_entropy
    monkeypatch.setattr(train_mod, "F", SimpleNamespace(cross_entropy=lambda *a, **k: ce(*a, **k) * float("nan")))
    with pytest.raises(FloatingPointError, match="loss became nan at step 1"):
        train_run(RunConfig(task, ModelSpec("lstm"), 8, n_layers=1, steps=5, batch=4, eval_every=5, val_size=8))


def test_a_learned_clock_run_records_its_clocks_at_every_evaluation():
    """A gate flip shows in the curve: every evaluation of a ``-tick`` run stores each layer's fraction of
    ticking tokens at the padding and elsewhere (a 0/1 clock); runs without a learned clock store none."""
    task = preset("copy", "variable", "smoke")
    res = train_run(RunConfig(task, ModelSpec.from_label("s4d-tick"), 8, n_layers=2, d_state=4, steps=4, batch=4,
                              eval_every=2, val_size=8))
    assert [p["step"] for p in res["curve"]] == [2, 4]
    for p in res["curve"]:
        assert len(p["clock"]) == 2
        assert all(0.0 <= c[k] <= 1.0 for c in p["clock"] for k in ("pad", "tokens"))
    assert res["curve"][-1]["clock"] == res["clock"]          # the same probe set: val_size <= CLOCK_PROBE
    plain = train_run(RunConfig(task, ModelSpec("s4d"), 8, n_layers=1, d_state=4, steps=2, batch=4, eval_every=2,
                                val_size=8))
    assert "clock" not in plain["curve"][-1] and "clock" not in plain


def test_cli_smoke_run_writes_report_and_resumes(tmp_path):
    cmd = [sys.executable, "-m", "ddesys.experiments.synthetic", "--scale", "smoke", "--tasks", "copy", "--protocols",
           "fixed", "--models", "ds4d", "s4d", "--steps", "4", "--eval-every", "2", "--quiet", "--out", str(tmp_path)]
    env = dict(os.environ, MPLBACKEND="Agg")
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    data = json.loads((tmp_path / "results.json").read_text())
    assert [r["config"]["family"] for r in data["runs"]] == ["ds4d", "s4d"]
    assert (tmp_path / "curves.png").stat().st_size > 0
    text = (tmp_path / "report.md").read_text()
    assert "| copy-fixed | ds4d |" in text and "acc tau_min" in text
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0 and "2 already in" in res.stdout


@pytest.mark.slow
def test_ds4d_learns_delay_copy_at_cpu_scale():
    """The paper's headline at CPU scale: DS4D solves fixed-delay copy (T = 16 tokens, lag 1024)."""
    task = preset("copy", "fixed", "cpu")
    res = train_run(RunConfig(task, ModelSpec("ds4d"), 56, n_layers=2, d_state=64, steps=600, batch=32, eval_every=100))
    assert res["best_acc"] >= 0.99
    assert res["mechanism"]["acc_mu_zero"] < 0.5 and res["mechanism"]["acc_tau_min"] < 0.5


def test_filler_gap_layout_and_unchanged_keys():
    """``gap`` filler tokens (id V-2) sit between the data and the padding; the look-back becomes
    T + gap + P; a task without a filler keeps its config (hence its run keys) as before."""
    import dataclasses
    t = dataclasses.replace(preset("copy", "variable", "smoke"), gap=5)
    x, y, P = t.sample(3, np.random.default_rng(1))
    T = t.T
    assert t.length == 2 * T + 5 + t.P_max and t.ticks == 2 * T + 5 and t.data_max == t.vocab - 3
    for b in range(3):
        assert (x[b, T:T + 5] == t.vocab - 2).all() and (x[b, T + 5:T + 5 + P[b]] == 0).all()
        go = T + 5 + P[b]
        assert x[b, go] == t.go and (y[b, go:go + T] == x[b, :T]).all()
        assert ((x[b, :T] >= 1) & (x[b, :T] <= t.vocab - 3)).all()
    assert "gap" not in preset("copy", "variable", "smoke").to_dict() and t.to_dict()["gap"] == 5
    with pytest.raises(ValueError, match="gap"):
        dataclasses.replace(t, gap=-1)


def test_evaluate_reads_the_supervised_positions_with_a_filler_gap():
    """``evaluate``'s accuracy is :func:`accuracy`'s (the supervised positions) with and without a gap."""
    import dataclasses
    from ddesys.experiments.synthetic.train import accuracy, evaluate
    for gap in (0, 5):
        task = dataclasses.replace(preset("copy", "variable", "smoke"), gap=gap)
        model = M.build(ModelSpec("s4d"), task.vocab, 8, 1, task.length, 8, seed=0)
        x, y, p = (torch.from_numpy(a) for a in task.sample(64, np.random.default_rng(0)))
        acc = accuracy(model, x, y)                         # an untrained model: right at some positions
        det = evaluate(model, x, y, p, task)
        assert acc > 0 and det["acc"] == pytest.approx(acc)
        assert sum(det["by_position"]) / len(det["by_position"]) == pytest.approx(acc)
