"""The compiled loops of the fused CPU decode step (:mod:`ddesys.cpu.step` documents them: layout, precision,
prefetching, threads). Numba only; :mod:`ddesys.cpu.step` validates, dispatches and times them.

The loops index the ring in its memory order, channel-major ``(H, R, B, N2)`` (``ring[h, s, b, n]``:
:func:`ddesys.cpu.step.new_ring`), the transpose of the ``(B, R, H, N2)`` buffer the public functions take."""
from __future__ import annotations

import sys

import numpy as np

from ._numba import nb as _nb
from .options import compile_loop, entry, loop

_PD = 8                       # channels ahead whose delayed rows are prefetched
_CH = 16                      # channels per parallel work item (every batch row of them)
_BIG_ENDIAN = sys.byteorder == "big"   # the packed 16-bit pairs are read as uint32: real at the lower address

if _nb is not None:
    from llvmlite import ir as _ir
    from numba import types as _t
    from numba.extending import intrinsic as _intrinsic

    @_intrinsic
    def _f16_to_f32(typingctx, bits):             # pragma: no cover - codegen (F16C / native half)
        def codegen(context, builder, sig, args):
            return builder.fpext(builder.bitcast(args[0], _ir.HalfType()), _ir.FloatType())
        return _t.float32(_t.uint16), codegen

    @_intrinsic
    def _f32_to_f16(typingctx, x):                # pragma: no cover - codegen; IEEE, round to nearest even
        def codegen(context, builder, sig, args):
            return builder.bitcast(builder.fptrunc(args[0], _ir.HalfType()), _ir.IntType(16))
        return _t.uint16(_t.float32), codegen

    @_intrinsic
    def _f32_bits(typingctx, x):                  # pragma: no cover - codegen
        def codegen(context, builder, sig, args):
            return builder.bitcast(args[0], _ir.IntType(32))
        return _t.uint32(_t.float32), codegen

    @_intrinsic
    def _bits_f32(typingctx, u):                  # pragma: no cover - codegen
        def codegen(context, builder, sig, args):
            return builder.bitcast(args[0], _ir.FloatType())
        return _t.float32(_t.uint32), codegen

    @_intrinsic
    def _prefetch(typingctx, addr):               # pragma: no cover - codegen; a hint: never faults
        def codegen(context, builder, sig, args):
            i8p = _ir.IntType(8).as_pointer()
            i32 = _ir.IntType(32)
            fnty = _ir.FunctionType(_ir.VoidType(), [i8p, i32, i32, i32])
            fn = builder.module.declare_intrinsic("llvm.prefetch", [i8p], fnty)
            builder.call(fn, [builder.inttoptr(args[0], i8p), i32(0), i32(3), i32(1)])   # read, keep, data
            return context.get_dummy_value()
        return _t.void(_t.uintp), codegen

    _U32 = _t.uint32
    _LO16, _HI16 = _U32(0xFFFF), _U32(0xFFFF0000)
    _SH16 = _U32(16)

    @loop("step.inline")
    def _f32_to_bf16_hi(x):                       # pragma: no cover - jitted
        """float32 -> bfloat16 bits in the upper half of a uint32 (lower half zero), round to nearest
        even; a NaN stays a quiet NaN. Branch-free, so the loop around it vectorizes."""
        u = _f32_bits(x)
        nan = (u & _U32(0x7FFFFFFF)) > _U32(0x7F800000)
        r = (u | _U32(0x00400000)) if nan else (u + _U32(0x7FFF) + ((u >> _SH16) & _U32(1)))
        return r & _HI16

    @loop("step.inline")
    def unpack16(u, fmt):                        # pragma: no cover - jitted
        """One stored mode, a uint32 holding (real, imaginary) 16-bit patterns in memory order (real at
        the lower address), -> (real, imaginary) float32, exactly."""
        lo = u & _LO16                            # the first 16-bit word on a little-endian machine
        hi = u >> _SH16
        if _BIG_ENDIAN:
            lo, hi = hi, lo
        if fmt == 0:
            return _f16_to_f32(_t.uint16(lo)), _f16_to_f32(_t.uint16(hi))
        return _bits_f32(lo << _SH16), _bits_f32(hi << _SH16)

    @loop("step.inline")
    def pack16(vr, vi, fmt):                     # pragma: no cover - jitted
        """(real, imaginary) float32 -> the uint32 :func:`unpack16` reads, rounded to nearest even."""
        if fmt == 0:
            lo = _U32(_f32_to_f16(vr))
            hi = _U32(_f32_to_f16(vi))
        else:
            lo = _f32_to_bf16_hi(vr) >> _SH16
            hi = _f32_to_bf16_hi(vi) >> _SH16
        if _BIG_ENDIAN:
            lo, hi = hi, lo
        return lo | (hi << _SH16)

    @loop("step.inline")
    def _bad_args(br, t, x, lam, m1, m2, bb, c, d, k, y):   # pragma: no cover - jitted
        """-1 when every shape fits ``buf``, ``t >= 0`` and every delay lies in ``[1, R - 1]``; else -2
        (shapes, ``t``, ``R``) or the index of the first bad delay. Runs before any memory is touched."""
        H, R, B, N2 = br.shape[0], br.shape[1], br.shape[2], br.shape[3]
        if t < 0 or R < 2 or x.shape[0] != B or x.shape[1] != H or y.shape[0] != B or y.shape[1] != H:
            return -2
        if d.shape[0] != H or k.shape[0] != H:
            return -2
        if br.ndim == 5 and br.shape[br.ndim - 1] != 2:         # 16-bit: (real, imaginary) pairs
            return -2
        for p in (lam, m1, m2, bb, c):
            if p.shape[0] != H or p.shape[1] != N2:
                return -2
        for i in range(H):
            if k[i] < 1 or k[i] > R - 1:
                return i
        return -1

    @loop("step.inline")
    def _delay_slots(st, kh, R):                  # pragma: no cover - jitted
        """Slots of ``t - k`` and ``t - k - 1`` from ``st = t % R`` (``1 <= k <= R - 1``: no division)."""
        sk = st - kh
        if sk < 0:
            sk += R
        return sk, (sk - 1 if sk >= 1 else R - 1)

    @loop("step.inline")
    def _prefetch_delayed(buf, h, st, k):         # pragma: no cover - jitted
        """Ask for channel ``h``'s two delayed slots ahead of use (every batch row's modes: ``B N2``
        values each, side by side): written ``k`` tokens ago, each channel's in another slot, they lie far
        apart in memory, and the step would wait on each."""
        sk, sk1 = _delay_slots(st, k[h], buf.shape[1])
        row = buf.strides[1]                      # bytes of one slot of one channel: B x N2 values
        base = buf.ctypes.data + h * buf.strides[0]
        a1 = base + sk * row
        a2 = base + sk1 * row
        for off in range(0, row, 64):
            _prefetch(a1 + off)
            _prefetch(a2 + off)

    @loop("step.modes")
    def _modes_c(br, bw, b, h, st, sp, sk, sk1, xr, lam, m1, m2, bb, c):   # pragma: no cover - jitted
        """``h_t`` of one (batch, channel) past its delay, all modes, read through ``br`` and written
        through ``bw`` (one buffer, two handles: LLVM's overlap check then passes and the loop runs
        vectorized); returns ``Re sum c h``."""
        acc = xr - xr                             # zero in the update's precision
        for n in range(br.shape[3]):
            v = lam[h, n] * br[h, sp, b, n] + m1[h, n] * br[h, sk, b, n] + m2[h, n] * br[h, sk1, b, n] \
                + bb[h, n] * xr
            bw[h, st, b, n] = v
            acc += c[h, n].real * v.real - c[h, n].imag * v.imag
        return acc

    @loop("step.modes_start")
    def _modes_c_start(br, bw, b, h, st, sp, sk, xr, lam, m1, bb, c, use_p, use_k):   # pragma: no cover
        """As :func:`_modes_c` for ``t <= k``: ``h_{t-k-1}`` is zero, ``h_{t-k}`` live iff ``use_k``
        (``t = k``), ``h_{t-1}`` iff ``use_p`` (``t >= 1``). Out of line: the steady loop stays lean."""
        acc = xr - xr
        for n in range(br.shape[3]):
            v = bb[h, n] * xr
            if use_p:
                v += lam[h, n] * br[h, sp, b, n]
            if use_k:
                v += m1[h, n] * br[h, sk, b, n]
            bw[h, st, b, n] = v
            acc += c[h, n].real * v.real - c[h, n].imag * v.imag
        return acc

    @loop("step.modes")
    def _chans_c(br, bw, h0, h1, t, x, lam, m1, m2, bb, c, d, k, y):   # pragma: no cover - jitted
        """Channels ``h0 <= h < h1``, every batch row, complex ring."""
        R, B = br.shape[1], br.shape[2]
        st = t % R
        sp = st - 1 if st >= 1 else R - 1
        for h in range(h0, min(h0 + _PD, h1)):   # the block's first channels (the loop asks _PD ahead)
            _prefetch_delayed(br, h, st, k)
        for h in range(h0, h1):
            if h + _PD < h1:
                _prefetch_delayed(br, h + _PD, st, k)
            kh = k[h]
            sk, sk1 = _delay_slots(st, kh, R)
            for b in range(B):
                xr = x[b, h]
                if t > kh:                        # the steady state: all three reads live
                    acc = _modes_c(br, bw, b, h, st, sp, sk, sk1, xr, lam, m1, m2, bb, c)
                else:                             # t <= k: reads before the start are zero
                    acc = _modes_c_start(br, bw, b, h, st, sp, sk, xr, lam, m1, bb, c, t >= 1, t == kh)
                y[b, h] = (acc + acc) + d[h] * xr

    @loop("step.modes")
    def _modes_16(br, bw, fmt, b, h, st, sp, sk, sk1, xr, lam, m1, m2, bb, c):   # pragma: no cover - jitted
        """As :func:`_modes_c` for a 16-bit history, in float32. ``br``/``bw``: the buffer as packed uint32
        ``(H, R, B, N2, 1)`` (one mode per element: the loop then vectorizes); ``fmt`` a call-site constant."""
        acc = np.float32(0)
        for n in range(br.shape[3]):
            pr, pi = unpack16(br[h, sp, b, n, 0], fmt)
            qr, qi = unpack16(br[h, sk, b, n, 0], fmt)
            rr, ri = unpack16(br[h, sk1, b, n, 0], fmt)
            vr = (lam[h, n].real * pr - lam[h, n].imag * pi + m1[h, n].real * qr - m1[h, n].imag * qi
                  + m2[h, n].real * rr - m2[h, n].imag * ri + bb[h, n].real * xr)
            vi = (lam[h, n].real * pi + lam[h, n].imag * pr + m1[h, n].real * qi + m1[h, n].imag * qr
                  + m2[h, n].real * ri + m2[h, n].imag * rr + bb[h, n].imag * xr)
            bw[h, st, b, n, 0] = pack16(vr, vi, fmt)
            acc += c[h, n].real * vr - c[h, n].imag * vi
        return acc

    @loop("step.modes_start")
    def _modes_16_start(br, bw, fmt, b, h, st, sp, sk, xr, lam, m1, bb, c, use_p, use_k):  # pragma: no cover
        """As :func:`_modes_c_start` for a 16-bit history (packed uint32 views, see :func:`_modes_16`)."""
        acc = np.float32(0)
        for n in range(br.shape[3]):
            vr = bb[h, n].real * xr
            vi = bb[h, n].imag * xr
            if use_p:
                pr, pi = unpack16(br[h, sp, b, n, 0], fmt)
                vr += lam[h, n].real * pr - lam[h, n].imag * pi
                vi += lam[h, n].real * pi + lam[h, n].imag * pr
            if use_k:
                pr, pi = unpack16(br[h, sk, b, n, 0], fmt)
                vr += m1[h, n].real * pr - m1[h, n].imag * pi
                vi += m1[h, n].real * pi + m1[h, n].imag * pr
            bw[h, st, b, n, 0] = pack16(vr, vi, fmt)
            acc += c[h, n].real * vr - c[h, n].imag * vi
        return acc

    @loop("step.modes")
    def _chans_16(br, bw, fmt, h0, h1, t, x, lam, m1, m2, bb, c, d, k, y):   # pragma: no cover - jitted
        """Channels ``h0 <= h < h1``, every batch row, 16-bit ring."""
        R, B = br.shape[1], br.shape[2]
        st = t % R
        sp = st - 1 if st >= 1 else R - 1
        for h in range(h0, min(h0 + _PD, h1)):
            _prefetch_delayed(br, h, st, k)
        for h in range(h0, h1):
            if h + _PD < h1:
                _prefetch_delayed(br, h + _PD, st, k)
            kh = k[h]
            sk, sk1 = _delay_slots(st, kh, R)
            for b in range(B):
                xr = x[b, h]
                if t > kh:
                    acc = _modes_16(br, bw, fmt, b, h, st, sp, sk, sk1, xr, lam, m1, m2, bb, c)
                else:
                    acc = _modes_16_start(br, bw, fmt, b, h, st, sp, sk, xr, lam, m1, bb, c, t >= 1, t == kh)
                y[b, h] = (acc + acc) + d[h] * xr

    # Entry points: compiled for the exact signatures below (nothing else compiles), once, cached on disk,
    # on the first step. ``br`` and ``bw`` are the same ring, channel-major (H, R, B, N2) (see _modes_c).
    # The parallel ones split blocks of _CH channels, every batch row in each (a fixed partition: the
    # arithmetic of a channel is the same whichever thread runs it). ``fmt``: 0 float16, 1 bfloat16
    # (ignored by the complex ones). Return: see _bad_args.
    @entry("step.entry")
    def _step_c_serial(br, bw, fmt, t, x, lam, m1, m2, bb, c, d, k, y):    # pragma: no cover - jitted
        bad = _bad_args(br, t, x, lam, m1, m2, bb, c, d, k, y)
        if bad == -1:
            _chans_c(br, bw, 0, br.shape[0], t, x, lam, m1, m2, bb, c, d, k, y)
        return bad

    @entry("step.entry_parallel")
    def _step_c_parallel(br, bw, fmt, t, x, lam, m1, m2, bb, c, d, k, y):  # pragma: no cover - jitted
        bad = _bad_args(br, t, x, lam, m1, m2, bb, c, d, k, y)
        if bad == -1:
            H = br.shape[0]
            for j in _nb.prange((H + _CH - 1) // _CH):
                h0 = j * _CH
                _chans_c(br, bw, h0, min(h0 + _CH, H), t, x, lam, m1, m2, bb, c, d, k, y)
        return bad

    @entry("step.entry")
    def _step_16_serial(br, bw, fmt, t, x, lam, m1, m2, bb, c, d, k, y):    # pragma: no cover - jitted
        bad = _bad_args(br, t, x, lam, m1, m2, bb, c, d, k, y)
        if bad == -1:
            br = br.view(np.uint32)               # (H, R, B, N2, 1): one mode per element
            bw = bw.view(np.uint32)
            if fmt == 0:
                _chans_16(br, bw, 0, 0, br.shape[0], t, x, lam, m1, m2, bb, c, d, k, y)
            else:
                _chans_16(br, bw, 1, 0, br.shape[0], t, x, lam, m1, m2, bb, c, d, k, y)
        return bad

    @entry("step.entry_parallel")
    def _step_16_parallel(br, bw, fmt, t, x, lam, m1, m2, bb, c, d, k, y):  # pragma: no cover - jitted
        bad = _bad_args(br, t, x, lam, m1, m2, bb, c, d, k, y)
        if bad == -1:
            br = br.view(np.uint32)
            bw = bw.view(np.uint32)
            H = br.shape[0]
            for j in _nb.prange((H + _CH - 1) // _CH):
                h0 = j * _CH
                if fmt == 0:
                    _chans_16(br, bw, 0, h0, min(h0 + _CH, H), t, x, lam, m1, m2, bb, c, d, k, y)
                else:
                    _chans_16(br, bw, 1, h0, min(h0 + _CH, H), t, x, lam, m1, m2, bb, c, d, k, y)
        return bad

    @loop("step.encode16")
    def encode16_loop(z, fmt, out):                # pragma: no cover - jitted; the step's own rounding
        zr = z.ravel()
        o = out.reshape(zr.shape[0], 2).view(np.uint32)
        for i in range(zr.shape[0]):
            o[i, 0] = pack16(np.float32(zr[i].real), np.float32(zr[i].imag), fmt)

    def _signatures(sixteen):
        """The exact types: C-contiguous ring (channel-major), parameters, ``d``, ``k``, ``y_out``; ``x_t`` any
        strides."""
        A = _t.Array
        out = []
        for cdt, rdt in ((_t.complex64, _t.float32),) if sixteen else ((_t.complex64, _t.float32),
                                                                      (_t.complex128, _t.float64)):
            buf = A(_t.uint16, 5, "C") if sixteen else A(cdt, 4, "C")
            p = A(cdt, 2, "C")
            tail = (_t.int64, A(rdt, 2, "A"), p, p, p, p, p, A(rdt, 1, "C"), A(_t.int64, 1, "C"),
                    A(rdt, 2, "C"))
            out.append(_t.int64(buf, buf, _t.int64, *tail))         # fmt (unused for complex), t, ...
        return out

    #: (history storage, parallel) -> the entry point; storage "complex" (complex64 / complex128 ring) or
    #: "16-bit" (a uint16 ring of float16 / bfloat16 pairs)
    STEP_ENTRIES = {("complex", False): _step_c_serial, ("complex", True): _step_c_parallel,
                    ("16-bit", False): _step_16_serial, ("16-bit", True): _step_16_parallel}


class StepKernels:
    """The compiled entry points of one ring storage (``"complex"`` or ``"16-bit"``), by name: ``serial``
    and ``parallel``, None until :meth:`get` compiles them (or loads them from Numba's disk cache)."""

    __slots__ = ("storage", "serial", "parallel")

    def __init__(self, storage):
        self.storage = storage
        self.serial = self.parallel = None

    def get(self, parallel):
        """The serial or ``parallel`` entry point, compiled on first use for its exact signatures."""
        kern = self.parallel if parallel else self.serial
        if kern is None:
            kern = compile_loop(STEP_ENTRIES[(self.storage, bool(parallel))], _signatures(self.storage == "16-bit"))
            if parallel:
                self.parallel = kern
            else:
                self.serial = kern
        return kern


#: ring storage -> its compiled entry points (:class:`StepKernels`)
STEP_KERNELS = {"complex": StepKernels("complex"), "16-bit": StepKernels("16-bit")}


def step_kernel(storage, parallel):
    """The compiled entry point for a ``storage`` ring (``"complex"`` or ``"16-bit"``), serial or ``parallel``."""
    return STEP_KERNELS[storage].get(parallel)


if _nb is None:                # no Numba: ddesys.cpu.step.step_available() is False and nothing below is called
    encode16_loop = pack16 = unpack16 = None
