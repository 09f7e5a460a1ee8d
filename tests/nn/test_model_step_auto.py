"""``SequenceModel.step`` runs the compiled plan by default (issue 47): the user's own loop equals the
module path to rounding, follows weight, mode, hook, module and cache changes between steps, and says
why it steps through the modules where the plan does not apply. Reference: ``model.module_step`` on a
second set of caches (itself checked against a NumPy model in test_model_step.py)."""
from __future__ import annotations

import copy
import pickle

import pytest
import torch
from torch import nn

from ddesys.cpu import block_loops
from ddesys.nn import SequenceModel

pytestmark = pytest.mark.skipif(not block_loops.available(), reason="the compiled plan needs Numba")
F64 = torch.float64


def _model(**kw):
    torch.manual_seed(0)
    return SequenceModel(7, 5, d_model=8, n_layers=2, embedding=True, layer_kw=dict(d_state=8, l_max=16),
                         dtype=F64, **kw).eval()


def _pair(model, B=2, prompt=5):
    """Two identical cache lists, prefilled with the same prompt: one for step, one for module_step."""
    ids = torch.randint(0, 7, (B, prompt), generator=torch.Generator().manual_seed(1))
    out = []
    for _ in range(2):
        c = model.allocate_inference_cache(B, dtype=F64)
        with torch.no_grad():
            model.prefill(ids, c)
        out.append(c)
    return out


def _both(model, a, b, tok):
    ya = model.step(tok, a)
    yb = model.module_step(tok, b)
    assert float((ya - yb).abs().max()) <= 1e-12 * max(1.0, float(yb.abs().max()))
    return ya


def _tokens(n, B=2, seed=2):
    return torch.randint(0, 7, (n, B), generator=torch.Generator().manual_seed(seed))


def test_own_loop_runs_the_plan_and_equals_the_module_path():
    model = _model()
    a, b = _pair(model)
    for tok in _tokens(6):
        _both(model, a, b, tok)
    plan = a[0].plan
    assert plan is model.compile_step(a) and plan.reason is None and plan.fused_tokens == 6


def test_own_loop_follows_weight_changes_between_steps():
    """In place (an optimizer step), a replaced parameter object, and the mode: never a stale step."""
    model = _model()
    a, b = _pair(model)
    toks = _tokens(8)
    _both(model, a, b, toks[0])
    with torch.no_grad():
        model.blocks[0].out.weight.mul_(1.3)                                  # read through the plan's views
        model.blocks[1].layer.log_dt.add_(0.2)                                # the layer rebinds its constants
    _both(model, a, b, toks[1])
    model.blocks[1].out.weight = nn.Parameter(torch.randn_like(model.blocks[1].out.weight))
    _both(model, a, b, toks[2])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model.train()
    loss = model(torch.randint(0, 7, (2, 6))).square().mean()
    loss.backward()
    opt.step()
    model.eval()
    for tok in toks[3:]:
        _both(model, a, b, tok)
    assert a[0].plan.fused_tokens == 8 and a[0].plan.reason is None


def test_own_loop_follows_hooks_and_replaced_modules():
    model = _model()
    a, b = _pair(model)
    toks = _tokens(5)
    _both(model, a, b, toks[0])
    seen = []
    h = model.blocks[0].out.register_forward_hook(lambda m, i, o: seen.append(1))
    _both(model, a, b, toks[1])                                               # the hook runs: the modules
    assert seen and "hook" in a[0].plan.reason
    h.remove()
    _both(model, a, b, toks[2])
    assert a[0].plan.reason is None
    model.blocks[1].act = nn.ReLU()                                           # a module replaced: derived again
    _both(model, a, b, toks[3])
    assert "fused form" in a[0].plan.reason
    model.blocks[1].act = nn.GELU()
    _both(model, a, b, toks[4])
    assert a[0].plan.reason is None


@pytest.mark.parametrize("case", ["dropout", "relu", "hook", "grad"])
def test_ineligible_steps_fall_back_with_the_reason(case):
    model = _model(dropout=0.1 if case == "dropout" else 0.0,
                   activation="ReLU" if case == "relu" else "gelu")
    if case == "dropout":
        model.train()
    if case == "hook":
        model.blocks[1].norm.register_forward_pre_hook(lambda *args: None)
    a, b = _pair(model)
    with torch.set_grad_enabled(case == "grad"):
        if case == "dropout":
            with pytest.warns(UserWarning, match="dropout"):
                model.step(_tokens(1)[0], a)
        else:
            _both(model, a, b, _tokens(1)[0])
    plan = model.compile_step(a)
    assert plan.fused_tokens == (case == "grad")                # step never records a graph: compiled
    want = {"dropout": "dropout", "relu": "fused form", "hook": "", "grad": None}[case]
    if want is None:
        assert plan.reason is None                              # eligible; the step itself runs without autograd
    else:
        assert plan.reason is not None and want in plan.reason


def test_a_replaced_cache_state_or_list_gets_a_new_plan_and_copies_carry_none():
    model = _model()
    a, b = _pair(model)
    toks = _tokens(4)
    _both(model, a, b, toks[0])
    plan = a[0].plan
    a[1].buf = a[1].buf.clone()                                               # the state moved elsewhere
    _both(model, a, b, toks[1])
    assert a[0].plan is plan and plan.program is not None
    swapped = [a[0], copy.deepcopy(a[1])]                                     # another list: another plan
    assert copy.copy(a[0]).plan is None and copy.deepcopy(a[0]).plan is None
    assert pickle.loads(pickle.dumps(a[0])).plan is None
    ref = [b[0], copy.deepcopy(b[1])]
    _both(model, swapped, ref, toks[2])
    assert swapped[0].plan is not plan
