"""The learned binary clock (nn.learned_clock, docs/theory.md §10.1 with ticks chosen by a gate), and the
soft gate's hardened form, against brute-force loops written here:

* both training paths (the scan at c in {0, 1} with gradients, the compacted FFT without) equal the
  clocked recurrence in ticks, in float64; decoding and prefill + decoding equal it too;
* the decode state does not grow with the position (a ring of k_max + 1 ticks per row);
* gradients: the scan's dL/dc at the binary clock equals one-sided finite differences of the soft clock's
  definition, the gate's straight-through gradient is that times sigma'(z) x, and the layer's parameters
  and input pass gradcheck at a fixed clock;
* the time split of ddesys.selective.soft_scan_grad (parts=True) sums to the clock's gradient.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ddesys import nn as dnn
from ddesys.nn.learned_clock import HardClocked, HardGateClock
from ddesys.nn.selective import GateClock, soft_forward
from ddesys.selective import soft_scan, soft_scan_grad

from clock_helpers import discrete_modes, tick_loop

F64 = torch.float64
H, L, LMAX = 3, 14, 10


def soft_def(loglam, mu, bbar, cout, s, x, cf, tau):
    """§10.4 with the step factors' clock ``cf`` and the internal times ``tau`` as separate inputs (the
    definition is ``cf = c``, ``tau = cumsum(c)``): ``x`` ``(B, H, L)`` -> ``y`` ``(B, H, L)`` without ``d x``."""
    B, Hs, Ls = x.shape
    y = np.zeros((B, Hs, Ls))
    for b in range(B):
        for j in range(Hs):
            ts, hs = [0.0], [np.zeros(loglam.shape[1], complex)]
            for t in range(Ls):
                r, hd = tau[b, t] - s[j], 0.0
                if r > 0:
                    i = next(i for i in range(1, len(ts)) if ts[i] >= r)
                    w = (r - ts[i - 1]) / (ts[i] - ts[i - 1])
                    hd = (1 - w) * hs[i - 1] + w * hs[i]
                h = np.exp(cf[b, t] * loglam[j]) * hs[-1] + cf[b, t] * (mu[j] * hd + bbar[j] * x[b, j, t])
                ts.append(tau[b, t])
                hs.append(h)
                y[b, j, t] = 2 * np.real(np.sum(cout[j] * h))
    return y


def soft_loop(layer, x, c):
    """The soft clock's definition for a layer: ``x`` ``(B, L, H)``, ``c`` ``(B, L)`` -> ``(B, L, H)``."""
    lam, mu, bbar, cout, k, alpha, D = discrete_modes(layer)
    xt = x.detach().numpy().transpose(0, 2, 1)
    y = soft_def(np.log(lam), mu, bbar, cout, k + alpha, xt, c, np.cumsum(c, axis=1))
    return y.transpose(0, 2, 1) + D * x.detach().numpy()


def _setup(seed=0):
    inner = dnn.DS4D(H, d_state=4, l_max=LMAX, transposed=False, seed=seed).double()
    with torch.no_grad():                        # delays off the integers: at a binary clock an integer delay
        inner.nu_tau.add_(0.3)                   # reads exactly at a node, where dL/dc is one-sided
    gate = HardGateClock(H, init=0.5, seed=seed + 1).double()
    with torch.no_grad():
        gate.w.copy_(torch.tensor([3.0, -2.0, 1.5], dtype=F64))
        gate.b.fill_(0.3)
    x = torch.randn(2, L, H, dtype=F64, generator=torch.Generator().manual_seed(seed + 2))
    layer = HardClocked(inner, gate)
    z = gate.logits(x)
    assert z.abs().min() > 1e-3                                              # no tick at the threshold
    ticks = z > 0
    assert 0 < int(ticks.sum()) < ticks.numel()                               # pauses and ticks
    return layer, x, ticks


def _err(a, b):
    return float((torch.as_tensor(a) - torch.as_tensor(b)).detach().abs().max())


def test_paths_equal_the_tick_recurrence():
    layer, x, ticks = _setup()
    ref = tick_loop(layer.inner, x, ticks)
    c = layer.gate(x)
    assert set(c.unique().tolist()) <= {0.0, 1.0}
    assert _err(layer(x), ref) < 1e-12                                       # the scan (training)
    with torch.no_grad():
        assert _err(layer(x), ref) < 1e-10                                   # compacted FFT
        assert _err(layer(x, mode="recurrent"), ref) < 1e-12
        forced = torch.ones_like(ticks)
        forced[0, 3:6] = False                                               # a given pause on top
        assert _err(layer(x, forced), tick_loop(layer.inner, x, ticks & forced)) < 1e-10
        cache = layer.allocate_inference_cache(2, dtype=F64)
        assert _err(torch.stack([layer.step(x[:, t], cache) for t in range(L)], 1), ref) < 1e-12
        cache = layer.allocate_inference_cache(2, dtype=F64)
        y = torch.cat([layer.prefill(x[:, :6], cache)] + [layer.step(x[:, t], cache)[:, None]
                                                          for t in range(6, L)], 1)
        assert _err(y, ref) < 1e-12


def test_hardened_soft_gate_is_the_threshold():
    soft = GateClock(H, init=0.5, seed=4).double()
    with torch.no_grad():
        soft.w.mul_(30.0)
    x = torch.randn(2, L, H, dtype=F64, generator=torch.Generator().manual_seed(5))
    hard = HardGateClock.from_soft(soft).double()
    assert torch.equal(hard(x) > 0.5, soft(x) > 0.5)
    assert torch.equal(hard.ticks(x), soft(x) > 0.5)


def test_decode_state_does_not_grow():
    layer, x, _ = _setup()
    long = x.repeat(1, 40, 1)                                                # 560 tokens
    sizes = []
    for max_seqlen in (16, 4096):
        cache = layer.allocate_inference_cache(2, max_seqlen=max_seqlen, dtype=F64)
        sizes.append([tuple(t.shape) for t in cache.tensors()])
    assert sizes[0] == sizes[1]
    assert cache.n_slots <= LMAX + 2                                         # k_max + 1 ticks
    with torch.no_grad():
        for t in range(long.shape[1]):
            layer.step(long[:, t], cache)
    assert [tuple(t.shape) for t in cache.tensors()] == sizes[0]


def test_clock_gradient_at_binary_points_and_straight_through():
    layer, x, ticks = _setup(1)
    rng = np.random.default_rng(0)
    G = rng.standard_normal((2, L, H))                                       # loss = sum(G * y)
    c = ticks.double().requires_grad_()
    y = soft_forward(layer.inner, x.transpose(1, 2), c).transpose(1, 2)
    (torch.from_numpy(G) * y).sum().backward()
    cb, eps = ticks.double().numpy(), 1e-6
    fd = np.zeros_like(cb)
    base = float((G * soft_loop(layer.inner, x, cb)).sum())
    for b in range(2):
        for t in range(L):
            step = -eps if cb[b, t] == 1.0 else eps                         # stay inside [0, 1]
            cp = cb.copy()
            cp[b, t] += step
            fd[b, t] = (float((G * soft_loop(layer.inner, x, cp)).sum()) - base) / step
    assert np.max(np.abs(c.grad.numpy() - fd)) < 1e-5 * max(1.0, np.abs(fd).max())
    # the gate's gradient: dL/dc at the binary clock times sigma'(z / temperature) / temperature, times x
    gate = layer.gate
    gate.zero_grad()
    (torch.from_numpy(G) * layer(x)).sum().backward()
    s = torch.sigmoid(gate.logits(x) / gate.temperature).detach()
    slope = c.grad * s * (1 - s) / gate.temperature                         # (B, L)
    assert _err(gate.w.grad, (slope[..., None] * x).sum((0, 1))) < 1e-10
    assert _err(gate.b.grad, slope.sum()) < 1e-10


def test_gradcheck_at_a_fixed_binary_clock():
    layer, x, ticks = _setup(2)
    xr = x.transpose(1, 2).clone().requires_grad_()                         # (B, H, L)
    assert torch.autograd.gradcheck(lambda v: soft_forward(layer.inner, v, ticks.double()), (xr,))
    # the layer's gradient in x is that one plus the gate's straight-through term
    xl = x.clone().requires_grad_()
    G = torch.randn(2, L, H, dtype=F64, generator=torch.Generator().manual_seed(7))
    (G * layer(xl)).sum().backward()
    c = ticks.double().requires_grad_()
    xf = x.clone().requires_grad_()
    (G * soft_forward(layer.inner, xf.transpose(1, 2), c).transpose(1, 2)).sum().backward()
    sg = torch.sigmoid(layer.gate.logits(x) / layer.gate.temperature).detach()
    st = (c.grad * sg * (1 - sg) / layer.gate.temperature)[..., None] * layer.gate.w.detach()
    assert _err(xl.grad, xf.grad + st) < 1e-10


@pytest.mark.parametrize("seed", [0, 1])
def test_clock_gradient_split_equals_finite_differences(seed):
    rng = np.random.default_rng(seed)
    Hs, N2, B, Ls = 2, 3, 2, 9
    loglam = -rng.uniform(0.05, 0.5, (Hs, N2)) + 1j * rng.uniform(0, 3, (Hs, N2))
    mu, bbar, cout = (rng.standard_normal((Hs, N2)) * 0.3 + 1j * rng.standard_normal((Hs, N2)) * 0.3
                      for _ in range(3))
    s = np.array([1.4, 3.7])
    x = rng.standard_normal((B, Hs, Ls))
    c = rng.uniform(0.1, 0.95, (B, Ls))
    gy = rng.standard_normal((B, Hs, Ls))
    _, fwd = soft_scan(loglam, mu, bbar, cout, s, x, c)
    full = soft_scan_grad(loglam, mu, bbar, cout, s, x, c, fwd, gy)
    *same, g_step, g_time = soft_scan_grad(loglam, mu, bbar, cout, s, x, c, fwd, gy, parts=True)
    assert all(np.array_equal(a, b) for a, b in zip(same, full))
    tau = np.cumsum(c, axis=1)
    loss = lambda cf, tt: float((gy * soft_def(loglam, mu, bbar, cout, s, x, cf, tt)).sum())   # noqa: E731
    eps = 1e-6
    fd_step, fd_tau = np.zeros((B, Ls)), np.zeros((B, Ls))
    for b in range(B):
        for t in range(Ls):
            e = np.zeros((B, Ls))
            e[b, t] = eps
            fd_step[b, t] = (loss(c + e, tau) - loss(c - e, tau)) / (2 * eps)
            fd_tau[b, t] = (loss(c, tau + e) - loss(c, tau - e)) / (2 * eps)
    fd_time = np.cumsum(fd_tau[:, ::-1], axis=1)[:, ::-1]                  # tau_j = sum_{t <= j} c_t
    assert np.max(np.abs(g_step - fd_step)) < 1e-6
    assert np.max(np.abs(g_time - fd_time)) < 1e-6
    assert np.max(np.abs(g_step + g_time - full[-1])) < 1e-12


def _binary_model(seed=0, hidden=0):
    from ddesys.nn.learned_clock import BinaryClock
    clock = "binary" if not hidden else BinaryClock(seed=seed, hidden=hidden)
    m = dnn.SequenceModel(10, 10, d_model=H, n_layers=2, layer="ds4d", embedding=True, clock=clock,
                          layer_kw={"d_state": 4, "l_max": LMAX, "seed": seed}).double()
    with torch.no_grad():
        for blk in m.blocks:
            blk.layer.gate.b.fill_(0.0)                                       # some pauses, some ticks
            blk.layer.gate.w.mul_(30.0)
            if hidden:                                                        # the hidden layer decides
                blk.layer.gate.w.mul_(0.1)
                blk.layer.gate.v.normal_(0.0, 10.0, generator=torch.Generator().manual_seed(seed))
                blk.layer.gate.a.fill_(-0.5)
    return m


@pytest.mark.parametrize("hidden", [0, 8])
def test_binary_clock_model_paths_agree_with_the_tick_loop(hidden):
    """SequenceModel(clock="binary"): each block's layer equals the tick loop at its gate's ticks (training
    scan and FFT), and the model's decode and prefill + decode equal its forward pass; with a gate whose
    hidden layer sets the ticks (``BinaryClock(hidden=8)``) too."""
    m = _binary_model(hidden=hidden)
    x = torch.randint(0, 10, (3, L), generator=torch.Generator().manual_seed(0))
    h = m.encoder(x)
    fractions = []
    for blk in m.blocks:
        z = blk.norm(h)
        ticks = blk.layer.gate.ticks(z)
        fractions.append(float(ticks.double().mean()))
        ref = tick_loop(blk.layer.inner, z, ticks)
        assert _err(blk.layer(z), ref) < 1e-12                                 # scan, with gradients
        with torch.no_grad():
            assert _err(blk.layer(z), ref) < 1e-10                             # FFT on the ticks
        h = blk(h)
    assert all(0.05 < f < 0.95 for f in fractions)
    with torch.no_grad():
        y = m(x)
        cache = m.allocate_inference_cache(3, L, dtype=F64)
        assert _err(torch.stack([m.step(x[:, t], cache) for t in range(L)], 1), y) < 1e-10
        cache = m.allocate_inference_cache(3, L, dtype=F64)
        yp = torch.cat([m.prefill(x[:, :7], cache)] + [m.step(x[:, t], cache)[:, None] for t in range(7, L)], 1)
        assert _err(yp, y) < 1e-10
        cache = m.allocate_inference_cache(3, L, dtype=F64)
        m.prefill(x[:, :5], cache)
        plan = m.compile_step(cache)                                          # the compiled model step
        assert _err(torch.stack([plan.step(x[:, t]) for t in range(5, L)], 1), y[:, 5:]) < 1e-10
    assert _err(m(x), y) < 1e-10


def test_time_cost_is_the_mean_clock_and_switches_off():
    from ddesys.nn.learned_clock import TimeCost
    m = _binary_model(1)
    cost = TimeCost(m, weight=0.5, steps=3)
    assert cost.n_clocks == 2
    x = torch.randint(0, 10, (2, 12), generator=torch.Generator().manual_seed(2))
    m(x)
    term = cost(1)
    h, means, slopes = m.encoder(x), [], []                                    # recomputed here
    with torch.no_grad():
        for blk in m.blocks:
            z = blk.layer.gate.logits(blk.norm(h))
            means.append(float((z > 0).double().mean()))
            slopes.append(torch.sigmoid(z) * (1 - torch.sigmoid(z)))
            h = blk(h)
    assert abs(float(term) - 0.5 * np.mean(means)) < 1e-14
    term.backward()                       # straight-through: d/db = the mean slope (the last gate's b acts on it alone)
    assert abs(float(m.blocks[-1].layer.gate.b.grad) - 0.5 * float(slopes[-1].mean()) / 2) < 1e-12
    m(x)
    assert float(cost(4)) == 0.0                                               # after ``steps``: off
    with torch.no_grad():
        m(x)
    assert float(cost(1)) == 0.0                                               # no gradients: not a training pass
    cost.remove()
    m(x)
    assert float(cost(1)) == 0.0
    floor = TimeCost(m, weight=0.5, steps=3, after=0.1)
    m(x)
    assert abs(float(floor(4)) - 0.1 * np.mean(means)) < 1e-14                 # ... or down to ``after``
    floor.remove()
    late = TimeCost(m, weight=0.5, steps=3, after=0.1, start=2)                # the task loss alone first
    assert [late.weight_at(k) for k in range(1, 8)] == [0.0, 0.0, 0.5, 0.5, 0.5, 0.1, 0.1]
    m(x)
    assert float(late(2)) == 0.0
    m(x)
    assert abs(float(late(3)) - 0.5 * np.mean(means)) < 1e-14
    late.remove()
    with pytest.raises(ValueError, match="weight"):
        TimeCost(m, weight=-1.0)
    for bad in (-1, 1.5):
        with pytest.raises(ValueError, match="start"):
            TimeCost(m, start=bad)


@pytest.mark.parametrize("clock", ["binary", "learned"])
def test_learned_clock_without_l_max_takes_the_first_sequence(clock):
    """A user's first training step with ``l_max=None``: the scan fixes the delay range from the sequence,
    as ``forward`` does, i.e. the model built with ``l_max = L``."""
    x = torch.randint(0, 10, (2, 12), generator=torch.Generator().manual_seed(3))
    kw = {"d_state": 4, "seed": 0}
    models = []
    for lm in (None, 12):
        with torch.random.fork_rng():
            torch.manual_seed(0)                                               # the same weights
            models.append(dnn.SequenceModel(10, 10, d_model=H, n_layers=2, embedding=True, clock=clock,
                                            layer_kw={**kw, "l_max": lm}).double())
    ys = [m(x) for m in models]                                                # with gradients: the scan
    assert _err(ys[0], ys[1]) < 1e-9                                          # float32 delays placed, then cast
    ys[0].sum().backward()
    assert models[0].blocks[0].layer.inner.l_max == 12


def test_a_gate_with_a_hidden_layer():
    """``hidden``: the logits are ``w . x + b + v . gelu(W x + a)`` (written out here), the clock starts at
    ``init`` as the linear gate does (small ``v``), the surrogate's gradient reaches every parameter and the
    seed fixes them all; a bad width is refused."""
    import torch.nn.functional as Fn

    from ddesys.nn.learned_clock import BinaryClock
    x = torch.randn(2, 7, 5, dtype=F64, generator=torch.Generator().manual_seed(0))
    gate = HardGateClock(5, init=0.9, seed=3, hidden=6).double()
    ref = x @ gate.w + gate.b + Fn.gelu(torch.einsum("blh,kh->blk", x, gate.W) + gate.a) @ gate.v
    assert _err(gate.logits(x), ref) < 1e-14 and _err(gate.logits(x[:, 2]), ref[:, 2]) < 1e-14
    assert float((torch.sigmoid(gate.logits(x)) - 0.9).abs().max()) < 0.1
    gate(x).sum().backward()
    assert all(p.grad is not None and float(p.grad.abs().max()) > 0 for p in gate.parameters())
    again = HardGateClock(5, init=0.9, seed=3, hidden=6).double()
    assert all(torch.equal(p, q) for p, q in zip(gate.parameters(), again.parameters()))
    assert "hidden=6" in repr(gate) and "hidden=6" in repr(BinaryClock(hidden=6))
    assert not hasattr(HardGateClock(5, seed=3), "W")                         # the linear gate: w and b alone
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="hidden"):
            HardGateClock(5, hidden=bad)


def test_a_gate_reading_its_input_detached_passes_no_gradient_to_it():
    """``input_grad=False``: the surrogate's gradient reaches ``w`` and ``b`` as before and nothing reaches the
    input; the clock's values are the same."""
    from ddesys.nn.learned_clock import HardGateClock
    x = torch.randn(2, 7, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    grads = {}
    for flag in (True, False):
        gate = HardGateClock(5, seed=1, input_grad=flag).double()
        xi = x.clone().requires_grad_(True)
        c = gate(xi)
        (c * torch.arange(7.0, dtype=torch.float64)).sum().backward()
        grads[flag] = (c.detach(), gate.w.grad.clone(), gate.b.grad.clone(), xi.grad)
    assert torch.equal(grads[True][0], grads[False][0])
    assert torch.allclose(grads[True][1], grads[False][1]) and torch.allclose(grads[True][2], grads[False][2])
    assert grads[True][3] is not None and float(grads[True][3].abs().max()) > 0
    assert grads[False][3] is None or float(grads[False][3].abs().max()) == 0
    assert "input_grad=False" in repr(HardGateClock(5, seed=1, input_grad=False))
