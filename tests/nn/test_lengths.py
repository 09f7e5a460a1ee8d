"""Padded batches (issue 20, finding 4): with ``lengths``, every sequence of a right-padded batch gets
what it gets alone: layer forward (causal and bidirectional), the state after it, prefill and the decoding
after it, the model's forward with pooling, and generate. References: each sequence run by itself."""
import pytest
import torch

from ddesys.nn import DS4D, S4D, SequenceModel

F64 = torch.float64
LENS = [7, 12, 3]
L = 12


def _batch(H, seed=0, garbage=True):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(len(LENS), L, H, dtype=F64, generator=g)
    for b, n in enumerate(LENS):                 # the padding holds garbage: it must never be read
        x[b, n:] = 1e3 * torch.randn(L - n, H, dtype=F64, generator=g) if garbage else 0
    return x


def _layers():
    yield DS4D(4, 8, l_max=L, seed=0).double()
    yield DS4D(4, 8, l_max=L, seed=1, tap=True).double()
    yield S4D(4, 8, seed=2).double()


@pytest.mark.parametrize("layer", list(_layers()), ids=["ds4d", "ds4d-tap", "s4d"])
def test_layer_forward_prefill_and_decoding_per_sequence(layer):
    x = _batch(4)
    with torch.no_grad():
        y = layer(x, lengths=LENS)
        _, state = layer(x, lengths=LENS, return_state=True)
        cache = layer.allocate_inference_cache(len(LENS), dtype=F64)
        y_pre = layer.prefill(x, cache, lengths=LENS)
        nxt = torch.randn(len(LENS), 4, dtype=F64)
        y_next = layer.step(nxt, cache)
        y_state = layer.step(nxt, state.detach())
        for b, n in enumerate(LENS):
            alone = layer(x[b:b + 1, :n])                              # (1, n, H)
            torch.testing.assert_close(y[b, :n], alone[0], rtol=1e-9, atol=1e-10)
            assert torch.all(y[b, n:] == 0)
            torch.testing.assert_close(y_pre[b, :n], alone[0], rtol=1e-9, atol=1e-10)
            c1 = layer.allocate_inference_cache(1, dtype=F64)
            layer.prefill(x[b:b + 1, :n], c1)
            ref = layer.step(nxt[b:b + 1], c1)                         # decoding continues from its own end
            torch.testing.assert_close(y_next[b], ref[0], rtol=1e-9, atol=1e-10)
            torch.testing.assert_close(y_state[b], ref[0], rtol=1e-9, atol=1e-10)


def test_bidirectional_reverse_kernel_reads_no_padding():
    layer = DS4D(4, 8, l_max=L, seed=3, bidirectional=True).double()
    x = _batch(4)
    with torch.no_grad():
        y = layer(x, lengths=LENS)
        for b, n in enumerate(LENS):
            torch.testing.assert_close(y[b, :n], layer(x[b:b + 1, :n])[0], rtol=1e-9, atol=1e-10)
        plain = layer(x)                                               # without lengths the padding leaks
    assert (plain[2, :3] - y[2, :3]).abs().max() > 1e-3


@pytest.mark.parametrize("pool", [None, "mean", "last"])
def test_model_forward_and_pooling(pool):
    model = SequenceModel(d_input=3, d_output=5, d_model=8, n_layers=2, pool=pool,
                          layer_kw=dict(d_state=8, l_max=L, seed=0)).double().eval()
    x = _batch(3)
    with torch.no_grad():
        y = model(x, lengths=torch.tensor(LENS))
        for b, n in enumerate(LENS):
            alone = model(x[b:b + 1, :n])[0]
            torch.testing.assert_close(y[b, :n] if pool is None else y[b], alone, rtol=1e-9, atol=1e-10)


def test_model_prefill_decoding_and_generate():
    torch.manual_seed(0)
    lm = SequenceModel(d_input=11, d_output=11, d_model=8, n_layers=2, embedding=True,
                       layer_kw=dict(d_state=8, l_max=32, seed=0)).double().eval()
    ids = torch.randint(1, 11, (len(LENS), L))
    with torch.no_grad():
        caches = lm.allocate_inference_cache(len(LENS), dtype=F64)
        y = lm.prefill(ids, caches, lengths=LENS)
        nxt = torch.tensor([1, 2, 3])
        y_next = lm.step(nxt, caches)
        out = lm.generate(ids, 4, temperature=0, lengths=LENS)
        for b, n in enumerate(LENS):
            c1 = lm.allocate_inference_cache(1, dtype=F64)
            torch.testing.assert_close(y[b, :n], lm.prefill(ids[b:b + 1, :n], c1)[0], rtol=1e-9, atol=1e-10)
            torch.testing.assert_close(y_next[b], lm.step(nxt[b:b + 1], c1)[0], rtol=1e-9, atol=1e-10)
            alone = lm.generate(ids[b:b + 1, :n], 4, temperature=0)[0]
            assert torch.equal(out[b, :n + 4], alone) and torch.all(out[b, n + 4:] == 0)


def test_bad_lengths_are_named():
    layer = DS4D(4, 8, l_max=L, seed=0)
    x = torch.randn(3, L, 4)
    for bad, err in (([7, 13, 3], ValueError), ([7, 0, 3], ValueError), ([7, 3], ValueError),
                     ([7.0, 3.0, 2.0], TypeError)):
        with pytest.raises(err, match="lengths"):
            layer(x, lengths=bad)
    cache = layer.allocate_inference_cache(3)
    layer.prefill(x[:, :2], cache)
    with pytest.raises(ValueError, match="fresh cache"):
        layer.prefill(x, cache, lengths=LENS)
    with pytest.raises(ValueError, match="state"):
        layer(x, lengths=LENS, state=cache)
