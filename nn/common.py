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




def check_cache(layer, cache, batch, what="step"):
    """The cache belongs to a layer of this kind and size (from its ``allocate_inference_cache``)."""
    name, want = type(layer).__name__, type(layer).cache_type
    if not isinstance(cache, want):
        raise TypeError(f"{name}.{what} needs the {want.__name__} from this layer's allocate_inference_cache(), "
                        f"got {type(cache).__name__}")
    state = cache.state
    if cache.modes != (layer.H, layer.N2):
        raise ValueError(f"{name}.{what}: the cache holds (H, N/2) = {cache.modes} states but this layer "
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


class StepConstants:
    """Memo of a layer's decode constants (discretized coefficients, interpolation weights), so ``step``
    does not rediscretize every token (complex ``exp`` over ``(H, N/2)`` is most of a token's work).

    Recomputed when any of the layer's own parameters changed since the last call (an optimizer step
    or ``load_state_dict`` writes in place and bumps torch's per-tensor version counter), when the
    dtype, device or a parameter object changed, or when the layer's ``memo_key()`` (its ablation and
    delay range) changed.
    Writes through ``param.data`` bypass torch's version counter (as they bypass autograd's checks):
    after such a write call :meth:`clear` (``layer._step_memo.clear()``) or use ``with torch.no_grad():
    param.copy_(...)``, which is tracked."""

    def __init__(self):
        self._key, self._value = None, None

    def clear(self):
        self._key, self._value = None, None

    def get(self, layer, dtype, compute):
        """``compute()``'s value, reused while the key of ``(layer, dtype)`` is unchanged."""
        names = layer.__dict__.get("_memo_names")
        if names is None:                            # the layer's own parameters, by name (fixed once built)
            names = layer.__dict__["_memo_names"] = tuple(n for n, _ in layer.named_parameters(recurse=False))
        key = (dtype, layer.memo_key(),
               tuple((id(p), p._version, p.device, p.dtype) for p in map(layer.__getattr__, names)))
        if key != self._key:
            self._value, self._key = compute(), key
        return self._value
