"""Smaller contracts of the user's path (issue 47): S4D takes DS4D's cache options, a mean-pooled model
refuses state passing by name, a learned-clock model takes ``lengths=`` in ``forward`` as its prefill does,
a time cost without a learned clock is refused, and the open-range error names ``max_seqlen=``."""
from __future__ import annotations

import warnings

import pytest
import torch

from ddesys.nn import DS4D, S4D, SequenceModel
from ddesys.nn.learned_clock import TimeCost


@pytest.mark.parametrize("hd", [torch.bfloat16, torch.float16])
def test_s4d_and_ds4d_take_the_same_cache_options(hd):
    for layer in ("ds4d", "s4d"):
        kw = dict(d_state=8, l_max=16) if layer == "ds4d" else dict(d_state=8)
        m = SequenceModel(5, 5, d_model=8, n_layers=1, layer=layer, embedding=True, layer_kw=kw).eval()
        caches = m.allocate_inference_cache(2, history_dtype=hd)
        assert m.step(torch.tensor([1, 2]), caches).shape == (2, 5)
    with pytest.raises(ValueError, match="history_dtype"):
        S4D(4, 4).allocate_inference_cache(1, history_dtype=torch.int8)
    with pytest.raises(TypeError, match="no_such"):
        S4D(4, 4).allocate_inference_cache(1, no_such=1)


def test_mean_pooling_refuses_state_passing_by_name():
    m = SequenceModel(3, 2, d_model=8, n_layers=1, pool="mean", layer_kw=dict(d_state=8, l_max=16))
    x = torch.randn(2, 10, 3)
    with pytest.raises(ValueError, match="pool='mean'"):
        m(x, return_state=True)
    last = SequenceModel(3, 2, d_model=8, n_layers=1, pool="last", layer_kw=dict(d_state=8, l_max=16)).double()
    xd = x.double()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")                                  # a first chunk is no short sequence
        y1, st = last(xd[:, :4], return_state=True)
        y2 = last(xd[:, 4:], state=st)
    assert float((y2 - last(xd)).abs().max()) <= 1e-10                 # the last position is the whole's


@pytest.mark.parametrize("clock", ["binary", "learned"])
def test_learned_clock_model_takes_lengths_in_forward(clock):
    torch.manual_seed(0)
    m = SequenceModel(6, 6, d_model=8, n_layers=2, embedding=True, clock=clock, layer="s4d",
                      layer_kw=dict(d_state=8)).double().eval()
    ids = torch.randint(1, 6, (2, 9))
    n = torch.tensor([9, 5])
    with torch.no_grad():
        y = m(ids, lengths=n)
        alone = m(ids[1:, :5])
    assert float((y[1, :5] - alone[0]).abs().max()) <= 1e-10          # each sequence as if alone
    assert float(y[1, 5:].abs().max()) == 0.0                          # nothing at the padding


def test_time_cost_without_a_learned_clock_is_refused():
    m = SequenceModel(5, 5, d_model=8, n_layers=1, embedding=True, layer_kw=dict(d_state=8, l_max=16))
    with pytest.raises(ValueError, match="no learned clock"):
        TimeCost(m)


def test_open_delay_range_error_names_max_seqlen():
    layer = DS4D(4, 4)                                                   # l_max=None: open until a forward
    with pytest.raises(RuntimeError, match="max_seqlen="):
        layer.to_ddesys()
