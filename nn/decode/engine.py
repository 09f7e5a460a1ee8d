"""Decode engines of :class:`nn.DS4D` and :class:`nn.S4D`: one per cache, chosen when the cache is allocated.

===============  ==========================================================  =======================================
engine           runs                                                        caches
===============  ==========================================================  =======================================
``"fused"``      :func:`ddesys.cpu.step.decode_step` (Numba, one pass)       CPU, complex64 / complex128 / 16-bit
``"triton"``     :func:`ddesys.gpu.decode.triton_step` (Triton, one kernel)  CUDA (or the interpreter in tests), all
``"reference"``  the torch update of :mod:`ddesys.recurrence`                any device, all
===============  ==========================================================  =======================================

S4D (DS4D without delay) has two: :class:`S4DFusedEngine` (CPU with Numba: the compiled prefill pass)
and :class:`S4DEngine` (anywhere: the Vandermonde prefill); both step with the torch update.

:func:`nn.decode.select.select_engine` picks the default (the first engine of the family's row of
:data:`nn.decode.select.ENGINES` that can run on the cache's device; ``DDESYS_REFERENCE=1`` at allocation
forces the reference). ``DS4D.step`` then calls ``cache``'s engine directly: no dispatch, no backend
choice per token.

The protocol (:class:`DecodeEngine`), one object per cache (``cache.engine``):

* ``allocate(shape, dtype, device)``: a zero ring ``(B, R, H, N2)`` (``(..., 2)`` for a 16-bit history)
  in the memory order the engine reads (channel-major on the CPU, ``ddesys.cpu.step.new_ring``;
  slot-major for Triton);
* ``layout(buf)``: a ring made elsewhere in that order (a copy where ``buf`` is not);
* ``carry_layout(ring)``: the same order for a carried state's ring, differentiably (no copy out of autograd);
* ``bind(cache, consts) -> handle``, run when a cache first meets a set of constants (after allocation,
  a reset, and every recomputation of the constants; ``layer.bind_cache(cache)`` does it): the
  token-independent checks (device, the delays still fit the ring) and the per-cache views, returned as
  the handle the cache keeps in its one slot ``cache.handle`` (``handle.consts``: the constants bound);
* ``step(cache, x_t, consts, clock=None)``: ``y_t`` ``(B, H)`` in the cache's real dtype, without
  optional branches;
* ``prefill(layer, cache, x, clock=None)``: a chunk ``x`` ``(B, H, L)`` through the cache's ring
  (positions ``cache.t ..``): the outputs ``(B, H, L)`` without optional branches; ``cache.t`` is the
  caller's. ``clock``: a clocked layer's ticks or gate values (:mod:`nn.decode.clocked`; None here);
* ``compiled_step(layer, cache)``: the step a compiled model plan runs for a layer whose step is the
  SSM alone (:mod:`nn.model_step`), or None (the plan calls ``layer.step``).

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

import torch

from ddesys.cpu.prefill import prefill_available
from ddesys.cpu.step import bind_step, decode_step, step_available
from ddesys.recurrence import delay_update, readout

from .cache import channel_major, check_history16, cpu_ring  # noqa: F401 (re-exported)
from .constants import DS4DConstants, S4DConstants, StepMemo, host_views  # noqa: F401 (re-exported)
from .prefill import fused_ds4d, fused_s4d, spectral_ds4d, spectral_s4d

__all__ = ["DS4DConstants", "S4DConstants", "StepMemo", "PARALLEL",
           "DecodeEngine", "FusedEngine", "TritonEngine", "ReferenceEngine", "S4DEngine", "S4DFusedEngine",
           "Handle", "FusedHandle", "check_history16"]

PARALLEL = (None, False, True, "auto")


# ---------------------------------------------------------------------------------------------- handles
class Handle:
    """What ``engine.bind`` returns and the cache keeps in ``cache.handle``: the constants it was bound
    for (``consts``), plus an engine's per-cache views (subclasses)."""

    def __init__(self, consts):
        self.consts = consts


class FusedHandle(Handle):
    """The fused engine's binding: ``ring`` (the NumPy view of the cache's ring; uint16 for a 16-bit
    history), ``fmt16`` (None, ``"float16"`` or ``"bfloat16"``) and ``run`` (the bound compiled step
    ``run(xn, t, yn)``, or None for ``parallel="auto"``, which times the loops per call)."""

    def __init__(self, consts, ring, fmt16, run):
        super().__init__(consts)
        self.ring, self.fmt16, self.run = ring, fmt16, run


class TritonHandle(Handle):
    """The Triton engine's binding: ``run(x_t, t)``, the prepared kernel call on the cache's ring."""

    def __init__(self, consts, run):
        super().__init__(consts)
        self.run = run


# ---------------------------------------------------------------------------------------------- checks
def _device_error(cache, consts):
    return RuntimeError(f"the layer's parameters are on {consts.lam.device} but this cache is on {cache.device}: "
                        "allocate a new cache after moving the layer")


def _grad_error():
    return RuntimeError("this cache carries autograd history (from forward(..., return_state=True)); decoding "
                        "writes it in place: decode from cache.detach()")


def _check_fits(cache, consts):
    if any(v.requires_grad for v in cache.tensors()):
        raise _grad_error()
    R = cache.n_slots
    if consts.k_max >= R:
        raise RuntimeError(f"the layer's delays now reach {consts.k_max} steps, past the cache's {R - 1}: "
                           "allocate a new cache (delays changed since allocation)")
    if len(consts.branches) != len(cache.branch_states):
        raise RuntimeError(f"this cache holds the states of {len(cache.branch_states)} branches, the layer has "
                           f"{len(consts.branches)}: allocate it with allocate_inference_cache of this layer")
    if consts.lam.device != cache.device:
        raise _device_error(cache, consts)


# ---------------------------------------------------------------------------------------------- engines
class DecodeEngine:
    """The decode-engine protocol (module docstring): ``layout``, ``carry_layout``, ``bind``, ``step``,
    ``prefill``. ``name`` is for display only; engines are told apart by their class."""
    name = None
    #: what the engine needs to run (an explicit ``engine=`` that cannot run says so)
    needs = "nothing"
    #: the engine takes ``parallel=`` (the fused CPU engine)
    takes_parallel = False

    @staticmethod
    def usable(device):
        """Whether the engine runs on ``device`` (here and now: Numba, Triton present)."""
        return True

    def allocate(self, shape, dtype, device):
        """A zero ring of ``shape`` and ``dtype`` on ``device`` in the memory layout this engine reads."""
        return self.layout(torch.zeros(shape, dtype=dtype, device=device))

    @staticmethod
    def layout(buf):
        """The ring in the memory layout this engine reads (any: indexing is torch's)."""
        return buf

    @staticmethod
    def carry_layout(ring):
        """A carried state's ring ``(B, R, H, N2)`` in this engine's memory order, differentiably."""
        return ring.contiguous()

    def bind(self, cache, consts):
        """Token-independent checks and per-cache views for ``consts``; returns the cache's handle."""
        raise NotImplementedError

    def compiled_step(self, layer, cache):
        """A compiled model plan's step of ``layer`` on ``cache`` (:class:`FusedStep`), or None: the plan
        then calls ``layer.step``."""
        return None

    def step(self, cache, x_t, consts, clock=None):
        """``x_t`` ``(B, H)`` -> ``y_t`` ``(B, H)`` in the cache's real dtype; updates the state in place
        (``clock``: a clocked layer's tick or gate value per row)."""
        raise NotImplementedError

    def prefill(self, layer, cache, x, clock=None):
        """A chunk ``x`` through the cache (positions ``cache.t ..``) -> its outputs (``clock``: a clocked
        layer's ticks or gate values)."""
        raise NotImplementedError

    def __repr__(self):
        return f"{type(self).__name__}()"


def _channel_major_carry(ring):
    """``(B, R, H, N2)`` channel-major in memory on the CPU (as the fused step reads it), else slot-major."""
    if ring.device.type == "cpu":
        return ring.permute(2, 1, 0, 3).contiguous().permute(2, 1, 0, 3)
    return ring.contiguous()


class SpectralPrefill:
    """DS4D's prefill from the per-mode state kernels (FFT; :func:`nn.decode.prefill.spectral_ds4d` for a
    fresh cache, :mod:`nn.decode.history` for one holding tokens): any device."""

    @staticmethod
    def prefill(layer, cache, x, clock=None):
        return spectral_ds4d(layer, x, cache)


def _cpu_ring(shape, dtype, device):
    """A zero ring, channel-major on the CPU (:func:`nn.decode.cache.cpu_ring`: huge pages, touched)."""
    return cpu_ring(shape, dtype) if device.type == "cpu" else torch.zeros(shape, dtype=dtype, device=device)


class ReferenceEngine(SpectralPrefill, DecodeEngine):
    """The torch update (``ddesys.recurrence.delay_update`` / ``readout``), any device and history."""
    name = "reference"
    carry_layout = staticmethod(_channel_major_carry)

    def allocate(self, shape, dtype, device):
        return _cpu_ring(shape, dtype, device)

    def bind(self, cache, consts):
        _check_fits(cache, consts)
        return Handle(consts)

    def step(self, cache, x_t, consts, clock=None):
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


class FusedEngine(DecodeEngine):
    """The fused Numba step on a CPU ring (:func:`ddesys.cpu.step.decode_step`), read through a NumPy view
    of the cache's buffer taken once per cache (``cache.handle.ring``). The ring is channel-major in
    memory (as ``allocate_inference_cache`` makes it); a cache whose ``buf`` was built otherwise (by hand,
    or a state from another layout) gets a channel-major copy of it when first bound. Prefill: one
    compiled pass of the same recurrence (:func:`nn.decode.prefill.fused_ds4d`)."""
    name = "fused"
    needs = "a CPU cache and Numba"
    takes_parallel = True
    carry_layout = staticmethod(_channel_major_carry)

    def __init__(self, parallel=None):
        if parallel not in PARALLEL:
            raise ValueError(f"parallel must be None (deterministic fixed rule), False, True or 'auto' (timed), "
                             f"got {parallel!r}")
        self.parallel = parallel

    def __repr__(self):
        return f"FusedEngine(parallel={self.parallel!r})"

    @staticmethod
    def usable(device):
        return device.type == "cpu" and step_available()

    def allocate(self, shape, dtype, device):
        return _cpu_ring(shape, dtype, device)

    @staticmethod
    def layout(buf):
        """The ring channel-major in memory (a copy when it is not; ``ddesys.cpu.step.new_ring``)."""
        return channel_major(buf)

    def bind(self, cache, consts):
        _check_fits(cache, consts)
        if consts.host is None:                                     # pragma: no cover - CPU constants have views
            raise RuntimeError("the fused engine needs CPU constants")
        old = cache.handle
        if isinstance(old, FusedHandle):                            # the views of an earlier binding stay
            ring, fmt16 = old.ring, old.fmt16
        else:
            cache.buf = buf = self.layout(cache.buf)               # a ring made elsewhere is copied once
            ring = buf.view(torch.uint16).numpy() if cache.history16 else buf.numpy()
            fmt16 = {torch.float16: "float16", torch.bfloat16: "bfloat16"}.get(cache.history16)
        # the token-independent work once: checks, the serial/parallel rule; "auto" keeps the timed call
        run = None if self.parallel == "auto" else bind_step(ring, *consts.host, fmt16=fmt16, parallel=self.parallel)
        return FusedHandle(consts, ring, fmt16, run)

    def step(self, cache, x_t, consts, clock=None):
        rdt = cache.real_dtype
        xn = (x_t if x_t.dtype == rdt else x_t.to(rdt)).detach().numpy()
        y = torch.empty(x_t.shape, dtype=rdt)                       # (B, H), returned to the caller
        yn = y.numpy()
        hd = cache.handle
        if hd.run is not None:
            hd.run(xn, cache.t, yn)
            return y
        par = "auto" if not torch.are_deterministic_algorithms_enabled() else None
        decode_step(hd.ring, xn, *consts.host, cache.t, yn, fmt16=hd.fmt16, parallel=par)
        return y

    @staticmethod
    def prefill(layer, cache, x, clock=None):
        consts = layer.bind_cache(cache)
        hd = cache.handle
        return fused_ds4d(hd.ring, hd.fmt16, consts.host, x, cache)

    def compiled_step(self, layer, cache):
        return None if self.parallel == "auto" else FusedStep(layer, cache)     # "auto" times each call


class FusedStep:
    """The fused engine's step as a compiled model plan runs it (:mod:`nn.model_step`): ``z -> s``
    ``(B, H)`` NumPy arrays of the model's dtype (``z_t``, ``s_t`` their tensor views), the cache's bound
    compiled step. A ``tick`` is refused as ``layer.step`` refuses it (a clock needs a clocked layer)."""

    def __init__(self, layer, cache):
        self.layer, self.cache = layer, cache
        self.f16 = cache.history16 == torch.float16
        layer.bind_cache(cache)                                     # the checks now, not at the first token

    def __call__(self, z, s, z_t, s_t, tick):
        if tick is not None:
            return self.layer.step(z_t, self.cache, tick)            # the module path's TypeError
        cache = self.cache
        self.layer.bind_cache(cache)                                # memo check; rebinds after a parameter change
        t = cache.t
        cache.handle.run(z, t, s)                                   # the layer's fused step: z -> s (B, H)
        cache.t = t + 1
        if self.f16 and not cache.warned:
            check_history16(cache, s_t, z_t)


class TritonEngine(SpectralPrefill, DecodeEngine):
    """The Triton kernel (:mod:`gpu.decode`): CUDA rings, complex or 16-bit. Triton is imported here, when
    the first such cache is allocated."""
    name = "triton"
    needs = "a CUDA cache and Triton"

    def __init__(self):
        from ddesys.gpu import decode as gpu_decode                        # imports Triton
        self.gpu = gpu_decode

    @staticmethod
    def usable(device):
        from ddesys import gpu
        return gpu.usable_for(torch.empty(0, device=device))

    @staticmethod
    def layout(buf):
        """The ring slot-major and contiguous, ``(B, R, H, N2)`` in memory (the kernel's layout)."""
        return buf if buf.is_contiguous() else buf.contiguous()

    def bind(self, cache, consts):
        _check_fits(cache, consts)
        cache.buf = self.layout(cache.buf)                                 # a ring made elsewhere: copied once
        return TritonHandle(consts, self.gpu.prepare_step(cache.buf, consts.lam, consts.m1, consts.m2, consts.bbar,
                                                          consts.c, consts.d, consts.k))

    def step(self, cache, x_t, consts, clock=None):
        return cache.handle.run(x_t, cache.t)


class S4DEngine(DecodeEngine):
    """S4D's engine anywhere: the torch update per token, the Vandermonde prefill
    (:func:`nn.decode.prefill.spectral_s4d`)."""
    name = "reference"

    def bind(self, cache, consts):
        if cache.h.requires_grad:
            raise _grad_error()
        if consts.lam.device != cache.h.device:
            raise _device_error(cache, consts)
        return Handle(consts)

    def step(self, cache, x_t, consts, clock=None):
        lam, bbar, c, dd = consts
        xt = x_t.to(cache.real_dtype)
        cache.h.copy_(delay_update(cache.h, 0, 0, xt[..., None], lam, 0, 0, bbar))  # (B, H, N2), mu = 0
        return readout(cache.h, c, dd, xt)

    @staticmethod
    def prefill(layer, cache, x, clock=None):
        return spectral_s4d(layer, x, cache)


class S4DFusedEngine(S4DEngine):
    """S4D's engine on the CPU with Numba: the torch update per token, the prefill in one compiled pass
    (:func:`nn.decode.prefill.fused_s4d`: a ring of one slot, no delayed terms)."""
    name = "fused"
    needs = "a CPU cache and Numba"

    @staticmethod
    def usable(device):
        return device.type == "cpu" and prefill_available()

    def bind(self, cache, consts):
        super().bind(cache, consts)
        hd = Handle(consts)
        hd.host = tuple(v.detach().resolve_conj().contiguous().numpy() for v in consts)    # lam, bbar, c, d
        return hd

    @staticmethod
    def prefill(layer, cache, x, clock=None):
        layer.bind_cache(cache)
        return fused_s4d(cache.handle.host, x, cache)
