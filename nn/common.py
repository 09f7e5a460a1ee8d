"""Pieces shared by the DS4D and S4D layers: initialization, input checks, FFT convolution."""
from __future__ import annotations

import math

import torch

from ddesys.init import s4d_modes as _modes


def s4d_modes(N2, init="inv"):
    """S4D-Lin / S4D-Inv poles as a complex64 tensor ``(1, N2)`` (see :func:`ddesys.init.s4d_modes`)."""
    return torch.as_tensor(_modes(N2, init), dtype=torch.complex64)[None, :]


def init_dt(C, dt_min, dt_max, generator=None):
    """``log dt`` uniform in ``[log dt_min, log dt_max]``, ``(C,)``."""
    if not 0 < dt_min <= dt_max:
        raise ValueError(f"need 0 < dt_min <= dt_max, got {dt_min}, {dt_max}")
    u = torch.rand(C, generator=generator)
    return u * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)


def check_input(layer, x):
    """Validate ``x`` and return it as ``(B, H, L)``."""
    if not torch.is_tensor(x):
        raise TypeError(f"{type(layer).__name__} expects a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{type(layer).__name__} expects a real floating-point input, got {x.dtype}")
    if x.dim() != 3:
        raise ValueError(f"{type(layer).__name__} expects a 3-D input "
                         f"({'(B, H, L)' if layer.transposed else '(B, L, H)'}), got shape {tuple(x.shape)}")
    xt = x if layer.transposed else x.transpose(-1, -2)
    if xt.shape[1] != layer.H:
        raise ValueError(f"{type(layer).__name__}(d_model={layer.H}) got {xt.shape[1]} channels in input of shape "
                         f"{tuple(x.shape)} (transposed={layer.transposed})")
    if x.device != layer.D.device:
        raise ValueError(f"input on {x.device} but the layer's parameters are on {layer.D.device}")
    return xt


def fft_conv(x, K):
    """Causal linear convolution ``y_t = sum_{j<=t} K_j x_{t-j}``: ``x`` ``(B, H, L)``, ``K`` ``(H, L)``."""
    L = x.shape[-1]
    n = 2 * L
    return torch.fft.irfft(torch.fft.rfft(x, n=n) * torch.fft.rfft(K, n=n), n=n)[..., :L]
