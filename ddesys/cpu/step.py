"""Fused CPU decode step of the delayed recurrence (docs/theory.md, decoding), compiled with Numba.

One token at position ``t`` for every (batch, channel) pair and all its modes, in one pass over memory::

    h_t = lam h_{t-1} + m1 h_{t-k} + m2 h_{t-k-1} + bbar x_t,     m1 = mu (1 - alpha), m2 = mu alpha
    y_t = 2 Re(sum_n c_n h_{n,t}) + d x_t,                        h_{t<0} = 0

The history is a ring buffer of ``R`` slots, indexed ``buf[b, s, h, n]`` (shape ``(B, R, H, N2)``): ``h_s``
lives in slot ``s mod R``. In memory it is channel-major, ``(H, R, B, N2)``: one channel's history in one
place, every batch row of a slot side by side (:func:`new_ring` allocates it; ``buf.transpose(2, 1, 0, 3)``
is C-contiguous). A step
reads slots ``(t-1) % R``, ``(t-k) % R``, ``(t-k-1) % R`` (a read of a position ``< 0`` is zero, whatever the
slot holds), then writes ``h_t`` into slot ``t % R``. With ``k = R - 1`` the slot of ``t-k-1`` is the one
written: every mode is read before it is written.

Storage (``buf``) and precision:

* complex64 ``(B, R, H, N2)``: the update in float32; parameters complex64, ``x_t``, ``d``, ``y_out`` float32;
* complex128 ``(B, R, H, N2)``: the update in float64; parameters complex128, the reals float64;
* 16-bit history, uint16 ``(B, R, H, N2, 2)``, the (real, imaginary) bit patterns of IEEE ``"float16"`` or
  ``"bfloat16"`` (``fmt16=``): half the memory of complex64. Loads widen exactly to float32, the update
  runs in float32 (parameters complex64, reals float32), the store rounds to nearest even. A torch cache:
  ``torch.from_numpy(new_ring((B, R, H, N2, 2), np.uint16))``, its ``.numpy()`` taken once; a float16
  numpy array ``a`` ``(..., 2)`` is passed as ``a.view(np.uint16)``; :func:`encode16` / :func:`decode16`
  convert.

16-bit accuracy. Each stored state is rounded to a relative ``u`` (``2^-11`` float16, ``2^-8`` bfloat16)
plus, for float16, an absolute ``a = 2^-25 sqrt 2`` where it is subnormal. The roundings enter the state
recurrence as a forcing; its coefficients have ``rho = |lam| + |m1| + |m2| < 1`` for a stable mode, so the
state error stays below ``(u max|h| + a) / (1 - rho)`` and::

    |y_t - y_t(exact)| <= 2 sum_n |c_n| (u max_s |h_{n,s}| + a) / (1 - rho_n)   (+ the float32 update's own)

(:func:`history_error_bound`; ``tests/nn/test_fused_step.py`` checks a layer's error against it, and
``python -m ddesys.experiments.bench.decode --only accuracy`` measures it on a layer's own parameters).
float16 rounds 8 times finer than bfloat16 but has a narrow range: a state past 65504 in magnitude
becomes infinite and one below ``6e-5`` loses relative precision; bfloat16 has float32's range. Use
float16 when the states are known to be of moderate size (DS4D's usual O(1) scale), bfloat16 when they
are not. Inside the loop a mode's pair is read and written as one uint32 (real at the lower address),
which lets the loop vectorize.

Memory. A step past the delays reads, per channel, the previous slot (hot) and two slots written ``k``
tokens ago, each channel's elsewhere: cold. Channel-major, the two delayed slots are adjacent and hold
every batch row's modes side by side, so a channel's delayed reads are one contiguous run of
``2 B N2`` values (a slot-major ring, ``(B, R, H, N2)`` in memory, scatters them into ``2 B`` places;
``python -m ddesys.experiments.bench.ring_layout`` measures the difference). The loop prefetches them
``_PD`` channels ahead. Large rings also want huge pages: :func:`new_ring` allocates through NumPy, which
advises the kernel to back large buffers with huge pages (``torch.zeros`` does not).

Threads and determinism. The parallel loop splits a fixed partition, blocks of ``_CH`` channels (every
batch row in each), over Numba's threads (``prange``) inside :func:`ddesys.cpu.threads.numba_threads` (never beyond
torch's budget). Each item's arithmetic is the same code whatever thread runs it and however many
there are, so the parallel loop's outputs are bitwise equal at 1, 2 or 16 threads and under any load.
The serial loop is compiled separately (LLVM may vectorize or contract it differently: the two agree to
float rounding, not bitwise). ``parallel=None`` (the default) is a fixed rule, deterministic: the serial
loop below ``B * H * N2 = PARALLEL_MIN_WORK`` (batch 2 at H = 256, N2 = 32: at batch 1 the threads'
handshake costs about what a second thread saves), else the parallel loop, even on one thread (on two
cores it runs a batch-2 step 1.1-1.4x and a batch-8 step 1.7-1.9x faster than the serial loop, the more
the larger the ring, and under another process's load it still slows less than the serial loop:
``python -m ddesys.experiments.bench.decode --only load``). The compile options of both, and which
loops of the package may reassociate sums, are the table of :mod:`ddesys.cpu.options`;
``python -m ddesys.experiments.bench.decode`` measures the loops. ``parallel=True`` / ``False`` force either
loop. ``parallel="auto"`` (opt-in, not deterministic) times both on the first calls of each size and thread
budget and keeps the faster, checking again every ``RECHECK`` calls; callers that honour a determinism
switch (``nn``'s fused engine and ``torch.are_deterministic_algorithms_enabled()``) pass None instead.

Checks, at no measurable cost: Numba's dispatcher, compiled for the exact types only, refuses wrong types,
dtypes, ranks, layouts and read-only buffers; the compiled loop checks the shapes, ``t >= 0`` and every
delay in ``[1, R - 1]`` before it touches memory. A refused call explains itself (:func:`check_step_args`
runs then) and leaves ``buf`` and ``y_out`` unchanged. Nothing is allocated per token: the caller owns
``y_out`` (``tests/nn/test_fused_step_inputs.py`` counts the allocations). The first call of each variant compiles
it (then Numba's disk cache serves it). ``DDESYS_REFERENCE`` is the caller's to honour
(``ddesys._array.force_reference``): this function is the fast path itself.
"""
from __future__ import annotations

import contextlib
import statistics
import time

import numpy as np

from ._numba import nb as _nb
from .threads import numba_threads, thread_budget

__all__ = ["decode_step", "bind_step", "check_step_args", "step_available", "history_error_bound", "encode16",
           "decode16", "new_ring", "is_channel_major", "FMT16", "PARALLEL_MIN_WORK", "RECHECK"]

FMT16 = ("float16", "bfloat16")
#: ``B * H * N2`` below which the step always runs on one thread: there the serial loop is close to two
#: threads, and it keeps its speed when other processes load the cores, where the parallel loop waits on
#: a descheduled thread at every step (``python -m ddesys.experiments.bench.decode --only load`` measures
#: both).
PARALLEL_MIN_WORK = 16384
#: calls between two re-timings of serial against parallel (``parallel="auto"`` above PARALLEL_MIN_WORK)
RECHECK = 4096
_TRIALS = 5                   # timed calls of each variant per decision
_TMAX = 2 ** 62

_C64, _C128, _U16 = np.dtype(np.complex64), np.dtype(np.complex128), np.dtype(np.uint16)
_F32, _F64, _I64 = np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int64)


def step_available() -> bool:
    """True when the compiled step can run (Numba present and not disabled by ``DDESYS_DISABLE_NUMBA``)."""
    return _nb is not None


from .step_loops import STEP_KERNELS, encode16_loop, step_kernel  # noqa: E402,F401  (compiled loops)
from .ring import is_channel_major, memory_view, new_ring  # noqa: E402  (the ring's memory layout)

_COMPLEX, _SIXTEEN = STEP_KERNELS["complex"], STEP_KERNELS["16-bit"]   # the entry points of each ring storage


# ---------------------------------------------------------------------------------------------- checks
def _fail(exc, msg):
    raise exc(f"decode_step: {msg}")


def _need_array(a, name):
    if type(a) is not np.ndarray:
        _fail(TypeError, f"{name} must be a numpy array (a CPU torch tensor's .numpy(), taken once), got "
                         f"{type(a).__name__}")


def check_step_args(buf, x_t, lam, m1, m2, bbar, c, d, k, t, y_out, fmt16=None):
    """Raise a clear ``TypeError``/``ValueError`` for the first argument :func:`decode_step` would refuse;
    returns None when all are accepted. (:func:`decode_step` runs it only after a refusal: its own checks
    are the compiled dispatcher's and loop's.)"""
    _need_array(buf, "buf")
    dt = buf.dtype
    if dt == _C64 or dt == _C128:
        if buf.ndim != 4:
            _fail(ValueError, f"a complex buf must be (B, R, H, N2), got shape {buf.shape}")
        if fmt16 is not None:
            _fail(ValueError, f"fmt16={fmt16!r} is for a uint16 (16-bit) history; buf is {dt}")
        pdt, rdt = (_C64, _F32) if dt == _C64 else (_C128, _F64)
    elif dt == _U16:
        if buf.ndim != 5 or buf.shape[4] != 2:
            _fail(ValueError, "a 16-bit buf must be uint16 (B, R, H, N2, 2) (real, imaginary bit patterns), "
                              f"got shape {buf.shape}")
        if fmt16 not in FMT16:
            _fail(ValueError, f"a uint16 buf needs fmt16='float16' or 'bfloat16', got {fmt16!r}")
        pdt, rdt = _C64, _F32
    elif dt == np.float16:
        _fail(TypeError, "pass a float16 history as its bit patterns, buf.view(np.uint16) (B, R, H, N2, 2), "
                         "with fmt16='float16' (make the view once, not per token)")
    else:
        _fail(TypeError, f"buf must be complex64, complex128 or uint16 (a 16-bit history), got {dt}")
    if not is_channel_major(buf):
        _fail(ValueError, f"buf must be channel-major in memory, (H, R, B, N2): buf.transpose(2, 1, 0, 3) "
                          f"C-contiguous, as ddesys.cpu.step.new_ring allocates it; got strides {buf.strides}")
    if not buf.flags.writeable:
        _fail(ValueError, "buf is read-only; the step writes h_t into it")
    B, R, H, N2 = buf.shape[:4]
    if R < 2:
        _fail(ValueError, f"the ring buffer needs R >= 2 slots (delays k >= 1), got R={R}")
    spec = [("x_t", x_t, rdt, (B, H), False), ("lam", lam, pdt, (H, N2), True), ("m1", m1, pdt, (H, N2), True),
            ("m2", m2, pdt, (H, N2), True), ("bbar", bbar, pdt, (H, N2), True), ("c", c, pdt, (H, N2), True),
            ("d", d, rdt, (H,), True), ("k", k, _I64, (H,), True), ("y_out", y_out, rdt, (B, H), True)]
    for name, a, want, shape, contiguous in spec:
        _need_array(a, name)
        if a.dtype != want or a.shape != shape:
            _fail(ValueError, f"{name} must be {want} {shape} for a {dt} buffer of shape {buf.shape}, got "
                              f"{a.dtype} {a.shape}")
        if contiguous and not a.flags.c_contiguous:
            _fail(ValueError, f"{name} must be C-contiguous, got strides {a.strides}")
        if not a.flags.writeable:
            _fail(ValueError, f"{name} must be a writeable array (the compiled step takes writeable arrays; "
                              "pass a copy)")
    if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer)):
        _fail(TypeError, f"t must be an integer position, got {t!r}")
    if not 0 <= t < _TMAX:
        _fail(ValueError, f"t must be a position in [0, 2^62), got {t}")
    bad = np.flatnonzero((k < 1) | (k > R - 1))
    if bad.size:
        i = int(bad[0])
        _fail(ValueError, f"every delay must lie in [1, R - 1] = [1, {R - 1}] for a ring buffer of R={R} slots; "
                          f"k[{i}] = {int(k[i])} (allocate R = max(k) + 1 slots)")


def _refused(args, fmt16, exc=None):
    """Explain a refused call: the detailed checks raise; if they find nothing, re-raise ``exc``."""
    check_step_args(*args, fmt16=fmt16)
    if exc is not None:
        raise exc
    raise ValueError("decode_step: arguments refused by the compiled step")   # pragma: no cover


# ---------------------------------------------------------------------------------------------- the step
class _Auto:
    """Serial or parallel, by timing both on real steps, per (16-bit?, B*H*N2, thread budget)."""

    def __init__(self):
        self.state = {}

    def pick(self, key):
        st = self.state.get(key)
        if st is None or st[0] >= RECHECK:
            st = self.state[key] = [0, [], [], None]
        st[0] += 1
        if st[3] is not None:
            return st[3], None
        ser, par = st[1], st[2]
        if len(ser) >= _TRIALS and len(par) >= _TRIALS:
            st[3] = statistics.median(par) < 0.9 * statistics.median(ser)
            return st[3], None
        return len(par) < len(ser), st          # alternate, timed

    @staticmethod
    def record(st, parallel, seconds):
        (st[2] if parallel else st[1]).append(seconds)


_AUTO = _Auto()


def decode_step(buf, x_t, lam, m1, m2, bbar, c, d, k, t, y_out, fmt16=None, parallel=None):
    """One decode step at position ``t``: writes ``h_t`` into slot ``t % R`` of ``buf`` and ``y_t`` into
    ``y_out``; returns ``y_out``.

    Args:
        buf: the ring buffer, writeable, updated in place, channel-major in memory (:func:`new_ring`):
            complex64 or complex128 ``(B, R, H, N2)``, or uint16 ``(B, R, H, N2, 2)`` with ``fmt16``
            (16-bit history).
        x_t: ``(B, H)`` real (any strides).
        lam, m1, m2, bbar, c: ``(H, N2)`` complex, C-contiguous; ``m1 = mu (1 - alpha)``, ``m2 = mu alpha``.
        d: ``(H,)`` real; k: int64 ``(H,)``, every delay in ``[1, R - 1]``.
        t: the position, an int ``>= 0``; reads of positions ``< 0`` are zero.
        y_out: ``(B, H)`` real, C-contiguous, written in place.
        fmt16: ``"float16"`` or ``"bfloat16"`` for a uint16 buffer; None for a complex one.
        parallel: None (the default: a fixed rule of the shapes, bitwise reproducible at any thread
            count, see the module docstring), True (the parallel loop, within the budget of
            :func:`ddesys.cpu.threads.thread_budget`), False (the serial loop) or ``"auto"`` (timed, opt-in).

    Precision: complex128 buffer -> complex128 parameters and float64 reals, the update in float64; a
    complex64 or 16-bit buffer -> complex64 and float32, the update in float32. Anything else is refused
    with a ``TypeError``/``ValueError`` naming the argument, and nothing is written.
    """
    if _nb is None:
        raise RuntimeError("decode_step needs Numba (missing, or disabled by DDESYS_DISABLE_NUMBA)")
    if t.__class__ is not int or not 0 <= t < _TMAX:        # the common case costs one test
        if isinstance(t, (int, np.integer)) and not isinstance(t, (bool, np.bool_)) and 0 <= t < _TMAX:
            t = int(t)
        else:
            _refused((buf, x_t, lam, m1, m2, bbar, c, d, k, t, y_out), fmt16)
    if fmt16 is None:
        kernels, fmt = _COMPLEX, 0
    elif fmt16 == "float16":
        kernels, fmt = _SIXTEEN, 0
    elif fmt16 == "bfloat16":
        kernels, fmt = _SIXTEEN, 1
    else:
        _refused((buf, x_t, lam, m1, m2, bbar, c, d, k, t, y_out), fmt16)
    timing = None
    if parallel is None or (parallel.__class__ is str and parallel == "auto"):
        try:                                      # B * H * N2 without building a shape tuple
            work = x_t.size * lam.size // (len(k) or 1)
        except (AttributeError, TypeError):
            work = 0                              # not arrays: refused below
        go_par = work >= PARALLEL_MIN_WORK        # the fixed rule: a function of the shapes only
        if go_par and parallel is not None:       # "auto": timed, the faster kept
            n = thread_budget()
            go_par = False
            if n > 1:
                go_par, timing = _AUTO.pick((fmt16 is not None, work, n))
    elif isinstance(parallel, (bool, np.bool_)):
        go_par = bool(parallel)
    else:
        raise ValueError(f"decode_step: parallel must be None, True, False or 'auto', got {parallel!r}")
    ring = memory_view(buf)                       # (H, R, B, N2): the loops' order
    kern = (kernels.parallel if go_par else kernels.serial) or kernels.get(go_par)
    try:
        if go_par:
            with numba_threads():
                t0 = time.perf_counter() if timing is not None else 0.0
                bad = kern(ring, ring, fmt, t, x_t, lam, m1, m2, bbar, c, d, k, y_out)
        else:
            t0 = time.perf_counter() if timing is not None else 0.0
            bad = kern(ring, ring, fmt, t, x_t, lam, m1, m2, bbar, c, d, k, y_out)
        if timing is not None:
            _Auto.record(timing, go_par, time.perf_counter() - t0)
    except (TypeError, ValueError, OverflowError) as exc:
        _refused((buf, x_t, lam, m1, m2, bbar, c, d, k, t, y_out), fmt16, exc)
    if bad != -1:
        _refused((buf, x_t, lam, m1, m2, bbar, c, d, k, t, y_out), fmt16)
    return y_out


def bind_step(buf, lam, m1, m2, bbar, c, d, k, fmt16=None, parallel=None):
    """:func:`decode_step` with the ring and its constants bound once: returns ``run(x_t, t, y_out)``.

    Everything that does not depend on the token is checked here (types, shapes, layouts, delays; the
    serial/parallel rule, a function of the shapes): ``run`` calls the compiled loop directly, with
    ``x_t`` ``(B, H)`` and ``y_out`` ``(B, H)`` in the update's precision and ``t`` an int ``>= 0`` (the
    compiled loop checks their shapes and ``t``; a refused call raises as :func:`decode_step` does and
    writes nothing). The bound arrays must stay alive and unchanged in shape while ``run`` is used.
    ``parallel="auto"`` is not bound (it times calls): use :func:`decode_step`."""
    if _nb is None:
        raise RuntimeError("bind_step needs Numba (missing, or disabled by DDESYS_DISABLE_NUMBA)")
    if parallel not in (None, True, False):
        raise ValueError(f"bind_step: parallel must be None, True or False, got {parallel!r}")
    B, H = buf.shape[0], buf.shape[2]
    rdt = _F64 if buf.dtype == _C128 else _F32
    x0, y0 = np.zeros((B, H), rdt), np.zeros((B, H), rdt)
    check_step_args(buf, x0, lam, m1, m2, bbar, c, d, k, 0, y0, fmt16=fmt16)
    kernels, fmt = (_COMPLEX, 0) if fmt16 is None else (_SIXTEEN, FMT16.index(fmt16))
    go_par = (B * lam.size >= PARALLEL_MIN_WORK) if parallel is None else bool(parallel)
    kern = kernels.get(go_par)
    consts = (lam, m1, m2, bbar, c, d, k)
    ring = memory_view(buf)                       # (H, R, B, N2): the loops' order

    def refused(x_t, t, y_out, exc=None):
        _refused((buf, x_t, *consts, t, y_out), fmt16, exc)

    threads = numba_threads if go_par else contextlib.nullcontext   # the parallel loop within the budget

    def run(x_t, t, y_out):
        with threads():
            try:
                bad = kern(ring, ring, fmt, t, x_t, lam, m1, m2, bbar, c, d, k, y_out)
            except (TypeError, ValueError, OverflowError) as exc:
                refused(x_t, t, y_out, exc)
        if bad != -1:
            refused(x_t, t, y_out)
        return y_out
    run.parallel = go_par
    return run


# ---------------------------------------------------------------------------------------------- 16-bit helpers
def _check_fmt(fmt16):
    if fmt16 not in FMT16:
        raise ValueError(f"fmt16 must be 'float16' or 'bfloat16', got {fmt16!r}")


def encode16(z, fmt16, out=None):
    """Complex ``z`` -> uint16 ``z.shape + (2,)`` bit patterns (real, imaginary), rounded to nearest even
    from float32 exactly as the step stores them (for prefilling a 16-bit history). ``out``: a C-contiguous
    uint16 array of that shape to fill."""
    _check_fmt(fmt16)
    z = np.asarray(z)
    if not np.iscomplexobj(z):
        z = z.astype(np.complex64)
    z = np.ascontiguousarray(z.astype(np.complex64, copy=False))   # the step rounds float32 values
    if out is None:
        out = np.empty(z.shape + (2,), np.uint16)
    elif out.dtype != _U16 or out.shape != z.shape + (2,) or not out.flags.c_contiguous:
        raise ValueError(f"encode16: out must be C-contiguous uint16 {z.shape + (2,)}, got {out.dtype} {out.shape}")
    if _nb is not None:
        encode16_loop(z, FMT16.index(fmt16), out)
    else:
        f = np.stack([z.real, z.imag], -1)
        out[...] = f.astype(np.float16).view(np.uint16) if fmt16 == "float16" else _np_f32_to_bf16(f)
    return out


def decode16(bits, fmt16):
    """uint16 ``(..., 2)`` bit patterns -> complex64 ``(...)``, exactly (every 16-bit value is a float32)."""
    _check_fmt(fmt16)
    bits = np.asarray(bits)
    if bits.dtype != _U16 or bits.shape[-1:] != (2,):
        raise ValueError(f"decode16: bits must be uint16 (..., 2), got {bits.dtype} {bits.shape}")
    if fmt16 == "float16":
        f = bits.view(np.float16).astype(np.float32)
    else:
        f = (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)
    out = np.empty(bits.shape[:-1], np.complex64)
    out.real, out.imag = f[..., 0], f[..., 1]
    return out


def _np_f32_to_bf16(f):
    """float32 -> bfloat16 bits, round to nearest even, NaN kept quiet (NumPy reference of the kernel's)."""
    u = np.ascontiguousarray(f, np.float32).view(np.uint32)
    r = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    return np.where(nan, ((u >> np.uint32(16)) | np.uint32(0x40)).astype(np.uint16), r)


#: relative rounding of a stored component and the absolute floor of a stored complex pair
_U16_ROUND = {"float16": (2.0 ** -11, 2.0 ** -25 * np.sqrt(2)), "bfloat16": (2.0 ** -8, 0.0)}


def history_error_bound(lam, m1, m2, c, h_max, fmt16):
    """Worst-case ``|y_t - y_t(exact)|`` ``(H,)`` from keeping the history in ``fmt16``, to first order in
    the rounding ``u`` (the float32 update's own rounding not included). Each stored state carries an error
    ``<= u |h| + a``; the state error ``e`` obeys the recurrence driven by these, and with
    ``rho = |lam| + |m1| + |m2| < 1`` (the sum of its coefficients' magnitudes), ``max |e| <= (u max|h| + a)
    / (1 - rho)`` per mode; so ``|dy_t| <= 2 sum_n |c_n| max |e_n|``. ``lam, m1, m2, c`` ``(H, N2)``;
    ``h_max`` ``(H, N2)``: each mode's largest ``|h|`` over the run. Infinite for a channel with
    ``rho >= 1``."""
    _check_fmt(fmt16)
    u, a = _U16_ROUND[fmt16]
    rho = np.abs(lam) + np.abs(m1) + np.abs(m2)
    gap = 1.0 - rho
    with np.errstate(divide="ignore"):
        gain = np.where(gap > 0, 1.0 / np.where(gap > 0, gap, 1.0), np.inf)
    return 2.0 * np.sum(np.abs(c) * (u * np.asarray(h_max) + a) * gain, axis=-1)
