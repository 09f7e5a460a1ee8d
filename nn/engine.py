"""Decode engines of :class:`nn.DS4D`: one per cache, chosen when the cache is allocated.

=============  =====================================================  ==========================================
engine         runs                                                   caches
=============  =====================================================  ==========================================
``"fused"``    :func:`ddesys.cpu.step.decode_step` (Numba, one pass)      CPU, complex64 / complex128 / 16-bit
``"triton"``   :func:`gpu.decode.triton_step` (Triton, one kernel)    CUDA (or the interpreter in tests), all
``"reference"`` the torch update of :mod:`ddesys.recurrence`          any device, all
=============  =====================================================  ==========================================

:func:`select_engine` picks the default from :func:`ddesys.backend.choose` on the new ring (``"numba"``
-> fused, ``"triton"`` -> triton, else reference; ``DDESYS_REFERENCE=1`` at allocation forces the
reference). ``DS4D.step`` then calls ``cache``'s engine directly: no dispatch, no backend choice per token.

Each engine has ``layout(buf)``: the ring in the memory order it reads (channel-major for the fused
engine, ``ddesys.cpu.step.new_ring``; slot-major for Triton; a copy where ``buf`` is not), applied at
allocation and by ``bind``; ``bind(cache, consts)``, run when a cache first meets a set of constants
(after allocation, and after every recomputation of the constants): the token-independent checks
(device, the delays still fit the ring) and the per-cache views; and ``step(cache, x_t, consts)``, which
returns ``y_t`` ``(B, H)`` in the cache's real dtype without the tap's term.

Determinism. The fused engine's default (``parallel=None``) is a fixed rule: the serial loop below
:data:`ddesys.cpu.step.PARALLEL_MIN_WORK`, else the parallel loop over a fixed partition of channel blocks
(every batch row in each), whose arithmetic does not depend on how many threads run it: outputs are
bitwise equal whatever the thread count or the machine's load. ``parallel="auto"`` (opt-in) times both
loops and keeps the faster (they agree to float rounding); it is ignored while
``torch.are_deterministic_algorithms_enabled()``.

The constants are memoized per layer (:class:`StepMemo`) and recomputed when a parameter changed;
``layer.setup_step()`` recomputes them explicitly (after a write that torch does not track, such as
one through ``param.data``).
"""
from __future__ import annotations

import operator
import warnings
from typing import Any, NamedTuple

import torch

from ddesys.backend import NUMBA, TRITON, choose
from ddesys.recurrence import delay_update, readout
from ddesys.cpu.step import bind_step, decode_step, step_available

from .cache import channel_major

__all__ = ["DS4DConstants", "S4DConstants", "StepMemo", "ENGINES", "select_engine", "FusedEngine", "TritonEngine",
           "ReferenceEngine", "check_history16"]

ENGINES = ("fused", "triton", "reference")
PARALLEL = (None, False, True, "auto")


class DS4DConstants(NamedTuple):
    """A DS4D layer's decode constants in one real precision ``rdt``."""
    lam: torch.Tensor           #: complex (H, N2)
    m1: torch.Tensor            #: complex (H, N2), mu (1 - alpha)
    m2: torch.Tensor            #: complex (H, N2), mu alpha
    bbar: torch.Tensor          #: complex (H, N2)
    c: torch.Tensor             #: complex (H, N2)
    d: torch.Tensor             #: real (H,), the skip D in rdt
    k: torch.Tensor             #: int64 (H,), integer delays
    k_max: int                  #: max(k)
    channels: torch.Tensor      #: int64 arange(H), for the reference engine's gathers
    host: tuple | None          #: NumPy views (lam, m1, m2, bbar, c, d, k) for the fused engine (CPU), else None
    tap: Any = None             #: the tap's decode constants (None without a tap)


class S4DConstants(NamedTuple):
    """An S4D layer's decode constants."""
    lam: torch.Tensor           #: complex (H, N2)
    bbar: torch.Tensor          #: complex (H, N2)
    c: torch.Tensor             #: complex (H, N2)
    d: torch.Tensor             #: real (H,)


_VERSION, _DATA_PTR = operator.attrgetter("_version"), torch.Tensor.data_ptr


class StepMemo:
    """Memo of a layer's decode constants, so ``step`` does not rediscretize every token (complex ``exp``
    over ``(H, N/2)`` is most of a token's work).

    Recomputed when any of the layer's own parameters changed since the last call (an optimizer step,
    ``load_state_dict`` or a write under ``torch.no_grad()``), when the dtype, device or a parameter
    object changed, or when the layer's ``memo_key()`` (its ablation, delay range, tap width) changed.
    Writes through ``param.data`` are invisible to torch: call ``layer.setup_step()`` after one.
    (Change detection reads torch's per-tensor version counters and storage addresses: a few
    microseconds per token.)"""

    def __init__(self):
        self._key, self._value, self._ids, self._params = None, None, None, ()

    def clear(self):
        self._key, self._value, self._ids, self._params = None, None, None, ()

    @property
    def value(self):
        return self._value

    def get(self, layer, dtype, compute):
        """``compute(dtype)``'s value, reused while the key of ``(layer, dtype)`` is unchanged."""
        params = layer._parameters                   # the layer's own parameters, in registration order
        ids = tuple(map(id, params.values()))
        if ids != self._ids:                         # a parameter object replaced (or the first call)
            self._ids, self._params = ids, tuple(params.values())
        vers = tuple(map(_VERSION, self._params))
        ptrs = tuple(map(_DATA_PTR, self._params))   # a move or cast: new storage
        key = (dtype, layer.memo_key(), ids, vers, ptrs)
        if key != self._key:
            self._value, self._key = compute(dtype), key
        return self._value


# ---------------------------------------------------------------------------------------------- engines
def _device_error(cache, consts):
    return RuntimeError(f"the layer's parameters are on {consts.lam.device} but this cache is on {cache.device}: "
                        "allocate a new cache after moving the layer")


def _check_fits(cache, consts):
    if cache.buf.requires_grad or (cache.xbuf is not None and cache.xbuf.requires_grad):
        raise RuntimeError("this cache carries autograd history (from forward(..., return_state=True)); decoding "
                           "writes it in place: decode from cache.detach()")
    R = cache.n_slots
    if consts.k_max >= R:
        raise RuntimeError(f"the layer's delays now reach {consts.k_max} steps, past the cache's {R - 1}: "
                           "allocate a new cache (delays changed since allocation)")
    if consts.tap is not None and cache.xbuf is None:
        raise RuntimeError("this cache has no input ring for the layer's tap: allocate it with "
                           "allocate_inference_cache of this layer")
    if consts.lam.device != cache.device:
        raise _device_error(cache, consts)


class ReferenceEngine:
    """The torch update (``ddesys.recurrence.delay_update`` / ``readout``), any device and history."""
    name = "reference"

    @staticmethod
    def layout(buf):
        """The ring in the memory layout this engine reads (any: indexing is torch's)."""
        return buf

    def bind(self, cache, consts):
        _check_fits(cache, consts)

    def step(self, cache, x_t, consts):
        buf, t, R = cache.buf, cache.t, cache.n_slots
        lam, m1, m2, bbar, c, d, k, k_max, ar = consts[:9]
        rdt = cache.real_dtype
        wide = (lambda z: torch.view_as_complex(z.float())) if cache.history16 else (lambda z: z)  # noqa: E731
        hk = wide(buf[:, (t - k) % R, ar])                          # (B, H, N2)
        hk1 = wide(buf[:, (t - k - 1) % R, ar])                     # (B, H, N2)
        if t <= k_max:                                              # reads before the start are zero
            zero = torch.zeros((), dtype=hk.dtype, device=buf.device)
            hk = torch.where((t - k >= 0)[:, None], hk, zero)
            hk1 = torch.where((t - k - 1 >= 0)[:, None], hk1, zero)
        prev = wide(buf[:, (t - 1) % R]) if t > 0 else torch.zeros_like(hk)               # (B, H, N2)
        xt = x_t.to(rdt)
        h = delay_update(prev, hk, hk1, xt[..., None], lam, m1, m2, bbar)  # (B, H, N2)
        buf[:, t % R] = torch.view_as_real(h).to(buf.dtype) if cache.history16 else h
        return readout(h, c, d, xt)                                  # (B, H)


class FusedEngine:
    """The fused Numba step on a CPU ring (:func:`ddesys.cpu.step.decode_step`), read through a NumPy view
    of the cache's buffer taken once per cache. The ring is channel-major in memory (as
    ``allocate_inference_cache`` makes it); a cache whose ``buf`` was built otherwise (by hand, or a
    state from another layout) gets a channel-major copy of it when first bound."""
    name = "fused"

    def __init__(self, parallel=None):
        if parallel not in PARALLEL:
            raise ValueError(f"parallel must be None (deterministic fixed rule), False, True or 'auto' (timed), "
                             f"got {parallel!r}")
        self.parallel = parallel

    @staticmethod
    def layout(buf):
        """The ring channel-major in memory (a copy when it is not; ``ddesys.cpu.step.new_ring``)."""
        return channel_major(buf)

    def bind(self, cache, consts):
        _check_fits(cache, consts)
        if consts.host is None:                                     # pragma: no cover - CPU constants have views
            raise RuntimeError("the fused engine needs CPU constants")
        if "_ring" not in cache.__dict__:
            cache.buf = buf = self.layout(cache.buf)               # a ring made elsewhere is copied once
            cache._ring = buf.view(torch.uint16).numpy() if cache.history16 else buf.numpy()
            cache._fmt16 = {torch.float16: "float16", torch.bfloat16: "bfloat16"}.get(cache.history16)
        # the token-independent work once: checks, the serial/parallel rule; "auto" keeps the timed call
        cache._run = None if self.parallel == "auto" else bind_step(cache._ring, *consts.host, fmt16=cache._fmt16,
                                                                   parallel=self.parallel)

    def step(self, cache, x_t, consts):
        rdt = cache.real_dtype
        xn = (x_t if x_t.dtype == rdt else x_t.to(rdt)).detach().numpy()
        y = torch.empty(x_t.shape, dtype=rdt)                       # (B, H), returned to the caller
        yn = y.numpy()
        run = cache._run
        if run is not None:
            run(xn, cache.t, yn)
            return y
        par = "auto" if not torch.are_deterministic_algorithms_enabled() else None
        decode_step(cache._ring, xn, *consts.host, cache.t, yn, fmt16=cache._fmt16, parallel=par)
        return y


class TritonEngine:
    """The Triton kernel (:mod:`gpu.decode`): CUDA rings, complex or 16-bit. Triton is imported here, when
    the first such cache is allocated."""
    name = "triton"

    def __init__(self):
        from ddesys.gpu import decode as gpu_decode                        # imports Triton
        self._gpu = gpu_decode

    @staticmethod
    def layout(buf):
        """The ring slot-major and contiguous, ``(B, R, H, N2)`` in memory (the kernel's layout)."""
        return buf if buf.is_contiguous() else buf.contiguous()

    def bind(self, cache, consts):
        _check_fits(cache, consts)
        cache.buf = self.layout(cache.buf)                                 # a ring made elsewhere: copied once
        cache._ring = self._gpu.prepare_step(cache.buf, consts.lam, consts.m1, consts.m2, consts.bbar, consts.c,
                                             consts.d, consts.k)

    def step(self, cache, x_t, consts):
        return cache._ring(x_t, cache.t)


def check_history16(cache, y, x_t):
    """A float16 history (range 65504) whose output is no longer finite while its input is: warn once per
    cache (bfloat16 has float32's range). ``step`` runs this for float16 caches until it warned."""
    if bool(torch.isfinite(y).all()) or not bool(torch.isfinite(x_t).all()):
        return
    cache._warned = True
    warnings.warn("DS4D: a float16 decode history overflowed (a state passed 65504, float16's largest value, and "
                  "became infinite), so outputs are inf or NaN from here on; use history_dtype=torch.bfloat16 "
                  "(float32's range), a complex cache, or smaller inputs", RuntimeWarning, stacklevel=3)


def select_engine(buf, engine=None, parallel=None):
    """The engine for a new ring ``buf``: ``engine`` (a name of :data:`ENGINES`) or the default for its
    device; ``parallel`` configures the fused engine (None for the others)."""
    if engine is not None and engine not in ENGINES:
        raise ValueError(f"engine must be None or one of {ENGINES}, got {engine!r}")
    if parallel not in PARALLEL:
        raise ValueError(f"parallel must be None, False, True or 'auto', got {parallel!r}")
    if engine is None:
        path = choose(buf)
        engine = "fused" if path == NUMBA and step_available() else "triton" if path == TRITON else "reference"
    if parallel is not None and engine != "fused":
        raise ValueError(f"parallel={parallel!r} configures the fused CPU engine; this cache's engine is {engine!r}")
    if engine == "fused":
        if buf.device.type != "cpu" or not step_available():
            raise ValueError(f"engine='fused' needs a CPU cache and Numba (cache on {buf.device}, Numba "
                             f"{'available' if step_available() else 'missing or disabled'})")
        return FusedEngine(parallel)
    if engine == "triton":
        from ddesys import gpu
        if not gpu.usable_for(buf):
            raise ValueError(f"engine='triton' needs a CUDA cache and Triton (cache on {buf.device}, Triton "
                             f"{'available' if gpu.triton_available() else 'missing'})")
        return TritonEngine()
    return ReferenceEngine()


def host_views(consts):
    """NumPy views ``(lam, m1, m2, bbar, c, d, k)`` of CPU constants for the fused engine (None elsewhere)."""
    if consts[0].device.type != "cpu":
        return None
    return tuple(v.detach().resolve_conj().contiguous().numpy() for v in consts)


def is_finite_all(tensors):
    """True when every tensor is finite (one device synchronization on a GPU)."""
    return all(bool(torch.isfinite(v).all()) for v in tensors)

