"""The layers inside a user's own code: the delay range, checkpoints, mixed precision, clear errors."""
import io
import math
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from ddesys.nn import DS4D, S4D, SequenceModel  # noqa: E402
from ddesys.nn.ds4d import DS4DCache  # noqa: E402


# ------------------------------------------------------------------------------ the delay range (l_max)
def test_default_delay_range_comes_from_the_first_sequence():
    """Defaults on length-64 sequences: every delay inside the sequence, the cache sized by it."""
    layer = DS4D(16, 8, seed=0)
    with pytest.raises(RuntimeError, match="l_max"):
        layer.allocate_inference_cache(2)                        # range not fixed before the first forward
    layer(torch.randn(2, 64, 16))
    delay = layer.to_ddesys().delay
    assert layer.l_max == 64 and delay.max() < 64 and delay.min() >= 1
    assert layer.allocate_inference_cache(8).n_slots <= 64
    layer(torch.randn(2, 300, 16))                               # frozen: a longer sequence changes nothing
    assert np.array_equal(layer.to_ddesys().delay, delay)


def test_default_grid_matches_explicit_l_max():
    lazy, explicit = DS4D(16, 8, seed=3), DS4D(16, 8, l_max=64, seed=3)
    lazy(torch.randn(1, 64, 16))
    assert torch.equal(lazy.nu_tau, explicit.nu_tau)
    assert np.array_equal(lazy.to_ddesys().delay, explicit.to_ddesys().delay)


def test_range_much_longer_than_the_sequence_warns_once():
    layer = DS4D(8, 8, l_max=1024)
    with pytest.warns(UserWarning, match="l_max=64"):
        layer(torch.randn(1, 64, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        layer(torch.randn(1, 64, 8))                             # once per layer


def test_a_clocked_prompt_is_no_training_length():
    """A short prompt through a clocked layer's FFT prefill does not warn; the layer's own check is kept
    for its first real sequence."""
    from ddesys.nn import Clocked
    layer = DS4D(8, 8, l_max=1024)
    clocked = Clocked(layer)
    cache = clocked.allocate_inference_cache(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clocked.prefill(torch.randn(1, 16, 8), cache)
    with pytest.warns(UserWarning, match="l_max=64"):
        layer(torch.randn(1, 64, 8))


def test_too_short_first_sequence_is_refused():
    with pytest.raises(ValueError, match="l_max"):
        DS4D(4, 4)(torch.randn(1, 2, 4))                          # s_max = 1 = s_min


# ------------------------------------------------------------------------------ checkpoints
def _roundtrip(state):
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def test_state_dict_carries_the_delay_range():
    src = DS4D(8, 8, l_max=64, seed=0)
    state = _roundtrip(src.state_dict())
    with pytest.raises(RuntimeError, match="l_max=64"):
        DS4D(8, 8, l_max=1024).load_state_dict(state)            # would move every delay: refused
    dst = DS4D(8, 8)                                              # l_max=None adopts the checkpoint's range
    dst.load_state_dict(state)
    assert dst.l_max == 64 and np.array_equal(dst.to_ddesys().delay, src.to_ddesys().delay)
    same = DS4D(8, 8, l_max=64)
    same.load_state_dict(state)
    assert np.array_equal(same.to_ddesys().delay, src.to_ddesys().delay)
    other_min = DS4D(8, 8, l_max=64, s_min=2.0)
    with pytest.raises(RuntimeError, match="s_min=1"):
        other_min.load_state_dict(state)


def test_old_checkpoint_without_range_still_loads():
    src = DS4D(8, 8, l_max=64, seed=0)
    state = {k: v for k, v in src.state_dict().items() if k != "delay_range"}     # as saved before
    dst = DS4D(8, 8, l_max=64)
    dst.load_state_dict(state)                                    # strict: no missing key
    assert np.array_equal(dst.to_ddesys().delay, src.to_ddesys().delay)
    with pytest.raises(RuntimeError, match="does not record its delay range"):
        DS4D(8, 8).load_state_dict(state)


def test_half_cast_keeps_the_range_exact():
    layer = DS4D(4, 4, l_max=1024, s_min=2.5, s_max=1000.3)
    layer.half()
    assert (layer.s_min, layer.s_max) == (2.5, 1000.3)
    state = layer.state_dict()
    back = DS4D(4, 4, l_max=1024, s_min=2.5, s_max=1000.3).half()
    back.load_state_dict(state)                                   # the range survived the cast bit for bit


# ------------------------------------------------------------------------------ mixed precision
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("cls", [DS4D, S4D])
def test_half_input_matches_float32(cls, dtype):
    layer = cls(8, 8, seed=0) if cls is S4D else cls(8, 8, l_max=64, seed=0)
    x = torch.randn(2, 64, 8)
    y32 = layer(x)
    xh = x.to(dtype).requires_grad_()
    yh = layer(xh)
    yh.float().square().mean().backward()
    assert yh.dtype == dtype and xh.grad.dtype == dtype and torch.isfinite(layer.log_dt.grad).all()
    ref = layer(xh.detach().float())                              # the same rounded input in float32
    res = torch.finfo(dtype).eps
    assert (yh.float() - ref).abs().max() <= 2 * res * ref.abs().max()
    assert (yh.float() - y32).abs().max() <= 8 * res * y32.abs().max()   # input rounding on top


def test_sequence_model_bfloat16_and_autocast():
    model = SequenceModel(3, 5, d_model=16, n_layers=2, layer_kw=dict(d_state=8))
    x = torch.randn(4, 64, 3)
    y32 = model(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ya = model(x)
    ya.float().sum().backward()
    assert torch.isfinite(model.blocks[0].layer.nu_tau.grad).all()
    assert (ya.float() - y32).abs().max() <= 0.05 * y32.abs().max()     # bf16 matmuls around the layer
    mb = SequenceModel(3, 5, d_model=16, n_layers=2, layer_kw=dict(d_state=8)).bfloat16()
    yb = mb(x.bfloat16())
    yb.float().sum().backward()
    assert yb.dtype == torch.bfloat16


@pytest.mark.parametrize("bad", [torch.float16, torch.bfloat16, torch.complex64, torch.int32])
def test_unsupported_kernel_dtype_refused(bad):
    with pytest.raises(ValueError, match="torch.float32, torch.float64"):
        DS4D(4, 4, l_max=16, kernel_dtype=bad)


# ------------------------------------------------------------------------------ clear errors
def test_model_step_needs_one_cache_per_layer():
    model = SequenceModel(3, 5, d_model=8, n_layers=3, layer_kw=dict(d_state=4, l_max=16))
    caches = model.allocate_inference_cache(2)
    with pytest.raises(ValueError, match="one cache per layer \\(3"):
        model.step(torch.randn(2, 3), caches[:2])
    with pytest.raises(ValueError, match="one cache per layer"):
        model.prefill(torch.randn(2, 5, 3), caches[0])


@pytest.mark.parametrize("other", ["H", "d_state", "s4d", "none"])
def test_step_with_another_layers_cache(other):
    layer = DS4D(8, 8, l_max=16)
    cache = {"H": lambda: DS4D(6, 8, l_max=16).allocate_inference_cache(2),
             "d_state": lambda: DS4D(8, 4, l_max=16).allocate_inference_cache(2),
             "s4d": lambda: S4D(8, 8).allocate_inference_cache(2),
             "none": lambda: None}[other]()
    with pytest.raises((TypeError, ValueError), match="allocate_inference_cache|another layer"):
        layer.step(torch.randn(2, 8), cache)
    s4 = S4D(8, 8)
    with pytest.raises(TypeError, match="S4DCache"):
        s4.step(torch.randn(2, 8), layer.allocate_inference_cache(2))


@pytest.mark.parametrize("cls", [DS4D, S4D])
def test_prefill_with_a_2d_prompt_says_so(cls):
    layer = cls(8, 8, l_max=16) if cls is DS4D else cls(8, 8)
    cache = layer.allocate_inference_cache(2)
    with pytest.raises(ValueError, match="3-D input"):
        layer.prefill(torch.randn(5, 8), cache)


def test_unknown_layer_name():
    with pytest.raises(ValueError, match="'ds4d', 's4d'"):
        SequenceModel(3, 5, layer="lstm")


@pytest.mark.parametrize("cls", [DS4D, S4D])
def test_empty_batch_and_zero_width(cls):
    layer = cls(8, 8, l_max=16) if cls is DS4D else cls(8, 8)
    y = layer(torch.randn(0, 16, 8))
    assert y.shape == (0, 16, 8)
    with pytest.raises(ValueError, match="d_model"):
        cls(0, 8)
    with pytest.raises(ValueError, match="d_state"):
        cls(4, 0)


@pytest.mark.parametrize("name", ["log_dt", "nu_tau", "C"])
def test_nan_parameters_are_named(name):
    layer = DS4D(4, 4, l_max=16)
    with torch.no_grad():
        getattr(layer, name).view(-1)[0] = math.nan
    with pytest.raises(FloatingPointError, match=name):
        layer(torch.randn(1, 16, 4))
    with pytest.raises(FloatingPointError, match=name):
        layer.allocate_inference_cache(1)


def test_cache_type_checked_directly():
    layer = DS4D(4, 4, l_max=16)
    bad = DS4DCache(torch.zeros(1, 3, 5, 2, dtype=torch.complex64))
    with pytest.raises(ValueError, match="another layer"):
        layer.step(torch.randn(1, 4), bad)


# ------------------------------------------------------------------------------ non-finite inputs (issue 20, finding 7)
@pytest.mark.parametrize("cls", [DS4D, S4D])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_input_is_refused_naming_its_position(cls, value):
    """Before, the FFT spread a NaN or inf at the last position into every earlier output."""
    layer = cls(4, 8, l_max=32) if cls is DS4D else cls(4, 8)
    x = torch.randn(3, 32, 4)
    x[2, 31, 1] = value
    x[1, 20, 3] = value                                          # the first position over the batch: 20
    with pytest.raises(ValueError, match=r"not finite at position 20 \(batch 1, channel 3"):
        layer(x)
    with pytest.raises(ValueError, match="position 20"):
        layer(x, mode="recurrent")
    with pytest.raises(ValueError, match="position 20"):
        layer(x.bfloat16())
    with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(ValueError, match="position 20"):
        layer(x)
    tr = cls(4, 8, l_max=32, transposed=True) if cls is DS4D else cls(4, 8, transposed=True)
    with pytest.raises(ValueError, match=r"position 20 \(batch 1, channel 3"):
        tr(x.transpose(1, 2))


def test_finite_input_is_never_refused():
    """The check is a sum: one that overflows (finite input) falls back to the exact test and passes."""
    layer = S4D(2, 4)
    x = torch.zeros(1, 8, 2)
    x[0, :4, 0] = 3e38                                           # the float32 sum overflows to inf
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        layer(x)                                                 # no ValueError
    layer(torch.zeros(0, 8, 2))                                  # empty batch
