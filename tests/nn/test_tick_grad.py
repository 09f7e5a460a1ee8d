"""The learned binary clock's training path without a delayed branch (nn.tick_grad): the compacted FFT
with the clock's gradient in closed form, against references written here and the scan:

* ``tick_grad`` equals central finite differences of the soft clock's definition (§10.4 with ``mu = 0``,
  a loop over rows, channels and steps), for clocks with pauses before the first tick, after the last,
  rows without ticks and rows that tick everywhere;
* a ``HardClocked`` S4D's gradients (gate, layer parameters, input) equal those of the soft scan run at
  the same binary clock, in float64, and its outputs the tick loop's;
* a layer with a delayed branch (DS4D) has no time kernel and keeps the scan.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ddesys import nn as dnn
from ddesys.nn.learned_clock import HardClocked, HardGateClock
from ddesys.nn.selective import soft_forward
from ddesys.nn.tick_grad import tick_grad

F64 = torch.float64
B, L, H, N = 4, 23, 3, 6


def _layer(seed=1):
    layer = dnn.S4D(H, 2 * N, seed=seed).double()
    with torch.no_grad():
        layer.log_dt.add_(1.5)                       # steps of order one: the kernel decays within L
    return layer


def _clock(seed=3):
    g = torch.Generator().manual_seed(seed)
    ticks = torch.rand(B, L, generator=g) < 0.55
    ticks[0, :4] = False                             # pauses before the first tick
    ticks[1, -5:] = False                            # and after the last
    ticks[2] = False                                 # a row that never ticks
    ticks[3] = True                                  # a row that ticks everywhere
    return ticks


def soft_loss(layer, x, w, c):
    """sum(w * y) of ``h_t = lam^{c_t} h_{t-1} + c_t bbar x_t``, ``y_t = 2 Re(C h_t)`` (no ``D x``)."""
    d = layer.discrete(F64)
    loglam, cb = np.log(d.lam.detach().numpy()), (d.bbar).detach().numpy()
    cout = d.c.detach().numpy()
    h, total = np.zeros((x.shape[0], H, N), complex), 0.0
    for t in range(x.shape[1]):                      # a loop over steps; rows and channels side by side
        ct = c[:, t, None, None]
        h = np.exp(ct * loglam) * h + ct * cb * x[:, t, :, None]
        total += np.sum(w[:, t] * 2 * np.real(np.sum(cout * h, axis=-1)))
    return total


@pytest.mark.parametrize("clock", ["mixed", "none tick"])
def test_tick_grad_equals_finite_differences_of_the_soft_clock(clock):
    layer, ticks = _layer(), _clock() if clock == "mixed" else torch.zeros(B, L, dtype=torch.bool)
    g = torch.Generator().manual_seed(5)
    x, w = torch.randn(B, L, H, generator=g, dtype=F64), torch.randn(B, L, H, generator=g, dtype=F64)
    K, Kd = layer.time_kernel(L + 1)
    got = tick_grad(K, Kd, x, w, ticks).numpy()
    c0, eps = ticks.double().numpy(), 1e-6
    want = np.zeros((B, L))
    for b in range(B):
        for t in range(L):
            cp, cm = c0.copy(), c0.copy()
            cp[b, t] += eps
            cm[b, t] -= eps
            want[b, t] = (soft_loss(layer, x.numpy(), w.numpy(), cp)
                          - soft_loss(layer, x.numpy(), w.numpy(), cm)) / (2 * eps)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7 * np.abs(want).max())
    assert np.abs(want[~ticks.numpy()]).max() > 1e-3            # the pauses' derivative is exercised
    assert np.abs(got).max() > 1e-3


def test_hard_clocked_s4d_gradients_equal_the_scans():
    torch.manual_seed(0)
    layer, gate = _layer(), HardGateClock(H, seed=2).double()
    with torch.no_grad():
        gate.w.mul_(30.0)                            # a gate that pauses some steps and ticks others
    model = HardClocked(layer, gate)
    x = torch.randn(B, L, H, dtype=F64, requires_grad=True)
    w = torch.randn(B, L, H, dtype=F64)
    c = gate(x)
    assert 0 < float(c.detach().mean()) < 1
    ref = soft_forward(layer, x.transpose(1, 2), c).transpose(1, 2)
    params = [x, gate.w, gate.b, *layer.parameters()]
    want = torch.autograd.grad((ref * w).sum(), params)
    y = model(x)
    got = torch.autograd.grad((y * w).sum(), params)
    torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-12)
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e, rtol=1e-10, atol=1e-12)
    assert float(got[1].abs().max()) > 0                      # the gate is trained


def test_float32_training_path_is_close_to_float64():
    x = torch.randn(B, L, H, dtype=F64)
    w = torch.randn(B, L, H, dtype=F64)
    grads = []
    for dt in (F64, torch.float32):
        model = HardClocked(_layer().to(dt), HardGateClock(H, seed=2).to(dt))
        y = model(x.to(dt))
        grads.append(torch.autograd.grad((y * w.to(dt)).sum(), [model.gate.w])[0].double())
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-3, atol=1e-4)


def test_a_layer_with_delays_keeps_the_scan():
    assert dnn.DS4D(H, 2 * N, l_max=8, seed=0).time_kernel(8) is None
    assert dnn.S4D(H, 2 * N, bidirectional=True, seed=0).time_kernel(8) is None
    K, Kd = dnn.S4D(H, 2 * N, seed=0).time_kernel(8)
    assert K.shape == Kd.shape == (H, 8) and K.dtype == F64
