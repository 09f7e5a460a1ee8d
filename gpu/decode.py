"""Fused DS4D decode step (Triton): one program per (batch, channel) does, for all its modes,

locate the slots of ``t-1``, ``t-k``, ``t-k-1`` in the ring buffer; gather them with the validity mask
of the cache position; interpolate; update ``h_t``; write it into slot ``t mod R``; read out ``y_t``.

Ring buffer layout ``(B, R, H, N2)`` complex (slot-major: one token's states are contiguous).
The reference is ``nn.DS4D.step``'s torch path (``ddesys.recurrence.delay_update`` / ``readout``).
The launch runs under :func:`gpu.device_guard` (the buffer's CUDA device, not the current one).
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
        pr = tl.load(BUF + (o_prev + n) * 2, mask=mask & v_prev, other=0.0)
        pi = tl.load(BUF + (o_prev + n) * 2 + 1, mask=mask & v_prev, other=0.0)
        kr = tl.load(BUF + (o_k + n) * 2, mask=mask & v_k, other=0.0)
        ki = tl.load(BUF + (o_k + n) * 2 + 1, mask=mask & v_k, other=0.0)
        lr = tl.load(BUF + (o_k1 + n) * 2, mask=mask & v_k1, other=0.0)
        li = tl.load(BUF + (o_k1 + n) * 2 + 1, mask=mask & v_k1, other=0.0)

        a_r = tl.load(LAM + pm, mask=mask, other=0.0)
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
        tl.store(BUF + (o_t + n) * 2, hr, mask=mask)
        tl.store(BUF + (o_t + n) * 2 + 1, hi, mask=mask)
        y = 2.0 * tl.sum(tl.where(mask, cr * hr - ci * hi, 0.0), axis=0) + tl.load(D + h) * x
        tl.store(Y + b * H + h, y)


def check_decode_inputs(buf, x_t, lam, m1, m2, bbar, c, d, k):
    """The ring buffer is written in place: complex64/complex128 ``(B, R, H, N2)`` and contiguous; every
    other argument on its device with the matching shape (``x_t`` ``(B, H)``, coefficients ``(H, N2)``,
    ``d`` and integer ``k`` ``(H,)``). Raises ``TypeError`` / ``ValueError`` naming the argument."""
    if not isinstance(buf, torch.Tensor) or buf.dtype not in (torch.complex64, torch.complex128):
        raise TypeError(f"decode_step: the ring buffer must be a complex64/complex128 tensor, got "
                        f"{getattr(buf, 'dtype', type(buf).__name__)}")
    if buf.dim() != 4:
        raise ValueError(f"decode_step: the ring buffer must have shape (B, R, H, N2), got {tuple(buf.shape)}")
    if not buf.is_contiguous():
        raise ValueError("decode_step: the ring buffer must be contiguous (it is updated in place)")
    B, R, H, N2 = buf.shape
    shapes = dict(x_t=(B, H), lam=(H, N2), m1=(H, N2), m2=(H, N2), bbar=(H, N2), c=(H, N2), d=(H,), k=(H,))
    values = dict(x_t=x_t, lam=lam, m1=m1, m2=m2, bbar=bbar, c=c, d=d, k=k)
    for name, shape in shapes.items():
        t = values[name]
        if tuple(t.shape) != shape:
            raise ValueError(f"decode_step: {name} must have shape {shape} for a buffer {tuple(buf.shape)}, "
                             f"got {tuple(t.shape)}")
        if t.device != buf.device:
            raise ValueError(f"decode_step: {name} is on {t.device} but the ring buffer is on {buf.device}")
    if k.dtype.is_floating_point or k.dtype.is_complex:
        raise TypeError(f"decode_step: k must be an integer tensor, got {k.dtype}")


def decode_launch(buf, x_t, lam, m1, m2, bbar, c, d, k, t):
    """``(kernel, grid, args, meta, y)`` of one step: the one place its arguments are formed, shared by
    :func:`decode_step` and the ahead-of-time compile check (:mod:`gpu.aot`)."""
    check_decode_inputs(buf, x_t, lam, m1, m2, bbar, c, d, k)
    B, R, H, N2 = buf.shape
    rdt = torch.float64 if buf.dtype == torch.complex128 else torch.float32
    r = lambda z: torch.view_as_real(z.to(buf.dtype).contiguous()).contiguous()  # noqa: E731
    y = torch.empty(B, H, dtype=rdt, device=buf.device)                          # (B, H)
    block = triton.next_power_of_2(N2)
    args = (torch.view_as_real(buf), x_t.to(rdt).contiguous(), r(lam), r(m1), r(m2), r(bbar), r(c),
            d.to(rdt).contiguous(), k.contiguous(), y, int(t), R, H, N2)
    # one warp per (batch, channel) program for N2 <= 32 modes: the work is a few loads per mode
    meta = dict(BLOCK_N=block, num_warps=max(1, min(4, block // 32)), **OPTIONS)
    return _decode_kernel, (B, H), args, meta, y


def decode_step(buf, x_t, lam, m1, m2, bbar, c, d, k, t):
    """One fused step. ``buf`` complex ``(B, R, H, N2)`` (updated in place), ``x_t`` real ``(B, H)``,
    ``lam, m1, m2, bbar, c`` complex ``(H, N2)``, ``d`` ``(H,)``, ``k`` int ``(H,)``, ``t`` the position.
    Returns ``y_t`` ``(B, H)`` in the buffer's real dtype."""
    kernel, grid, args, meta, y = decode_launch(buf, x_t, lam, m1, m2, bbar, c, d, k, t)
    with device_guard(buf):
        kernel[grid](*args, **meta)
    return y
