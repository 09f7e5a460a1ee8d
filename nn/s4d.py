"""S4D baseline (diagonal SSM, ZOH, explicit B) with the same interface as :class:`nn.DS4D`."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ddesys.discretize import zoh
from ddesys.recurrence import delay_update, readout
from ddesys.transfer import vandermonde_kernel

from .common import (StepConstants, check_cache, check_finite_params, check_input, check_sizes, check_step_input,
                     compute_dtype, continuous_poles, fft_conv, init_dt, no_autocast, s4d_modes)
from .optim import register_optim


@dataclass
class S4DCache:
    """Decode state: ``h`` ``(B, H, N2)`` complex."""
    h: torch.Tensor
    t: int = 0

    @property
    def state(self):
        return self.h

    @property
    def batch_size(self):
        return self.h.shape[0]

    @property
    def nbytes(self):
        return self.h.numel() * self.h.element_size()


class S4D(nn.Module):
    """S4D layer (Gu et al. 2022): ``h_t = exp(dt A) h_{t-1} + (exp(dt A) - 1)/A B x_t``.

    The SSM alone (FFT convolution plus the ``D`` skip); :class:`nn.s4compat.S4D` follows the S4
    repository's module contract, :class:`nn.SequenceBlock` wraps it in a residual block.

    Kernel by the Vandermonde product ``K_t = 2 Re sum_n C_n bbar_n e^{t dt A_n}``
    (:func:`ddesys.transfer.vandermonde_kernel`: fused Numba loop with its own backward on the CPU, the
    official ``polar``/``exp`` product elsewhere).
    Args as :class:`nn.DS4D` (``init``, ``dt_min``, ``dt_max``, ``bidirectional``, ``transposed``,
    ``dt_lr``). Shapes: ``(B, L, H) -> (B, L, H)``; ``step`` ``(B, H) -> (B, H)``.
    """

    cache_type = S4DCache

    def __init__(self, d_model, d_state=64, l_max=None, *, init="inv", dt_min=1e-3, dt_max=1e-1,
                 bidirectional=False, transposed=False, dt_lr=None, seed=None):
        super().__init__()
        check_sizes(self, d_model, d_state)
        self.H, self.N2 = d_model, d_state // 2
        self.bidirectional, self.transposed = bidirectional, transposed
        C = 2 * d_model if bidirectional else d_model
        g = torch.Generator().manual_seed(seed) if seed is not None else None
        a = s4d_modes(self.N2, init).expand(C, -1)                  # (C, N2)
        self.log_dt = nn.Parameter(init_dt(C, dt_min, dt_max, g))  # (C,)
        self.nu_re = nn.Parameter(torch.log(-a.real).clone())       # (C, N2)
        self.nu_im = nn.Parameter(a.imag.clone())                   # (C, N2)
        self.B = nn.Parameter(torch.view_as_real(torch.ones(C, self.N2, dtype=torch.cfloat)).clone())
        self.C = nn.Parameter(torch.view_as_real(torch.randn(C, self.N2, dtype=torch.cfloat, generator=g)))
        self.D = nn.Parameter(torch.randn(d_model, generator=g))    # (H,)
        self._step_memo = StepConstants()
        register_optim(self, "log_dt", {"weight_decay": 0.0, **({"lr": dt_lr} if dt_lr is not None else {})})
        for name in ("nu_re", "nu_im", "B"):
            register_optim(self, name, {"weight_decay": 0.0})

    def discrete(self, dtype=torch.float32):
        """``lam, bbar, c`` complex ``(C, N2)`` and ``dtA`` ``(C, N2)``."""
        f = lambda p: p.to(dtype)  # noqa: E731
        dt, a = continuous_poles(self.log_dt, self.nu_re, self.nu_im, dtype)   # (C, 1), (C, N2)
        B = torch.view_as_complex(f(self.B).contiguous())           # (C, N2)
        lam, _, bbar = zoh(a, torch.zeros_like(a), B, dt)           # (C, N2)
        return lam, bbar, torch.view_as_complex(f(self.C).contiguous()), a * dt

    def kernel(self, L, dtype=torch.float32):
        """Real kernels ``(H, L)`` (bidirectional ``(2, H, L)``)."""
        lam, bbar, c, _ = self.discrete(dtype)
        K = vandermonde_kernel(lam, c * bbar, L)                    # (C, L)
        return K.view(2, self.H, L) if self.bidirectional else K

    def forward(self, x, mode="fft"):
        """``(B, L, H) -> (B, L, H)``; ``mode="recurrent"`` steps through the sequence (verification)."""
        if mode not in ("fft", "recurrent"):
            raise ValueError(f"mode must be 'fft' or 'recurrent', got {mode!r}")
        xin = check_input(self, x)                                  # (B, H, L), any float dtype
        check_finite_params(self)
        L = xin.shape[-1]
        if xin.shape[0] == 0:                                       # empty batch: empty output
            y = self.D[:, None] * xin
        elif mode == "recurrent":
            if self.bidirectional:
                raise ValueError("mode='recurrent' is causal; a bidirectional layer has no recurrence")
            cache = self.allocate_inference_cache(xin.shape[0], dtype=xin.dtype)
            y = torch.stack([self.step(xin[..., t], cache) for t in range(L)], dim=-1)
        else:
            with no_autocast(xin):                                  # FFTs in float32 or better
                x = xin.to(compute_dtype(xin))                      # (B, H, L)
                K = self.kernel(L, x.dtype).to(x.dtype)             # (H, L) or (2, H, L)
                if self.bidirectional:
                    y = fft_conv(x, K[0]) + fft_conv(x.flip(-1), K[1]).flip(-1)
                else:
                    y = fft_conv(x, K)                              # (B, H, L)
                y = (y + self.D[:, None] * x).to(xin.dtype)
        return y if self.transposed else y.transpose(-1, -2)

    def allocate_inference_cache(self, batch_size, dtype=None):
        if self.bidirectional:
            raise ValueError("a bidirectional S4D layer sees the future; it cannot decode step by step")
        cdt = torch.complex128 if dtype == torch.float64 else torch.complex64
        return S4DCache(torch.zeros(batch_size, self.H, self.N2, dtype=cdt, device=self.D.device))

    @torch.no_grad()
    def step(self, x_t, cache):
        """``x_t`` ``(B, H)`` -> ``(B, H)``, updating ``cache`` in place (inference: no autograd)."""
        check_step_input(self, x_t, cache)
        rdt = torch.float64 if cache.h.dtype == torch.complex128 else torch.float32
        lam, bbar, c, _ = self._step_memo.get(self, rdt, lambda: self.discrete(rdt))
        cache.h.copy_(delay_update(cache.h, 0, 0, x_t.to(rdt)[..., None], lam, 0, 0, bbar))  # (B, H, N2), mu = 0
        cache.t += 1
        return readout(cache.h, c, self.D.to(rdt), x_t.to(rdt)).to(x_t.dtype)

    @torch.no_grad()
    def prefill(self, x, cache):
        """Consume a prompt ``(B, L, H)``; returns the FFT output and sets the cache state."""
        xb = check_input(self, x).double()                           # (B, H, L)
        check_cache(self, cache, xb.shape[0], what="prefill")
        if cache.t != 0:
            raise ValueError("prefill expects a fresh cache (t = 0)")
        y = self.forward(x)
        L = xb.shape[-1]
        lam, bbar, _, dtA = self.discrete(torch.float64)
        t = torch.arange(L - 1, -1, -1, dtype=torch.float64, device=xb.device)   # powers lam^{L-1-j}
        V = torch.exp(dtA[..., None] * t) * bbar[..., None]          # (H, N2, L)
        cache.h.copy_(torch.einsum("bhl,hnl->bhn", xb.to(V.dtype), V).to(cache.h.dtype))
        cache.t = L
        return y
