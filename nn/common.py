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
    if xt.shape[-1] == 0:
        raise ValueError(f"{type(layer).__name__} got an empty sequence (L = 0) in input of shape {tuple(x.shape)}")
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


LOG_DT_RANGE = (-20.0, 10.0)
LOG_RATE_RANGE = (math.log(1e-6), math.log(100.0))


def continuous_poles(log_dt, nu_re, nu_im, dtype):
    """``dt`` ``(C, 1)`` and ``a = -exp(nu_re) + i nu_im`` ``(C, N2)`` (SPEC section 7), guarded.

    ``log_dt`` is clamped to ``[-20, 10]`` and the decay per step ``dt exp(nu_re)`` to ``[1e-6, 100]``,
    so ``|abar| = exp(-dt exp(nu_re))`` stays in ``[e^-100, 1 - 1e-6]``: strictly stable and finite for
    any finite parameters (without the clamp ``nu_re << 0`` rounds ``|abar|`` to exactly 1 and ``nu_re >> 0``
    overflows). Inside the range this is exactly the SPEC's parameterization.
    """
    ldt = log_dt.to(dtype).clamp(*LOG_DT_RANGE)[:, None]            # (C, 1)
    dt = torch.exp(ldt)                                             # (C, 1)
    rate = torch.exp((nu_re.to(dtype) + ldt).clamp(*LOG_RATE_RANGE))  # (C, N2)  dt |Re a|
    return dt, torch.complex(-rate / dt, nu_im.to(dtype))           # (C, 1), (C, N2)


def check_step_input(layer, x_t, cache):
    """Validate a decode step's input against the layer and its cache."""
    if layer.bidirectional:
        raise ValueError(f"{type(layer).__name__}(bidirectional=True) sees the future; it cannot decode step by step")
    if not torch.is_tensor(x_t) or not x_t.is_floating_point():
        raise TypeError(f"step expects a real floating-point tensor x_t, got "
                        f"{getattr(x_t, 'dtype', type(x_t).__name__)}")
    if x_t.dim() != 2 or x_t.shape[1] != layer.H:
        raise ValueError(f"step expects x_t of shape (B, {layer.H}), got {tuple(x_t.shape)}")
    if x_t.shape[0] != cache.batch_size:
        raise ValueError(f"x_t has batch {x_t.shape[0]} but the cache was allocated for {cache.batch_size}")


class StepConstants:
    """Memo of a layer's decode constants (discretized coefficients, interpolation weights), so ``step``
    does not rediscretize every token (complex ``exp`` over ``(H, N/2)`` is most of a token's work).

    Recomputed when any of the layer's own parameters changed since the last call (an optimizer step
    or ``load_state_dict`` writes in place and bumps torch's per-tensor version counter), when the
    dtype, device or a parameter object changed, or when ``discrete`` was overridden on the instance.
    Writes through ``param.data`` bypass torch's version counter (as they bypass autograd's checks):
    after such a write call :meth:`clear` (``layer._step_memo.clear()``) or use ``with torch.no_grad():
    param.copy_(...)``, which is tracked."""

    def __init__(self):
        self._key, self._value = None, None

    def clear(self):
        self._key, self._value = None, None

    def get(self, layer, dtype, compute):
        """``compute()``'s value, reused while the key of ``(layer, dtype)`` is unchanged."""
        fn = layer.discrete
        key = (dtype, getattr(fn, "__func__", fn),
               tuple((id(p), p._version, p.device, p.dtype) for p in layer._parameters.values()))
        if key != self._key:
            self._value, self._key = compute(), key
        return self._value
