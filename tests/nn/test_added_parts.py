"""Adding a part touches one module: a branch and a clock written here, in the tests, and nowhere in the
package, each run through training, prefill, step and carry against float64 references (the layer's
recurrence from ``verification.reference`` plus a brute-force loop of the part written here).

* :class:`EchoBranch`: a first-order echo of the input per channel, ``s_t = a s_{t-1} + x_t``, term
  ``g s_t`` (a branch with a recurrent state of its own, unlike the tap's input ring);
* :class:`EnergyClock`: a learned clock read from the input's energy, ``c_t = 0.2 + 0.7 sigmoid(w
  mean(x_t^2) + b)`` (another parameterization than the package's ``GateClock``).
"""
import copy

import numpy as np
import pytest
import torch
from torch import nn

from ddesys import DiscreteDelaySystem
from ddesys.nn import DS4D
from ddesys.nn.branch import Branch
from ddesys.nn.selective import SoftClocked
from ddesys.verification.reference.errors import rel_max
from ddesys.verification.reference.layer import ds4d_params, recurrence, soft_clock_recurrence

F64 = torch.float64


class EchoBranch(Branch):
    """``y += g s_t``, ``s_t = a s_{t-1} + x_t`` per channel, ``a = sigmoid(nu)`` in (0, 1)."""

    def __init__(self, channels, seed=0):
        super().__init__(channels)
        g = torch.Generator().manual_seed(seed)
        self.nu = nn.Parameter(torch.randn(channels, generator=g))         # (C,)
        self.g = nn.Parameter(0.5 * torch.randn(channels, generator=g))    # (C,)

    def kernel(self, L, dtype):
        a, g = torch.sigmoid(self.nu.to(dtype)), self.g.to(dtype)
        return g[:, None] * a[:, None] ** torch.arange(L, dtype=dtype)      # (C, L)

    def filter(self, x):
        return _echo_loop(torch.sigmoid(self.nu.double()), self.g.double(), x.double())

    def step_constants(self, rdt, zero=False):
        g = torch.zeros_like(self.g) if zero else self.g
        return torch.sigmoid(self.nu.double()).detach().to(rdt), g.detach().to(rdt)

    def allocate(self, batch_size, dtype, device):
        return torch.zeros(batch_size, self.channels, dtype=dtype, device=device)  # (B, C)

    def step(self, x_t, state, t, consts):
        a, g = consts
        state.mul_(a).add_(x_t.to(state.dtype))
        return g * state

    def chunk_output(self, xb, state, t0, consts):
        a, g = consts
        s, ys = state.clone(), []
        for t in range(xb.shape[-1]):
            s = a * s + xb[..., t].to(s.dtype)
            ys.append(g * s)
        return torch.stack(ys, -1)                                          # (B, C, L)

    def prefill(self, xb, state, t0=0):
        a, _ = self.step_constants(state.dtype)
        for t in range(xb.shape[-1]):
            state.mul_(a).add_(xb[..., t].to(state.dtype))

    @torch.no_grad()
    def to_ddesys(self, batch_shape=None):
        a = torch.sigmoid(self.nu.double()).numpy()[:, None]                # (C, 1): lam = a, no delayed feedback
        c = 0.5 * self.g.double().numpy()[:, None]                          # y = 2 Re(c s)
        shape = (batch_shape or (self.channels,)) + (1,)
        return DiscreteDelaySystem(a.reshape(shape), np.zeros(shape), np.ones(shape), c.reshape(shape),
                                   np.full(shape[:-1], 2.0))


def _echo_loop(a, g, x):
    """The brute-force echo: ``x`` ``(B, C, L)`` float64 -> ``(B, C, L)``."""
    s, y = torch.zeros_like(x[..., 0]), torch.empty_like(x)
    for t in range(x.shape[-1]):
        s = a * s + x[..., t]
        y[..., t] = g * s
    return y


def _reference(layer, x):
    """The layer's recurrence (verification.reference) plus the echo loop, float64 ``(B, L, H)``."""
    y = recurrence(*ds4d_params(layer), x.transpose(1, 2).double().numpy())
    echo = layer.added_branches[0]
    e = _echo_loop(torch.sigmoid(echo.nu.double()).detach(), echo.g.double().detach(), x.transpose(1, 2).double())
    return torch.from_numpy(y).transpose(1, 2) + e.transpose(1, 2)


def _layer(**kw):
    torch.manual_seed(0)
    return DS4D(4, d_state=8, l_max=24, p0=0.5, seed=1, branches=[EchoBranch(4)], **kw)


def test_added_branch_trains_by_fft_against_the_reference():
    layer = _layer()
    x = torch.randn(2, 40, 4, dtype=F64)
    assert rel_max(layer(x), _reference(layer, x)) <= 1e-9
    assert rel_max(layer(x, mode="recurrent"), _reference(layer, x)) <= 1e-12
    opt = torch.optim.SGD(layer.parameters(), lr=0.05)
    layer(x).pow(2).mean().backward()
    echo = layer.added_branches[0]
    assert echo.nu.grad is not None and float(echo.nu.grad.abs().sum()) > 0
    before = echo.nu.detach().clone()
    opt.step()
    assert not torch.equal(before, echo.nu.detach())
    assert rel_max(layer(x), _reference(layer, x)) <= 1e-9                 # the trained branch, still exact
    K = torch.from_numpy(layer.to_ddesys().kernel(40))                     # the branch is part of the system
    assert rel_max(layer.kernel(40), K) <= 1e-9


@pytest.mark.parametrize("engine", [None, "reference"])
def test_added_branch_steps_and_prefills_against_the_reference(engine):
    layer = _layer()
    x = torch.randn(3, 40, 4, dtype=F64)
    ref = _reference(layer, x)
    cache = layer.allocate_inference_cache(3, dtype=F64, engine=engine)
    assert len(cache.branch_states) == 1 and cache.branch_states[0].shape == (3, 4)
    ys = [layer.prefill(x[:, :13], cache)]
    ys += [layer.step(x[:, t], cache)[:, None] for t in range(13, 21)]
    ys += [layer.prefill(x[:, 21:], cache)]
    assert rel_max(torch.cat(ys, 1), ref) <= 1e-10
    with torch.no_grad():                                                  # a parameter change reaches the step
        layer.added_branches[0].g.mul_(2.0)
    cache.reset()
    ys = [layer.step(x[:, t], cache)[:, None] for t in range(40)]
    assert rel_max(torch.cat(ys, 1), _reference(layer, x)) <= 1e-10


def test_added_branch_carries_state_across_chunks():
    layer = _layer()
    x = torch.randn(2, 40, 4, dtype=F64)
    ref = _reference(layer, x)
    y1, st = layer(x[:, :17], return_state=True)
    y2, st2 = layer(x[:, 17:30], state=st, return_state=True)
    assert rel_max(torch.cat([y1, y2], 1), ref[:, :30]) <= 1e-9
    dec = st2.detach()                                                     # decode on from the carried state
    y3 = torch.cat([layer.step(x[:, t], dec)[:, None] for t in range(30, 40)], 1)
    assert rel_max(y3, ref[:, 30:]) <= 1e-9
    x2 = x.clone().requires_grad_(True)                                    # autograd through the carry
    _, st = layer(x2[:, :17], return_state=True)
    layer(x2[:, 17:], state=st).sum().backward()
    assert float(x2.grad[:, :17].abs().sum()) > 0


class EnergyClock(nn.Module):
    """``c_t = 0.2 + 0.7 sigmoid(w mean_h(x_t^2) + b)``: ``(B, L, H) -> (B, L)``, ``(B, H) -> (B,)``."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(-1.5, dtype=torch.float64))   # float64: finite differences
        self.b = nn.Parameter(torch.tensor(0.5, dtype=torch.float64))

    def forward(self, x):
        e = x.pow(2).mean(-1)
        return 0.2 + 0.7 * torch.sigmoid(self.w.to(x.dtype) * e + self.b.to(x.dtype))


def _clock_reference(layer, x):
    c = layer.gate(x).detach().double().numpy()                            # (B, L): the clock's own values
    y = soft_clock_recurrence(*ds4d_params(layer.inner), x.transpose(1, 2).double().numpy(), c)
    return torch.from_numpy(y).transpose(1, 2)


def _clocked():
    return SoftClocked(DS4D(3, d_state=8, l_max=12, p0=0.5, seed=2), EnergyClock())


def test_added_clock_trains_against_the_reference_and_finite_differences():
    layer = _clocked()
    x = torch.randn(2, 30, 3, dtype=F64)
    assert rel_max(layer(x), _clock_reference(layer, x)) <= 1e-10
    loss = lambda: layer(x).pow(2).mean()  # noqa: E731
    loss().backward()
    g_auto = float(layer.gate.w.grad)
    h = 1e-6
    with torch.no_grad():
        layer.gate.w += h
        up = float(loss())
        layer.gate.w -= 2 * h
        down = float(loss())
        layer.gate.w += h
    assert abs(g_auto - (up - down) / (2 * h)) <= 1e-6 * max(1.0, abs(g_auto))


def test_added_clock_steps_prefills_and_continues_against_the_reference():
    layer = _clocked()
    x = torch.randn(2, 30, 3, dtype=F64)
    ref = _clock_reference(layer, x)
    cache = layer.allocate_inference_cache(2, max_seqlen=30, dtype=F64)
    ys = [layer.prefill(x[:, :11], cache)]                                 # a fresh cache: one scan
    ys += [layer.step(x[:, t], cache)[:, None] for t in range(11, 18)]
    twin = copy.deepcopy(cache)                                            # the decode state carried to a copy
    ys += [layer.prefill(x[:, 18:], cache)]                                # a cache holding tokens: continues
    assert rel_max(torch.cat(ys, 1), ref) <= 1e-10
    y_twin = torch.cat([layer.step(x[:, t], twin)[:, None] for t in range(18, 30)], 1)
    assert rel_max(y_twin, ref[:, 18:]) <= 1e-10
