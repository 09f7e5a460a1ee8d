"""The model-level contract (issue 20, finding 5): ``SequenceModel`` options (``prenorm``, ``norm``,
``device``, ``dtype``), its caches (keyword pass-through, Mamba's signature, reset), step input
shapes, ``generate``, whole-model pickling with ``weights_only=True``, and ``torch.compile`` of the
layers' training forward (non-finite inputs, finding 7: ``tests/nn/test_nn_usage.py``).

References: ``reference_model_forward`` (``tests/nn_helpers.py``: the model's norms and linears around
a NumPy float64 recurrence per layer, never the layers' own code) and the model's own FFT forward.
"""
from __future__ import annotations

import io
import math
import os
import pathlib
import subprocess
import sys

import pytest
import torch

from ddesys import nn as dnn
from ddesys.nn import SequenceModel

from nn_helpers import reference_model_forward
from ddesys.verification.reference import rel_max

V = 13


def token_model(layer="ds4d", seed=0, **kw):
    torch.manual_seed(seed)
    layer_kw = dict(d_state=8, l_max=24) if layer == "ds4d" else dict(d_state=8)
    layer_kw.update(kw.pop("layer_kw", {}))
    return SequenceModel(V, V, d_model=8, n_layers=2, layer=layer, embedding=True, layer_kw=layer_kw, **kw).eval()


def ids(B, L, seed=1):
    return torch.randint(0, V, (B, L), generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------------------ constructor options
@pytest.mark.parametrize("prenorm", [True, False])
@pytest.mark.parametrize("norm", ["layer", "none"])
def test_prenorm_and_norm_options_equal_the_patched_model(prenorm, norm):
    """The options build what the delay experiment used to patch in after construction, parameter for
    parameter (same seed, same state dict, same outputs)."""
    x = torch.randn(2, 24, 3)
    torch.manual_seed(5)
    patched = SequenceModel(3, 4, d_model=8, n_layers=2, layer_kw=dict(d_state=8, l_max=24))
    for blk in patched.blocks:
        blk.prenorm = prenorm
        if norm == "none":
            blk.norm = torch.nn.Identity()
    if norm == "none":
        patched.norm = torch.nn.Identity()
    torch.manual_seed(5)
    built = SequenceModel(3, 4, d_model=8, n_layers=2, layer_kw=dict(d_state=8, l_max=24), prenorm=prenorm, norm=norm)
    assert list(built.state_dict()) == list(patched.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(built.state_dict().values(), patched.state_dict().values()))
    assert torch.equal(built(x), patched(x))
    assert all(blk.prenorm is prenorm for blk in built.blocks)
    assert isinstance(built.norm, torch.nn.LayerNorm if norm == "layer" else torch.nn.Identity)


def test_unknown_norm_is_named():
    with pytest.raises(ValueError, match="norm must be one of"):
        SequenceModel(3, 4, d_model=8, n_layers=1, norm="batch")


def test_device_and_dtype_arguments():
    torch.manual_seed(2)
    ref = SequenceModel(3, 4, d_model=8, n_layers=2, layer_kw=dict(d_state=8, l_max=24)).double()
    torch.manual_seed(2)
    m = SequenceModel(3, 4, d_model=8, n_layers=2, layer_kw=dict(d_state=8, l_max=24), device="cpu",
                      dtype=torch.float64)
    assert {p.dtype for p in m.parameters()} == {torch.float64}
    assert {p.device.type for p in m.parameters()} == {"cpu"}
    x = torch.randn(2, 24, 3, dtype=torch.float64)
    assert torch.equal(m(x), ref(x))
    with pytest.raises(ValueError, match="dtype"):
        SequenceModel(3, 4, d_model=8, n_layers=1, dtype=torch.int32)
    with pytest.raises(ValueError, match="device"):
        SequenceModel(3, 4, d_model=8, n_layers=1, device="no-such-device")


# ------------------------------------------------------------------------------ caches
def test_cache_keywords_pass_through_to_every_layer():
    m = token_model()
    caches = m.allocate_inference_cache(2, history_dtype=torch.bfloat16)     # a TypeError before
    assert len(caches) == 2 and all(c.buf.dtype == torch.bfloat16 for c in caches)
    p = ids(2, 20)
    with torch.no_grad():
        full = m(p)
        y = torch.cat([m.prefill(p[:, :12], caches)] + [m.step(p[:, t], caches)[:, None] for t in range(12, 20)], 1)
    assert rel_max(y, full) <= 5e-2                                           # a bfloat16 history


def test_mamba_signature_and_a_positional_dtype_refused():
    m = token_model()
    caches = m.allocate_inference_cache(2, 64)                 # Mamba: max_seqlen second, not a dtype
    assert all(c.buf.dtype == torch.complex64 for c in caches)
    caches = m.allocate_inference_cache(2, max_seqlen=64, dtype=torch.float64)
    assert all(c.buf.dtype == torch.complex128 for c in caches)
    assert m.blocks[0].allocate_inference_cache(2, dtype=torch.float64).buf.dtype == torch.complex128
    for owner, alloc in (("SequenceModel", m.allocate_inference_cache),
                         ("SequenceBlock", m.blocks[0].allocate_inference_cache)):
        with pytest.raises(TypeError, match=rf"^{owner}\.allocate_inference_cache got the dtype torch\.float64 as "
                                            r"max_seqlen.*dtype=torch\.float64\)$"):
            alloc(2, torch.float64)                            # the dtype where max_seqlen is


@pytest.mark.parametrize("kw, match", [({"dtype": torch.int64}, "dtype"), ({"dtype": "float64"}, "dtype"),
                                       ({"max_seqlen": 0}, "max_seqlen"), ({"max_seqlen": 2.5}, "max_seqlen"),
                                       ({"batch_size": -1}, "batch_size"), ({"batch_size": True}, "batch_size")])
def test_cache_arguments_are_validated(kw, match):
    m = token_model()
    kw = {"batch_size": 2, **kw}
    with pytest.raises(ValueError, match=match):
        m.allocate_inference_cache(**kw)


def test_a_keyword_a_layer_does_not_take_is_named():
    m = token_model("s4d")
    with pytest.raises(TypeError, match="S4D.allocate_inference_cache.*'no_such_option'"):
        m.allocate_inference_cache(2, no_such_option=1)
    m.allocate_inference_cache(2, history_dtype=torch.bfloat16)           # DS4D's option: taken, no history


@pytest.mark.parametrize("case", ["ds4d", "s4d", "tap", "bf16"])
def test_reset_cache_gives_the_same_decoding_again(case):
    layer = "s4d" if case == "s4d" else "ds4d"
    m = token_model(layer, layer_kw={"tap": True} if case == "tap" else {})
    ckw = {"history_dtype": torch.bfloat16} if case == "bf16" else {}
    a, b = ids(2, 30, seed=1), ids(2, 30, seed=2)

    def decode(p, caches):
        out = [m.prefill(p[:, :9], caches)]
        return torch.cat(out + [m.step(p[:, t], caches)[:, None] for t in range(9, p.shape[1])], dim=1)

    with torch.no_grad():
        caches = m.allocate_inference_cache(2, **ckw)
        first = decode(a, caches)
        m.reset_cache(caches)
        again = decode(a, caches)              # prefill needs an empty cache: the reset gave one
        m.reset_cache(caches)
        other = decode(b, caches)
        fresh = decode(b, m.allocate_inference_cache(2, **ckw))
    assert torch.equal(first, again) and torch.equal(other, fresh)
    with pytest.raises(ValueError, match="one cache per layer"):
        m.reset_cache(caches[:1])


# ------------------------------------------------------------------------------ step inputs
def test_step_takes_ids_of_shape_b_or_b1():
    m = token_model()
    p = ids(3, 12)
    with torch.no_grad():
        c1, c2 = m.allocate_inference_cache(3), m.allocate_inference_cache(3)
        m.prefill(p[:, :8], c1), m.prefill(p[:, :8], c2)
        y1 = m.step(p[:, 8], c1)                                  # (B,)
        y2 = m.step(p[:, 8:9], c2)                                # (B, 1): the word_language_model shape
    assert y1.shape == (3, V) and y2.shape == (3, 1, V) and torch.equal(y2[:, 0], y1)
    for bad in (p[:, 8:10], p[:, None, 8:9], p[0, 8]):
        with pytest.raises(ValueError, match=r"token ids of shape \(B,\) or \(B, 1\), got shape " +
                           str(tuple(bad.shape)).replace("(", r"\(").replace(")", r"\)")):
            m.step(bad, c1)
    with pytest.raises(TypeError, match="integer token ids"):
        m.step(p[:, 8].float(), c1)
    with pytest.raises(ValueError, match=r"token ids of shape \(B, L\), got shape \(3,\)"):
        m.prefill(p[:, 0], m.allocate_inference_cache(3))


def test_step_takes_continuous_inputs_of_shape_bd_or_b1d():
    torch.manual_seed(0)
    m = SequenceModel(3, 4, d_model=8, n_layers=2, layer_kw=dict(d_state=8, l_max=12)).eval()
    x = torch.randn(2, 10, 3)
    with torch.no_grad():
        c1, c2 = m.allocate_inference_cache(2), m.allocate_inference_cache(2)
        y1 = torch.stack([m.step(x[:, t], c1) for t in range(10)], 1)
        y2 = torch.cat([m.step(x[:, t:t + 1], c2) for t in range(10)], 1)
        full = m(x)
    assert torch.equal(y1, y2) and rel_max(y1, full) <= 1e-5
    with pytest.raises(ValueError, match=r"inputs of shape \(B, 3\) or \(B, 1, 3\), got shape \(2, 4\)"):
        m.step(torch.randn(2, 4), c1)
    with pytest.raises(TypeError, match="floating-point"):
        m.step(torch.zeros(2, 3, dtype=torch.long), c1)


# ------------------------------------------------------------------------------ generate
@pytest.mark.parametrize("layer", ["ds4d", "s4d"])
def test_generate_uses_the_full_forwards_logits_float64(layer):
    """Greedy generation, then the generated sequence teacher-forced through an independent float64
    reference of the model: the logits each token came from are the reference's at its position."""
    m = token_model(layer, dtype=torch.float64)
    p = ids(3, 7)
    out, logits = m.generate(p, 12, temperature=0, return_logits=True)
    assert out.shape == (3, 19) and out.dtype == torch.int64 and torch.equal(out[:, :7], p)
    with torch.no_grad():
        ref = reference_model_forward(m, out)[:, 6:18]           # the positions each new token was drawn at
        full = m(out)[:, 6:18]
    assert rel_max(logits, ref) <= 1e-10 and rel_max(full, ref) <= 1e-10
    assert torch.equal(out[:, 7:], logits.argmax(-1))


@pytest.mark.parametrize("layer, kw", [("ds4d", {}), ("s4d", {}), ("ds4d", {"tap": True})])
def test_generate_float32_equals_the_fft_forward_token_by_token(layer, kw):
    m = token_model(layer, layer_kw=kw)
    p = ids(2, 9)
    out, logits = m.generate(p, 15, temperature=0.7, top_k=5, generator=torch.Generator().manual_seed(0),
                             return_logits=True)
    with torch.no_grad():
        full = m(out)[:, 8:23]
    assert rel_max(logits, full) <= 1e-5                          # float32 rounding of FFT vs recurrence


def test_generate_with_a_generator_is_reproducible_and_leaves_the_global_rng():
    m = token_model()
    p = ids(3, 5)
    state = torch.get_rng_state()
    a = m.generate(p, 20, generator=torch.Generator().manual_seed(7))
    b = m.generate(p, 20, generator=torch.Generator().manual_seed(7))
    c = m.generate(p, 20, generator=torch.Generator().manual_seed(8))
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(a, b) and not torch.equal(a, c)
    greedy = m.generate(p, 20, temperature=0)
    assert torch.equal(m.generate(p, 20, top_k=1, generator=torch.Generator().manual_seed(3)), greedy)


def test_generate_with_a_sampler():
    m = token_model()
    p = ids(2, 5)
    seen = []

    def last_token(logits):
        seen.append(logits.shape)
        return torch.full((logits.shape[0],), V - 1)

    out = m.generate(p, 4, sampler=last_token)
    assert seen == [(2, V)] * 4 and (out[:, 5:] == V - 1).all()
    assert torch.equal(m.generate(p, 0), p)
    with pytest.raises(ValueError, match="sampler replaces"):
        m.generate(p, 4, temperature=0.5, sampler=last_token)
    with pytest.raises(ValueError, match="outside"):
        m.generate(p, 2, sampler=lambda lg: torch.full((2,), V))


@pytest.mark.parametrize("bad, err, match", [
    ({"temperature": -1.0}, ValueError, "temperature"), ({"temperature": math.nan}, ValueError, "temperature"),
    ({"top_k": 0}, ValueError, "top_k"), ({"max_new_tokens": -1}, ValueError, "max_new_tokens"),
    ({"prompt": "1-D"}, ValueError, r"\(B, L\)"), ({"prompt": "float"}, TypeError, "integer"),
    ({"generator": 3}, TypeError, "Generator")])
def test_generate_arguments_are_named(bad, err, match):
    m = token_model()
    kw = {"prompt": ids(2, 5), "max_new_tokens": 3, **bad}
    kw["prompt"] = {"1-D": ids(2, 5)[0], "float": ids(2, 5).float()}.get(kw["prompt"], kw["prompt"]) \
        if isinstance(kw["prompt"], str) else kw["prompt"]
    with pytest.raises(err, match=match):
        m.generate(**kw)


def test_generate_needs_a_token_model_and_warns_on_dropout():
    torch.manual_seed(0)
    with pytest.raises(ValueError, match="token model"):
        SequenceModel(3, 4, d_model=8, n_layers=1, layer_kw=dict(l_max=16)).generate(ids(2, 5), 3)
    m = token_model(dropout=0.1).train()
    with pytest.warns(UserWarning, match="dropout is active"):
        m.generate(ids(2, 5), 3)
    assert m.training                                            # the caller's mode, untouched


# ------------------------------------------------------------------------------ whole-model pickling
def _public_classes(model):
    """The only allowlist: the classes of the modules the model is made of (the project's, each public
    in its module's ``__all__``, and torch's layers); no memo, cache, constants or NumPy class."""
    classes = sorted({type(mod) for mod in model.modules()}, key=lambda t: (t.__module__, t.__qualname__))
    for cls in classes:
        if not cls.__module__.startswith("torch."):
            assert cls.__name__ in dnn.__all__ \
                or cls.__name__ in getattr(sys.modules[cls.__module__], "__all__", ()), cls
    return classes


def _reload(model):
    buf = io.BytesIO()
    torch.save(model, buf)
    allowed = _public_classes(model)
    before = list(torch.serialization.get_safe_globals())
    buf.seek(0)
    with torch.serialization.safe_globals(allowed):
        found = set(torch.serialization.get_unsafe_globals_in_checkpoint(buf))
        buf.seek(0)
        back = torch.load(buf, weights_only=True)
    after = torch.serialization.get_safe_globals()
    assert not [c for c in allowed if c in after and c not in before]    # the allowlist restored
    names = {f"{t.__module__}.{t.__qualname__}" for t in allowed}
    assert found <= names, found - names                     # nothing derived (step constants, numpy, caches)
    return back


@pytest.mark.parametrize("layer, kw", [("ds4d", {}), ("s4d", {}), ("ds4d", {"tap": True})])
def test_whole_model_loads_with_weights_only(layer, kw):
    m = token_model(layer, layer_kw=kw)
    p = ids(2, 16)
    with torch.no_grad():
        ref = m(p)
    back = _reload(m)
    with torch.no_grad():
        assert torch.equal(back(p), ref)
    out = m.generate(p[:, :6], 8, temperature=0)             # decoding leaves nothing to pickle
    with torch.no_grad():
        caches = m.allocate_inference_cache(2, history_dtype=torch.bfloat16) if layer == "ds4d" else None
        if caches is not None:
            m.prefill(p[:, :6], caches), m.step(p[:, 6], caches)
    back = _reload(m)
    assert torch.equal(back.generate(p[:, :6], 8, temperature=0), out)
    assert not any("Cache" in type(v).__name__ for mod in back.modules() for v in vars(mod).values())


# ------------------------------------------------------------------------------ torch.compile (CPU)
COMPILE_SCRIPT = """
import math, sys, warnings
import torch
from ddesys.nn import DS4D, S4D
warnings.simplefilter("ignore")
backend = sys.argv[1]
for cls in (DS4D, S4D):
    torch.manual_seed(0)
    layer = cls(8, 8, l_max=32) if cls is DS4D else cls(8, 8)
    x = torch.randn(2, 32, 8, requires_grad=True)
    f = torch.compile(layer, backend=backend)
    y = f(x)                                     # the first call: Numba compiles its kernels here
    y.square().sum().backward()
    got = [x.grad.clone()] + [p.grad.clone() for p in layer.parameters()]
    x.grad = None
    layer.zero_grad()
    ref = layer(x)
    ref.square().sum().backward()
    want = [x.grad] + [p.grad for p in layer.parameters()]
    err = max(float((a - b).abs().max() / b.abs().max().clamp_min(1e-30)) for a, b in zip([y] + got, [ref] + want))
    assert err <= 1e-5, (cls.__name__, err)
    try:
        f(torch.full((1, 32, 8), math.nan))
        raise SystemExit("a NaN input passed the compiled forward")
    except ValueError as e:
        assert "not finite" in str(e)
    print(cls.__name__, "ok")
"""

# What broke it (issue 20): Dynamo traced into the autograd Functions of nn/autograd.py and on into the
# Numba dispatcher, which on a kernel's first call (a fresh process) compiles it; Dynamo's bytecode
# rewrite of numba/core/dispatcher.py:_compile_for_args failed ("AssertionError: exception table entry
# start instruction has no offset"). nn/autograd.py now calls FusedKernel.apply and Vandermonde.apply
# behind torch.compiler.disable; these tests fail if that is removed.


def _compile_in_a_fresh_process(tmp_path, backend):
    script = tmp_path / "compile_check.py"
    script.write_text(COMPILE_SCRIPT)
    root = pathlib.Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, str(script), backend], cwd=tmp_path, capture_output=True, text=True,
                         timeout=900, env={**os.environ, "PYTHONPATH": str(root)})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["DS4D", "ok", "S4D", "ok"]


@pytest.mark.integration
def test_torch_compile_traces_the_training_forward(tmp_path):
    """Dynamo (backend ``eager``), in a fresh process: forward and gradients equal the eager layer's,
    and the non-finite input check still raises."""
    _compile_in_a_fresh_process(tmp_path, "eager")


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_training_forward(tmp_path, backend):
    _compile_in_a_fresh_process(tmp_path, backend)
