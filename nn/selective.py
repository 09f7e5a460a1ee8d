"""The learned clock: a gate on the layer's input sets how far its time advances at each step.

The mathematics is :mod:`ddesys.selective` (docs/theory.md §10.5): internal time ``tau_t = sum c_j``,
``h_t = lam^{c_t} h_{t-1} + c_t mu H(tau_t - s) + c_t bbar x_t``, delayed reads interpolated in internal
time. ``c = 1`` is the paper's DS4D, ``c`` in ``{0, 1}`` the binary clock of :mod:`nn.clock`; every clock
keeps the layer stable. The gate is Mamba's selection with a delay line behind it: a token with ``c``
near zero neither decays the state nor moves the delays' clock.

* :class:`GateClock`: ``c_t = sigmoid(w . x_t + b)`` per row and step (one clock per layer), ``(B, L, H)
  -> (B, L)``;
* :class:`SoftScan`: the autograd function of the scan (float64 on the CPU; other devices round-trip);
* :func:`soft_forward`: a DS4D (or S4D) layer's outputs under a soft clock.

No FFT path: the system is time-varying; the scan is ``O(B H N L)`` (compiled, parallel over (row,
channel) pairs). Decoding a gated layer runs the same scan one step at a time
(:class:`nn.clock.Clocked` with a gate).
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ddesys.selective import soft_scan, soft_scan_grad

__all__ = ["GateClock", "SoftScan", "soft_forward"]


class GateClock(nn.Module):
    """``c_t = sigmoid(w . x_t + b)``: how far a layer's time advances at step ``t``.

    Parameters
    ----------
    d_model : int
        Channels ``H`` of the layer input.
    init : float, default 0.9
        Initial clock value (``b = logit(init)``, ``w`` small: the layer starts near the paper's DS4D,
        whose clock is 1).
    seed : int or None
        Seeds ``w`` (the global RNG is untouched when given).

    Shapes: ``x (B, L, H) -> c (B, L)``; ``x_t (B, H) -> (B,)``.
    """

    def __init__(self, d_model, init=0.9, seed=None):
        super().__init__()
        if not 0.0 < init < 1.0:
            raise ValueError(f"init must lie in (0, 1), got {init}")
        g = torch.Generator().manual_seed(seed) if seed is not None else None
        self.w = nn.Parameter(torch.randn(d_model, generator=g) / d_model ** 0.5 * 0.1)   # (H,)
        self.b = nn.Parameter(torch.logit(torch.tensor(float(init))))

    def forward(self, x):
        return torch.sigmoid(x @ self.w.to(x.dtype) + self.b.to(x.dtype))


class SoftScan(torch.autograd.Function):
    """``h = scan(loglam, mu, bbar, s, x, c)``: complex ``(H, N2)`` x3, ``s (H,)``, ``x (B, H, L)``,
    ``c (B, L)`` -> ``h`` ``(B, H, L, N2)`` (:func:`ddesys.selective.soft_scan`), complex64 for a float32
    ``x`` (float32 arithmetic), else complex128."""

    @staticmethod
    def forward(ctx, loglam, mu, bbar, s, x, c):
        args = [a.detach().cpu().numpy() for a in (loglam, mu, bbar, s, x, c)]
        fwd = soft_scan(*args, dtype=np.float32 if x.dtype == torch.float32 else np.float64)
        ctx.args, ctx.fwd, ctx.dev = args, fwd, x.device
        ctx.dtypes = [a.dtype for a in (loglam, mu, bbar, s, x, c)]
        return torch.from_numpy(fwd[0]).to(x.device)

    @staticmethod
    def backward(ctx, G):
        g = soft_scan_grad(*ctx.args, ctx.fwd, G.detach().cpu().numpy())
        return tuple(torch.from_numpy(np.ascontiguousarray(a)).to(device=ctx.dev, dtype=dt)
                     for a, dt in zip(g, ctx.dtypes))


def soft_forward(layer, x, c):
    """A causal DS4D / S4D ``layer``'s outputs under the soft clock ``c`` ``(B, L)``: ``x`` ``(B, H, L)``
    -> ``(B, H, L)`` in ``x``'s dtype. The scan runs in float32 for float32 / 16-bit inputs, else float64
    (the parameters are discretized in float64 and rounded). Differentiable in the layer's parameters,
    ``x`` and ``c``."""
    rdt = torch.float64 if x.dtype == torch.float64 else torch.float32
    cdt = torch.complex128 if rdt == torch.float64 else torch.complex64
    d = layer.discrete(torch.float64)
    mu = getattr(d, "mu", None)
    mu = torch.zeros_like(d.lam) if mu is None else mu
    s = getattr(d, "delay", None)
    s = torch.ones(d.lam.shape[0], dtype=torch.float64, device=d.lam.device) if s is None else s
    h = SoftScan.apply(torch.log(d.lam).to(cdt), mu.to(cdt), d.bbar.to(cdt), s.double(), x.to(rdt),
                       c.to(rdt))                                               # (B, H, L, N2)
    y = 2 * torch.einsum("hn,bhln->bhl", d.c.to(cdt), h).real + layer.D.to(rdt)[:, None] * x.to(rdt)
    return y.to(x.dtype)
