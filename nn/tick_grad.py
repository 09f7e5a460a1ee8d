"""The derivative of a binary-clocked LTI layer's loss with respect to each step's clock, by FFT.

A layer run in ticks (:class:`nn.clock.Clocked`) is LTI in its own time: compacted to its ``Lc`` ticks,
the outputs are ``yc = K * xc`` (plus ``D x``), and between ticks the output is the held state's readout.
Training a learned binary clock (:class:`nn.learned_clock.HardClocked`) needs ``dLoss/dc_t`` at the binary
point of the soft system ``h_t = lam^{c_t} h_{t-1} + c_t bbar x_t`` (docs/theory.md §10.4-§10.5), which
the scan gives at ``O(B H N L)`` sequential work. Without a delayed branch it has a closed form in the
kernel ``K(m) = 2 Re sum_n C_n bbar_n lam_n^m`` and its time derivative ``K'(m) = 2 Re sum_n C_n bbar_n
log(lam_n) lam_n^m`` (:meth:`nn.S4D.time_kernel`), with ``a`` the output gradient summed over each tick's
segment (the tick and the paused steps after it), ``b = xc`` and ``S_t`` the output gradient summed from
``t`` to the end of its segment (per channel; the clock is shared, so the channels are summed):

* more time at ``t`` stretches every (write ``s`` before ``t``, read at or after ``t``) pair by ``K'``:
  ``F(k) = sum_{s <= k < r} a_r K'(r - s) b_s`` for a cut after tick ``k`` (by FFT: its increments are a
  convolution and a correlation), plus ``S_t sum_{s <= k} K'(k - s) b_s`` for the reads of ``t``'s own
  segment when ``t`` is a pause after tick ``k``; a tick ``t`` (tick ``k``) gives ``F(k - 1)``;
* a write at ``t`` adds ``x_t`` to the state: ``x_t (S_t K(0) + sum_{r > k} a_r K(r - k))``.

:func:`tick_grad` is that formula (``O(B H Lc log Lc)``); :class:`TickGrad` attaches it to the
layer's output as the gradient of the clock (tested equal to the scan's in float64).
"""
from __future__ import annotations

import torch

from .common import fft_conv

__all__ = ["TickGrad", "tick_grad"]


def tick_grad(K, Kd, x, gy, ticks):
    """``dLoss/dc`` ``(B, L)`` of a clocked LTI layer at its binary clock (module docstring).

    Parameters
    ----------
    K, Kd : tensor, real ``(H, >= Lc + 1)``
        The kernel and its time derivative at lags ``0, 1, ...`` (``Lc``: the most ticks of a row).
    x : tensor, real ``(B, L, H)``
        The layer's input.
    gy : tensor, real ``(B, L, H)``
        The loss's gradient with respect to the layer's output.
    ticks : tensor, bool ``(B, L)``

    Returns
    -------
    tensor ``(B, L)``: float64 for a float64 ``x``, else float32
    """
    f64 = torch.float64 if x.dtype == torch.float64 else torch.float32
    x, gy = x.to(f64).transpose(1, 2), gy.to(f64).transpose(1, 2)          # (B, H, L)
    B, H, L = x.shape
    k = ticks.long().cumsum(1) - 1                                          # (B, L): the tick at or before t
    Lc = int(k.max()) + 1 if L else 0
    idx = (k + 1)[:, None, :].expand(B, H, L)                               # segment index, 0 = before tick 0
    seg = gy.new_zeros(B, H, Lc + 1).scatter_add_(2, idx, gy)               # each segment's output gradient
    bx = x.new_zeros(B, H, Lc + 1).scatter_add_(2, idx, x * ticks[:, None, :].to(f64))
    a, b = seg[..., 1:], bx[..., 1:]                                        # (B, H, Lc): a_k, b_k = xc
    before = torch.cat([seg.new_zeros(B, H, 1), seg.cumsum(2)[..., :-1]], 2)    # gradient before each segment
    S = seg.gather(2, idx) - (gy.cumsum(2) - gy - before.gather(2, idx))   # (B, H, L): from t to its segment's end
    K, Kd = K.to(f64)[:, :Lc + 1], Kd.to(f64)[:, :Lc + 1]
    if Lc == 0:                                                             # nothing ticks: writes alone
        return (x * S * K[:, :1]).sum(1)
    conv_d = fft_conv(b, Kd[:, :Lc])                                        # sum_{s <= k} K'(k - s) b_s
    # correlations sum_{r > i} a_r G(r - i), i = -1 .. Lc - 1, as a convolution of the reversed a
    ar = torch.cat([a.flip(2), a.new_zeros(B, H, 1)], 2)                    # (B, H, Lc + 1)
    strict = lambda G: torch.cat([G.new_zeros(H, 1), G[:, 1:]], 1)         # noqa: E731  (lag 0 left out)
    corr_d = fft_conv(ar, strict(Kd))[..., :Lc].flip(2)                     # (B, H, Lc), i = 0 .. Lc - 1
    corr = fft_conv(ar, strict(K)).flip(2)                                  # (B, H, Lc + 1), i = -1 .. Lc - 1
    F = (b * corr_d - a * (conv_d - Kd[:, :1] * b)).cumsum(2)               # (B, H, Lc): the cut after tick k
    zero = x.new_zeros(B, H, 1)
    Fp, conv_p = torch.cat([zero, F], 2), torch.cat([zero, conv_d], 2)      # index k + 1, F(-1) = 0
    tick = ticks[:, None, :]
    time = torch.where(tick, Fp.gather(2, (idx - 1).clamp(min=0)),
                       Fp.gather(2, idx) + S * conv_p.gather(2, idx))
    write = x * (S * K[:, :1] + corr.gather(2, idx))
    return (time + write).sum(1)                                            # (B, L)


class TickGrad(torch.autograd.Function):
    """``y = TickGrad.apply(y, c, K, Kd, x, ticks)``: ``y`` unchanged; backward passes ``y``'s gradient
    through and gives ``c`` ``(B, L)`` its :func:`tick_grad` (``K``, ``Kd``, ``x`` detached inputs)."""

    @staticmethod
    def forward(ctx, y, c, K, Kd, x, ticks):
        ctx.save_for_backward(K, Kd, x, ticks)
        ctx.c_dtype = c.dtype
        return y.view_as(y)

    @staticmethod
    def backward(ctx, gy):
        K, Kd, x, ticks = ctx.saved_tensors
        dc = tick_grad(K, Kd, x, gy, ticks).to(ctx.c_dtype) if ctx.needs_input_grad[1] else None
        return gy, dc, None, None, None, None
