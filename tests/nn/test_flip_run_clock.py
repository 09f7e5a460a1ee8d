"""A clock learned from flip tests that reads whether the token before paused (nn.FlipRunClock), against
oracles written outside it:

* the ticks equal a brute-force loop over positions (``tick_t = decision[s_t, id_t]``, ``s_{t+1} = not
  tick_t``), including after a carried ``previous``; the prefix scan equals a loop on random maps;
* every path of a model (training, no gradients, decoding, prefill + decoding, two prefills, chunks carried
  by ``state=``, the module path, right-padded prompts) equals the same weights under a given clock that
  computes the loop's ticks over the whole sequence, in float64: the decode state carries the context;
* a flip test of an entry after a pause is the difference of two losses under the loop's clocks with the
  entry as it is and flipped (the states after it change too), its gradient written out by hand.
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from ddesys import nn as dnn
from ddesys.nn.flip_run_clock import run_states

F64 = torch.float64
V, H, L, LMAX = 5, 3, 18, 12


def loop_ticks(table, tokens, previous=None):
    """The oracle: ``table`` ``(2 V,)`` bool, ``tokens`` ``(B, L)``; a plain loop over rows and positions."""
    B, n = tokens.shape
    out = torch.zeros(B, n, dtype=torch.bool)
    for b in range(B):
        s = 0 if previous is None else int(not bool(previous[b]))
        for t in range(n):
            k = bool(table[s * V + int(tokens[b, t])])
            out[b, t] = k
            s = 0 if k else 1
    return out


class LoopClock(torch.nn.Module):
    """A given clock computing :func:`loop_ticks` of a fixed table over the whole input (no state)."""

    def __init__(self, table):
        super().__init__()
        self.table = table.clone()

    def forward(self, tokens):
        return loop_ticks(self.table, tokens)


# padding 0 pauses everywhere, id 3 ticks after a tick and pauses inside a run of pauses (data-like noise)
TABLE = torch.tensor([False, True, True, True, True,                 # after a tick: only 0 pauses
                      False, True, True, False, True])               # after a pause: 0 and 3 pause


def _model(layer="ds4d", seed=0, **kw):
    torch.manual_seed(seed)
    clock = dnn.FlipRunClock(V, gain=4.0, **({"pause_below": -1.0, "explore": 0.0} | kw))
    lk = {"d_state": 4, "seed": seed} | ({"l_max": LMAX} if layer == "ds4d" else {})
    m = dnn.SequenceModel(V, V, d_model=H, n_layers=2, layer=layer, embedding=True, clock=clock,
                          layer_kw=lk).double()
    with torch.no_grad():
        clock.ticking.copy_(TABLE)
        if layer == "ds4d":
            for blk in m.blocks:
                blk.layer.inner.nu_tau.add_(0.3)
    return m


def _tokens(seed=0, b=3):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, V, (b, L), generator=g)
    x[:, 4:12] = torch.where(torch.rand(b, 8, generator=g) < 0.7, 0, 3)   # a gap of padding with noise 3
    return x


def _told(m):
    t = copy.deepcopy(m)
    t.clock = LoopClock(m.clock.ticking)
    return t


def _err(a, b):
    return float((torch.as_tensor(a) - torch.as_tensor(b)).detach().abs().max())


def test_the_hand_written_example():
    clock = dnn.FlipRunClock(V, explore=0.0)
    with torch.no_grad():
        clock.ticking.copy_(TABLE)
    x = torch.tensor([[1, 3, 0, 3, 3, 2, 3, 0, 0, 4]])
    want = torch.tensor([[True, True, False, False, False, True, True, False, False, True]])
    assert torch.equal(clock(x), want) and torch.equal(clock.ticks(x), want)
    assert torch.equal(clock(x[:, 4:], previous=torch.tensor([False])), want[:, 4:])   # after the pause at 3
    assert not torch.equal(clock(x[:, 4:]), want[:, 4:])                              # the context matters
    assert clock.pauses() == [0] and clock.pauses(after_pause=True) == [0, 3]
    assert "contexts=2" in repr(clock)


@pytest.mark.parametrize("n", [0, 1, 2, 7, 16, 33])
def test_the_prefix_scan_is_the_loop(n):
    g = torch.Generator().manual_seed(n)
    k0, k1 = torch.rand(4, n, generator=g) < 0.5, torch.rand(4, n, generator=g) < 0.5
    s0 = torch.tensor([False, True, False, True])
    want = torch.zeros(4, n, dtype=torch.bool)
    for b in range(4):
        s = bool(s0[b])
        for t in range(n):
            want[b, t] = s
            s = not bool((k1 if s else k0)[b, t])
    assert torch.equal(run_states(k0, k1, s0), want)


def test_random_tables_equal_the_loop():
    clock = dnn.FlipRunClock(V).eval()
    for seed in range(5):
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            clock.ticking.copy_(torch.rand(2 * V, generator=g) < 0.6)
        x = torch.randint(0, V, (4, 40), generator=g)
        prev = torch.rand(4, generator=g) < 0.5
        assert torch.equal(clock(x), loop_ticks(clock.ticking, x))
        assert torch.equal(clock(x, previous=prev), loop_ticks(clock.ticking, x, prev))


@pytest.mark.parametrize("layer", ["ds4d", "s4d"])
def test_every_path_is_the_clock_over_the_whole_sequence(layer):
    m = _model(layer)
    x = _tokens()
    assert bool((~loop_ticks(TABLE, x) & (x == 3)).any())                # noise paused somewhere
    y = m(x)
    assert y.requires_grad
    with torch.no_grad():
        ref = _told(m)(x)
        assert _err(y, ref) < 1e-10 and _err(m(x), ref) < 1e-10
        cache = m.allocate_inference_cache(3, L, dtype=F64)
        assert _err(torch.stack([m.step(x[:, t], cache) for t in range(L)], 1), ref) < 1e-10
        cache = m.allocate_inference_cache(3, L, dtype=F64)
        assert _err(torch.stack([m.module_step(x[:, t], cache) for t in range(L)], 1), ref) < 1e-10
        for cut in (5, 9):                                          # inside the gap: the context carries
            cache = m.allocate_inference_cache(3, L, dtype=F64)
            yp = torch.cat([m.prefill(x[:, :cut], cache)] + [m.step(x[:, t], cache)[:, None] for t in range(cut, L)], 1)
            assert _err(yp, ref) < 1e-10
            cache = m.allocate_inference_cache(3, L, dtype=F64)
            assert _err(torch.cat([m.prefill(x[:, :cut], cache), m.prefill(x[:, cut:], cache)], 1), ref) < 1e-10
            ya, st = m(x[:, :cut], return_state=True)
            yb = m(x[:, cut:], state=st)
            assert _err(torch.cat([ya, yb], 1), ref) < 1e-10


@pytest.mark.filterwarnings("ignore:DS4D. delays are spread")      # the oracle's short compacted runs
def test_a_right_padded_prompt_continues_from_each_rows_own_last_token():
    m = _model("ds4d")
    x = _tokens(1)
    x[0, 3], x[1, 8], x[2, 13] = 1, 0, 2                            # each row's last token: a tick, a pause, a tick
    n = torch.tensor([4, 9, 14])
    with torch.no_grad():
        cache = m.allocate_inference_cache(3, L, dtype=F64)
        padded = x.clone()
        for b in range(3):
            padded[b, n[b]:] = 0                                     # padding that would pause
        m.prefill(padded[:, :14], cache, lengths=n)
        assert cache[0].last_tick.tolist() == [True, False, True]     # each row's own last token, not the padding
        for b in range(3):
            assert bool(cache[0].last_tick[b]) == bool(loop_ticks(TABLE, x[b:b + 1, :n[b]])[0, -1])
        rows = torch.arange(3)
        ys = torch.stack([m.step(x[rows, n + j], cache) for j in range(4)], 1)    # each row from its own end
        for b in range(3):
            ref = _told(m)(x[b:b + 1, :n[b] + 4])
            assert _err(ys[b], ref[0, n[b]:]) < 1e-10


def _row_losses(m, x, y):
    ce = F.cross_entropy(m(x).transpose(1, 2), y, ignore_index=-100, reduction="none")     # (B, L)
    return ce.sum(1), (y != -100).sum(1)


def test_a_flip_test_after_a_pause_is_the_difference_of_two_loop_clocks(monkeypatch):
    m = _model("ds4d", strength=6.0, cost=0.3, tests=1)
    with torch.no_grad():
        m.clock.u.copy_(torch.linspace(-0.3, 0.3, 2 * V, dtype=F64))   # inside the hysteresis: no change
    x, y = _tokens(2), _tokens(3)
    e = V + 3                                                        # id 3 inside a run of pauses
    monkeypatch.setattr(m.clock, "_choose", lambda entries: e)
    out = m.clock.loss(x, lambda: _row_losses(m, x, y))
    flipped = TABLE.clone()
    flipped[e] = True                                                # ticking
    with torch.no_grad():
        def told(table):
            t = copy.deepcopy(m)
            t.clock = LoopClock(table)
            s, c = _row_losses(t, x, y)
            return float(s.sum() / c.sum())
        d = told(TABLE) - told(flipped)                              # paused minus ticking
    s = run_states(TABLE[x], TABLE[x + V], torch.zeros(3, dtype=torch.bool))
    f = float(((x + V * s.long()) == e).double().mean())             # the entry's share of the positions
    (test,) = m.clock.last_tests
    assert test["id"] == e and abs(test["d"] - d) < 1e-12 and abs(d) > 1e-6 and f > 0
    assert abs(test["delta"] - (d - 0.3 * f)) < 1e-12
    m.zero_grad()
    out.backward()
    want = torch.zeros(2 * V, dtype=F64)
    want[e] = -6.0 * (d - 0.3 * f) * m.clock.gain
    assert _err(m.clock.u.grad, want) < 1e-12
    assert torch.equal(m.clock.ticking, TABLE)


def test_bad_previous_and_caches_without_a_record_are_refused():
    m = _model("s4d")
    x = _tokens()
    with pytest.raises(ValueError, match="previous"):
        m.clock(x, previous=torch.tensor([1, 0, 1]))
    with pytest.raises(ValueError, match="previous"):
        m.clock(x, previous=torch.tensor([True]))
    with torch.no_grad():
        cache = m.allocate_inference_cache(3, L, dtype=F64)
        m.step(x[:, 0], cache)
        cache[0].last_tick = None                                    # a cache that keeps no record
        with pytest.raises(ValueError, match="tick of the token before"):
            m.step(x[:, 1], cache)


def test_the_decisions_travel_in_the_state_dict():
    m = _model("s4d")
    other = dnn.FlipRunClock(V)
    other.load_state_dict(m.clock.state_dict())
    assert torch.equal(other.ticking, TABLE) and other.vocab_size == V and other.u.shape == (2 * V,)
    with pytest.raises(ValueError, match="token ids"):
        other(torch.tensor([[V]]))


def test_ids_after_a_pause_start_ticking_but_undecided():
    """``init_after_pause``: the entries after a pause start between ``pause_below`` and ``hysteresis``, so
    one test whose delta is negative pauses them; the entries after a tick start at ``init``."""
    clock = dnn.FlipRunClock(V, init=0.9, init_after_pause=0.55, gain=2.0)
    z = clock.logits().detach()
    assert torch.allclose(z[:V], torch.full((V,), 2.1972245773), atol=1e-6)
    assert torch.allclose(z[V:], torch.full((V,), 0.2006706954), atol=1e-6)
    assert bool(clock.ticking.all()) and "init_after_pause=0.55" in repr(clock)
    with torch.no_grad():
        clock.u[V + 2] -= 0.11                                       # a small push: below 0
    clock.settle()
    assert clock.pauses(after_pause=True) == [2] and clock.pauses() == []
    for bad in (0.0, 1.0, "0.6", float("nan")):
        with pytest.raises(ValueError, match="init_after_pause"):
            dnn.FlipRunClock(V, init_after_pause=bad)
    assert dnn.FlipRunClock(V, init_after_pause=0.4, pause_below=-1.0).ticking.all()


def test_ids_after_a_pause_can_start_paused():
    """Below ``sigma(pause_below)`` the entries after a pause start paused: a run of pauses, once begun,
    goes on through every id until a test unpauses one (a loop clock's ticks as the oracle); the entries
    after a tick are untouched, and a test's push above ``hysteresis`` unpauses an entry."""
    clock = dnn.FlipRunClock(V, init_after_pause=0.45, gain=2.0)
    assert clock.pauses(after_pause=True) == list(range(V)) and clock.pauses() == []
    with torch.no_grad():
        clock.u[0] -= 2.0                                            # id 0 pauses after a tick
    clock.settle()
    x = torch.tensor([[1, 0, 2, 3, 0, 4], [0, 2, 0, 0, 3, 1]])
    assert torch.equal(clock.ticks(x), loop_ticks(clock.ticking, x))
    assert torch.equal(clock.ticks(x), torch.tensor([[True, False, False, False, False, False],
                                                     [False, False, False, False, False, False]]))
    with torch.no_grad():
        clock.u[V + 4] += 1.0                                        # id 4 after a pause: above hysteresis
    clock.settle()
    assert clock.pauses(after_pause=True) == [v for v in range(V) if v != 4]
    assert torch.equal(clock.ticks(x)[0], torch.tensor([True, False, False, False, False, True]))
