"""Variable-delay tasks whose padding is not one id (issue 51): padding drawn from several ids, uniform or
Zipf, and data-like noise inside the gap; the targets never change, tasks with one padding id keep their
configuration (and so their run keys), and a given clock told the ids pauses at every one of them."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from ddesys.experiments._models import ModelSpec
from ddesys.experiments.synthetic import __main__ as cli
from ddesys.experiments.synthetic.models import build
from ddesys.experiments.synthetic.tasks import IGNORE, preset

BASE = preset("copy", "variable", "cpu")


def _gap_tokens(task, tokens, lags):
    """The tokens between the data (and filler) and go, per row, as one flat array."""
    start = task.T + task.gap
    return np.concatenate([tokens[b, start:start + p] for b, p in enumerate(lags)])


def test_one_padding_id_keeps_the_task_and_its_key():
    assert BASE.pads == 1 and BASE.pad_ids == (0,) and BASE.name == "copy-variable"
    assert not {"pads", "pad_dist", "noise"} & set(BASE.to_dict())
    tok, _, lags = BASE.sample(64, np.random.default_rng(0))
    assert set(np.unique(_gap_tokens(BASE, tok, lags))) == {0}


@pytest.mark.parametrize("dist", ["uniform", "zipf"])
def test_padding_from_several_ids(dist):
    task = dataclasses.replace(BASE, pads=4, pad_dist=dist)
    assert task.name == "copy-variable-pads4" + ("-zipf" if dist == "zipf" else "")
    assert task.pad_ids == (0, 12, 13, 14) and task.data_max == BASE.data_max - 3     # go is 15: ids below it
    tok, lab, lags = task.sample(512, np.random.default_rng(1))
    gap = _gap_tokens(task, tok, lags)
    ids, counts = np.unique(gap, return_counts=True)
    assert tuple(ids) == task.pad_ids
    freq = counts / counts.sum()
    want = task.pad_probs()
    assert np.abs(freq - want).max() < 0.02                       # the drawn frequencies
    if dist == "zipf":
        assert freq[0] > 1.8 * freq[1]
    short = lags < task.P_max                                     # the trailing padding is drawn too
    assert np.isin(tok[short, -1], task.pad_ids).all() and (tok[short, -1] != 0).any()
    data = tok[:, :task.T]
    sup = lab != IGNORE
    assert (lab[sup].reshape(len(tok), task.T) == data).all()     # copy: the targets are the data
    assert data.max() <= task.data_max and not np.isin(data, task.pad_ids).any()


def test_noise_inside_the_gap():
    task = dataclasses.replace(BASE, noise=0.25)
    assert task.name == "copy-variable-noise0.25" and task.ticks == task.length
    tok, lab, lags = task.sample(512, np.random.default_rng(2))
    gap = _gap_tokens(task, tok, lags)
    noisy = gap != 0
    assert abs(noisy.mean() - 0.25) < 0.02
    assert gap[noisy].min() >= 1 and gap[noisy].max() <= task.data_max
    with pytest.raises(ValueError, match="noise"):
        dataclasses.replace(BASE, noise=1.0)
    with pytest.raises(ValueError, match="pads"):
        dataclasses.replace(BASE, pads=0)


def test_the_cli_builds_the_variants_and_refuses_bad_ones(capsys):
    args = cli._parse(["--scale", "smoke", "--tasks", "copy", "--protocols", "variable", "--pads", "3",
                       "--pad-dist", "zipf", "--noise", "0.1"])
    (task,) = cli._tasks(args)
    assert (task.pads, task.pad_dist, task.noise) == (3, "zipf", 0.1)
    for bad in (["--pads", "0"], ["--pad-dist", "pareto"], ["--noise", "1.5"]):
        with pytest.raises(SystemExit) as e:
            cli._parse(["--scale", "smoke", *bad])
        assert e.value.code == 2


def test_a_given_clock_told_the_ids_pauses_at_each():
    task = dataclasses.replace(preset("copy", "variable", "smoke"), pads=3)
    model = build(ModelSpec.from_label("s4d-clock"), task.vocab, 8, 1, task.length, 8, pad=task.pad_ids)
    tok, _, lags = task.sample(16, np.random.default_rng(3))
    ticks = model.clock(torch.from_numpy(tok)).numpy()
    assert not ticks[np.isin(tok, task.pad_ids)].any() and ticks[~np.isin(tok, task.pad_ids)].all()


def test_the_pushes_on_each_padding_id_against_finite_differences():
    """:func:`diagnosis.pad_pushes` on a binary-clock model: on the last gated layer (no gate downstream) the
    cost's push is ``-weight / (layers * B * L)`` per token, and the loss's push on one id equals minus the
    finite-difference derivative of the loss when that id's clock values move (through a hook on the
    gate; on the soft clock, whose outputs depend smoothly on its values: the binary clock's push is its
    surrogate's). Pushes are total derivatives: on the first layer they include the effect through the
    second."""
    import torch.nn.functional as F

    from ddesys.experiments.synthetic.diagnosis import pad_pushes, table
    task = dataclasses.replace(preset("copy", "variable", "smoke"), pads=3)
    torch.manual_seed(0)
    model = build(ModelSpec.from_label("s4d-tick"), task.vocab, 8, 2, task.length, 8, seed=0,
                  ticks=task.ticks, pad=task.pad_ids).double()
    tok, lab, _ = (torch.from_numpy(a) for a in task.sample(8, np.random.default_rng(4)))
    rows = pad_pushes(model, tok, lab, task.pad_ids, 0.3)
    assert len(rows) == 2 and rows[0]["ids"] == list(task.pad_ids)
    per_token = 0.3 / (2 * tok.numel())
    assert np.allclose(rows[1]["cost"], [-per_token * n for n in rows[1]["count"]], rtol=1e-12)
    assert not np.allclose(rows[0]["cost"], [-per_token * n for n in rows[0]["count"]], rtol=1e-6)
    with torch.no_grad():                      # the first gate reads the normed embedding: its logit per id
        blk = model.blocks[0]
        z = blk.layer.gate.logits(blk.norm(model.encoder(tok)))                      # (B, L)
    for j, i in enumerate(task.pad_ids):
        assert abs(rows[0]["logit"][j] - float(z[tok == i].mean())) <= 1e-12
    others = [float(z[tok == i].mean()) for i in torch.unique(tok).tolist() if i not in task.pad_ids]
    assert abs(rows[0]["data_logit"] - min(others)) <= 1e-12
    torch.manual_seed(0)
    model = build(ModelSpec.from_label("s4d-gate"), task.vocab, 8, 2, task.length, 8, seed=0,
                  pad=task.pad_ids).double()
    rows = pad_pushes(model, tok, lab, task.pad_ids, 0.3)
    gate = model.blocks[1].layer.gate
    k, h = task.pad_ids[1], 1e-6
    at = tok == k

    def loss_with_shift(eps):
        hook = gate.register_forward_hook(lambda m, i, o: o + eps * at.to(o.dtype))
        try:
            with torch.no_grad():
                logits = model(tok)
        finally:
            hook.remove()
        sup = lab != IGNORE
        return float(F.cross_entropy(logits[sup], lab[sup]))
    model.eval()
    fd = (loss_with_shift(h) - loss_with_shift(-h)) / (2 * h)
    assert abs(rows[1]["loss"][1] + fd) <= 1e-5 * max(1.0, abs(fd))
    run = {"curve": [{"step": 1, "val_acc": 0.1, "pads": rows}, {"step": 2, "val_acc": 0.2, "pads": rows}]}
    t = table(run)
    assert len(t) == 6 and t[0][:3] == (1, 0, rows[0]["count"][0]) and t[0][5] == 2 * rows[0]["loss"][0]
    assert t[0][7:] == (None, None)               # the soft gate has no logits: not recorded


def test_the_clock_table_reads_each_runs_last_evaluation():
    """:func:`report.clock_table` on the committed padding runs: one row per learned-clock run, its clocks
    those of the run's last evaluation, runs of one task that differ in a setting told apart by the label."""
    import json
    from pathlib import Path

    from ddesys.experiments.synthetic import report
    runs = json.loads((Path(__file__).parents[2] / "docs/experiments/clock-pads-cpu/results.json").read_text())["runs"]
    rows = report.clock_table(runs)
    clocked = [r for r in runs if r["status"] == "done" and any(p.get("clock") for p in r["curve"])]
    assert len(rows) == len(clocked) >= 2
    by_key = {(r["config"]["seed"], r["curve"][-1]["step"], r["curve"][-1]["val_acc"],
               tuple((c["pad"], c["tokens"]) for c in r["curve"][-1]["clock"])) for r in clocked}
    assert {(seed, step, acc, tuple(layers)) for _, _, _, seed, step, acc, layers in rows} == by_key
    labels = {(task, label) for task, label, *_ in rows}
    assert len({label for task, label in labels if task == "copy-variable-pads4"}) >= 2   # variants apart


def test_a_larger_vocabulary_holds_sixteen_padding_ids(capsys):
    """``--vocab``: 16 padding ids need more than copy's 16 ids; the task names its vocabulary, the
    default keeps its name (and so its runs' keys), too small a vocabulary is refused by the CLI."""
    assert preset("copy", "variable", "cpu").to_dict()["vocab"] == 16 and BASE.name == "copy-variable"
    args = cli._parse(["--scale", "smoke", "--tasks", "copy", "sum", "--protocols", "variable", "--vocab", "32",
                       "--pads", "16"])
    copy, tsum = cli._tasks(args)
    assert copy.vocab == 32 and copy.name == "copy-variable-v32-pads16"
    assert tsum.vocab == 32 and tsum.name == "sum-variable-pads16"        # the sums' own vocabulary
    assert copy.pad_ids == (0, *range(16, 31)) and copy.data_max == 15 and copy.go == 31
    tok, lab, lags = copy.sample(256, np.random.default_rng(3))
    assert set(np.unique(_gap_tokens(copy, tok, lags))) == set(copy.pad_ids)
    targets = lab[lab != IGNORE]
    assert targets.min() >= 1 and targets.max() <= copy.data_max                 # data never a padding id
    for bad in (["--vocab", "0"], ["--vocab", "16", "--pads", "16"]):
        with pytest.raises(SystemExit) as e:
            cli._parse(["--scale", "smoke", "--tasks", "copy", "--protocols", "variable", *bad])
        assert e.value.code == 2
    assert "task size" in capsys.readouterr().err
