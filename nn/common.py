"""Pieces shared by the DS4D and S4D layers: initialization, input checks, FFT convolution."""
from __future__ import annotations

import contextlib
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


KERNEL_DTYPES = (torch.float32, torch.float64)
HALF_DTYPES = (torch.float16, torch.bfloat16)


def check_sizes(layer, d_model, d_state):
    name = type(layer).__name__
    if not isinstance(d_model, int) or isinstance(d_model, bool) or d_model < 1:
        raise ValueError(f"{name}: d_model must be a positive integer, got {d_model!r}")
    if not isinstance(d_state, int) or isinstance(d_state, bool) or d_state < 2 or d_state % 2:
        raise ValueError(f"{name}: d_state must be a positive even integer (conjugate pairs), got {d_state!r}")


def check_kernel_dtype(layer, dtype):
    if dtype not in KERNEL_DTYPES:
        raise ValueError(f"{type(layer).__name__}: kernel_dtype must be one of "
                         f"{', '.join(map(str, KERNEL_DTYPES))}, got {dtype} (half precision cannot hold the "
                         "kernel synthesis; half inputs are supported, see the layer's docstring)")
    return dtype


def compute_dtype(x):
    """The dtype the layer computes in for input ``x``: float32 for float16 / bfloat16, else ``x``'s."""
    return torch.float32 if x.dtype in HALF_DTYPES else x.dtype


def no_autocast(x):
    """Autocast off for the layer's FFT path (it chooses its own precisions: half FFTs lose the kernel)."""
    dev = x.device.type
    if dev in ("cpu", "cuda") and torch.is_autocast_enabled(dev):
        return torch.autocast(dev, enabled=False)
    return contextlib.nullcontext()


def check_finite_params(layer):
    """Name the non-finite parameters (a diverged optimizer step) instead of returning NaN silently.
    Checked where it costs no device synchronization (CPU parameters) and at decode/analysis entry points."""
    if layer.D.device.type != "cpu":
        return
    bad = [n for n, p in layer.named_parameters(recurse=False) if not bool(torch.isfinite(p).all())]
    if bad:
        raise FloatingPointError(f"{type(layer).__name__}: parameter(s) {', '.join(bad)} contain NaN or inf "
                                 "(the training step diverged: lower the learning rate, clip gradients, or "
                                 "reload the last good checkpoint)")


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


def check_cache(layer, cache, batch, what="step"):
    """The cache belongs to a layer of this kind and size (from its ``allocate_inference_cache``)."""
    name, want = type(layer).__name__, type(layer).cache_type
    if not isinstance(cache, want):
        raise TypeError(f"{name}.{what} needs the {want.__name__} from this layer's allocate_inference_cache(), "
                        f"got {type(cache).__name__}")
    state = cache.state
    if state.shape[-2:] != (layer.H, layer.N2):
        raise ValueError(f"{name}.{what}: the cache holds (H, N/2) = {tuple(state.shape[-2:])} states but this layer "
                         f"has ({layer.H}, {layer.N2}); was it allocated by another layer?")
    if batch != cache.batch_size:
        raise ValueError(f"{name}.{what}: input has batch {batch} but the cache was allocated for {cache.batch_size}")
    if state.device != layer.D.device:
        raise ValueError(f"{name}.{what}: cache on {state.device} but the layer's parameters are on {layer.D.device}")


def check_step_input(layer, x_t, cache):
    """Validate a decode step's input against the layer and its cache."""
    if layer.bidirectional:
        raise ValueError(f"{type(layer).__name__}(bidirectional=True) sees the future; it cannot decode step by step")
    if not torch.is_tensor(x_t) or not x_t.is_floating_point():
        raise TypeError(f"step expects a real floating-point tensor x_t, got "
                        f"{getattr(x_t, 'dtype', type(x_t).__name__)}")
    if x_t.dim() != 2 or x_t.shape[1] != layer.H:
        raise ValueError(f"step expects x_t of shape (B, {layer.H}), got {tuple(x_t.shape)}")
    check_cache(layer, cache, x_t.shape[0])


def encode_range(s_min, s_max):
    """``(s_min, s_max)`` as an int64 tensor ``(2,)`` holding their float64 bit patterns (``s_max`` None ->
    NaN): exact in a state dict and untouched by ``module.half()`` / ``.to(dtype)``."""
    v = torch.tensor([s_min, math.nan if s_max is None else s_max], dtype=torch.float64)
    return v.view(torch.int64).clone()


def decode_range(t):
    """Inverse of :func:`encode_range`: ``(s_min, s_max or None)``."""
    s_min, s_max = t.detach().cpu().clone().view(torch.float64).tolist()
    return s_min, (None if math.isnan(s_max) else s_max)


def delay_range_mismatch(layer, saved):
    """Why a checkpoint with delay range ``saved`` = ``(s_min, s_max)`` (None: saved before ranges were
    stored) cannot load into ``layer``, or None. Equal ranges load; a layer whose range is not fixed yet
    (``l_max=None``) adopts the checkpoint's."""
    name = type(layer).__name__
    if saved is None:
        if layer.s_max is None:
            return (f"{name}: this checkpoint does not record its delay range (saved by an older ddesys) and the "
                    "layer has l_max=None: build the layer with the l_max it was trained with")
        return None
    s_min, s_max = saved
    if s_max is None or layer.s_max is None:
        return None if s_max is not None or layer.s_max is None else (
            f"{name}: the checkpoint's delay range was not fixed yet (l_max=None, saved before any forward) but "
            f"this layer's is (l_max={layer.l_max}); build the layer with l_max=None")
    if (s_min, s_max) != (layer.s_min, layer.s_max):
        l_ck = int(math.floor(s_max)) + 1
        return (f"{name}: the checkpoint's delays are relative to s_min={s_min:g}, s_max={s_max:g} (l_max={l_ck}) "
                f"but this layer has s_min={layer.s_min:g}, s_max={layer.s_max:g} (l_max={layer.l_max}): loading "
                f"would move every delay. Build the layer with l_max={l_ck}"
                f"{'' if s_min == layer.s_min else f', s_min={s_min:g}'}, or with l_max=None to adopt the "
                "checkpoint's range")
    return None


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
