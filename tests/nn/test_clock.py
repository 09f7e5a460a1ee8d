"""The selective clock (issue 22): ddesys.clock.clocked_simulate, nn.Clocked, SequenceModel(clock=...).

Every number is checked against :func:`clocked_oracle`, a float64 Python loop written from the
definition (the system keeps its own tick count and the list of its tick states; a non-tick step changes
nothing and reads no input; the output holds the last tick state's readout plus ``d x_t``), without
importing the code under test. The model's reference composes that oracle with the blocks' own norm and
MLP modules.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ddesys import DiscreteDelaySystem
from ddesys import nn as dnn
from ddesys.clock import clocked_simulate
from ddesys.nn.decode.clocked import ClockedFused, ClockedReference
from ddesys.nn.decode.select import ENGINES

F64 = torch.float64
L = 24


# ---------------------------------------------------------------- the oracle
def clocked_oracle(p, x, ticks):
    """``p = (lam, mu, bbar, c, k, alpha, d)`` (``(H, N2)`` complex, ``(H,)`` int / real), ``x`` ``(B, H, L)``
    float64, ``ticks`` ``(B, L)`` bool -> ``y`` ``(B, H, L)``, one channel of one row at a time."""
    lam, mu, bbar, c, k, alpha, d = p
    x, ticks = np.asarray(x, dtype=np.float64), np.asarray(ticks, dtype=bool)
    B, H, T = x.shape
    y = np.zeros((B, H, T))
    for b in range(B):
        for j in range(H):
            hs = []                                           # the states at the ticks, in tick time
            at = lambda i: hs[i] if i >= 0 else 0.0           # noqa: E731  (zero before tick 0)
            for t in range(T):
                if ticks[b, t]:
                    n, kj, a = len(hs), int(k[j]), float(alpha[j])
                    hs.append(lam[j] * at(n - 1) + mu[j] * ((1 - a) * at(n - kj) + a * at(n - kj - 1))
                              + bbar[j] * x[b, j, t])
                held = 2 * np.real(np.sum(c[j] * hs[-1])) if hs else 0.0
                y[b, j, t] = held + d[j] * x[b, j, t]
    return y


def layer_params(layer):
    """The oracle's parameters of an nn DS4D or S4D layer (float64)."""
    D = layer.D.detach().double().numpy()
    if isinstance(layer, dnn.DS4D):
        q = layer.discrete(F64)
        f = lambda z: z.detach().numpy()                      # noqa: E731
        return f(q.lam), f(q.mu), f(q.bbar), f(q.c), f(q.k), f(q.alpha), D
    q = layer.discrete(F64)
    lam = q.lam.detach().numpy()
    H = lam.shape[0]
    return lam, np.zeros_like(lam), q.bbar.detach().numpy(), q.c.detach().numpy(), np.ones(H, int), np.zeros(H), D


def oracle_nn(layer, x, ticks):
    """The oracle on torch ``x`` ``(B, L, H)`` -> ``(B, L, H)`` numpy."""
    return clocked_oracle(layer_params(layer), x.detach().double().transpose(1, 2).numpy(),
                          ticks.numpy()).transpose(0, 2, 1)


def make_ticks(T=L, seed=0):
    """Rows: random p=.5, dense p=.9, no tick at all, first step only, last step only, sparse p=.2."""
    rng = np.random.default_rng(seed)
    t = np.zeros((6, T), bool)
    t[0], t[1], t[5] = rng.random(T) < 0.5, rng.random(T) < 0.9, rng.random(T) < 0.2
    t[3, 0] = t[4, -1] = True
    return t


def random_system(H=4, N2=3, delays=(1.0, 2.5, 7.25, 13.0), seed=0):
    rng = np.random.default_rng(seed)
    ph = lambda: np.exp(2j * np.pi * rng.random((H, N2)))    # noqa: E731
    lam, mu = rng.uniform(0.2, 0.6, (H, N2)) * ph(), rng.uniform(0.1, 0.35, (H, N2)) * ph()
    bbar, c = rng.normal(size=(H, N2)) * ph(), rng.normal(size=(H, N2)) * ph()
    sys = DiscreteDelaySystem(lam=lam, mu=mu, bbar=bbar, c=c, delay=np.array(delays), d=rng.normal(size=H))
    return sys, (lam, mu, bbar, c, sys.k, sys.alpha, sys.d)


def max_err(a, b):
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) if np.size(a) else 0.0


# ---------------------------------------------------------------- 1. clocked_simulate
def test_clocked_simulate_matches_oracle():
    sys, p = random_system()
    ticks = make_ticks()
    x = np.random.default_rng(1).normal(size=(6, 4, L))
    y = clocked_simulate(sys, x, ticks)
    ref = clocked_oracle(p, x, ticks)
    assert y.shape == x.shape and max_err(y, ref) < 1e-12
    p0 = (p[0], 0 * p[1]) + p[2:]                             # the delay matters in these rows
    assert max_err(ref, clocked_oracle(p0, x, ticks)) > 1e-3
    assert max_err(y[2], p[-1][:, None] * x[2]) < 1e-15      # no tick: d x only
    # a channel-less system (batch shape ()), x (B, L)
    s1 = DiscreteDelaySystem(lam=p[0][1], mu=p[1][1], bbar=p[2][1], c=p[3][1], delay=2.5, d=0.7)
    p1 = tuple(np.asarray(v)[None] for v in (p[0][1], p[1][1], p[2][1], p[3][1], 2, 0.5, 0.7))
    assert max_err(clocked_simulate(s1, x[:, 0], ticks), clocked_oracle(p1, x[:, :1], ticks)[:, 0]) < 1e-12


# ---------------------------------------------------------------- 2. nn Clocked against the oracle
def _layers(dtype=F64):
    yield dnn.DS4D(3, d_state=4, l_max=L, seed=0).to(dtype)
    yield dnn.S4D(3, d_state=4, seed=1).to(dtype)


def _x(B=6, T=L, H=3, seed=2, dtype=F64):
    return torch.randn(B, T, H, dtype=dtype, generator=torch.Generator().manual_seed(seed))


def _decode(clocked, x, ticks, cache=None):
    cache = cache or clocked.allocate_inference_cache(x.shape[0], dtype=F64)
    return torch.stack([clocked.step(x[:, t], cache, ticks[:, t]) for t in range(x.shape[1])], 1), cache


@pytest.mark.parametrize("layer", list(_layers()), ids=["ds4d", "s4d"])
def test_clocked_layer_paths_match_oracle(layer):
    clocked, x, ticks = dnn.Clocked(layer), _x(), torch.from_numpy(make_ticks())
    ref = oracle_nn(layer, x, ticks)
    with torch.no_grad():
        assert max_err(clocked(x, ticks), ref) < 1e-10                       # FFT on the compacted input
        assert max_err(clocked(x, ticks, mode="recurrent"), ref) < 1e-12
        assert max_err(_decode(clocked, x, ticks)[0], ref) < 1e-12
        P = 10                                                                # prefill a prefix, then step
        cache = clocked.allocate_inference_cache(6, dtype=F64)
        y_pre = clocked.prefill(x[:, :P], cache, ticks[:, :P])
        y_rest, _ = _decode(clocked, x[:, P:], ticks[:, P:], cache)
        assert max_err(torch.cat([y_pre, y_rest], 1), ref) < 1e-10
        cache = clocked.allocate_inference_cache(6, dtype=F64)               # prefill into a used cache
        y0, _ = _decode(clocked, x[:, :3], ticks[:, :3], cache)
        y1 = clocked.prefill(x[:, 3:P], cache, ticks[:, 3:P])
        y2, _ = _decode(clocked, x[:, P:], ticks[:, P:], cache)
        assert max_err(torch.cat([y0, y1, y2], 1), ref) < 1e-12
        assert cache.t == L and cache.n.tolist() == ticks.sum(1).tolist()


@pytest.mark.parametrize("layer", list(_layers(torch.float32)), ids=["ds4d", "s4d"])
def test_clocked_float32_fft_near_oracle(layer):
    x, ticks = _x(dtype=torch.float32), torch.from_numpy(make_ticks())
    ref = oracle_nn(layer, x, ticks)
    with torch.no_grad():
        y = dnn.Clocked(layer)(x, ticks)
    assert y.dtype == torch.float32 and max_err(y.double(), ref) < 1e-4 * np.abs(ref).max()


# ---------------------------------------------------------------- 3. invariances
@pytest.mark.parametrize("layer", list(_layers()), ids=["ds4d", "s4d"])
def test_pauses_change_nothing_but_the_feedthrough(layer):
    n, B = 14, 3
    clocked, xc = dnn.Clocked(layer), _x(B, n, seed=3)
    rng = np.random.default_rng(4)
    ticks = np.zeros((B, n + 10), bool)
    for b in range(B):                                       # 10 pauses anywhere (row 0: some up front)
        ticks[b, np.sort(rng.choice(np.arange(3 if b == 0 else 0, n + 10), n, replace=False))] = True
    ticks = torch.from_numpy(ticks)
    x = 100 * _x(B, n + 10, seed=5)                          # garbage at the pauses: never read
    x[ticks] = xc.reshape(-1, 3)
    D = layer.D.detach().double()
    with torch.no_grad():
        y, plain = clocked(x, ticks), layer(xc)
        y_dec, _ = _decode(clocked, x, ticks)
    for yy, tol in ((y, 1e-10), (y_dec, 1e-10)):
        for b in range(B):
            tk = ticks[b].nonzero()[:, 0]
            assert max_err(yy[b, tk], plain[b]) < tol
            j = torch.cumsum(ticks[b].long(), 0) - 1              # last tick at or before each step
            held = torch.where((j >= 0)[:, None], plain[b, j.clamp(min=0)] - D * xc[b, j.clamp(min=0)], 0.0)
            assert max_err(yy[b], held + D * x[b]) < tol


@pytest.mark.parametrize("layer", list(_layers()), ids=["ds4d", "s4d"])
def test_all_ticks_is_the_plain_layer_and_rows_are_independent(layer):
    clocked, x, ticks = dnn.Clocked(layer), _x(), torch.from_numpy(make_ticks())
    with torch.no_grad():
        assert max_err(clocked(x, torch.ones(6, L, dtype=torch.bool)), layer(x)) < 1e-12
        assert max_err(clocked(x, torch.ones(6, L, dtype=torch.bool), mode="recurrent"),
                       layer(x, mode="recurrent")) < 1e-12
        other = ticks.clone()
        other[1:] = torch.from_numpy(make_ticks(seed=9))[1:]
        other[2] = True                                      # row 2 now ticks everywhere: a longer Lc
        for run in (lambda t: clocked(x, t), lambda t: _decode(clocked, x, t)[0]):
            assert max_err(run(ticks)[0], run(other)[0]) < 1e-12


# ---------------------------------------------------------------- 4. gradients
def test_gradients_reach_parameters_and_only_the_ticks():
    layer = dnn.DS4D(3, d_state=4, l_max=L, seed=0).double()
    clocked, ticks = dnn.Clocked(layer), torch.from_numpy(make_ticks())
    w = _x(seed=7)
    x = _x().requires_grad_(True)
    (clocked(x, ticks) * w).sum().backward()
    grads = {name: p.grad for name, p in layer.named_parameters()}
    assert all(g is None or torch.isfinite(g).all() for g in grads.values())
    for name in ("B", "C", "D", "log_dt", "nu_re", "r", "theta"):
        assert grads[name] is not None and grads[name].abs().max() > 0, name
    D = layer.D.detach()
    assert max_err(x.grad[~ticks], (D * w)[~ticks]) < 1e-14          # pauses: only the D skip
    # the gradient at the ticks is the oracle's adjoint: grad[b, t] = sum_s w[b, s] dy_s/dx_t
    p, T = layer_params(layer), L
    for b in (0, 5):
        for t in ticks[b].nonzero()[:, 0].tolist():
            e = np.zeros((1, 3, T))
            e[..., t] = 1.0
            resp = clocked_oracle(p, e, ticks[b:b + 1].numpy())[0]           # (H, L)
            assert max_err(x.grad[b, t], (w[b].numpy().T * resp).sum(1)) < 1e-10
    with torch.no_grad():
        layer.D.zero_()
    x.grad = None
    (clocked(x, ticks) * w).sum().backward()
    assert (x.grad[~ticks] == 0).all() and torch.isfinite(x.grad).all() and x.grad[ticks].abs().max() > 0


# ---------------------------------------------------------------- 5. SequenceModel(clock=...)
V, LM = 6, 16


def _lm():
    torch.manual_seed(0)
    m = dnn.SequenceModel(V, V, d_model=8, n_layers=2, embedding=True, layer_kw={"l_max": LM, "d_state": 8},
                          clock=dnn.TokenClock((0,)))
    return m.double().eval()


def _tokens(B=3, seed=11):
    g = torch.Generator().manual_seed(seed)
    tok = torch.randint(1, V, (B, LM), generator=g)
    tok[torch.rand(B, LM, generator=g) < 0.35] = 0           # pauses
    tok[1, :4] = 0                                           # a row that starts with pauses
    return tok


def _model_oracle(m, tok):
    """Embedding -> per block ``h + glu(out(act(layer_oracle(norm(h)))))`` -> norm -> decoder."""
    ticks = tok != 0
    h = m.encoder(tok)
    for blk in m.blocks:
        z = torch.from_numpy(oracle_nn(blk.layer.inner, blk.norm(h), ticks))
        h = h + blk.glu(blk.out(blk.act(z)))
    return m.decoder(m.norm(h))


def test_model_forward_decode_prefill_generate():
    m, tok = _lm(), _tokens()
    with torch.no_grad():
        y = m(tok)
        assert max_err(y, _model_oracle(m, tok)) < 1e-10
        caches = m.allocate_inference_cache(3, dtype=F64)
        assert max_err(torch.stack([m.step(tok[:, t], caches) for t in range(LM)], 1), y) < 1e-10
        caches = m.allocate_inference_cache(3, dtype=F64)
        y_pre = m.prefill(tok[:, :7], caches)
        y_rest = torch.stack([m.step(tok[:, t], caches) for t in range(7, LM)], 1)
        assert max_err(torch.cat([y_pre, y_rest], 1), y) < 1e-10
        out, logits = m.generate(tok[:, :5], 4, temperature=0, return_logits=True,
                                 cache_kwargs={"dtype": F64})
        assert out.shape == (3, 9) and (out[:, :5] == tok[:, :5]).all()
        assert max_err(logits, m(out)[:, 4:8]) < 1e-10


def test_model_lengths_pad_as_pauses():
    m, tok = _lm(), _tokens()
    lens = [LM, 9, 5]
    tok = tok.clone()
    for b, n in enumerate(lens):
        tok[b, n:] = torch.arange(n, LM) % (V - 1) + 1      # padding of ticking tokens: must be ignored
    nxt = torch.tensor([3, 1, 4])
    with torch.no_grad():
        y = m(tok, lengths=lens)
        caches = m.allocate_inference_cache(3, dtype=F64)
        y_pre = m.prefill(tok, caches, lengths=lens)
        y_next = m.step(nxt, caches)
        for b, n in enumerate(lens):
            alone = m(torch.cat([tok[b:b + 1, :n], nxt[b:b + 1, None]], 1))[0]
            assert max_err(y[b, :n], alone[:n]) < 1e-10
            assert max_err(y_pre[b, :n], alone[:n]) < 1e-10
            assert max_err(y_next[b], alone[n]) < 1e-10


# ---------------------------------------------------------------- 6. bad input
def test_bad_input_is_named():
    layer = dnn.DS4D(3, d_state=4, l_max=L, seed=0).double()
    clocked, x, ticks = dnn.Clocked(layer), _x(), torch.from_numpy(make_ticks())
    with pytest.raises(TypeError, match="ticks"):
        clocked(x, ticks.long())
    with pytest.raises(ValueError, match="ticks"):
        clocked(x, ticks[:, :-1])
    with pytest.raises(ValueError, match="lengths"):
        clocked(x, ticks, lengths=[3] * 6)
    with pytest.raises(TypeError, match="ticks"):
        clocked_simulate(random_system()[0], np.zeros((6, 4, L)), make_ticks().astype(int))
    with pytest.raises(ValueError, match="ticks"):
        clocked_simulate(random_system()[0], np.zeros((6, 4, L)), make_ticks()[:, :-1])
    cache = clocked.allocate_inference_cache(6, dtype=F64)
    with pytest.raises(ValueError, match="tick"):
        clocked.step(x[:, 0], cache, ticks[:3, 0])
    with pytest.raises(TypeError, match="tick"):
        clocked.step(x[:, 0], cache, ticks[:, 0].long())
    with pytest.raises(ValueError, match="ticks"):
        clocked.prefill(x, cache, ticks[:, :-1])
    foreign = dnn.Clocked(dnn.DS4D(3, d_state=4, l_max=L, seed=0).double()).allocate_inference_cache(6, dtype=F64)
    with pytest.raises(ValueError, match="cache"):
        clocked.step(x[:, 0], foreign, ticks[:, 0])
    with pytest.raises(ValueError, match="cache"):
        dnn.Clocked(dnn.S4D(3, d_state=4).double()).step(x[:, 0], cache, ticks[:, 0])
    with pytest.raises(NotImplementedError, match="TapBranch"):
        dnn.Clocked(dnn.DS4D(3, d_state=4, l_max=L, tap=True)).allocate_inference_cache(2)
    with pytest.raises(ValueError, match="pause_tokens"):
        dnn.TokenClock(())
    with pytest.raises(TypeError, match="clock"):
        dnn.SequenceModel(V, V, d_model=8, n_layers=1, embedding=True, clock=3)
    assert cache.t == 0 and not cache.buf.any()              # the refused calls left the cache alone


# ---------------------------------------------------------------- 7. stability carries over
def test_clocked_states_are_the_compacted_runs_states():
    sys, p = random_system(H=3, delays=(1.5, 4.0, 9.75), seed=3)
    assert np.all(sys.is_stable())
    rng = np.random.default_rng(8)
    T = 500
    ticks = rng.random((2, T)) < 0.3
    x = rng.uniform(-1, 1, (2, 3, T))
    d = np.asarray(sys.d)[:, None]
    state = clocked_simulate(sys, x, ticks) - d * x                  # the held state's readout
    assert max_err(state, clocked_oracle(p, x, ticks) - d * x) < 1e-12
    for b in range(2):
        xc = x[b][:, ticks[b]]                                       # (H, n_b): the compacted input
        sc = sys.simulate(xc) - d * xc
        assert max_err(state[b][:, ticks[b]], sc) < 1e-12            # the same states, in order
        j = np.cumsum(ticks[b]) - 1
        assert max_err(state[b][:, j >= 0], sc[:, j[j >= 0]]) < 1e-12  # held between ticks
        assert (state[b][:, j < 0] == 0).all()
        assert max_err(np.abs(state[b]).max(1), np.abs(sc).max(1)) < 1e-12   # never past the compacted bound


def test_float_input_model_with_a_callable_clock_decodes_like_its_forward():
    """A clock on float inputs (pause where feature 0 <= 0): step sees the whole (B, 1, d_input) input."""
    model = dnn.SequenceModel(3, 3, d_model=8, n_layers=2, layer_kw={"l_max": 16, "d_state": 8, "seed": 0},
                          clock=lambda x: x[..., 0] > 0).double().eval()
    x = torch.randn(2, 20, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    x[:, :, 1] = 10.0 * (x[:, :, 0] <= 0)                   # a clock reading feature 1 instead would tick there
    with torch.no_grad():
        y = model(x)
        caches = model.allocate_inference_cache(2, dtype=torch.float64)
        ys = torch.stack([model.step(x[:, t], caches) for t in range(20)], 1)
    assert torch.allclose(ys, y, atol=1e-12, rtol=0)
    assert [int(c.n.max()) for c in caches] == [int((x[:, :, 0] > 0).sum(1).max())] * 2


@pytest.mark.filterwarnings("ignore:DS4D. delays are spread")
@pytest.mark.parametrize("engine", ["fused", "reference"])
@pytest.mark.parametrize("inner", ["ds4d", "s4d"])
def test_clocked_decode_engines_match_oracle(engine, inner):
    layer = (dnn.DS4D(3, d_state=4, l_max=L, seed=0) if inner == "ds4d" else dnn.S4D(3, d_state=4, seed=1)).to(F64)
    clocked, x, ticks = dnn.Clocked(layer), _x(), torch.from_numpy(make_ticks())
    ref = oracle_nn(layer, x, ticks)
    cache = clocked.allocate_inference_cache(6, dtype=F64, engine=engine)
    assert type(cache.engine) is ENGINES["clock"][engine] and cache.engine.name == engine
    with torch.no_grad():
        y_pre = clocked.prefill(x[:, :10], cache, ticks[:, :10])
        y_rest, _ = _decode(clocked, x[:, 10:], ticks[:, 10:], cache)
        assert max_err(torch.cat([y_pre, y_rest], 1), ref) < 1e-10
        cache.reset()
        assert max_err(_decode(clocked, x, ticks, cache)[0], ref) < 1e-12
        layer.log_dt.add_(0.2)                                                # the constants change
        cache.reset()
        assert max_err(_decode(clocked, x, ticks, cache)[0], oracle_nn(layer, x, ticks)) < 1e-12


def test_clocked_engine_choice(monkeypatch):
    ds, s4 = dnn.Clocked(dnn.DS4D(3, d_state=4, l_max=L, seed=0)), dnn.Clocked(dnn.S4D(3, d_state=4, seed=1))
    assert type(ds.allocate_inference_cache(2).engine) is ClockedFused
    c4 = s4.allocate_inference_cache(2)
    assert type(c4.engine) is ClockedFused and c4.n_slots == 2                  # S4D: the fused step, mu = 0
    with pytest.raises(ValueError, match="engine must be"):
        ds.allocate_inference_cache(2, engine="triton")
    monkeypatch.setenv("DDESYS_REFERENCE", "1")
    assert type(ds.allocate_inference_cache(2).engine) is ClockedReference


def test_clocked_fused_decode_follows_a_parameter_change_mid_sequence():
    layer = dnn.DS4D(3, d_state=4, l_max=L, seed=0).to(F64)
    clocked, x, ticks = dnn.Clocked(layer), _x(), torch.from_numpy(make_ticks())
    fused, ref = (clocked.allocate_inference_cache(6, dtype=F64, engine=e) for e in ("fused", "reference"))
    with torch.no_grad():
        for t in range(L):
            if t == L // 2:
                layer.theta.add_(0.3)                                         # new decode constants
            yf, yr = clocked.step(x[:, t], fused, ticks[:, t]), clocked.step(x[:, t], ref, ticks[:, t])
            assert max_err(yf, yr) < 1e-13
