"""Padding never reaches the valid positions, whatever it holds: NaN, inf, huge values, token ids outside the
vocabulary. For ``forward``, ``prefill`` and the decoding after it, at the layer and the model level, the
valid outputs (and the gradients of a loss on them) equal those of the same batch with a zero tail
(identical: the padding is replaced before anything reads it) and those of each sequence run alone."""
import math

import pytest
import torch

from ddesys.nn import DS4D, S4D, SequenceModel
from ddesys.nn.clock import TokenClock

F64 = torch.float64
LENS = [5, 9, 2]
L = 9
FILLS = [math.nan, math.inf, -math.inf, 1e300]


def _batch(H, fill, seed=0):
    """``(x, x0)``: a right-padded batch ``(3, L, H)`` whose tail holds ``fill``, and the same with zeros."""
    g = torch.Generator().manual_seed(seed)
    x0 = torch.randn(len(LENS), L, H, dtype=F64, generator=g)
    for b, n in enumerate(LENS):
        x0[b, n:] = 0
    x = x0.clone()
    for b, n in enumerate(LENS):
        x[b, n:] = fill
    return x, x0


def _layers():
    yield DS4D(4, 8, l_max=L, seed=0).double()
    yield DS4D(4, 8, l_max=L, seed=1, tap=True).double()
    yield S4D(4, 8, seed=2).double()


def _alone(layer, x0, b):
    return layer(x0[b:b + 1, :LENS[b]])[0]


@pytest.mark.parametrize("fill", FILLS, ids=["nan", "inf", "-inf", "1e300"])
@pytest.mark.parametrize("layer", list(_layers()), ids=["ds4d", "ds4d-tap", "s4d"])
def test_layer_prefill_then_steps_never_read_the_tail(layer, fill):
    x, x0 = _batch(4, fill)
    nxt = torch.randn(2, len(LENS), 4, dtype=F64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        outs = []
        for inp in (x, x0):
            cache = layer.allocate_inference_cache(len(LENS), dtype=F64)
            y = layer.prefill(inp, cache, lengths=LENS)
            outs.append((y, [layer.step(nxt[i], cache) for i in range(2)]))
        (y, steps), (y0, steps0) = outs
        assert torch.equal(y, y0)                        # identical: the tail was never read
        for s, s0 in zip(steps, steps0):
            assert torch.isfinite(s).all() and torch.equal(s, s0)
        for b, n in enumerate(LENS):                     # and what each sequence gets alone
            torch.testing.assert_close(y[b, :n], _alone(layer, x0, b), rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("fill", FILLS, ids=["nan", "inf", "-inf", "1e300"])
@pytest.mark.parametrize("layer", list(_layers()), ids=["ds4d", "ds4d-tap", "s4d"])
def test_layer_forward_with_lengths_accepts_any_tail(layer, fill):
    x, x0 = _batch(4, fill)
    grads = []
    for inp in (x, x0):
        layer.zero_grad()
        y = layer(inp, lengths=LENS)
        mask = torch.arange(L)[None, :, None] < torch.tensor(LENS)[:, None, None]
        (y * mask).square().sum().backward()
        grads.append([p.grad.clone() for p in layer.parameters()])
        if inp is x:
            y_bad = y.detach()
        else:
            y_ref = y.detach()
    assert torch.equal(y_bad, y_ref)
    for b, n in enumerate(LENS):
        assert torch.all(y_bad[b, n:] == 0)
        with torch.no_grad():
            torch.testing.assert_close(y_bad[b, :n], _alone(layer, x0, b), rtol=1e-9, atol=1e-10)
    for g, g0 in zip(*grads):
        assert torch.isfinite(g).all() and torch.equal(g, g0)
    with torch.no_grad():                                # the state after each sequence, then decoding
        _, state = layer(x, lengths=LENS, return_state=True)
        _, state0 = layer(x0, lengths=LENS, return_state=True)
        nxt = torch.randn(len(LENS), 4, dtype=F64)
        assert torch.equal(layer.step(nxt, state), layer.step(nxt, state0))


def test_layer_forward_still_refuses_nan_at_a_valid_position():
    layer = DS4D(4, 8, l_max=L, seed=0).double()
    x, _ = _batch(4, math.nan)
    x[1, 3, 2] = math.nan                                # inside sequence 1 (length 9)
    with pytest.raises(ValueError, match="position 3"):
        layer(x, lengths=LENS)


def _float_model(layer="ds4d"):
    return SequenceModel(3, 5, d_model=8, n_layers=2, layer=layer, layer_kw={"l_max": L} if layer == "ds4d" else {},
                         dtype=F64).eval()


@pytest.mark.parametrize("fill", FILLS, ids=["nan", "inf", "-inf", "1e300"])
@pytest.mark.parametrize("kind", ["ds4d", "s4d"])
def test_model_prefill_then_steps_never_read_the_tail(kind, fill):
    model = _float_model(kind)
    x, x0 = _batch(3, fill)
    nxt = torch.randn(2, len(LENS), 3, dtype=F64, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        outs = []
        for inp in (x, x0):
            caches = model.allocate_inference_cache(len(LENS), dtype=F64)
            y = model.prefill(inp, caches, lengths=LENS)
            outs.append((y, [model.step(nxt[i], caches) for i in range(2)]))
        (y, steps), (y0, steps0) = outs
        assert torch.isfinite(y).all() and torch.equal(y, y0)
        for s, s0 in zip(steps, steps0):
            assert torch.isfinite(s).all() and torch.equal(s, s0)
        for b, n in enumerate(LENS):
            alone = model(x0[b:b + 1, :n])[0]
            torch.testing.assert_close(y[b, :n], alone, rtol=1e-9, atol=1e-10)
            c1 = model.allocate_inference_cache(1, dtype=F64)
            model.prefill(x0[b:b + 1, :n], c1)
            torch.testing.assert_close(steps[0][b], model.step(nxt[0, b:b + 1], c1)[0], rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("pool", [None, "mean", "last"])
@pytest.mark.parametrize("fill", FILLS, ids=["nan", "inf", "-inf", "1e300"])
def test_model_forward_with_lengths_accepts_any_tail(fill, pool):
    model = SequenceModel(3, 5, d_model=8, n_layers=2, pool=pool, layer_kw={"l_max": L}, dtype=F64)
    x, x0 = _batch(3, fill)
    res = []
    for inp in (x, x0):
        model.zero_grad()
        y = model(inp, lengths=LENS)
        if pool is None:
            y = y * (torch.arange(L)[None, :, None] < torch.tensor(LENS)[:, None, None])
        y.square().sum().backward()
        res.append((y.detach(), [p.grad.clone() for p in model.parameters()]))
    (y, g), (y0, g0) = res
    assert torch.isfinite(y).all() and torch.equal(y, y0)
    for a, b in zip(g, g0):
        assert torch.isfinite(a).all() and torch.equal(a, b)
    with torch.no_grad():
        for b, n in enumerate(LENS):
            alone = model(x0[b:b + 1, :n])[0]
            got = y[b, :n] if pool is None else y[b]
            torch.testing.assert_close(got, alone, rtol=1e-9, atol=1e-10)
            if pool is None:
                assert torch.all(y[b, n:] == 0)


# ---------------------------------------------------------------------------------------------- token models
V = 11
BAD_IDS = [-1, V, 10**6]


def _ids(bad, seed=0):
    """Right-padded ids ``(3, L)``: the padding holds ``bad`` (outside the vocabulary), and the same with 0."""
    g = torch.Generator().manual_seed(seed)
    ids0 = torch.randint(1, V, (len(LENS), L), generator=g)
    for b, n in enumerate(LENS):
        ids0[b, n:] = 0
    ids = ids0.clone()
    for b, n in enumerate(LENS):
        ids[b, n:] = bad
    return ids, ids0


def _lm(clock=None):
    return SequenceModel(V, V, d_model=8, n_layers=2, embedding=True, clock=clock, layer_kw={"l_max": L},
                         dtype=F64).eval()


@pytest.mark.parametrize("bad", BAD_IDS)
@pytest.mark.parametrize("clock", [None, "token"])
def test_padding_ids_are_never_looked_up(bad, clock):
    model = _lm(TokenClock(pause_tokens=(3,)) if clock else None)
    ids, ids0 = _ids(bad)
    nxt = torch.tensor([4, 7, 2])
    with torch.no_grad():
        y = model(ids, lengths=LENS)
        y0 = model(ids0, lengths=LENS)
        assert torch.equal(y, y0)
        res = []
        for inp in (ids, ids0):
            caches = model.allocate_inference_cache(len(LENS), dtype=F64)
            res.append((model.prefill(inp, caches, lengths=LENS), model.step(nxt, caches)))
        (p, s), (p0, s0) = res
        assert torch.equal(s, s0)
        for b, n in enumerate(LENS):
            alone = model(ids0[b:b + 1, :n])[0]
            torch.testing.assert_close(y[b, :n], alone, rtol=1e-9, atol=1e-10)
            torch.testing.assert_close(p[b, :n], p0[b, :n], rtol=0, atol=0)
            torch.testing.assert_close(p[b, :n], alone, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("bad", BAD_IDS)
def test_generate_with_padded_prompts_ignores_padding_ids(bad):
    model = _lm()
    ids, ids0 = _ids(bad)
    out = model.generate(ids, 3, temperature=0, lengths=LENS)
    out0 = model.generate(ids0, 3, temperature=0, lengths=LENS)
    assert torch.equal(out, out0)
    for b, n in enumerate(LENS):
        alone = model.generate(ids0[b:b + 1, :n], 3, temperature=0)
        assert torch.equal(out[b, :n + 3], alone[0])
