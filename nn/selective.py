"""The learned clock: a gate on the layer's input sets how far its time advances at each step.

The mathematics is :mod:`ddesys.selective` (docs/theory.md §10.4): internal time ``tau_t = sum c_j``,
``h_t = lam^{c_t} h_{t-1} + c_t mu H(tau_t - s) + c_t bbar x_t``, delayed reads interpolated in internal
time. ``c = 1`` is the paper's DS4D, ``c`` in ``{0, 1}`` the binary clock of :mod:`nn.clock`; every clock
keeps the layer stable. The gate is Mamba's selection with a delay line behind it: a token with ``c``
near zero neither decays the state nor moves the delays' clock.

* :class:`GateClock`: ``c_t = sigmoid(w . x_t + b)`` per row and step (one clock per layer), ``(B, L, H)
  -> (B, L)``;
* :class:`SoftScan`: the autograd function of the scan (float64 on the CPU; other devices round-trip);
* :func:`soft_forward`: a DS4D (or S4D) layer's outputs under a soft clock.

No FFT path: the system is time-varying; the scan is ``O(B H N L)`` (compiled, parallel over (row,
channel) pairs). Decoding (:class:`SoftClockCache`, :func:`soft_step`, :func:`soft_prefill`; used by
:class:`nn.clock.Clocked` with a gate) runs the same recurrence one token at a time: ``O(H N)`` work per
token plus a binary search of the internal times for each delayed read, and memory for every state of
the sequence (``max_seqlen``), since with a slow clock a read can reach back any number of real steps.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from ddesys.selective import soft_scan, soft_scan_grad

from .clock import _RingCache

__all__ = ["GateClock", "SoftClockCache", "SoftScan", "soft_allocate", "soft_forward", "soft_prefill", "soft_step"]


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
    """``y = scan(loglam, mu, bbar, cout, s, x, c)``: complex ``(H, N2)`` x4, ``s (H,)``, ``x (B, H, L)``,
    ``c (B, L)`` -> ``y = 2 Re(sum_n cout_n h_n)`` ``(B, H, L)`` in ``x``'s dtype
    (:func:`ddesys.selective.soft_scan`; float32 arithmetic for a float32 ``x``, else float64)."""

    @staticmethod
    def forward(ctx, loglam, mu, bbar, cout, s, x, c):
        args = [a.detach().cpu().numpy() for a in (loglam, mu, bbar, cout, s, x, c)]
        y, fwd = soft_scan(*args, dtype=np.float32 if x.dtype == torch.float32 else np.float64)
        ctx.args, ctx.fwd, ctx.dev = args, fwd, x.device
        ctx.dtypes = [a.dtype for a in (loglam, mu, bbar, cout, s, x, c)]
        return torch.from_numpy(y).to(x.device)

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
    mu, s = _defaults(d)
    y = SoftScan.apply(torch.log(d.lam).to(cdt), mu.to(cdt), d.bbar.to(cdt), d.c.to(cdt), s.double(),
                       x.to(rdt), c.to(rdt))                                    # (B, H, L)
    return (y + layer.D.to(rdt)[:, None] * x.to(rdt)).to(x.dtype)


# ---------------------------------------------------------------------------------------------- decoding
@dataclass(eq=False)
class SoftClockCache(_RingCache):
    """Decode state of a gated :class:`nn.clock.Clocked` layer: every state so far ``buf`` ``(B, R, H, N2)``
    complex and its internal time ``tau`` ``(B, R)`` float64 (``R = max_seqlen``: a delayed read may reach
    back any number of real steps, however few ticks), and the number ``t`` of tokens consumed."""
    buf: torch.Tensor
    tau: torch.Tensor
    t: int = 0
    max_seqlen: int | None = field(default=None, repr=False)

    def _tensors(self):
        return [self.buf, self.tau]


def _defaults(d):
    """``mu`` and the delays ``s`` of a discretized layer (an S4D has neither: ``mu = 0``, ``s = 1``)."""
    mu = getattr(d, "mu", None)
    s = getattr(d, "delay", None)
    return (torch.zeros_like(d.lam) if mu is None else mu,
            torch.ones(d.lam.shape[0], dtype=torch.float64, device=d.lam.device) if s is None else s)


def _soft_constants(layer, rdt):
    """``(loglam, mu, bbar, c)`` complex ``(H, N2)``, ``d`` ``(H,)`` and the delays ``s`` float64 ``(H,)``."""
    cdt = torch.complex128 if rdt == torch.float64 else torch.complex64
    d = layer.discrete(torch.float64)
    mu, s = _defaults(d)
    return tuple(v.detach().to(cdt) for v in (torch.log(d.lam), mu, d.bbar, d.c)) + \
        (layer.D.detach().to(rdt), s.detach().double())


def soft_allocate(clocked, batch_size, max_seqlen, rdt):
    """A fresh :class:`SoftClockCache` for ``clocked`` (``max_seqlen`` required)."""
    if max_seqlen is None:
        raise ValueError("a gated Clocked layer's decode cache keeps every state (a delayed read may reach back "
                         "any number of real steps): pass max_seqlen to allocate_inference_cache")
    inner = clocked.inner
    cdt = torch.complex128 if rdt == torch.float64 else torch.complex64
    dev = inner.D.device
    buf = torch.zeros(batch_size, max_seqlen, inner.H, inner.N2, dtype=cdt, device=dev)
    tau = torch.zeros(batch_size, max_seqlen, dtype=torch.float64, device=dev)
    return SoftClockCache(buf, tau)._bind(clocked, None, max_seqlen)


def soft_step(clocked, x_t, cache, memo):
    """One token ``x_t`` ``(B, H)`` of a gated layer -> ``(B, H)``; appends its state to ``cache``."""
    if cache.t >= cache.max_seqlen:
        raise RuntimeError(f"the cache is full: it holds max_seqlen = {cache.max_seqlen} tokens")
    rdt = cache.real_dtype
    loglam, mu, bbar, c_out, d, s = memo.get(clocked.inner, rdt, lambda r: _soft_constants(clocked.inner, r))
    B, t, buf = x_t.shape[0], cache.t, cache.buf
    xt = x_t.to(rdt)
    c = clocked.gate(x_t).to(torch.float64)                                   # (B,)
    tau = (cache.tau[:, t - 1] if t else torch.zeros_like(c)) + c             # (B,)
    r = tau[:, None] - s[None, :]                                             # (B, H): the reads' times
    prev = buf[:, t - 1] if t else torch.zeros_like(buf[:, 0])                # (B, H, N2)
    hd = torch.zeros_like(prev)
    if t:
        hist = cache.tau[:, :t].contiguous()                                  # (B, t), nondecreasing
        q = torch.searchsorted(hist, r.contiguous(), side="left").clamp_(max=t - 1)   # first tau >= r
        lo = torch.where(q > 0, hist.gather(1, (q - 1).clamp(min=0)), torch.zeros_like(r))
        w = ((r - lo) / (hist.gather(1, q) - lo)).to(rdt)                     # (B, H)
        idx = lambda j: j[:, None, :, None].expand(B, 1, clocked.H, buf.shape[-1])   # noqa: E731
        right = buf.gather(1, idx(q))[:, 0]                                   # (B, H, N2)
        left = torch.where((q > 0)[..., None], buf.gather(1, idx((q - 1).clamp(min=0)))[:, 0], 0)
        hd = torch.where((r > 0)[..., None], (1 - w)[..., None] * left + w[..., None] * right, 0)
    cr = c.to(rdt)[:, None, None]
    h = torch.exp(cr * loglam) * prev + cr * (mu * hd + bbar * xt[..., None])  # (B, H, N2)
    buf[:, t] = h
    cache.tau[:, t] = tau
    cache.t += 1
    return (2 * (c_out * h).real.sum(-1) + d * xt).to(x_t.dtype)


def soft_prefill(clocked, x, cache):
    """A prompt ``x`` ``(B, L, H)`` into a fresh :class:`SoftClockCache`: one scan, its states kept."""
    L = x.shape[1]
    if L > cache.max_seqlen:
        raise ValueError(f"the prompt has {L} tokens, the cache holds max_seqlen = {cache.max_seqlen}")
    rdt = cache.real_dtype
    loglam, mu, bbar, c_out, d, s = _soft_constants(clocked.inner, rdt)
    xt = x.transpose(1, 2).to(rdt)                                            # (B, H, L)
    c = clocked.gate(x).to(rdt)                                               # (B, L)
    y, (h, tau, *_) = soft_scan(*(a.cpu().numpy() for a in (loglam, mu, bbar, c_out, s, xt, c)),
                                dtype=np.float32 if rdt == torch.float32 else np.float64)
    cache.buf[:, :L] = torch.from_numpy(h).to(cache.buf.device).permute(0, 2, 1, 3)   # (B, L, H, N2)
    cache.tau[:, :L] = torch.from_numpy(tau).to(cache.tau.device)
    cache.t = L
    y = torch.from_numpy(y).to(xt.device) + d[:, None] * xt                   # (B, H, L)
    return y.transpose(1, 2).to(x.dtype)
