"""State passing on the CPU runs the compiled chunk scan (:mod:`ddesys.cpu.chunk_scan`): its gradients
equal central finite differences in float64 (through a carried state, the input, the parameters), and it
equals the FFT route other devices take (the per-mode history response, :mod:`nn.decode.history`)."""
from __future__ import annotations

import pytest
import torch

from ddesys.cpu import chunk_scan
from ddesys.nn import DS4D, S4D
from ddesys.nn.decode import carry
from ddesys.verification.reference import rel_max

pytestmark = pytest.mark.skipif(not chunk_scan.available(), reason="needs Numba")
F64 = torch.float64


def _layer(kind):
    if kind == "s4d":
        return S4D(2, 4, seed=3).double()
    return DS4D(2, 4, l_max=6, seed=3, p0=0.4, tap=kind == "tap").double()


@pytest.mark.parametrize("kind", ["ds4d", "s4d"])
def test_state_passing_gradient_equals_finite_differences(kind):
    """Two chunks, the second from the first's state: d(loss)/d(input, parameters) by gradcheck."""
    layer = _layer(kind)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 9, 2, dtype=F64, generator=gen, requires_grad=True)
    w = torch.randn(2, 9, 2, dtype=F64, generator=gen)

    def loss(x):
        y1, st = layer(x[:, :4], return_state=True)
        y2, st2 = layer(x[:, 4:], state=st, return_state=True)
        ring = st2.ring()
        return (torch.cat([y1, y2], 1) * w).sum() + ring.real.sum() + 0.5 * ring.imag.sum()

    assert torch.autograd.gradcheck(loss, (x,), eps=1e-6, atol=1e-7)
    params = list(layer.named_parameters())
    g = torch.autograd.grad(loss(x.detach()), [p for _, p in params])
    for (name, p), gp in zip(params, g):
        for idx in {tuple(0 for _ in p.shape), tuple(s - 1 for s in p.shape)}:
            with torch.no_grad():
                p[idx] += 1e-6
                up = float(loss(x.detach()))
                p[idx] -= 2e-6
                dn = float(loss(x.detach()))
                p[idx] += 1e-6
            fd = (up - dn) / 2e-6
            assert abs(fd - float(gp[idx])) <= 1e-6 * max(1.0, abs(fd)), (name, idx, fd, float(gp[idx]))


@pytest.mark.parametrize("kind", ["ds4d", "tap", "s4d"])
def test_scan_route_equals_the_fft_route(kind, monkeypatch):
    """The CPU scan and the FFT route (forced by reporting the scan unavailable) give the same outputs,
    states and gradients, from a zero and from a carried state."""
    layer = _layer(kind)
    x = torch.randn(2, 11, 2, dtype=F64, generator=torch.Generator().manual_seed(1))

    def run():
        y1, st = layer(x[:, :5], return_state=True)
        y2, st2 = layer(x[:, 5:], state=st, return_state=True)
        y = torch.cat([y1, y2], 1)
        g = torch.autograd.grad(y.square().sum(), list(layer.parameters()))
        return y.detach(), st2.ring().detach(), g
    ya, ra, ga = run()
    monkeypatch.setattr(carry, "chunk_scan_available", lambda x: False)
    yb, rb, gb = run()
    assert rel_max(ya, yb) <= 1e-10
    assert rel_max(ra, rb) <= 1e-10
    for a, b in zip(ga, gb):
        assert rel_max(a, b) <= 1e-8
