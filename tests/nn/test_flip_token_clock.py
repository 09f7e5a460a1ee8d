"""A clock per token id learned from flip tests (nn.FlipTokenClock), against oracles written outside it:

* every path of a model run in its decisions equals the clocked recurrence in ticks (a brute-force loop)
  in float64, and the same model under a given clock told the ids it pauses at (training, no gradients,
  decoding, prefill + decoding);
* a flip test's preference is the difference of two losses computed by the same weights under two given
  clocks (``TokenClock`` told the ids, with the tested id paused and ticking); its gradient for ``u`` is
  ``-strength * d * gain`` at the tested id plus the time cost's derivative, written out by hand;
* the decisions follow the logits with hysteresis; exploration happens in training only, only at paused
  ids, once per row and id, never inside a flip test's passes; the decisions travel in the state dict.
"""
from __future__ import annotations

import copy
import pickle

import pytest
import torch
import torch.nn.functional as F

from ddesys import nn as dnn

from clock_helpers import tick_loop

F64 = torch.float64
V, H, L, LMAX = 7, 3, 16, 12
PAUSE = (0, 3, 5)


def _model(layer="ds4d", seed=0, **kw):
    torch.manual_seed(seed)                                         # the embedding's initialization
    clock = dnn.FlipTokenClock(V, gain=4.0, **({"pause_below": -1.0} | kw))    # a band (-1, 1) to set logits in
    lk = {"d_state": 4, "seed": seed} | ({"l_max": LMAX} if layer == "ds4d" else {})
    m = dnn.SequenceModel(V, V, d_model=H, n_layers=2, layer=layer, embedding=True, clock=clock,
                          layer_kw=lk).double()
    with torch.no_grad():
        clock.ticking.copy_(torch.tensor([v not in PAUSE for v in range(V)]))
        if layer == "ds4d":
            for blk in m.blocks:
                blk.layer.inner.nu_tau.add_(0.3)
    return m


def _tokens(seed=0, b=3):
    return torch.randint(0, V, (b, L), generator=torch.Generator().manual_seed(seed))


def _err(a, b):
    return float((torch.as_tensor(a) - torch.as_tensor(b)).detach().abs().max())


def _told(m, pause):
    """The same weights under a given clock told ``pause``."""
    t = copy.deepcopy(m)
    t.clock = dnn.TokenClock(sorted(pause)) if pause else None
    if not pause:                                                   # every id ticks: a clock that never pauses
        t.clock = dnn.TokenClock([V + 1])
    return t


@pytest.mark.parametrize("layer", ["ds4d", "s4d"])
def test_every_path_is_the_clocked_recurrence(layer):
    m = _model(layer, explore=0.0)
    x = _tokens()
    ticks = ~torch.isin(x, torch.tensor(PAUSE))
    assert m.clock.pauses() == list(PAUSE) and torch.equal(m.clock.ticks(x), ticks)
    h = m.encoder(x)
    for blk in m.blocks:                                            # each layer: the loop in the ids' ticks
        z = blk.norm(h)
        assert _err(blk.layer(z, ticks=m.clock(x)), tick_loop(blk.layer.inner, z, ticks)) < 1e-10
        h = blk(h, ticks=ticks)
    y = m(x)
    assert y.requires_grad
    with torch.no_grad():
        assert _err(_told(m, PAUSE)(x), y) < 1e-10
        assert _err(m(x), y) < 1e-10
        cache = m.allocate_inference_cache(3, L, dtype=F64)
        assert _err(torch.stack([m.step(x[:, t], cache) for t in range(L)], 1), y) < 1e-10
        cache = m.allocate_inference_cache(3, L, dtype=F64)
        yp = torch.cat([m.prefill(x[:, :6], cache)] + [m.step(x[:, t], cache)[:, None] for t in range(6, L)], 1)
        assert _err(yp, y) < 1e-10


def _task_loss(m, x, y):
    return F.cross_entropy(m(x).reshape(-1, V), y.reshape(-1))


@pytest.mark.parametrize("v, ticking", [(3, False), (2, True)])
def test_a_flip_test_is_the_difference_of_two_told_clocks(v, ticking, monkeypatch):
    m = _model("ds4d", strength=7.0, cost=0.4, soft_cost=0.2, tests=1)
    with torch.no_grad():
        m.clock.u.copy_(torch.linspace(-0.3, 0.3, V, dtype=F64))    # logits within the hysteresis: no change
    x, y = _tokens(1), _tokens(2)
    monkeypatch.setattr(m.clock, "_choose", lambda tokens: v)
    assert bool(m.clock.ticking[v]) == ticking
    out = m.clock.loss(x, lambda: _task_loss(m, x, y))
    paused_set, ticking_set = set(PAUSE) | {v}, set(PAUSE) - {v}
    with torch.no_grad():
        d = float(_task_loss(_told(m, paused_set), x, y) - _task_loss(_told(m, ticking_set), x, y))
    f = float((x == v).double().mean())
    (test,) = m.clock.last_tests
    assert test["id"] == v and abs(test["d"] - d) < 1e-12
    assert abs(test["delta"] - (d - 0.4 * f)) < 1e-12 and f > 0
    assert abs(d) > 1e-5                                            # not a vacuous check
    assert float(out.detach()) == 0.0                               # gradients only: a logged loss stays the task's
    m.zero_grad()
    out.backward()
    zc = m.clock.logits().detach()
    s = torch.sigmoid(zc)
    counts = torch.bincount(x.flatten(), minlength=V).double()
    want = 0.2 * counts / x.numel() * s * (1 - s) * m.clock.gain   # the soft cost, d mean sigma(z[x]) / du
    want[v] += -7.0 * (d - 0.4 * f) * m.clock.gain                  # the flip test, with the tick's cost
    assert _err(m.clock.u.grad, want) < 1e-12
    assert [p.grad for n, p in m.named_parameters() if n != "clock.u"] == [None] * (len(list(m.parameters())) - 1)
    assert m.clock.pauses() == list(PAUSE)                          # inside the hysteresis: unchanged


def _row_losses(m, x, y):
    """Per row: the cross-entropy summed over the supervised tokens (labels != -100), and their count."""
    ce = F.cross_entropy(m(x).transpose(1, 2), y, ignore_index=-100, reduction="none")     # (B, L)
    return ce.sum(1), (y != -100).sum(1)


def _told_loss(m, pause, x, y):
    """The loss per supervised token of ``x`` under a given clock told ``pause`` (the oracle)."""
    with torch.no_grad():
        s, n = _row_losses(_told(m, pause), x, y)
    return float(s.sum() / n.sum())


def test_several_flip_tests_share_two_passes_each_on_its_own_rows(monkeypatch):
    G, B = 3, 7                                                     # rows 0, 3, 6 | 1, 4 | 2, 5
    m = _model("ds4d", strength=5.0, cost=0.25, tests=G)
    with torch.no_grad():
        m.clock.u.copy_(torch.linspace(-0.2, 0.2, V, dtype=F64))    # logits within the hysteresis: no change
    x, y = _tokens(3, b=B), _tokens(4, b=B)
    y[1, :9] = -100                                                 # rows with fewer supervised tokens
    y[5, 3:] = -100
    ids = iter([3, 2, 3])                                           # paused, ticking, paused again
    chosen_rows = []
    monkeypatch.setattr(m.clock, "_choose", lambda rows: chosen_rows.append(rows) or next(ids))
    calls = []
    out = m.clock.loss(x, lambda: calls.append(1) or _row_losses(m, x, y))
    assert len(calls) == 2                                          # every test in the same two passes
    for g, rows in enumerate(chosen_rows):                          # each group draws from its own rows
        assert torch.equal(rows, x[g::G])
    m.zero_grad()
    out.backward()
    want = torch.zeros(V, dtype=F64)
    for g, (v, test) in enumerate(zip((3, 2, 3), m.clock.last_tests)):
        xg, yg = x[g::G], y[g::G]
        d = _told_loss(m, set(PAUSE) | {v}, xg, yg) - _told_loss(m, set(PAUSE) - {v}, xg, yg)
        f = float((xg == v).double().mean())
        assert test["id"] == v and abs(test["d"] - d) < 1e-12 and abs(d) > 1e-6
        assert abs(test["delta"] - (d - 0.25 * f)) < 1e-12
        want[v] += -5.0 / G * (d - 0.25 * f) * m.clock.gain          # each test's share of the strength
    assert len(m.clock.last_tests) == G
    assert _err(m.clock.u.grad, want) < 1e-12
    assert m.clock.pauses() == list(PAUSE)


def test_fewer_rows_than_tests_one_test_per_row(monkeypatch):
    m = _model("s4d", tests=8)
    x, y = _tokens(5, b=2), _tokens(6, b=2)
    m.clock.loss(x, lambda: _row_losses(m, x, y))
    assert len(m.clock.last_tests) == 2


def test_the_decisions_follow_the_logits_with_hysteresis():
    clock = dnn.FlipTokenClock(4, gain=1.0, hysteresis=1.0, pause_below=-1.0)
    assert clock.pauses() == []
    with torch.no_grad():
        clock.u.copy_(torch.tensor([-0.5, -1.5, 0.5, 3.0]))
    clock.settle()
    assert clock.pauses() == [1]                                    # -0.5 stays ticking; below -1 pauses
    with torch.no_grad():
        clock.u.copy_(torch.tensor([-0.5, 0.5, 0.5, 3.0]))
    clock.settle()
    assert clock.pauses() == [1]                                    # a paused id at +0.5 stays paused
    with torch.no_grad():
        clock.u[1] = 1.5
    clock.settle()
    assert clock.pauses() == []                                     # above +1 it ticks again
    sd = copy.deepcopy(clock.state_dict())
    with torch.no_grad():
        clock.u.fill_(-3.0)
    clock.settle()
    fresh = dnn.FlipTokenClock(4, gain=1.0)
    fresh.load_state_dict(clock.state_dict())
    assert fresh.pauses() == [0, 1, 2, 3]                           # the decisions travel with the weights
    fresh.load_state_dict(sd)
    assert fresh.pauses() == []


def test_a_pause_threshold_apart_from_the_hysteresis():
    clock = dnn.FlipTokenClock(4, gain=1.0, hysteresis=1.0, pause_below=0.0)
    with torch.no_grad():
        clock.u.copy_(torch.tensor([-0.1, 0.1, 0.9, 3.0]))
    clock.settle()
    assert clock.pauses() == [0]                                    # below 0 pauses, above stays ticking
    with torch.no_grad():
        clock.u.copy_(torch.tensor([0.9, -2.0, 0.9, 3.0]))
    clock.settle()
    assert clock.pauses() == [0, 1]                                 # a paused id at +0.9 stays paused
    with torch.no_grad():
        clock.u[0] = 1.1
    clock.settle()
    assert clock.pauses() == [1]                                    # above the hysteresis it ticks again
    assert dnn.FlipTokenClock(4, hysteresis=2.0).pause_below == 0.0         # by default 0
    assert dnn.FlipTokenClock(4, pause_below=1.0).pause_below == 1.0        # no band: the threshold alone
    assert "pause_below=0" in repr(clock)


def test_a_clock_pickled_by_an_earlier_version_keeps_its_rule():
    clock = dnn.FlipTokenClock(4, gain=1.0, hysteresis=1.0)
    state = clock.__getstate__()
    old = {k: v for k, v in state.items() if k not in ("pause_below", "tests", "last_tests")}   # before them
    back = dnn.FlipTokenClock.__new__(dnn.FlipTokenClock)
    back.__setstate__(old)
    assert back.pause_below == -1.0 and back.tests == 1 and back.last_tests == []
    with torch.no_grad():
        back.u.copy_(torch.tensor([-0.5, -1.5, 0.5, 3.0]))
    back.settle()
    assert back.pauses() == [1]                                     # the band it trained with: -0.5 ticks
    again = pickle.loads(pickle.dumps(clock))                       # today's: as it was
    assert again.pause_below == 0.0 and again.tests == 8


def test_exploration_is_training_only_at_paused_ids_once_per_row():
    clock = dnn.FlipTokenClock(V, explore=0.3, tests=2)
    clock.ticking.copy_(torch.tensor([v not in PAUSE for v in range(V)]))
    x = torch.randint(0, V, (400, 30), generator=torch.Generator().manual_seed(5))
    paused = torch.isin(x, torch.tensor(PAUSE))
    torch.manual_seed(0)
    c = clock(x)                                                    # training, under autograd
    assert c.dtype == torch.bool and c[~paused].all()               # a ticking id never pauses
    for b in range(0, 400, 37):                                     # one decision per row and id
        for v in PAUSE:
            assert len(c[b][x[b] == v].unique()) <= 1
    frac = float(c[paused].double().mean())
    assert 0.22 < frac < 0.38                                       # about explore
    with torch.no_grad():
        assert torch.equal(clock(x), ~paused)                       # no gradients: the decisions
    clock.eval()
    assert torch.equal(clock(x), ~paused)                           # eval: the decisions
    clock.train()
    seen = []
    state = torch.get_rng_state()
    x4 = x[:4]
    clock.loss(x4, lambda: seen.append(clock(x4)) or (torch.ones(4), torch.ones(4)))
    assert len(seen) == 2 and torch.equal(seen[0], ~paused[:4])     # the passes: the decisions, never exploring,
    tested = torch.tensor([t["id"] for t in clock.last_tests])[torch.arange(4) % 2]       # row r: group r % 2
    assert torch.equal(seen[1] ^ seen[0], x4 == tested[:, None])    # then each row with its group's id flipped
    assert not torch.equal(torch.get_rng_state(), state)            # the id is drawn from the global RNG ...


def test_the_flip_passes_share_their_rng_and_leave_it():
    clock = dnn.FlipTokenClock(V, tests=1)
    x = _tokens(6)
    draws = []
    torch.manual_seed(3)
    clock.loss(x, lambda: draws.append(torch.rand(4)) or torch.tensor(0.0))
    assert torch.equal(draws[0], draws[1])                          # the same dropout masks in both passes
    torch.manual_seed(3)
    clock._choose(x)
    after_choose = torch.rand(1)
    torch.manual_seed(3)
    clock.loss(x, lambda: torch.rand(100).sum())
    assert torch.equal(torch.rand(1), after_choose)                 # ... and the passes leave it as it was


def test_half_the_tests_draw_among_the_paused_ids_present_half_by_position():
    clock = dnn.FlipTokenClock(V)
    clock.ticking.copy_(torch.tensor([v not in PAUSE for v in range(V)]))
    x = torch.tensor([[0, 1, 2, 4, 6, 1, 2, 4], [1, 1, 1, 1, 1, 1, 6, 6]])   # paused id 0 present; 3, 5 absent
    torch.manual_seed(1)
    got = [clock._choose(x) for _ in range(4000)]
    assert set(got) <= {0, 1, 2, 4, 6}
    for v, n in ((0, 1), (1, 8), (6, 3)):                            # half the draws, plus its share of positions
        want = 0.5 * (v == 0) + 0.5 * n / x.numel()
        assert abs(got.count(v) / len(got) - want) < 0.03, v
    clock.ticking.fill_(True)
    got = [clock._choose(x) for _ in range(2000)]                   # nothing paused: by position only
    assert abs(got.count(1) / len(got) - 8 / 16) < 0.04


def test_bad_arguments_are_refused_by_name():
    for kw, msg in (({"hysteresis": -1.0}, "hysteresis"), ({"strength": float("nan")}, "strength"),
                    ({"cost": -0.1}, "cost"), ({"soft_cost": -1.0}, "soft_cost"), ({"explore": 1.0}, "explore"),
                    ({"init": 1.0}, "init"),
                    ({"init": 0.6}, "exceed hysteresis"), ({"gain": 0.0}, "gain"), ({"tests": 0}, "tests"),
                    ({"tests": True}, "tests"), ({"tests": 2.0}, "tests"), ({"pause_below": 1.5}, "pause_below"),
                    ({"pause_below": float("nan")}, "pause_below"), ({"pause_below": True}, "pause_below"),
                    ({"pause_below": "0"}, "pause_below"), ({"pause_below": None}, "pause_below"),
                    ({"hysteresis": 0.0, "pause_below": 0.5}, "pause_below")):
        with pytest.raises(ValueError, match=msg):
            dnn.FlipTokenClock(5, **kw)
    with pytest.raises(ValueError, match="vocab_size"):
        dnn.FlipTokenClock(0)
    clock = dnn.FlipTokenClock(5)
    with pytest.raises(TypeError, match="FlipTokenClock needs integer token ids"):
        clock(torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"\[0, 5\)"):
        clock(torch.tensor([[0, 5]]))
    with pytest.raises(ValueError, match=r"\(B, L\)"):
        clock.loss(torch.tensor([0, 1]), lambda: torch.tensor(0.0))
    with pytest.raises(FloatingPointError, match="non-finite"):
        clock.loss(torch.tensor([[0, 1]]), lambda: torch.tensor(float("nan")))
    x2 = torch.tensor([[0, 1], [2, 3]])
    with pytest.raises(ValueError, match="per-row"):                # two tests need the rows' losses
        clock.loss(x2, lambda: torch.tensor(0.0))
    with pytest.raises(ValueError, match=r"returned a tensor of shape \(2,\)"):   # per-row means alone
        dnn.FlipTokenClock(5, tests=1).loss(x2, lambda: torch.ones(2))
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        clock.loss(x2, lambda: (torch.zeros(3), torch.ones(3)))
    with pytest.raises(ValueError, match="has 2 rows"):             # loss_of must run the batch it was given
        clock.loss(x2, lambda: (clock(x2[:1]).double().sum(1).expand(2), torch.ones(2)))
    m = _model("s4d")
    with pytest.raises(ValueError, match="no learned clock"):      # it is not trained by a TimeCost
        dnn.TimeCost(m)


def test_exploration_rules_each_row_and_id_or_every_paused_id_of_a_row():
    ticking = torch.tensor([v not in PAUSE for v in range(V)])
    x = torch.arange(V).repeat(4000, 2)                             # every id in every row
    paused = torch.isin(x, torch.tensor(PAUSE))
    got = {}
    for rule in (dnn.ExploreEach(0.3), dnn.ExploreRows(0.3), 0.3):
        clock = dnn.FlipTokenClock(V, explore=rule)
        clock.ticking.copy_(ticking)
        torch.manual_seed(0)
        got[repr(rule)] = c = clock(x)
        assert c[~paused].all()                                     # a ticking id never pauses
        per_row = c[:, list(PAUSE)].double()                        # (rows, paused ids)
        assert abs(float(per_row.mean()) - 0.3) < 0.02              # a paused id ticks in 30% of the rows
        assert torch.equal(c[:, :V], c[:, V:])                      # one decision per row and id
    rows = got["ExploreRows(0.3)"][:, list(PAUSE)]
    assert torch.equal(rows.all(1), rows.any(1))                    # rows: all the paused ids of a row, or none
    each = got["ExploreEach(0.3)"][:, list(PAUSE)]
    clean = float((~each.any(1)).double().mean())
    assert abs(clean - 0.7 ** len(PAUSE)) < 0.03                    # each: a clean row is (1 - p)^k
    assert torch.equal(got["0.3"], got["ExploreEach(0.3)"])         # a number: each row and id, as always
    torch.manual_seed(0)
    draw = torch.rand(x.shape[0], V) < 0.3                          # the draws of the runs recorded before
    assert torch.equal(got["0.3"], ticking[x] | (draw & ~ticking).gather(1, x))
    assert dnn.FlipTokenClock(V).explore == dnn.ExploreRows(0.2)
    assert "explore=ExploreRows(0.3)" in repr(dnn.FlipTokenClock(V, explore=dnn.ExploreRows(0.3)))
    for bad in (1.0, -0.1, float("nan"), True, "0.2"):
        with pytest.raises(ValueError, match="p must|explore"):
            dnn.ExploreRows(bad) if not isinstance(bad, str) else dnn.FlipTokenClock(V, explore=bad)
    run = dnn.FlipRunClock(V, explore=dnn.ExploreRows(0.5))        # over the entries of a run clock too
    run.ticking.copy_(torch.tensor([v not in PAUSE for v in range(V)] * 2))
    torch.manual_seed(1)
    c = run(torch.tensor([[0, 3, 5, 1]] * 2000))                    # ids paused after a tick and after a pause
    assert abs(float(c[:, 0].double().mean()) - 0.5) < 0.04
    assert torch.equal(c[:, 0], c[:, 1]) and torch.equal(c[:, 0], c[:, 2]) and c[:, 3].all()


def test_a_clock_pickled_with_a_number_keeps_exploring_each_row_and_id():
    clock = dnn.FlipTokenClock(V)
    state = clock.__dict__.copy()
    state["explore"] = 0.25                                         # as an earlier version stored it
    old = dnn.FlipTokenClock.__new__(dnn.FlipTokenClock)
    old.__setstate__(state)
    assert old.explore == dnn.ExploreEach(0.25)


def test_by_entry_draws_that_share_of_the_other_tests_uniformly_among_the_ids_present():
    clock = dnn.FlipTokenClock(V, by_entry=0.5)
    x = torch.tensor([[1, 1, 1, 1, 1, 1, 1, 2], [1, 1, 1, 1, 1, 1, 6, 1]])   # ids 1 (14 of 16), 2, 6
    torch.manual_seed(2)
    got = [clock._choose(x) for _ in range(6000)]
    for v, n in ((1, 14), (2, 1), (6, 1)):                          # half uniform over 3 ids, half by position
        want = 0.5 / 3 + 0.5 * n / x.numel()
        assert abs(got.count(v) / len(got) - want) < 0.025, v
    clock.ticking[2] = False                                        # a paused id present: half the draws first
    got = [clock._choose(x) for _ in range(6000)]
    want = 0.5 + 0.5 * (0.5 / 3 + 0.5 / 16)
    assert abs(got.count(2) / len(got) - want) < 0.025
    assert "by_entry=0.5" in repr(clock) and "by_entry" not in repr(dnn.FlipTokenClock(V))
    for bad in (-0.1, 1.5, float("nan"), True):
        with pytest.raises(ValueError, match="by_entry"):
            dnn.FlipTokenClock(V, by_entry=bad)
