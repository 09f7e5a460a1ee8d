"""A clock learned per token id (nn.LearnedTokenClock), against oracles written outside it:

* every path of a model run in its ticks equals the clocked recurrence in ticks (a brute-force loop), in
  float64: the training path with the clock's gradient (float ticks), the path without gradients, decoding
  and prefill + decoding; and equals the same model under a given clock told the ids it pauses at;
* its gradient: the logit of id v gets the sum over v's positions of dL/dc (the soft clock's derivative at
  the binary point, by finite differences of the soft clock's definition, oracle of
  test_learned_clock_candidates) times the surrogate's slope and the gain;
* the time cost watches it; bad arguments are refused by name.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from ddesys import nn as dnn
from ddesys.nn.selective import soft_forward

from clock_helpers import tick_loop

F64 = torch.float64
V, H, L, LMAX = 7, 3, 16, 12
PAUSE = (0, 3, 5)


def _model(layer="ds4d", seed=0):
    clock = dnn.LearnedTokenClock(V, gain=4.0)
    kw = {"d_state": 4, "seed": seed} | ({"l_max": LMAX} if layer == "ds4d" else {})
    m = dnn.SequenceModel(V, V, d_model=H, n_layers=2, layer=layer, embedding=True, clock=clock,
                          layer_kw=kw).double()
    with torch.no_grad():
        clock.u.copy_(torch.tensor([-0.7 if v in PAUSE else 0.4 + 0.1 * v for v in range(V)], dtype=F64))
        for blk in m.blocks:
            if layer == "ds4d":
                blk.layer.inner.nu_tau.add_(0.3)        # delays off the integers (dL/dc two-sided)
    return m


def _tokens(seed=0):
    return torch.randint(0, V, (3, L), generator=torch.Generator().manual_seed(seed))


def _err(a, b):
    return float((torch.as_tensor(a) - torch.as_tensor(b)).detach().abs().max())


@pytest.mark.parametrize("layer", ["ds4d", "s4d"])
def test_every_path_is_the_clocked_recurrence(layer):
    m = _model(layer)
    x = _tokens()
    ticks = ~torch.isin(x, torch.tensor(PAUSE))
    assert m.clock.pauses() == list(PAUSE)
    assert torch.equal(m.clock.ticks(x), ticks)
    h = m.encoder(x)
    for blk in m.blocks:                                            # each layer: the loop in the id's ticks
        z = blk.norm(h)
        assert _err(blk.layer(z, ticks=m.clock(x)), tick_loop(blk.layer.inner, z, ticks)) < 1e-10
        h = blk(h, ticks=ticks)
    y = m(x)                                                        # float ticks, with the clock's gradient
    assert y.requires_grad
    told = copy.deepcopy(m)
    told.clock = dnn.TokenClock(PAUSE)                              # the same weights, told the ids
    with torch.no_grad():
        assert _err(told(x), y) < 1e-10
        assert _err(m(x), y) < 1e-10
        cache = m.allocate_inference_cache(3, L, dtype=F64)
        assert _err(torch.stack([m.step(x[:, t], cache) for t in range(L)], 1), y) < 1e-10
        cache = m.allocate_inference_cache(3, L, dtype=F64)
        yp = torch.cat([m.prefill(x[:, :6], cache)] + [m.step(x[:, t], cache)[:, None] for t in range(6, L)], 1)
        assert _err(yp, y) < 1e-10
    n = torch.tensor([L, 9, 4])                                     # right padding: pauses on top
    yl = m(x, lengths=n)
    for b, k in enumerate(n.tolist()):
        assert _err(yl[b, :k], y[b, :k]) < 1e-10


def test_the_gradient_is_the_soft_clocks_derivative_times_the_slope():
    m = _model("ds4d")
    x = _tokens(1)
    G = torch.randn(3, L, H, dtype=F64, generator=torch.Generator().manual_seed(2))
    blk = m.blocks[0]
    z = blk.norm(m.encoder(x)).detach()
    m.zero_grad()
    (G * blk.layer(z, ticks=m.clock(x))).sum().backward()
    # dL/dc by one-sided finite differences of the soft clock (inside [0, 1]) through the scan's definition
    cb = m.clock.ticks(x).double()
    base = float((G * soft_forward(blk.layer.inner, z.transpose(1, 2), cb).transpose(1, 2)).sum())
    dc, eps = torch.zeros_like(cb), 1e-6
    with torch.no_grad():
        for b in range(3):
            for t in range(L):
                step = -eps if cb[b, t] == 1.0 else eps
                cp = cb.clone()
                cp[b, t] += step
                yp = soft_forward(blk.layer.inner, z.transpose(1, 2), cp).transpose(1, 2)
                dc[b, t] = (float((G * yp).sum()) - base) / step
    zl = m.clock.logits(x).detach()
    s = torch.sigmoid(zl / m.clock.temperature)
    per_pos = dc * s * (1 - s) / m.clock.temperature * m.clock.gain               # dL/du at each position
    want = torch.zeros(V, dtype=F64).index_add_(0, x.flatten(), per_pos.flatten())
    assert _err(m.clock.u.grad, want) < 1e-6 * max(1.0, float(want.abs().max()))
    assert float(want.abs().max()) > 1e-3                                         # not a vacuous check


def test_the_time_cost_watches_it_and_moves_the_frequent_ids():
    m = _model("s4d")
    cost = dnn.TimeCost(m, weight=0.5, steps=10)
    assert cost.n_clocks == 1
    x = _tokens(3)
    c = m.clock(x)
    m(x)
    got = cost(1)
    assert abs(float(got) - 0.5 * float(c.mean())) < 1e-12
    m.zero_grad()
    got.backward()
    s = torch.sigmoid(m.clock.logits().detach())
    counts = torch.bincount(x.flatten(), minlength=V).double()
    want = 0.5 * counts / x.numel() * s * (1 - s) * m.clock.gain                  # d(mean c)/du per id
    assert _err(m.clock.u.grad, want) < 1e-12


def test_bad_arguments_are_refused_by_name():
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="vocab_size"):
            dnn.LearnedTokenClock(bad)
    for kw in ({"init": 1.0}, {"init": 0.0}, {"temperature": 0.0}, {"gain": -1.0}):
        with pytest.raises(ValueError):
            dnn.LearnedTokenClock(5, **kw)
    clock = dnn.LearnedTokenClock(5)
    with pytest.raises(TypeError, match="integer token ids"):
        clock(torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"\[0, 5\)"):
        clock(torch.tensor([[0, 5]]))
    with torch.no_grad():
        assert clock(torch.tensor([[0, 4]])).dtype == torch.bool and clock.pauses() == []
    m = _model("s4d")
    with pytest.raises(TypeError):                                 # a carried state takes bool ticks only
        m.blocks[0].layer(torch.zeros(1, L, H, dtype=F64), ticks=torch.ones(1, L, dtype=F64), return_state=True)
    with torch.no_grad():                                          # chunks carried without gradients
        x = _tokens(4)
        y, st = m(x[:, :7], return_state=True)
        y2, _ = m(x[:, 7:], state=st, return_state=True)
        assert _err(torch.cat([y, y2], 1), m(x)) < 1e-10
    assert np.isfinite(float(m(x).sum()))


def test_noise_decides_each_id_once_per_row_in_training_only():
    clock = dnn.LearnedTokenClock(V, noise=2.0).double()
    with torch.no_grad():
        clock.u.zero_()                                            # every id at its threshold
    x = torch.randint(0, V, (64, 40), generator=torch.Generator().manual_seed(5))
    torch.manual_seed(0)
    c = clock(x)                                                   # training, under autograd: sampled
    assert c.requires_grad and set(c.detach().unique().tolist()) == {0.0, 1.0}
    for b in range(64):                                            # one decision per row and id
        for v in x[b].unique():
            assert len(c[b][x[b] == v].detach().unique()) == 1
    frac = float(c.detach().mean())
    assert 0.35 < frac < 0.65                                      # logistic noise at z = 0: half and half
    clock.eval()
    assert torch.equal(clock(x).detach(), torch.zeros_like(c))     # eval: the threshold (z = 0 pauses)
    with torch.no_grad():
        clock.train()
        assert not clock(x).any()                                  # no gradients: never sampled
    with pytest.raises(ValueError, match="noise"):
        dnn.LearnedTokenClock(V, noise=-1.0)
