"""Issue 21: the S4 recipe's one-line swap. A ``p0 = 0`` DS4D is S4D (same outputs from the same shared
parameters), lands in the same optimizer groups of S4's ``setup_optimizer`` apart from the delay
parameters, and ``experiments.s4_recipe`` runs (smoke). Seconds on 2 cores."""
from __future__ import annotations

import json

import pytest
import torch

from ddesys.experiments import s4_recipe
from ddesys.nn.s4compat import DS4D, S4D

DELAY = ("r", "theta", "nu_tau")


def _pair(dtype=torch.float64, H=8, n_layers=2, lr=1e-3):
    torch.manual_seed(0)
    s4 = s4_recipe.S4Model(S4D, 1, 10, H, n_layers, 0.1, lr, d_state=8).to(dtype)
    torch.manual_seed(1)
    ds = s4_recipe.S4Model(DS4D, 1, 10, H, n_layers, 0.1, lr, d_state=8, p0=0.0).to(dtype)
    return s4, ds


def test_p0_zero_ds4d_with_s4d_parameters_is_s4d():
    s4, ds = _pair()
    x = torch.rand(4, 32, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    ds(x)                                                   # fixes the delay range (l_max = 32)
    shared = s4.state_dict()
    missing, unexpected = ds.load_state_dict(shared, strict=False)
    assert unexpected == []
    assert {k.rsplit(".", 1)[1] for k in missing} == set(DELAY)
    s4.eval(), ds.eval()
    with torch.no_grad():
        y_s4, y_ds = s4(x), ds(x)
    assert (y_s4 - y_ds).abs().max() <= 1e-10 * max(1.0, float(y_s4.abs().max()))
    # and after a training step from the same parameters (the delayed branch stays off: sigmoid(r) = 0)
    for m in (s4, ds):
        m.train()
        opt, _ = s4_recipe.setup_optimizer(m, 1e-2, 1e-2, 1)
        torch.manual_seed(3)
        torch.nn.functional.cross_entropy(m(x), torch.arange(4)).backward()
        opt.step()
    for k, v in s4.state_dict().items():
        assert torch.allclose(v, ds.state_dict()[k], rtol=0, atol=1e-8), k


@pytest.mark.parametrize("seed", [None, 5])
def test_the_swap_draws_what_s4d_draws(seed):
    """Regression (issue 21): the same global seed gave the swap other C, D and downstream weights than
    S4D (DS4D drew its branch first), so ``p0 = 0`` trained to other accuracies. Now the shared
    parameters and every module built after the layer are S4D's, and the next random number is too."""
    kw = {} if seed is None else {"seed": seed}
    torch.manual_seed(0)
    s4 = s4_recipe.S4Model(S4D, 1, 10, 8, 2, 0.1, 1e-3, d_state=8, **kw).double()
    after_s4 = torch.rand(3)
    torch.manual_seed(0)
    ds = s4_recipe.S4Model(DS4D, 1, 10, 8, 2, 0.1, 1e-3, d_state=8, p0=0.0, **kw).double()
    after_ds = torch.rand(3)
    assert torch.equal(after_s4, after_ds)
    own = dict(ds.named_parameters())
    for name, p in s4.named_parameters():
        assert torch.equal(p, own[name]), name
    x = torch.rand(4, 32, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    s4.eval(), ds.eval()
    with torch.no_grad():
        assert (s4(x) - ds(x)).abs().max() <= 1e-10
    torch.manual_seed(0)
    again = s4_recipe.S4Model(DS4D, 1, 10, 8, 2, 0.1, 1e-3, d_state=8, **kw)
    torch.manual_seed(0)
    twin = s4_recipe.S4Model(DS4D, 1, 10, 8, 2, 0.1, 1e-3, d_state=8, **kw)
    assert all(torch.equal(a, b) for a, b in zip(again.parameters(), twin.parameters()))   # reproducible


@pytest.mark.parametrize("setup", ["recipe", "s4_test"])
def test_same_optimizer_groups_apart_from_delay(setup):
    s4, ds = _pair(torch.float32)
    if setup == "recipe":
        make = lambda m: s4_recipe.setup_optimizer(m, 1e-2, 1e-2, 10)[0]            # noqa: E731
    else:
        from nn_helpers import s4_setup_optimizer
        make = lambda m: s4_setup_optimizer(m, 1e-2, 1e-2, 10)[0]                   # noqa: E731

    def groups(m):
        out = {}
        for g in make(m).param_groups:
            for p in g["params"]:
                out[p] = (g["lr"], g["weight_decay"])
        return {n: out[p] for n, p in m.named_parameters() if p.requires_grad}

    g4, gd = groups(s4), groups(ds)
    delay = {n for n in gd if n.rsplit(".", 1)[1] in DELAY}
    assert len(delay) == 2 * len(DELAY)
    assert set(gd) - delay == set(g4)
    assert all(gd[n] == g4[n] for n in g4), {n: (g4[n], gd[n]) for n in g4 if g4[n] != gd[n]}
    # S4's lr hint on S4D's SSM set, the main group (with weight decay) for C, D and the GLU
    assert g4["s4_layers.0.kernel.log_dt"] == g4["s4_layers.0.kernel.B"] == (1e-3, 0.0)
    assert g4["s4_layers.0.kernel.C"] == g4["s4_layers.0.output_linear.0.weight"] == (1e-2, 1e-2)
    # the delayed branch: no weight decay in either case
    assert all(gd[n][1] == 0.0 for n in delay)


def test_smoke_run(tmp_path):
    out = tmp_path / "run"
    assert s4_recipe.main(["--seeds", "1", "--epochs", "1", "--n-train", "64", "--d-model", "8", "--n-layers", "1",
                           "--arms", "s4d", "ds4d", "--out", str(out)]) == 0
    saved = json.loads((out / "results.json").read_text())
    assert saved["program"] == "ddesys.experiments.s4_recipe"
    assert [(r["arm"], r["seed"]) for r in saved["runs"]] == [("s4d", 0), ("ds4d", 0)]
    assert "| `ds4d` |" in (out / "results.md").read_text()
    assert s4_recipe.main(["--seeds", "1", "--epochs", "2", "--n-train", "64", "--d-model", "8", "--n-layers", "1",
                           "--arms", "s4d", "--out", str(out)]) == 0    # another recipe: its runs join the file
    saved = json.loads((out / "results.json").read_text())
    assert [r["config"]["epochs"] for r in saved["runs"]] == [1, 1, 2]
    assert "| `ds4d` |" not in (out / "results.md").read_text()          # the report: this recipe's runs


def test_rerun_into_one_folder_adds_only_the_missing_runs(tmp_path, capsys):
    out = tmp_path / "run"
    base = ["--epochs", "1", "--n-train", "64", "--d-model", "8", "--n-layers", "1", "--out", str(out)]
    s4_recipe.main(["--seeds", "1", "--arms", "s4d"] + base)
    first = json.loads((out / "results.json").read_text())["runs"]
    assert s4_recipe.main(["--seeds", "2", "--arms", "s4d"] + base) == 0    # seed 0 kept, seed 1 added
    rs = json.loads((out / "results.json").read_text())["runs"]
    assert [(r["arm"], r["seed"]) for r in rs] == [("s4d", 0), ("s4d", 1)] and rs[0] == first[0]
    assert "already in" in capsys.readouterr().out
    (out / "results.json").write_text("{not json")
    with pytest.raises(SystemExit, match="not valid JSON"):             # damaged: refused untouched
        s4_recipe.main(["--seeds", "1", "--arms", "s4d"] + base)
    assert (out / "results.json").read_text() == "{not json"
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(SystemExit, match="error"):
        s4_recipe.main(["--seeds", "1", "--arms", "s4d", "--out", str(blocker)])
    with pytest.raises(SystemExit):
        s4_recipe.main(["--seeds", "0", "--out", str(tmp_path / "x")])  # bad argument at parse time


def test_only_the_drop_in_changed_its_start():
    """The fixed-lag copy, the delay task and the general pipelines build ``nn.DS4D``: its paper default
    (``p = 0.1``) and its own draw are unchanged; only ``nn.s4compat.DS4D`` starts at ``p0 = 0.015``."""
    from ddesys import nn as dnn
    core = dnn.DS4D(4, 4, l_max=8, seed=0)
    assert torch.allclose(torch.sigmoid(core.r.double()), torch.full((4, 2), 0.1, dtype=torch.float64), atol=1e-7)
    drop = DS4D(4, 4, l_max=8)
    assert torch.allclose(torch.sigmoid(drop.kernel.r.double()), torch.full((4, 2), 0.015, dtype=torch.float64),
                          atol=1e-7)
    again = dnn.DS4D(4, 4, l_max=8, seed=0)                 # nn.DS4D's seeded draw is reproducible as before
    assert torch.equal(core.theta, again.theta) and torch.equal(core.C, again.C)


@pytest.mark.parametrize("bad", [["--dropout", "1.5"], ["--dropout", "x"], ["--seeds", "0"]])
def test_bad_arguments_stop_at_parse_time(tmp_path, bad, capsys):
    with pytest.raises(SystemExit) as exc:
        s4_recipe.main(["--out", str(tmp_path / "o")] + bad)
    assert exc.value.code == 2 and not (tmp_path / "o").exists()
    assert bad[0] in capsys.readouterr().err
