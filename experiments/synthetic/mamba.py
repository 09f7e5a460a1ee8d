"""A CPU training path for the Mamba baseline: Mamba's selective scan compiled with Numba.

``transformers``' Mamba runs its reference scan on the CPU (``mamba-ssm`` has CUDA kernels only): a
Python loop over the tokens, far too slow for a training step of the CPU preset, so the baseline
could not be trained on the CPU. :func:`accelerate` swaps, on one model's own mixers (no global patch), the
training-time forward for the same computation with the scan below; the weights, their names and every
other path (generation with a cache, a padding mask, any device but the CPU) stay ``transformers``' own.

The scan, per row ``b``, channel ``d`` and state ``n`` (Mamba's selective SSM, zero initial state)::

    h_t[n] = exp(delta_t A[n]) h_{t-1}[n] + delta_t B_t[n] u_t,      y_t = sum_n C_t[n] h_t[n]

:func:`selective_scan` runs it forward (parallel over rows) and its adjoint backward, the backward
recomputing each channel's states instead of storing ``(B, D, L, N)`` of them. Without Numba it is a
plain torch loop (slow; the documented fallback). tests/experiments/test_mamba_scan.py checks both against a
float64 loop and the whole mixer against ``transformers``' reference forward.
"""
from __future__ import annotations

import types

import numpy as np
import torch
import torch.nn.functional as F

from ddesys.recurrence import numba_available
from ddesys.cpu.threads import numba_threads

__all__ = ["selective_scan", "accelerate"]

if numba_available():
    import numba as _nb
    _jit = _nb.njit(parallel=True, cache=True)
    _prange = _nb.prange
else:  # pragma: no cover - the torch loop below is used instead
    _nb, _jit, _prange = None, (lambda f: f), range


@_jit
def _scan_forward(u, delta, A, Bm, Cm, y):  # pragma: no cover - jitted
    nb_, D, L = u.shape                            # Bm, Cm: (B, L, N), the state index innermost
    N = A.shape[1]
    for b in _prange(nb_):
        h = np.zeros(N)
        for d in range(D):
            h[:] = 0.0
            for t in range(L):
                dt = delta[b, d, t]
                du = dt * u[b, d, t]
                acc = 0.0
                for n in range(N):
                    h[n] = np.exp(dt * A[d, n]) * h[n] + du * Bm[b, t, n]
                    acc += Cm[b, t, n] * h[n]
                y[b, d, t] = acc


@_jit
def _scan_backward(u, delta, A, Bm, Cm, gy, gu, gdelta, gA_rows, gB, gC):  # pragma: no cover - jitted
    nb_, D, L = u.shape
    N = A.shape[1]
    for b in _prange(nb_):
        hs = np.zeros((L + 1, N))                  # hs[t + 1] = h_t; hs[0] = 0
        da = np.zeros((L, N))                      # the step's decay exp(delta_t A)
        g = np.zeros(N)
        for d in range(D):
            for t in range(L):                     # recompute this channel's states
                dt = delta[b, d, t]
                du = dt * u[b, d, t]
                for n in range(N):
                    a = np.exp(dt * A[d, n])
                    da[t, n] = a
                    hs[t + 1, n] = a * hs[t, n] + du * Bm[b, t, n]
            g[:] = 0.0                             # dL/dh_t, accumulated backwards in time
            for t in range(L - 1, -1, -1):
                dt = delta[b, d, t]
                ut = u[b, d, t]
                dyt = gy[b, d, t]
                s_delta = 0.0
                s_u = 0.0
                for n in range(N):
                    gC[b, t, n] += hs[t + 1, n] * dyt
                    gn = g[n] + Cm[b, t, n] * dyt
                    a = da[t, n]
                    gah = gn * hs[t, n] * a            # dL/da times a
                    s_delta += gah * A[d, n] + gn * Bm[b, t, n] * ut
                    gA_rows[b, d, n] += gah * dt
                    gB[b, t, n] += gn * dt * ut
                    s_u += gn * Bm[b, t, n]
                    g[n] = gn * a
                gdelta[b, d, t] = s_delta
                gu[b, d, t] = s_u * dt


def _loop(u, delta, A, Bm, Cm):
    """The scan as a torch loop (autograd): the fallback without Numba."""
    h = u.new_zeros(u.shape[0], u.shape[1], A.shape[1])                        # (B, D, N)
    ys = []
    for t in range(u.shape[-1]):
        dt = delta[..., t, None]                                               # (B, D, 1)
        h = torch.exp(dt * A) * h + dt * u[..., t, None] * Bm[:, None, :, t]   # (B, D, N)
        ys.append((h * Cm[:, None, :, t]).sum(-1))                             # (B, D)
    return torch.stack(ys, -1)                                                 # (B, D, L)


class _Scan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, delta, A, Bm, Cm):                # Bm, Cm: (B, L, N) here
        arrs = [t.detach().contiguous().numpy() for t in (u, delta, A, Bm, Cm)]
        y = np.empty_like(arrs[0])
        with numba_threads():
            _scan_forward(*arrs, y)
        ctx.save_for_backward(u, delta, A, Bm, Cm)
        return torch.from_numpy(y)

    @staticmethod
    def backward(ctx, gy):
        arrs = [t.detach().contiguous().numpy() for t in ctx.saved_tensors]
        u, delta, A, Bm, Cm = arrs
        gy = gy.detach().contiguous().numpy().astype(u.dtype, copy=False)
        gu, gdelta = np.empty_like(u), np.empty_like(delta)
        gA_rows = np.zeros((u.shape[0],) + A.shape, dtype=A.dtype)
        gB, gC = np.zeros_like(Bm), np.zeros_like(Cm)
        with numba_threads():
            _scan_backward(u, delta, A, Bm, Cm, gy, gu, gdelta, gA_rows, gB, gC)
        return tuple(torch.from_numpy(a) for a in (gu, gdelta, gA_rows.sum(0), gB, gC))


def selective_scan(u, delta, A, Bm, Cm):
    """Mamba's selective scan (module docstring), zero initial state, with gradients for every input.

    ``u``, ``delta``: (B, D, L) inputs and positive step sizes; ``A``: (D, N); ``Bm``, ``Cm``: (B, N, L).
    Returns ``y``: (B, D, L), in the inputs' common dtype (float32 or float64). CPU tensors; on another
    device, or without Numba, the torch loop runs instead."""
    if u.dim() != 3 or delta.shape != u.shape or A.dim() != 2 or A.shape[0] != u.shape[1] \
            or Bm.shape != (u.shape[0], A.shape[1], u.shape[2]) or Cm.shape != Bm.shape:
        raise ValueError(f"shapes: u, delta (B, D, L), A (D, N), B, C (B, N, L); got u {tuple(u.shape)}, "
                         f"delta {tuple(delta.shape)}, A {tuple(A.shape)}, B {tuple(Bm.shape)}, C {tuple(Cm.shape)}")
    dtype = torch.promote_types(torch.promote_types(u.dtype, delta.dtype),
                                torch.promote_types(A.dtype, torch.promote_types(Bm.dtype, Cm.dtype)))
    if dtype not in (torch.float32, torch.float64):
        raise TypeError(f"selective_scan computes in float32 or float64, got {dtype}")
    args = [t.to(dtype) for t in (u, delta, A, Bm, Cm)]
    if _nb is None or u.device.type != "cpu":
        return _loop(*args)
    u, delta, A, Bm, Cm = args
    return _Scan.apply(u, delta, A, Bm.transpose(1, 2), Cm.transpose(1, 2))    # the kernels' (B, L, N)


def _mixer_forward(self, hidden_states, cache=None, attention_mask=None, **kwargs):
    """``MambaMixer.forward`` without a cache or mask: the reference computation, its scan compiled."""
    if cache is not None or attention_mask is not None or kwargs.get("cache_params") is not None \
            or hidden_states.device.type != "cpu":          # a GPU keeps transformers' path (mamba-ssm's kernels)
        return type(self).forward(self, hidden_states, cache=cache, attention_mask=attention_mask, **kwargs)
    L = hidden_states.shape[1]
    x, z = self.in_proj(hidden_states).transpose(1, 2).chunk(2, dim=1)        # (B, D, L) each
    x = self.act(self.conv1d(x)[..., :L])                                     # (B, D, L): causal depthwise
    R, N = self.time_step_rank, self.ssm_state_size
    dt, Bm, Cm = torch.split(self.x_proj(x.transpose(1, 2)), [R, N, N], dim=-1)   # (B, L, R), (B, L, N) x 2
    delta = F.softplus(self.dt_proj(dt)).transpose(1, 2)                      # (B, D, L)
    A = -torch.exp(self.A_log)                                                # (D, N)
    y = selective_scan(x, delta, A, Bm.transpose(1, 2), Cm.transpose(1, 2))   # (B, D, L)
    y = (y + x * self.D[:, None]) * F.silu(z)                                 # (B, D, L)
    return self.out_proj(y.transpose(1, 2).to(hidden_states.dtype))           # (B, L, H)


def accelerate(model):
    """Give each ``transformers`` ``MambaMixer`` inside ``model`` the compiled scan for its cache-free
    forward (an attribute of those instances; the class and other models are untouched). Returns the
    number of mixers changed."""
    count = 0
    for mod in model.modules():
        if type(mod).__name__ == "MambaMixer" and hasattr(mod, "A_log") and hasattr(mod, "x_proj"):
            mod.forward = types.MethodType(_mixer_forward, mod)
            count += 1
    return count
