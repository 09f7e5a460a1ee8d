"""The learned (soft) clock (issue 22): ddesys.selective, nn.selective, SoftClocked, SequenceModel(clock="learned").

Every number is checked against :func:`soft_oracle`, a float64 Python loop written from the definition
(docs/theory.md §10.5) without importing the code under test: internal time ``tau_t = c_0 + ... + c_t``,
``h_t = lam^{c_t} h_{t-1} + c_t mu H(tau_t - s) + c_t bbar x_t`` with ``H`` the states placed at their
internal times, the point ``(0, 0)`` before the start, joined by straight lines (right-closed segments).
Gradients are central finite differences of that loop; ``c = 1`` and ``c`` in ``{0, 1}`` are checked
against the DS4D recurrence and the binary clock, each as its own loop and as the project's layers.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from ddesys import nn as dnn
from ddesys.nn.selective import GateClock, SoftClocked, soft_forward
from ddesys.selective import soft_scan, soft_scan_grad

F64 = torch.float64


# ---------------------------------------------------------------- the oracles
def soft_oracle(loglam, mu, bbar, cout, s, x, c):
    """The definition, one (row, channel) at a time: complex ``(H, N2)`` x4, ``s (H,)``, ``x (B, H, T)``,
    ``c (B, T)`` -> ``y (B, H, T)`` (without ``d x``), states ``h (B, H, T, N2)``."""
    B, H, T = x.shape
    y, hh = np.zeros((B, H, T)), np.zeros((B, H, T, loglam.shape[1]), complex)
    for b in range(B):
        for j in range(H):
            ts, hs, now = [0.0], [np.zeros(loglam.shape[1], complex)], 0.0     # the point (0, 0)
            for t in range(T):
                ct = c[b, t]
                now += ct
                r, hd = now - s[j], 0.0
                if r > 0:               # first stored point at or after r (the last one if rounding passes it)
                    i = next((i for i in range(1, len(ts)) if ts[i] >= r), len(ts) - 1)
                    wgt = (r - ts[i - 1]) / (ts[i] - ts[i - 1])
                    hd = (1 - wgt) * hs[i - 1] + wgt * hs[i]
                h = np.exp(ct * loglam[j]) * hs[-1] + ct * mu[j] * hd + ct * bbar[j] * x[b, j, t]
                ts.append(now)
                hs.append(h)
                hh[b, j, t] = h
                y[b, j, t] = 2 * np.real(np.sum(cout[j] * h))
    return y, hh


def delay_loop(lam, mu, bbar, cout, k, alpha, d, x, ticks=None):
    """The DS4D recurrence in ticks: ``h_n = lam h_{n-1} + mu((1-a) h_{n-k} + a h_{n-k-1}) + bbar x`` at
    each tick, held (no input read) between ticks; ``y = 2 Re(cout h) + d x``. ``ticks=None``: all tick."""
    B, H, T = x.shape
    ticks = np.ones((B, T), bool) if ticks is None else ticks
    y = np.zeros((B, H, T))
    for b in range(B):
        for j in range(H):
            hs = []
            at = lambda n: hs[n] if n >= 0 else 0.0                              # noqa: E731
            for t in range(T):
                if ticks[b, t]:
                    n, kj, a = len(hs), int(k[j]), float(alpha[j])
                    hs.append(lam[j] * at(n - 1) + mu[j] * ((1 - a) * at(n - kj) + a * at(n - kj - 1))
                              + bbar[j] * x[b, j, t])
                y[b, j, t] = (2 * np.real(np.sum(cout[j] * hs[-1])) if hs else 0.0) + d[j] * x[b, j, t]
    return y


def random_params(H=3, N2=2, seed=0, rho=0.9):
    """``loglam, mu, bbar, cout`` ``(H, N2)`` complex with ``|lam| + |mu| <= rho``."""
    rng = np.random.default_rng(seed)
    ph = lambda: np.exp(2j * np.pi * rng.random((H, N2)))                        # noqa: E731
    a = rng.uniform(0.2, 0.6, (H, N2))
    lam = a * ph()
    mu = rng.uniform(0.1, 1.0, (H, N2)) * (rho - a) * ph()
    return np.log(lam), mu, rng.normal(size=(H, N2)) * ph(), rng.normal(size=(H, N2)) * ph()


def clocks(T, seed=0):
    """Rows: random soft, a run of exact zeros and of exact ones in a soft clock, alternating 0/1, tiny."""
    rng = np.random.default_rng(seed)
    c = rng.uniform(0.05, 1.0, (5, T))
    c[1, 3:8], c[1, 12:18] = 0.0, 1.0
    c[2, : T // 3], c[2, -4:] = 0.0, 1.0                 # starts paused (the (0, 0) point is read)
    c[3] = np.arange(T) % 2
    c[4] = 1e-3 * rng.random(T)
    return c


def max_err(a, b):
    return float(np.max(np.abs(np.asarray(a, dtype=complex) - np.asarray(b, dtype=complex)), initial=0.0))


# ---------------------------------------------------------------- 1. the scan = the loop
@pytest.mark.parametrize("s", [(1.0, 2.5, 4.75), (1.3, 6.2, 40.0)])     # integer, fractional, past tau_L
def test_soft_scan_equals_the_definition(s):
    T, s = 24, np.array(s)
    p = random_params()
    x = np.random.default_rng(1).normal(size=(5, 3, T))
    c = clocks(T)
    ref, href = soft_oracle(*p, s, x, c)
    y, (h, tau, *_) = soft_scan(*p, s, x, c)
    assert y.dtype == np.float64 and y.shape == (5, 3, T) and h.shape == (5, 3, T, 2)
    assert max_err(y, ref) < 1e-12 * max(1.0, np.abs(ref).max())
    assert max_err(h, href) < 1e-12 * max(1.0, np.abs(href).max())
    assert max_err(tau, np.cumsum(c, 1)) < 1e-13
    y32, _ = soft_scan(*p, s, x, c, dtype=np.float32)
    assert y32.dtype == np.float32 and max_err(y32, ref) < 1e-5 * np.abs(ref).max()


def test_clock_one_is_ds4d_and_binary_is_the_clocked_system():
    T, s = 20, np.array([1.0, 2.5, 5.25])
    k, alpha = np.floor(s).astype(int), s - np.floor(s)
    loglam, mu, bbar, cout = p = random_params(seed=3)
    x = np.random.default_rng(4).normal(size=(4, 3, T))
    zero = np.zeros(3)
    ones = np.ones((4, T))
    ref = delay_loop(np.exp(loglam), mu, bbar, cout, k, alpha, zero, x)
    assert max_err(soft_scan(*p, s, x, ones)[0], ref) < 1e-12 * np.abs(ref).max()
    ticks = np.random.default_rng(5).random((4, T)) < 0.5
    ticks[1], ticks[2, :5] = True, False
    ref = delay_loop(np.exp(loglam), mu, bbar, cout, k, alpha, zero, x, ticks)
    assert max_err(soft_scan(*p, s, x, ticks.astype(float))[0], ref) < 1e-12 * np.abs(ref).max()


def test_stability_bound_for_every_clock():
    T = 64
    for seed in range(4):
        loglam, mu, bbar, cout = p = random_params(H=4, N2=3, seed=seed, rho=0.95)
        s = np.array([1.0, 1.7, 3.5, 9.25])
        rng = np.random.default_rng(seed)
        x = np.sign(rng.normal(size=(7, 4, T))) * rng.uniform(0.5, 1.0, (7, 4, T))
        c = np.concatenate([clocks(T, seed), np.ones((1, T)), rng.random((1, T)) ** 8])
        h = soft_scan(*p, s, x, c)[1][0]                                     # (B, H, T, N2)
        bound = np.abs(bbar) * np.abs(x).max() / (1 - np.abs(np.exp(loglam)) - np.abs(mu))   # (H, N2)
        assert (np.abs(h).max(axis=(0, 2)) <= bound * (1 + 1e-12)).all()
    # the bound is attained in the limit (so the check above can fail): real positive modes, x = 1, c = 1
    y, (h, *_) = soft_scan(np.log([[0.5]]), np.array([[0.45]]), np.array([[1.0]]), np.array([[1.0]]),
                           np.array([2.5]), np.ones((1, 1, 400)), np.ones((1, 400)))
    assert 0.99 * 20 < h[0, 0, -1, 0].real <= 20 * (1 + 1e-12)


# ---------------------------------------------------------------- 2. the adjoint = finite differences of the loop
def test_soft_scan_grad_equals_finite_differences_of_the_definition():
    B, H, N2, T = 2, 3, 2, 12
    p = list(random_params(H, N2, seed=7))
    s = np.array([1.35, 3.6, 14.0])                          # the last never reads (its gradient is 0)
    rng = np.random.default_rng(8)
    x, gy = rng.normal(size=(B, H, T)), rng.normal(size=(B, H, T))
    c = rng.uniform(0.05, 1.0, (B, T))
    c[1, 2:4], c[1, 6:9] = 0.0, 1.0                          # exact 0 and 1 (the loop extends smoothly past them)
    args = p + [s, x, c]
    y, fwd = soft_scan(*args)
    got = soft_scan_grad(*args, fwd, gy)
    loss = lambda a: float(np.sum(gy * soft_oracle(*a)[0]))                  # noqa: E731
    eps = 1e-6
    names = ["loglam", "mu", "bbar", "cout", "s", "x", "c"]
    for i, (name, g) in enumerate(zip(names, got)):
        assert g.shape == args[i].shape, name
        parts = (1.0, 1j) if np.iscomplexobj(args[i]) else (1.0,)
        fd = np.zeros(args[i].shape, complex)
        for idx in np.ndindex(args[i].shape):
            for unit in parts:
                a = [v.copy() for v in args]
                a[i][idx] += unit * eps
                up = loss(a)
                a[i][idx] -= 2 * unit * eps
                fd[idx] += unit * (up - loss(a)) / (2 * eps)
        assert max_err(g, fd) < 1e-6 * np.abs(fd).max(), name
    assert got[4][2] == 0.0
    # float32: the same adjoint to float32 accuracy
    got32 = soft_scan_grad(*args, soft_scan(*args, dtype=np.float32)[1], gy)
    for name, g, g32 in zip(names, got, got32):
        assert max_err(g32, g) < 1e-5 * np.abs(g).max(), name


# ---------------------------------------------------------------- 3. nn: soft_forward, SoftClocked
def _layer(H=2, T=12):
    return dnn.DS4D(H, d_state=4, l_max=T, seed=0).double()


def _discrete(layer):
    d = layer.discrete(F64)
    f = lambda z: z.detach().numpy()                                         # noqa: E731
    return f(d.lam), f(d.mu), f(d.bbar), f(d.c), f(d.k), f(d.alpha), f(d.delay), layer.D.detach().numpy()


def test_soft_forward_at_clock_one_and_binary():
    layer, T = _layer(3, 16), 16
    lam, mu, bbar, cout, k, alpha, delay, D = _discrete(layer)
    assert max_err(k + alpha, delay) < 1e-12
    x = torch.randn(4, 3, T, dtype=F64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        y = soft_forward(layer, x, torch.ones(4, T, dtype=F64))
        assert y.dtype == F64 and y.shape == (4, 3, T)
        assert max_err(y, layer(x.transpose(1, 2), mode="recurrent").transpose(1, 2)) < 1e-12
        assert max_err(y, delay_loop(lam, mu, bbar, cout, k, alpha, D, x.numpy())) < 1e-12
        ticks = torch.rand(4, T, generator=torch.Generator().manual_seed(1)) < 0.5
        ticks[0], ticks[1, :6] = True, False
        y = soft_forward(layer, x, ticks.double())
        ref = delay_loop(lam, mu, bbar, cout, k, alpha, D, x.numpy(), ticks.numpy())
        assert max_err(y, ref) < 1e-12
        clocked = dnn.Clocked(layer)
        assert max_err(y, clocked(x.transpose(1, 2), ticks, mode="recurrent").transpose(1, 2)) < 1e-12
        assert max_err(y, clocked(x.transpose(1, 2), ticks).transpose(1, 2)) < 1e-10     # FFT path
        # a gated Clocked layer: c = sigmoid(w . x_t + b), the oracle's loop plus d x
        gate = GateClock(3, init=0.4, seed=2).double()
        gate.w.mul_(40.0)                                                    # clocks spread over (0, 1)
        gated = SoftClocked(layer, gate)
        xb = x.transpose(1, 2)                                               # (B, L, H)
        c = torch.sigmoid(xb @ gate.w + gate.b).numpy()
        assert c.min() < 0.05 and c.max() > 0.95
        ref = soft_oracle(np.log(lam), mu, bbar, cout, delay, x.numpy(), c)[0] + D[:, None] * x.numpy()
        ref = torch.from_numpy(ref).transpose(1, 2)                          # (B, L, H)
        assert max_err(gated(xb), ref) < 1e-12
        # decoding it: one token at a time, and prefill + steps (reads reach back many real steps)
        cache = gated.allocate_inference_cache(4, max_seqlen=T, dtype=F64)
        assert max_err(torch.stack([gated.step(xb[:, t], cache) for t in range(T)], 1), ref) < 1e-12
        cache = gated.allocate_inference_cache(4, max_seqlen=T, dtype=F64)
        y = [gated.prefill(xb[:, :7], cache)]
        y = torch.cat(y + [gated.step(xb[:, t], cache)[:, None] for t in range(7, T)], 1)
        assert max_err(y, ref) < 1e-12


def test_soft_forward_gradcheck():
    layer, T = _layer(2, 8), 8
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 2, T, dtype=F64, generator=g, requires_grad=True)
    c = (0.1 + 0.85 * torch.rand(2, T, dtype=F64, generator=g)).requires_grad_()
    assert torch.autograd.gradcheck(lambda x, c: soft_forward(layer, x, c), (x, c))
    x, c = x.detach(), c.detach()
    for name, p in list(layer.named_parameters()):
        def f(q, name=name, p=p):
            layer._parameters[name] = q
            try:
                return soft_forward(layer, x, c)
            finally:
                layer._parameters[name] = p
        assert torch.autograd.gradcheck(f, (p.detach().clone().requires_grad_(),)), name


# ---------------------------------------------------------------- 4. SequenceModel(clock="learned")
V, LM = 7, 12


def _lm():
    torch.manual_seed(0)
    m = dnn.SequenceModel(V, V, d_model=8, n_layers=2, embedding=True,
                          layer_kw={"l_max": LM, "d_state": 8, "seed": 0}, clock="learned")
    return m.double()


def _model_oracle(m, tok):
    """Embedding -> per block ``h + glu(out(act(oracle(norm(h)))))`` with ``c = sigmoid(norm(h) w + b)``."""
    h = m.encoder(tok)
    for blk in m.blocks:
        z = blk.norm(h)                                                      # (B, L, H)
        lam, mu, bbar, cout, k, alpha, delay, D = _discrete(blk.layer.inner)
        gate = blk.layer.gate
        c = torch.sigmoid(z @ gate.w + gate.b).detach().numpy()
        zt = z.detach().transpose(1, 2).numpy()
        y = soft_oracle(np.log(lam), mu, bbar, cout, delay, zt, c)[0] + D[:, None] * zt
        h = h + blk.glu(blk.out(blk.act(torch.from_numpy(y).transpose(1, 2))))
    return m.decoder(m.norm(h))


def test_learned_model_forward_decode_prefill_generate():
    m, B = _lm().eval(), 3
    tok = torch.randint(0, V, (B, LM), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        for blk in m.blocks:                                                 # clocks spread over (0, 1)
            blk.layer.gate.w.mul_(60.0)
            blk.layer.gate.b.zero_()
        y = m(tok)
        assert max_err(y, _model_oracle(m, tok)) < 1e-12
        caches = m.allocate_inference_cache(B, max_seqlen=LM, dtype=F64)
        assert max_err(torch.stack([m.step(tok[:, t], caches) for t in range(LM)], 1), y) < 1e-12
        with pytest.raises(RuntimeError, match="max_seqlen"):
            m.step(tok[:, 0], caches)
        caches = m.allocate_inference_cache(B, max_seqlen=LM, dtype=F64)
        y_pre = m.prefill(tok[:, :5], caches)
        y_rest = torch.stack([m.step(tok[:, t], caches) for t in range(5, LM)], 1)
        assert max_err(torch.cat([y_pre, y_rest], 1), y) < 1e-12
        out, logits = m.generate(tok[:, :5], 4, temperature=0, return_logits=True, cache_kwargs={"dtype": F64})
        assert out.shape == (B, 9) and (out[:, :5] == tok[:, :5]).all()
        assert max_err(logits, m(out)[:, 4:8]) < 1e-12
        assert (out[:, 5:] == logits.argmax(-1)).all()
        with pytest.raises(ValueError, match="max_seqlen"):
            m.allocate_inference_cache(B, dtype=F64)


def test_learned_model_trains_its_gates():
    m = _lm().train()
    tok = torch.randint(0, V, (4, LM), generator=torch.Generator().manual_seed(6))
    gates = [blk.layer.gate for blk in m.blocks]
    before = [(g.w.detach().clone(), g.b.detach().clone()) for g in gates]
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    loss = torch.nn.functional.cross_entropy(m(tok[:, :-1]).reshape(-1, V), tok[:, 1:].reshape(-1))
    loss.backward()
    for g in gates:
        for p in (g.w, g.b):
            assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().max() > 0
    assert all(torch.isfinite(p.grad).all() for p in m.parameters() if p.grad is not None)
    opt.step()
    for g, (w, b) in zip(gates, before):
        assert not torch.equal(g.w, w) and not torch.equal(g.b, b)


# ---------------------------------------------------------------- 5. bad input
def test_bad_input_is_named():
    p = random_params()
    s, x, c = np.array([1.5, 2.0, 3.0]), np.zeros((2, 3, 6)), np.full((2, 6), 0.5)
    bad_c = c.copy()
    bad_c[1, 2] = 1.5
    with pytest.raises(ValueError, match=r"clock c .*\[0, 1\]"):
        soft_scan(*p, s, x, bad_c)
    with pytest.raises(ValueError, match=r"clock c"):
        soft_scan(*p, s, x, -c)
    with pytest.raises(ValueError, match=r"clock c"):
        soft_scan(*p, s, x, np.where(bad_c > 1, np.nan, c))
    with pytest.raises(ValueError, match="delays s"):
        soft_scan(*p, np.array([1.5, 0.5, 3.0]), x, c)
    with pytest.raises(ValueError, match="c .*B, L"):
        soft_scan(*p, s, x, c[:, :-1])
    with pytest.raises(ValueError, match="s must be"):
        soft_scan(*p, s[:2], x, c)
    with pytest.raises(ValueError, match="mu"):
        soft_scan(p[0], p[1][:, :1], p[2], p[3], s, x, c)
    with pytest.raises(ValueError, match="cout"):
        soft_scan(*p[:3], p[3][:2], s, x, c)
    with pytest.raises(ValueError, match="loglam"):
        soft_scan(*p, s, x[:, :2], c)


# ---------------------------------------------------------------- 6. without Numba
_SCRIPT = """
import json, sys, numpy as np
from ddesys import cpu
from ddesys.selective import soft_scan, soft_scan_grad
a = json.loads(sys.argv[1])
cplx = lambda v: np.array(v[0]) + 1j * np.array(v[1])
args = [cplx(v) for v in a[:4]] + [np.array(v) for v in a[4:7]]
y, fwd = soft_scan(*args)
g = soft_scan_grad(*args, fwd, np.array(a[7]))
out = [y] + [np.asarray(v) for v in g]
print(json.dumps({"numba": cpu.available(), "out": [[v.real.tolist(), np.imag(v).tolist()] for v in out]}))
"""


def test_pure_python_fallback_matches_compiled():
    p = random_params(H=2, N2=2, seed=9)
    rng = np.random.default_rng(10)
    s, x, gy = np.array([1.4, 2.6]), rng.normal(size=(2, 2, 8)), rng.normal(size=(2, 2, 8))
    c = rng.uniform(0.0, 1.0, (2, 8))
    c[0, 2] = 0.0
    args = list(p) + [s, x, c]
    y, fwd = soft_scan(*args)
    want = [y] + list(soft_scan_grad(*args, fwd, gy))
    payload = [[v.real.tolist(), v.imag.tolist()] for v in p] + [v.tolist() for v in (s, x, c, gy)]
    env = dict(os.environ, DDESYS_DISABLE_NUMBA="1")
    run = subprocess.run([sys.executable, "-c", _SCRIPT, json.dumps(payload)], env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    res = json.loads(run.stdout.strip().splitlines()[-1])
    assert res["numba"] is False
    for w, (re, im) in zip(want, res["out"]):
        assert max_err(np.array(re) + 1j * np.array(im), w) < 1e-12 * max(1.0, np.abs(w).max())
    assert max_err(y, soft_oracle(*args)[0]) < 1e-12 * np.abs(y).max()


def test_a_diverged_gate_is_refused_as_non_finite():
    """A NaN clock is what a diverged training step produces: refused as ``NonFiniteInputError`` (a
    ``FloatingPointError``, which training loops record as divergence), not as a range ``ValueError``."""
    from ddesys.nn import DS4D
    from ddesys.nn.common import NonFiniteInputError
    from ddesys.nn.selective import GateClock, SoftClocked
    layer = SoftClocked(DS4D(4, 8, l_max=16, seed=0), GateClock(4, seed=0))
    with torch.no_grad():
        layer.gate.b.fill_(float("nan"))
    with pytest.raises(NonFiniteInputError, match="learned clock is not finite"):
        layer(torch.randn(2, 10, 4))
