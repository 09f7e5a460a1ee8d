"""Compatibility with scripts and checkpoints of earlier versions: whole-model pickles written by the previous
version load and give the outputs recorded then; the removed ``nn.common.StepConstants`` name resolves;
state passing at the model level (``forward(..., state=, return_state=True)``) as at the layer level; and
``SequenceModel.step`` in training mode neither builds a graph nor varies silently."""
import io
import pathlib
import subprocess
import sys
import warnings

import pytest
import torch

from ddesys import nn as dnn
from ddesys.nn import SequenceModel
from ddesys.nn import legacy

DATA = pathlib.Path(__file__).resolve().parents[1] / "data"
F64 = torch.float64
SHORT_CHUNKS = pytest.mark.filterwarnings("ignore:DS4D. delays are spread")   # chunks shorter than l_max


# ---------------------------------------------------------------------------------------------- old names
def test_step_constants_resolves_without_a_warning():
    from ddesys.nn import common
    from ddesys.nn.decode.constants import StepMemo
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cls = common.StepConstants
    assert cls is StepMemo
    with pytest.raises(AttributeError, match="NoSuchName"):
        common.NoSuchName


def test_a_script_that_allowlists_step_constants_starts():
    script = ("import torch, ddesys.nn.common\n"
              "torch.serialization.add_safe_globals([ddesys.nn.common.StepConstants])\n"
              "print('started')\n")
    out = subprocess.run([sys.executable, "-W", "error", "-c", script], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and "started" in out.stdout, out.stderr[-2000:]


def test_a_pickled_step_memo_of_the_old_kind_unpickles_empty():
    from ddesys.nn.decode.constants import StepMemo
    memo = StepMemo()
    memo.get(dnn.DS4D(4, 4, l_max=8), torch.float32, lambda dt: ("constants", dt))
    back = pickle_roundtrip(memo)
    assert back.value is None                            # derived data: never restored


def pickle_roundtrip(obj):
    import pickle
    return pickle.loads(pickle.dumps(obj))


# ---------------------------------------------------------------------------------------------- model_v1.pt
def _load_v1():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return torch.load(DATA / "model_v1.pt", weights_only=False, pickle_module=legacy)


def test_model_v1_loads_and_gives_the_recorded_outputs():
    """tests/data/model_v1.pt: ``torch.save`` of a token model by commit 7fb829e (top-level ``nn`` package,
    the decode memo pickled as ``nn.common.StepConstants``; tests/data/make_model_v1.py), after decoding."""
    d = _load_v1()
    model, ids = d["model"], d["ids"]
    assert type(model) is SequenceModel and isinstance(model.blocks[0].layer, dnn.DS4D)
    with torch.no_grad():
        torch.testing.assert_close(model(ids), d["logits"], rtol=1e-4, atol=1e-5)
        caches = model.allocate_inference_cache(2)
        torch.testing.assert_close(model.prefill(ids[:, :8], caches), d["prompt_logits"], rtol=1e-4, atol=1e-5)
        steps = torch.stack([model.step(ids[:, t], caches) for t in range(8, 12)], 1)
        torch.testing.assert_close(steps, d["step_logits"], rtol=1e-4, atol=1e-5)
        out = model.generate(ids[:, :8], 4, temperature=0)
    assert out.shape == (2, 12)


def test_model_v1_with_the_old_tap_loads_into_the_tap_branch():
    """The same file's float-input model whose layer had the tap as its own parameters (``tap_e``, ``nu_tap``,
    ``tap_width_bits``): unpickled, the layer holds them in its branch ``layer.tap``."""
    d = _load_v1()
    model, x = d["tap_model"], d["x"]
    layer = model.blocks[0].layer
    assert layer.has_tap and layer.tap_width == 2.0 
    assert {"tap.e", "tap.nu", "tap.width_bits"} <= set(layer.state_dict())
    assert not {"tap_e", "nu_tap", "tap_width_bits"} & set(layer.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(model(x), d["tap_y"], rtol=1e-4, atol=1e-5)
        caches = model.allocate_inference_cache(2)
        torch.testing.assert_close(model.prefill(x[:, :8], caches), d["tap_prompt"], rtol=1e-4, atol=1e-5)
        steps = torch.stack([model.step(x[:, t], caches) for t in range(8, 12)], 1)
        torch.testing.assert_close(steps, d["tap_steps"], rtol=1e-4, atol=1e-5)
    groups = dnn.param_groups(model, lr=1e-3)                # the optimizer hints survive the move
    assert sum(len(g["params"]) for g in groups) == len(list(model.parameters()))


def test_model_v1_saves_again_in_the_current_form():
    model = _load_v1()["model"]
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    assert b"StepConstants" not in buf.getvalue() and b"nn.common" not in buf.getvalue()
    public = [getattr(dnn, n) for n in dnn.__all__ if isinstance(getattr(dnn, n), type)]
    with torch.serialization.safe_globals(public + [torch.nn.Embedding, torch.nn.ModuleList, torch.nn.LayerNorm,
                                                    torch.nn.GELU, torch.nn.Dropout, torch.nn.Linear, torch.nn.GLU]):
        again = torch.load(buf, weights_only=True)
    ids = torch.randint(0, 11, (2, 10))
    with torch.no_grad():
        assert torch.equal(again(ids), model(ids))


def test_legacy_unpickler_maps_only_the_old_package():
    up = legacy.Unpickler(io.BytesIO(b""))
    assert up.find_class("nn.model", "SequenceModel") is SequenceModel
    assert up.find_class("nn.generate", "sample") is dnn.generate.sample
    assert up.find_class("torch.nn.modules.linear", "Linear") is torch.nn.Linear


# ---------------------------------------------------------------------------------------------- state passing
def _model(layer="ds4d", **kw):
    return SequenceModel(7, 7, d_model=8, n_layers=2, embedding=True, layer=layer,
                         layer_kw={"l_max": 16} if layer == "ds4d" else {}, dtype=F64, **kw).eval()


@SHORT_CHUNKS
@pytest.mark.parametrize("layer", ["ds4d", "s4d"])
def test_model_state_carries_across_chunks(layer):
    model = _model(layer)
    ids = torch.randint(0, 7, (2, 14), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        whole = model(ids)
        y1, state = model(ids[:, :6], return_state=True)
        assert isinstance(state, list) and len(state) == 2
        y2, state2 = model(ids[:, 6:10], state=state, return_state=True)
        y3 = model(ids[:, 10:], state=state2)
    torch.testing.assert_close(torch.cat([y1, y2, y3], 1), whole, rtol=1e-7, atol=1e-8)
    with torch.no_grad():                                # decoding continues from the returned state
        y_next = model.step(ids[:, 10], state2)
    torch.testing.assert_close(y_next, whole[:, 10], rtol=1e-7, atol=1e-8)


@SHORT_CHUNKS
def test_model_state_is_differentiable_and_follows_lengths():
    model = _model()
    ids = torch.randint(0, 7, (3, 9), generator=torch.Generator().manual_seed(1))
    y1, state = model(ids[:, :5], return_state=True)
    y2 = model(ids[:, 5:], state=state)
    y2.square().sum().backward()
    assert model.encoder.weight.grad is not None and model.blocks[0].layer.log_dt.grad is not None
    lens = [9, 4, 6]
    with torch.no_grad():
        _, st = model(ids, lengths=lens, return_state=True)
        nxt = torch.tensor([1, 2, 3])
        y = model.step(nxt, st)
        for b, n in enumerate(lens):
            ref = model(torch.cat([ids[b:b + 1, :n], nxt[b:b + 1, None]], 1))[0, -1]
            torch.testing.assert_close(y[b], ref, rtol=1e-7, atol=1e-8)


@SHORT_CHUNKS
def test_model_state_misuse_is_named():
    model, other = _model(), _model()
    ids = torch.randint(0, 7, (2, 6))
    with pytest.raises(ValueError, match="one cache per layer"):
        model(ids, state=[None])
    with pytest.raises(RuntimeError, match="not by this"):
        model(ids, state=other.allocate_inference_cache(2))
    clocked = _model(clock=dnn.TokenClock(pause_tokens=(0,)))
    with pytest.raises(RuntimeError, match="without gradients"):     # a clocked carry: under no_grad
        clocked(ids, return_state=True)


# ---------------------------------------------------------------------------------------------- step in train mode
def test_step_in_training_mode_builds_no_graph_and_warns_about_dropout():
    model = SequenceModel(7, 7, d_model=8, n_layers=1, embedding=True, dropout=0.3, layer_kw={"l_max": 16})
    assert model.training
    caches = model.allocate_inference_cache(2)
    with pytest.warns(UserWarning, match="eval"):
        y = model.step(torch.tensor([1, 2]), caches)
    assert not y.requires_grad and y.grad_fn is None
    quiet = SequenceModel(7, 7, d_model=8, n_layers=1, embedding=True, layer_kw={"l_max": 16})
    c2 = quiet.allocate_inference_cache(2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y2 = quiet.step(torch.tensor([1, 2]), c2)        # training mode without dropout: same numbers, quiet
    assert y2.grad_fn is None
    with pytest.warns(UserWarning, match="eval"):
        model.compile_step(model.allocate_inference_cache(2)).step(torch.tensor([1, 2]))
