"""Fused DS4D decode step (Triton): one program per (batch, channel) does, for all its modes,

locate the slots of ``t-1``, ``t-k``, ``t-k-1`` in the ring buffer; gather them with the validity mask
of the cache position; interpolate; update ``h_t``; write it into slot ``t mod R``; read out ``y_t``.

Ring buffer layout ``(B, R, H, N2)`` complex (slot-major: one token's states are contiguous), or a
16-bit history float16 / bfloat16 ``(B, R, H, N2, 2)`` (real, imaginary): the kernel reads the ring as
real pairs either way, widens each load to the update's precision (float32 for a 16-bit history) and
rounds each store to the ring's dtype (round to nearest even).
The reference is ``nn.engine.ReferenceEngine`` (``ddesys.recurrence.delay_update`` / ``readout``).
The launch runs under :func:`gpu.device_guard` (the buffer's CUDA device, not the current one).

:func:`prepare_step` validates a ring and its constants once and returns the per-token launcher
``nn.DS4D``'s Triton engine calls; :func:`triton_step` is one validated step. (Named apart from
:func:`ddesys.cpu.step.decode_step`, the CPU step with another contract: NumPy arrays, ``y_out`` written
in place.)
"""
from __future__ import annotations

import torch

from . import OPTIONS, device_guard, triton_available

if triton_available():
    import triton
    import triton.language as tl

    @triton.jit(do_not_specialize=["t"])                 # one compiled variant for every position
    def _decode_kernel(BUF, X, LAM, M1, M2, BB, C, D, K, Y, t, R, H, N2, BLOCK_N: tl.constexpr):
        b = tl.program_id(0).to(tl.int64)             # int64 offsets: B R H N2 can pass 2^31
        h = tl.program_id(1).to(tl.int64)
        n = tl.arange(0, BLOCK_N)
        mask = n < N2
        kh = tl.load(K + h).to(tl.int64)
        x = tl.load(X + b * H + h)
        pm = (h * N2 + n) * 2                                   # (H, N2, 2) parameter layout

        t = t.to(tl.int64)
        s_t = t % R
        s_prev = (t - 1 + R) % R
        s_k = ((t - kh) % R + R) % R
        s_k1 = ((t - kh - 1) % R + R) % R
        tv = n.to(tl.int64) * 0 + t                             # position as a vector (vector masks)
        v_prev = tv >= 1
        v_k = tv - kh >= 0
        v_k1 = tv - kh - 1 >= 0

        o_t = ((b * R + s_t) * H + h) * N2
        o_prev = ((b * R + s_prev) * H + h) * N2
        o_k = ((b * R + s_k) * H + h) * N2
        o_k1 = ((b * R + s_k1) * H + h) * N2
        a_r = tl.load(LAM + pm, mask=mask, other=0.0)            # the update's precision
        wt = a_r.dtype                                          # a 16-bit ring's loads widen to it
        pr = tl.load(BUF + (o_prev + n) * 2, mask=mask & v_prev, other=0.0).to(wt)
        pi = tl.load(BUF + (o_prev + n) * 2 + 1, mask=mask & v_prev, other=0.0).to(wt)
        kr = tl.load(BUF + (o_k + n) * 2, mask=mask & v_k, other=0.0).to(wt)
        ki = tl.load(BUF + (o_k + n) * 2 + 1, mask=mask & v_k, other=0.0).to(wt)
        lr = tl.load(BUF + (o_k1 + n) * 2, mask=mask & v_k1, other=0.0).to(wt)
        li = tl.load(BUF + (o_k1 + n) * 2 + 1, mask=mask & v_k1, other=0.0).to(wt)

        a_i = tl.load(LAM + pm + 1, mask=mask, other=0.0)
        m1r = tl.load(M1 + pm, mask=mask, other=0.0)
        m1i = tl.load(M1 + pm + 1, mask=mask, other=0.0)
        m2r = tl.load(M2 + pm, mask=mask, other=0.0)
        m2i = tl.load(M2 + pm + 1, mask=mask, other=0.0)
        br = tl.load(BB + pm, mask=mask, other=0.0)
        bi = tl.load(BB + pm + 1, mask=mask, other=0.0)
        cr = tl.load(C + pm, mask=mask, other=0.0)
        ci = tl.load(C + pm + 1, mask=mask, other=0.0)

        hr = a_r * pr - a_i * pi + m1r * kr - m1i * ki + m2r * lr - m2i * li + br * x
        hi = a_r * pi + a_i * pr + m1r * ki + m1i * kr + m2r * li + m2i * lr + bi * x
        st = BUF.dtype.element_ty                               # the ring's dtype: a 16-bit store rounds
        tl.store(BUF + (o_t + n) * 2, hr.to(st), mask=mask)
        tl.store(BUF + (o_t + n) * 2 + 1, hi.to(st), mask=mask)
        y = 2.0 * tl.sum(tl.where(mask, cr * hr - ci * hi, 0.0), axis=0) + tl.load(D + h) * x
        tl.store(Y + b * H + h, y)


HISTORY16 = (torch.float16, torch.bfloat16)


def _ring_dtypes(buf):
    """``(complex dtype of the parameters, real dtype of the update)`` for a ring buffer."""
    if buf.dtype in HISTORY16:
        return torch.complex64, torch.float32
    return buf.dtype, (torch.float64 if buf.dtype == torch.complex128 else torch.float32)


def check_decode_inputs(buf, x_t, lam, m1, m2, bbar, c, d, k):
    """The ring buffer is written in place: complex64/complex128 ``(B, R, H, N2)`` or float16/bfloat16
    ``(B, R, H, N2, 2)`` (a 16-bit history), contiguous; every other argument on its device with the
    matching shape (``x_t`` ``(B, H)``, coefficients ``(H, N2)``, ``d`` and integer ``k`` ``(H,)``).
    Raises ``TypeError`` / ``ValueError`` naming the argument."""
    if not isinstance(buf, torch.Tensor) or buf.dtype not in (torch.complex64, torch.complex128) + HISTORY16:
        raise TypeError(f"triton_step: the ring buffer must be a complex64/complex128 tensor (or float16/bfloat16 "
                        f"(B, R, H, N2, 2) for a 16-bit history), got {getattr(buf, 'dtype', type(buf).__name__)}")
    if buf.dtype in HISTORY16:
        if buf.dim() != 5 or buf.shape[-1] != 2:
            raise ValueError(f"triton_step: a 16-bit ring buffer must have shape (B, R, H, N2, 2), got "
                             f"{tuple(buf.shape)}")
    elif buf.dim() != 4:
        raise ValueError(f"triton_step: the ring buffer must have shape (B, R, H, N2), got {tuple(buf.shape)}")
    if not buf.is_contiguous():
        raise ValueError("triton_step: the ring buffer must be contiguous (it is updated in place)")
    B, R, H, N2 = buf.shape[:4]
    shapes = dict(x_t=(B, H), lam=(H, N2), m1=(H, N2), m2=(H, N2), bbar=(H, N2), c=(H, N2), d=(H,), k=(H,))
    values = dict(x_t=x_t, lam=lam, m1=m1, m2=m2, bbar=bbar, c=c, d=d, k=k)
    for name, shape in shapes.items():
        t = values[name]
        if t is None and name == "x_t":
            continue
        if tuple(t.shape) != shape:
            raise ValueError(f"triton_step: {name} must have shape {shape} for a buffer {tuple(buf.shape)}, "
                             f"got {tuple(t.shape)}")
        if t.device != buf.device:
            raise ValueError(f"triton_step: {name} is on {t.device} but the ring buffer is on {buf.device}")
    if k.dtype.is_floating_point or k.dtype.is_complex:
        raise TypeError(f"triton_step: k must be an integer tensor, got {k.dtype}")


def _ring_args(buf, lam, m1, m2, bbar, c, d, k):
    """The launch arguments that do not change per token: the ring as real pairs, constants as contiguous
    real views in the update's precision."""
    pdt, rdt = _ring_dtypes(buf)
    r = lambda z: torch.view_as_real(z.to(pdt).resolve_conj().contiguous()).contiguous()  # noqa: E731
    ring = buf if buf.dtype in HISTORY16 else torch.view_as_real(buf)
    return ring, (r(lam), r(m1), r(m2), r(bbar), r(c), d.to(rdt).contiguous(), k.contiguous()), rdt


def decode_launch(buf, x_t, lam, m1, m2, bbar, c, d, k, t):
    """``(kernel, grid, args, meta, y)`` of one step: the one place its arguments are formed, shared by
    :func:`triton_step` and the ahead-of-time compile check (:mod:`gpu.aot`)."""
    check_decode_inputs(buf, x_t, lam, m1, m2, bbar, c, d, k)
    ring, consts, rdt = _ring_args(buf, lam, m1, m2, bbar, c, d, k)
    return _launch(buf, ring, consts, rdt, x_t, t)


def _launch(buf, ring, consts, rdt, x_t, t):
    B, R, H, N2 = buf.shape[:4]
    y = torch.empty(B, H, dtype=rdt, device=buf.device)                          # (B, H)
    block = triton.next_power_of_2(N2)
    args = (ring, x_t.to(rdt).contiguous(), *consts[:5], consts[5], consts[6], y, int(t), R, H, N2)
    # one warp per (batch, channel) program for N2 <= 32 modes: the work is a few loads per mode
    meta = dict(BLOCK_N=block, num_warps=max(1, min(4, block // 32)), **OPTIONS)
    return _decode_kernel, (B, H), args, meta, y


def prepare_step(buf, lam, m1, m2, bbar, c, d, k):
    """Validate a ring and its constants once; returns ``run(x_t, t) -> y_t`` ``(B, H)``, one fused step
    per call (``x_t`` ``(B, H)`` on the ring's device, checked for its shape only)."""
    check_decode_inputs(buf, None, lam, m1, m2, bbar, c, d, k)
    ring, consts, rdt = _ring_args(buf, lam, m1, m2, bbar, c, d, k)
    B, H = buf.shape[0], buf.shape[2]

    def run(x_t, t):
        if tuple(x_t.shape) != (B, H):
            raise ValueError(f"triton_step: x_t must have shape {(B, H)}, got {tuple(x_t.shape)}")
        kernel, grid, args, meta, y = _launch(buf, ring, consts, rdt, x_t, t)
        with device_guard(buf):
            kernel[grid](*args, **meta)
        return y
    return run


def triton_step(buf, x_t, lam, m1, m2, bbar, c, d, k, t):
    """One fused step. ``buf`` complex ``(B, R, H, N2)`` or 16-bit ``(B, R, H, N2, 2)`` (updated in place),
    ``x_t`` real ``(B, H)``, ``lam, m1, m2, bbar, c`` complex ``(H, N2)``, ``d`` ``(H,)``, ``k`` int ``(H,)``,
    ``t`` the position. Returns ``y_t`` ``(B, H)`` in the update's real dtype."""
    kernel, grid, args, meta, y = decode_launch(buf, x_t, lam, m1, m2, bbar, c, d, k, t)
    with device_guard(buf):
        kernel[grid](*args, **meta)
    return y

