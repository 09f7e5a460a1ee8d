"""Every misuse of the layers and models is refused before any work, by an error that names the argument,
the value given and what would be accepted; and what looks accepted does what it says (a recurrent
forward trains, a cache reset only touches this model's caches)."""
import re

import pytest
import torch

from ddesys.nn import DS4D, S4D, SequenceModel
from ddesys.nn import s4compat

V = 11


def _lm(**kw):
    return SequenceModel(V, V, d_model=8, n_layers=2, embedding=True, layer_kw={"l_max": 16}, **kw).eval()


# ---------------------------------------------------------------------------------------------- token ids
@pytest.mark.parametrize("bad", [V, -1, 10**6])
def test_ids_outside_the_vocabulary_are_named(bad):
    model = _lm()
    ids = torch.randint(0, V, (2, 6), generator=torch.Generator().manual_seed(0))
    ids[1, 4] = bad
    want = rf"vocabulary.*{V}.*{bad}.*\(1, 4\)"
    with pytest.raises(ValueError, match=want):
        model(ids)
    caches = model.allocate_inference_cache(2)
    with pytest.raises(ValueError, match=want):
        model.prefill(ids, caches)
    assert all(c.t == 0 for c in caches)                 # refused before any work
    with pytest.raises(ValueError, match=rf"vocabulary.*{V}.*{bad}.*batch 1"):
        model.step(torch.tensor([3, bad]), caches)
    with pytest.raises(ValueError, match=rf"vocabulary.*{V}.*{bad}.*batch 1"):
        model.compile_step(caches).step(torch.tensor([3, bad]))
    assert all(c.t == 0 for c in caches)
    with pytest.raises(ValueError, match=want):
        model.generate(ids, 2)
    with pytest.raises(ValueError, match=want):          # a valid position of a padded prompt
        model.generate(ids, 2, lengths=[6, 6])


def test_ids_at_valid_positions_of_a_padded_batch_are_checked():
    model = _lm()
    ids = torch.zeros(2, 6, dtype=torch.long)
    ids[0, 2] = V + 5                                    # valid: sequence 0 has 4 tokens
    with pytest.raises(ValueError, match=rf"{V + 5}.*\(0, 2\)"):
        model(ids, lengths=[4, 6])
    with pytest.raises(ValueError, match=rf"{V + 5}.*\(0, 2\)"):
        model.prefill(ids, model.allocate_inference_cache(2), lengths=[4, 6])


# ---------------------------------------------------------------------------------------------- caches
@pytest.mark.parametrize("layer", [DS4D(4, 8, l_max=16, seed=0), S4D(4, 8, seed=0)], ids=["ds4d", "s4d"])
@pytest.mark.parametrize("lengths", [None, [5, 8]])
def test_prefill_without_a_cache_names_the_cache(layer, lengths):
    x = torch.randn(2, 8, 4)
    with pytest.raises(TypeError, match=rf"{type(layer).__name__}Cache.*allocate_inference_cache.*NoneType"):
        layer.prefill(x, None, lengths=lengths)


def test_reset_cache_refuses_another_models_caches():
    model, other = _lm(), _lm()
    theirs = other.allocate_inference_cache(2)
    with torch.no_grad():
        other.prefill(torch.randint(0, V, (2, 5)), theirs)
    before = [c.buf.clone() for c in theirs]
    with pytest.raises(RuntimeError, match="reset_cache.*not by this"):
        model.reset_cache(theirs)
    assert all(c.t == 5 for c in theirs)                 # untouched
    assert all(torch.equal(c.buf, b) for c, b in zip(theirs, before))
    with pytest.raises(RuntimeError, match="not by this"):   # as step refuses them
        model.step(torch.tensor([1, 2]), theirs)
    mine = model.allocate_inference_cache(2)
    with torch.no_grad():
        model.prefill(torch.randint(0, V, (2, 5)), mine)
    model.reset_cache(mine)
    assert all(c.t == 0 for c in mine)


def test_reset_cache_refuses_caches_in_the_wrong_order():
    model = SequenceModel(3, 3, d_model=8, n_layers=2, layer_kw={"l_max": 16})
    caches = model.allocate_inference_cache(1)
    with pytest.raises(RuntimeError, match="reset_cache"):
        model.reset_cache(caches[::-1])


# ---------------------------------------------------------------------------------------------- mode
@pytest.mark.parametrize("layer", ["ds4d", "s4d"])
def test_recurrent_mode_trains_like_the_fft_mode(layer):
    """``mode="recurrent"`` runs the exact recurrence; it must not silently drop the layers' gradients."""
    model = SequenceModel(3, 2, d_model=8, n_layers=1, layer=layer, layer_kw={"l_max": 16} if layer == "ds4d" else {},
                          dtype=torch.float64)
    x = torch.randn(2, 12, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    grads = {}
    for mode in ("fft", "recurrent"):
        model.zero_grad()
        model(x, mode=mode).square().sum().backward()
        grads[mode] = {n: p.grad for n, p in model.named_parameters()}
    for name, g in grads["recurrent"].items():
        assert g is not None, f"{name} got no gradient in mode='recurrent'"
        torch.testing.assert_close(g, grads["fft"][name], rtol=1e-6, atol=1e-8)
    with torch.no_grad():                                   # the values are the recurrence's, bit for bit
        y_plain = model(x, mode="recurrent")
    assert torch.equal(model(x, mode="recurrent").detach(), y_plain)


# ---------------------------------------------------------------------------------------------- arguments
@pytest.mark.parametrize("kw", [{"tap_width": 8.0}, {"tap_lr": 1e-3}, {"tap_width": 1.0}])
def test_tap_settings_without_the_tap_are_refused(kw):
    with pytest.raises(ValueError, match=rf"{next(iter(kw))}.*tap=True"):
        DS4D(4, l_max=16, **kw)
    layer = DS4D(4, l_max=16, tap=True, **kw)
    assert layer.tap is not None


@pytest.mark.parametrize("lr", [float("nan"), -1e-3, float("inf"), -0.0 - 1e-300])
@pytest.mark.parametrize("cls", [s4compat.DS4D, s4compat.S4D])
def test_s4compat_learning_rate_must_be_finite_and_non_negative(cls, lr):
    with pytest.raises(ValueError, match=re.escape("lr must be a finite number >= 0")):
        cls(4, lr=lr)
    assert cls(4, lr=0.0).lr == 0.0


def test_empty_batch_with_empty_lengths_is_consistent():
    layer = DS4D(4, 8, l_max=16, seed=0)
    y = layer(torch.randn(0, 10, 4), lengths=[])
    assert y.shape == (0, 10, 4)
    model = SequenceModel(3, 2, d_model=8, n_layers=1, layer_kw={"l_max": 16}, pool="mean")
    assert model(torch.randn(0, 10, 3), lengths=[]).shape == (0, 2)


@pytest.mark.parametrize("make", [lambda: DS4D(4, 8, l_max=16), lambda: S4D(4, 8),
                                  lambda: s4compat.DS4D(4, 8, transposed=False, l_max=16),
                                  lambda: s4compat.S4D(4, 8, transposed=False)],
                         ids=["ds4d", "s4d", "s4compat-ds4d", "s4compat-s4d"])
def test_channels_last_layer_given_channels_first_names_the_convention(make):
    layer = make()
    x = torch.randn(2, 4, 10)                            # (B, H, L): the other convention
    with pytest.raises(ValueError) as err:
        layer(x)
    msg = str(err.value)
    assert "(B, L, H)" in msg and "(2, 4, 10)" in msg, msg
    assert "(2, 10, 4)" not in msg, msg                  # not the layer's internal (B, H, L) view
