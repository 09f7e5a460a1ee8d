"""``nn.s4compat``: the S4-repository ``S4D`` contract (``(B, H, L) -> (y, None)``, GELU, channel dropout,
``Conv1d(H, 2H, 1)`` + GLU, S4's ``_optim`` rule) on the DS4D / S4D cores.

The training test uses an S4-example-style backbone and ``setup_optimizer`` written here the way the
official ``example.py`` does it (only ``_optim`` attributes, no project helpers), so the swap
``from nn.s4compat import DS4D as S4D`` is checked as a user would do it. Tiny sizes: seconds on 2 cores.
"""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn as tnn

from ddesys import nn as ddnn
from ddesys.nn.optim import param_groups
from ddesys.nn.s4compat import DS4D, S4D
from nn_helpers import s4_setup_optimizer

F64 = torch.float64
H, N, L = 8, 8, 24
CORE = {S4D: ddnn.S4D, DS4D: ddnn.DS4D}
SSM = {S4D: ("log_dt", "nu_re", "nu_im", "B"),
       DS4D: ("log_dt", "nu_re", "nu_im", "B", "nu_tau", "r", "theta")}


def _kw(cls):
    """Small, seeded layers (DS4D's delay range sized to the test length)."""
    return {"seed": 0, **({"l_max": 32} if cls is DS4D else {})}


def _x(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------------------------------------------
# (a) the configuration: (B, H, L) -> (y, None)
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("training", [True, False])
def test_ds4d_returns_pair(batch, training):
    layer = DS4D(64, d_state=64, dropout=0.1, transposed=True, lr=1e-3)
    layer.train(training)
    out = layer(_x(batch, 64, 32))
    # batch 2: a bare tensor would unpack as "y, _ = out" along the batch axis without error
    assert isinstance(out, tuple) and len(out) == 2 and out[1] is None
    y, state = out
    assert state is None and y.shape == (batch, 64, 32) and torch.isfinite(y).all()
    assert isinstance(layer.kernel, ddnn.DS4D) and layer.layer is layer.kernel and layer.kernel.transposed


# ---------------------------------------------------------------------------------------------------
# (b, c) S4 example.py-style backbone and optimizer, for both layers
# ---------------------------------------------------------------------------------------------------
class S4StyleModel(tnn.Module):
    """The S4 example's backbone: Linear encoder, (prenorm) residual blocks calling ``z, _ = layer(z)``
    on ``(B, H, L)``, dropout, mean pooling, Linear decoder."""

    def __init__(self, layer_cls, d_input, d_output, d_model, n_layers, dropout, lr, prenorm=True, **kw):
        super().__init__()
        self.prenorm = prenorm
        self.encoder = tnn.Linear(d_input, d_model)
        self.s4_layers = tnn.ModuleList(layer_cls(d_model, d_state=N, dropout=dropout, transposed=True, lr=lr, **kw)
                                        for _ in range(n_layers))
        self.norms = tnn.ModuleList(tnn.LayerNorm(d_model) for _ in range(n_layers))
        self.dropouts = tnn.ModuleList(tnn.Dropout1d(dropout) for _ in range(n_layers))
        self.decoder = tnn.Linear(d_model, d_output)

    def forward(self, x):                                   # (B, L, d_input)
        x = self.encoder(x).transpose(-1, -2)               # (B, H, L)
        for layer, norm, dropout in zip(self.s4_layers, self.norms, self.dropouts):
            z = norm(x.transpose(-1, -2)).transpose(-1, -2) if self.prenorm else x
            z, _ = layer(z)                                 # (B, H, L)
            x = dropout(z) + x
            if not self.prenorm:
                x = norm(x.transpose(-1, -2)).transpose(-1, -2)
        return self.decoder(x.transpose(-1, -2).mean(dim=1))   # (B, d_output)


@pytest.mark.parametrize("cls", [S4D, DS4D])
def test_s4_example_training_loop(cls):
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = S4StyleModel(cls, d_input=1, d_output=2, d_model=H, n_layers=2, dropout=0.1, lr=1e-3, **_kw(cls))
        # synthetic task: the class is the sign of the sequence's mean
        x = _x(32, L, 1, seed=1)
        target = (x[..., 0].mean(1) > 0).long()
        steps = 20
        optimizer, scheduler = s4_setup_optimizer(model, lr=3e-2, weight_decay=0.01, epochs=steps)

        # the lr hint reaches the SSM parameters of every layer, and only them
        ssm = {id(getattr(layer.kernel, name)) for layer in model.s4_layers for name in SSM[cls]}
        slow = [g for g in optimizer.param_groups if g["lr"] == 1e-3]
        assert len(slow) == 1 and slow[0]["weight_decay"] == 0.0
        assert {id(p) for p in slow[0]["params"]} == ssm
        main = {id(p) for p in optimizer.param_groups[0]["params"]}
        for layer in model.s4_layers:
            assert id(layer.kernel.C) in main and id(layer.kernel.D) in main
            assert id(layer.output_linear[0].weight) in main
        # the project's own grouping agrees
        ours = [g for g in param_groups(model, lr=3e-2, weight_decay=0.01) if g["lr"] == 1e-3]
        assert len(ours) == 1 and {id(p) for p in ours[0]["params"]} == ssm

        crit = tnn.CrossEntropyLoss()

        def eval_loss():
            model.eval()
            with torch.no_grad():
                return crit(model(x), target).item()

        before = eval_loss()
        ssm0 = model.s4_layers[0].kernel.log_dt.detach().clone()
        for _ in range(steps):
            model.train()
            optimizer.zero_grad()
            loss = crit(model(x), target)
            loss.backward()
            optimizer.step()
            scheduler.step()
        after = eval_loss()
    assert math.isfinite(after) and after < 0.6 * before, (before, after)
    assert not torch.equal(ssm0, model.s4_layers[0].kernel.log_dt.detach())   # SSM parameters trained


# ---------------------------------------------------------------------------------------------------
# (c, d) the composition, against an independent one with the same SSM parameters
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [S4D, DS4D])
def test_matches_manual_composition(cls):
    layer = cls(H, d_state=N, dropout=0.1, lr=1e-3, **_kw(cls)).double().eval()
    core = CORE[cls](H, N, transposed=True, **_kw(cls)).double()
    core.load_state_dict(layer.kernel.state_dict())
    u = _x(2, H, L, dtype=F64)
    y, state = layer(u)
    assert state is None
    v = core(u)                                                         # (B, H, L) SSM alone
    v = 0.5 * v * (1 + torch.erf(v / math.sqrt(2)))                     # exact GELU
    W, b = layer.output_linear[0].weight[:, :, 0], layer.output_linear[0].bias   # (2H, H), (2H,)
    z = torch.einsum("oh,bhl->bol", W, v) + b[:, None]                  # (B, 2H, L)
    ref = z[:, :H] * torch.sigmoid(z[:, H:])                            # GLU over channels
    torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cls", [S4D, DS4D])
def test_dropout_is_channel_tied(cls):
    p = 0.5
    layer = cls(H, d_state=N, dropout=p, **_kw(cls)).train()
    seen = {}
    layer.dropout.register_forward_hook(lambda m, i, o: seen.update(i=i[0], o=o))
    with torch.random.fork_rng():
        torch.manual_seed(0)
        layer(_x(4, H, L))
    i, o = seen["i"], seen["o"]
    kept = o != 0                                                       # (B, H, L)
    assert torch.equal(kept, kept[..., :1].expand_as(kept))             # one mask per (batch, channel)
    torch.testing.assert_close(o[kept], i[kept] / (1 - p))
    assert kept.any() and not kept.all()


# ---------------------------------------------------------------------------------------------------
# (e) arguments, (f) layout, optimizer hints
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [S4D, DS4D])
def test_bad_kwargs_raise_type_error(cls):
    with pytest.raises(TypeError, match="bogus_arg"):
        cls(H, d_state=N, bogus_arg=1)
    with pytest.raises(TypeError, match="dt_lr"):
        cls(H, d_state=N, dt_lr=1e-3)
    with pytest.raises(TypeError, match="lr"):
        cls(H, d_state=N, lr="fast")
    with pytest.raises(ValueError, match="dropout"):
        cls(H, d_state=N, dropout=1.0)
    if cls is S4D:
        with pytest.raises(TypeError, match="p0"):
            S4D(H, d_state=N, p0=0.1)                                   # a DS4D-only argument


def test_ds4d_kernel_args_pass_through():
    layer = DS4D(H, d_state=N, dt_min=0.01, dt_max=0.02, l_max=32, p0=0.25, delay_init="constant", tau0=5.0,
                 s_min=2.0, s_max=20.0, theta_jitter=0.0, lr=1e-3)
    core = layer.kernel
    assert (core.s_min, core.s_max, core.l_max) == (2.0, 20.0, 32)
    dt = core.log_dt.detach().exp()
    assert ((dt >= 0.01 - 1e-7) & (dt <= 0.02 + 1e-7)).all()
    torch.testing.assert_close(torch.sigmoid(core.r.detach()), torch.full((H, N // 2), 0.25))
    torch.testing.assert_close(core.discrete(F64)[6], torch.full((H,), 5.0, dtype=F64))


@pytest.mark.parametrize("cls", [S4D, DS4D])
def test_untransposed_layout(cls):
    a = cls(H, d_state=N, transposed=True, **_kw(cls)).eval()
    b = cls(H, d_state=N, transposed=False, **_kw(cls)).eval()
    b.load_state_dict(a.state_dict())
    u = _x(2, H, L)
    ya, _ = a(u)
    yb, sb = b(u.transpose(1, 2).contiguous())                          # (B, L, H)
    assert sb is None and yb.shape == (2, L, H)
    torch.testing.assert_close(yb, ya.transpose(1, 2), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("cls", [S4D, DS4D])
def test_optim_hints_follow_s4(cls):
    core_names = [n for n, _ in cls(H, d_state=N, **_kw(cls)).kernel.named_parameters()]
    for lr, hp in ((None, {"weight_decay": 0.0}), (1e-3, {"lr": 1e-3, "weight_decay": 0.0})):
        core = cls(H, d_state=N, lr=lr, **_kw(cls)).kernel
        for name in core_names:
            p = getattr(core, name)
            if name in SSM[cls]:
                assert p._optim == hp and core._optim_hints[name] == hp and p.requires_grad
            else:
                assert name in ("C", "D") and not hasattr(p, "_optim") and name not in core._optim_hints
    frozen = cls(H, d_state=N, lr=0.0, **_kw(cls))                     # S4: lr=0 freezes (buffers there)
    for name in SSM[cls]:
        assert not getattr(frozen.kernel, name).requires_grad
    frozen(_x(1, H, L))[0].sum().backward()
    assert frozen.kernel.C.grad is not None and frozen.kernel.log_dt.grad is None


@pytest.mark.parametrize("cls", [S4D, DS4D])
def test_step_matches_forward(cls):
    layer = cls(H, d_state=N, dropout=0.1, **_kw(cls)).double().eval()
    u = _x(2, H, 12, dtype=F64)
    y, _ = layer(u)
    state = layer.default_state(2, dtype=F64)
    ys = torch.stack([layer.step(u[..., t], state)[0] for t in range(u.shape[-1])], dim=-1)
    torch.testing.assert_close(ys, y, rtol=1e-8, atol=1e-8)


def s4_example_setup_optimizer(model, lr, weight_decay):
    """The grouping of S4's ``example.py`` as released (sorted distinct ``_optim`` dicts): parameters without
    ``_optim`` in the main AdamW group (``lr``, ``weight_decay``), one group per distinct ``_optim`` dict."""
    params = list(model.parameters())
    optimizer = torch.optim.AdamW([p for p in params if not hasattr(p, "_optim")], lr=lr, weight_decay=weight_decay)
    hps = [p._optim for p in params if hasattr(p, "_optim")]
    for hp in [dict(s) for s in sorted(dict.fromkeys(frozenset(hp.items()) for hp in hps))]:
        optimizer.add_param_group({"params": [p for p in params if getattr(p, "_optim", None) == hp], **hp})
    return optimizer


def _group_of(groups, p):
    (g,) = [g for g in groups if any(q is p for q in g["params"])]
    return g["lr"], g["weight_decay"]


@pytest.mark.parametrize("tap_lr", [5e-2, None])
@pytest.mark.parametrize("setup", ["s4_example", "s4_test", "param_groups"])
def test_tap_keeps_its_optimizer_hints(setup, tap_lr):
    """issue 20, finding 1: the S4 drop-in with tap=True used to clear the tap's hints, so S4's
    setup_optimizer trained the tap delay at the global rate *with* weight decay. Now the SSM set gets S4's
    lr, the tap delay its tap_lr (else the base rate, docs/theory.md §8.4) and the tap gain the base rate,
    both without weight decay; C and D the main group."""
    model = S4StyleModel(DS4D, d_input=1, d_output=2, d_model=H, n_layers=2, dropout=0.0, lr=1e-3, tap=True,
                         tap_lr=tap_lr, **_kw(DS4D))
    base_lr, wd = 3e-2, 0.01
    if setup == "s4_example":
        groups = s4_example_setup_optimizer(model, base_lr, wd).param_groups
    elif setup == "s4_test":
        groups = s4_setup_optimizer(model, base_lr, wd, epochs=1)[0].param_groups
    else:
        groups = param_groups(model, lr=base_lr, weight_decay=wd)
    for layer in model.s4_layers:
        core = layer.kernel
        for name in SSM[DS4D]:
            assert _group_of(groups, getattr(core, name)) == (1e-3, 0.0), name
        assert _group_of(groups, core.tap.nu) == (tap_lr or base_lr, 0.0)
        assert _group_of(groups, core.tap.e) == (base_lr, 0.0)
        assert _group_of(groups, core.C) == _group_of(groups, core.D) == (base_lr, wd)
        assert core.tap.nu._optim == ({"lr": tap_lr, "weight_decay": 0.0} if tap_lr else {"weight_decay": 0.0})
    n = sum(len(g["params"]) for g in groups)
    assert n == len(list(model.parameters()))                            # every parameter in exactly one group


def test_lr_zero_freezes_the_ssm_set_not_the_tap():
    layer = DS4D(H, d_state=N, lr=0.0, tap=True, **_kw(DS4D))
    assert not any(getattr(layer.kernel, n).requires_grad for n in SSM[DS4D])
    assert layer.kernel.tap.nu.requires_grad and layer.kernel.tap.e.requires_grad
    layer(_x(1, H, L))[0].sum().backward()
    assert layer.kernel.tap.nu.grad is not None and layer.kernel.log_dt.grad is None
