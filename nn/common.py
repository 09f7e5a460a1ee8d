"""Pieces shared by the DS4D and S4D layers: initialization, input checks, FFT convolution."""
from __future__ import annotations

import contextlib
import math
import numbers

import torch

from ddesys.init import s4d_modes as _modes

from .decode.cache import describe_layer, refuse_dtype_as_max_seqlen


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


class NonFiniteInputError(ValueError, FloatingPointError):
    """A layer's input holds NaN or inf (raised by ``forward``, naming the first position). A
    ``ValueError`` (bad input) and a ``FloatingPointError`` (what a diverged training step produces), so
    a training loop can treat it like a non-finite loss, and non-finite parameters (``FloatingPointError``)."""


def check_finite_params(layer, any_device=False):
    """Name the non-finite parameters (a diverged optimizer step) instead of returning NaN silently.
    Checked where it costs no device synchronization (CPU parameters), and on every device with
    ``any_device`` (where the decode constants are recomputed: once per parameter change, not per token)."""
    if layer.D.device.type != "cpu" and not any_device:
        return
    bad = [n for n, p in layer.named_parameters(recurse=False) if not bool(torch.isfinite(p).all())]
    if bad:
        raise FloatingPointError(f"{type(layer).__name__}: parameter(s) {', '.join(bad)} contain NaN or inf "
                                 "(the training step diverged: lower the learning rate, clip gradients, or "
                                 "reload the last good checkpoint)")


def check_layout(name, H, transposed, x):
    """``x`` a 3-D tensor in the caller's layout, ``(B, H, L)`` when ``transposed`` else ``(B, L, H)``, with
    ``H`` channels: else ``ValueError`` quoting that convention and the shape received (as the caller
    gave it, never a transposed view), and the remedy when ``x`` looks like the other layout."""
    want, other = ("(B, H, L)", "(B, L, H)") if transposed else ("(B, L, H)", "(B, H, L)")
    ax = 1 if transposed else 2
    if not torch.is_tensor(x) or x.dim() != 3:
        got = f"shape {tuple(x.shape)}" if torch.is_tensor(x) else type(x).__name__
        raise ValueError(f"{name}(d_model={H}) expects a 3-D input {want} (transposed={transposed}), got {got}")
    if x.shape[ax] != H:
        hint = (f": it looks like {other}; pass x.transpose(1, 2), or build the layer with transposed={not transposed}"
                if x.shape[3 - ax] == H else "")
        raise ValueError(f"{name}(d_model={H}) expects inputs {want} with H = {H} channels, got {x.shape[ax]} "
                         f"channels in input of shape {tuple(x.shape)} (transposed={transposed}{hint})")


def check_input(layer, x):
    """Validate ``x`` and return it as ``(B, H, L)``."""
    if not torch.is_tensor(x):
        raise TypeError(f"{type(layer).__name__} expects a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{type(layer).__name__} expects a real floating-point input, got {x.dtype}")
    check_layout(type(layer).__name__, layer.H, layer.transposed, x)
    xt = x if layer.transposed else x.transpose(-1, -2)
    if xt.shape[-1] == 0:
        raise ValueError(f"{type(layer).__name__} got an empty sequence (L = 0) in input of shape {tuple(x.shape)}")
    if x.device != layer.D.device:
        raise ValueError(f"input on {x.device} but the layer's parameters are on {layer.D.device}")
    return xt


def fft_conv(x, K):
    """Causal linear convolution ``y_t = sum_{j<=t} K_j x_{t-j}``: ``x`` ``(B, H, L)``, ``K`` ``(H, L)``."""
    L = x.shape[-1]
    n = 2 * L
    return torch.fft.irfft(torch.fft.rfft(x, n=n) * torch.fft.rfft(K, n=n), n=n)[..., :L]




def check_cache(layer, cache, batch, what="step"):
    """The cache belongs to a layer of this kind and size and to this very layer (from its
    ``allocate_inference_cache``): ``TypeError`` for another kind, ``ValueError`` for another size, batch
    or device, ``RuntimeError`` naming both layers for another layer of the same shape."""
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
    if cache.owner is not layer:
        raise RuntimeError(f"{name}.{what}: this cache {cache.binding()}, not by this layer, {describe_layer(layer)}: "
                           "a cache holds one layer's state (one cache per layer, from that layer's "
                           "allocate_inference_cache)")


def check_step_input(layer, x_t, cache):
    """Validate a decode step's input against the layer and its cache. Token-independent checks of the
    cache run in full only when it is not this layer's own (the fast path is an identity test)."""
    if layer.bidirectional:
        raise ValueError(f"{type(layer).__name__}(bidirectional=True) sees the future; it cannot decode step by step")
    if not torch.is_tensor(x_t) or not x_t.is_floating_point():
        raise TypeError(f"step expects a real floating-point tensor x_t, got "
                        f"{getattr(x_t, 'dtype', type(x_t).__name__)}")
    if x_t.dim() != 2 or x_t.shape[1] != layer.H:
        raise ValueError(f"step expects x_t of shape (B, {layer.H}), got {tuple(x_t.shape)}")
    if cache.__class__ is not layer.cache_type or cache.owner is not layer:
        check_cache(layer, cache, x_t.shape[0])
    if x_t.shape[0] != cache.batch_size:
        raise ValueError(f"{type(layer).__name__}.step: input has batch {x_t.shape[0]} but the cache was allocated "
                         f"for {cache.batch_size}")
    if x_t.device != cache.state.device:
        raise ValueError(f"{type(layer).__name__}.step: x_t on {x_t.device} but the cache is on {cache.state.device}")


def check_dtype(layer, dtype, what="dtype"):
    """``dtype`` of ``allocate_inference_cache``: None or a real floating dtype (float64 -> a complex128
    cache, the others complex64) or complex64 / complex128 itself; anything else (a Mamba-style
    positional ``max_seqlen`` landing here, a string) raises ``TypeError`` naming the argument."""
    ok = (None, torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128)
    if dtype is not None and (not isinstance(dtype, torch.dtype) or dtype not in ok):
        raise TypeError(f"{type(layer).__name__}.allocate_inference_cache: {what} must be None or a torch float "
                        f"dtype (float64 gives a complex128 cache, the others complex64), got {dtype!r}"
                        + (" (the signature is allocate_inference_cache(batch_size, max_seqlen=None, dtype=None, "
                           "**kwargs), as Mamba's)" if isinstance(dtype, numbers.Integral) else ""))
    return torch.float64 if dtype in (torch.float64, torch.complex128) else (None if dtype is None else torch.float32)


def check_alloc_sizes(layer, batch_size, max_seqlen):
    """``batch_size`` a non-negative int and ``max_seqlen`` None or a positive int (a dtype there: the
    ``TypeError`` of :func:`nn.decode.cache.refuse_dtype_as_max_seqlen`)."""
    refuse_dtype_as_max_seqlen(max_seqlen, type(layer).__name__)
    name = f"{type(layer).__name__}.allocate_inference_cache"
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 0:
        raise TypeError(f"{name}: batch_size must be a non-negative int, got {batch_size!r}")
    if max_seqlen is not None and (isinstance(max_seqlen, bool) or not isinstance(max_seqlen, numbers.Integral)
                                   or max_seqlen < 1):
        raise TypeError(f"{name}: max_seqlen must be None or a positive int (the longest sequence the cache will "
                        f"see), got {max_seqlen!r}")


# ---------------------------------------------------------------------------------------------- clocked layers
def check_ticks(ticks, B, L, device=None, learned=False):
    """``ticks`` as a tensor ``(B, L)``, bool (or, with ``learned``, float: a learned clock's values 0.0 / 1.0
    carrying its gradient) (``TypeError`` / ``ValueError`` naming the misfit)."""
    if not torch.is_tensor(ticks) or not (ticks.dtype == torch.bool or learned and ticks.is_floating_point()):
        raise TypeError(f"ticks must be a bool tensor (True where the clock ticks), got "
                        f"{getattr(ticks, 'dtype', type(ticks).__name__)}")
    if tuple(ticks.shape) != (B, L):
        raise ValueError(f"ticks must have shape (B, L) = ({B}, {L}), one flag per position, got {tuple(ticks.shape)}")
    return ticks if device is None else ticks.to(device)


def check_clocked_input(layer, x, lengths=None):
    """A clocked layer's ``forward`` input ``x`` ``(B, L, H)`` (``lengths`` refused: padding is pauses)."""
    if lengths is not None:
        raise ValueError(f"{type(layer).__name__}: pass the padding as pauses in ticks (False), not lengths=")
    if not torch.is_tensor(x) or x.dim() != 3 or x.shape[-1] != layer.H:
        raise ValueError(f"{type(layer).__name__} expects x of shape (B, L, {layer.H}), got "
                         f"{tuple(x.shape) if torch.is_tensor(x) else type(x).__name__}")


def check_clocked_step(layer, x_t, cache, tick):
    """A clocked layer's decode step: ``x_t`` ``(B, H)`` float, ``cache`` of this layer and batch, ``tick``
    ``(B,)`` bool or None (all tick). Returns the ticks."""
    if not torch.is_tensor(x_t) or x_t.dim() != 2 or x_t.shape[1] != layer.H or not x_t.is_floating_point():
        raise ValueError(f"step expects a float x_t of shape (B, {layer.H}), got "
                         f"{tuple(x_t.shape) if torch.is_tensor(x_t) else type(x_t).__name__}")
    B = x_t.shape[0]
    check_clocked_cache(layer, cache, B)
    if tick is None:
        return torch.ones(B, dtype=torch.bool, device=x_t.device)
    if not torch.is_tensor(tick) or tick.dtype != torch.bool:
        raise TypeError(f"tick must be a bool tensor (True where the clock ticks), got "
                        f"{getattr(tick, 'dtype', type(tick).__name__)}")
    if tuple(tick.shape) != (B,):
        raise ValueError(f"tick must have shape (B,) = ({B},), got {tuple(tick.shape)}")
    return tick


def check_clocked_cache(layer, cache, B):
    """The cache is ``layer``'s own (its ``cache_type``, allocated by it) and holds ``B`` sequences."""
    if not isinstance(cache, layer.cache_type) or cache.owner is not layer:
        raise ValueError(f"this cache was not allocated by this {type(layer).__name__} layer "
                         "(allocate_inference_cache)")
    if cache.batch_size != B:
        raise ValueError(f"the cache holds {cache.batch_size} sequences, the input {B}")


def __getattr__(name):
    """``StepConstants``: the decode memo's name in checkpoints of earlier versions
    (:class:`nn.decode.constants.StepMemo`). It resolves without a warning: a script that allowlists it
    for ``torch.load(weights_only=True)`` (``torch.serialization.add_safe_globals``) runs under ``-W error``."""
    if name == "StepConstants":
        from .decode.constants import StepMemo
        return StepMemo
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
