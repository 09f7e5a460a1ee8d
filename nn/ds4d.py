"""DS4D: the diagonal delay state space layer (SPEC sections 5-7), FFT training and recurrent decoding.

The mathematics lives in :mod:`ddesys` (ZOH, delay split, contour choice, kernel synthesis, the
one-step update); this module holds the parameterization, the convolution and the inference cache.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ddesys import DiscreteDelaySystem
from ddesys._array import next_pow2, unit_roundoff
from ddesys.contour import choose_contour
from ddesys.discretize import zoh
from ddesys.interpolation import split_delay
from ddesys.recurrence import delay_update, readout, run_recurrence
from ddesys.transfer import synthesize_kernel

import gpu
from gpu import decode as gpu_decode

from .common import (StepConstants, check_input, check_step_input, continuous_poles, fft_conv, init_dt,
                     s4d_modes)
from .optim import register_optim


@dataclass
class DS4DCache:
    """Decode state of one DS4D layer: ring buffer ``buf`` ``(B, R, H, N2)`` of the last ``R = k_max + 1``
    states of every mode (slot-major: a token's states are contiguous) and the number ``t`` of tokens
    consumed."""
    buf: torch.Tensor
    t: int = 0

    @property
    def batch_size(self):
        return self.buf.shape[0]

    @property
    def n_slots(self):
        return self.buf.shape[1]

    @property
    def nbytes(self):
        return self.buf.numel() * self.buf.element_size()


class DS4D(nn.Module):
    """Delay S4D layer: ``H`` channels, ``N/2`` complex modes each, one learnable delay per channel.

    Args:
        d_model: channels ``H``.  d_state: state size ``N`` (``N/2`` complex modes stored).
        l_max: history horizon: delays live in ``[s_min, s_max]``, ``s_max = l_max - 1`` by default.
        init: ``"inv"`` (S4D-Inv) or ``"lin"`` (S4D-Lin) base dynamics.
        dt_min, dt_max: log-uniform range of the initial step.
        p0: initial branch allocation ``p_n`` (0 gives exactly S4D).
        theta0, theta_jitter: delayed-branch phase ``theta0 + theta_jitter N(0, 1)``.
        delay_init: ``"grid"`` (uniform grid over ``[s_min, s_max]`` in random channel order) or
            ``"constant"`` (every channel at ``tau0`` steps).
        s_min, s_max: delay bounds in steps.
        bidirectional: a second kernel per channel applied to the reversed sequence (no ``step``).
        transposed: inputs ``(B, H, L)`` instead of ``(B, L, H)``.
        dt_lr: learning rate of ``dt`` and the delay (``None``: the optimizer's); no weight decay on
            SSM parameters (see :func:`nn.optim.param_groups`).
        eps, M: contour settings: ``M = nextpow2(2L)`` (the paper's) and ``eps="auto"`` for it, about
            3e-11 relative kernel error in float64 and 2e-5 in float32 (:mod:`ddesys.contour`); pass
            ``M=4L``-sized values for 1e-13.
        kernel_dtype: precision of the kernel synthesis (float64: batch-independent cost, no float32
            restoration floor); the convolution runs in the input's dtype.
    Shapes: ``forward`` ``(B, L, H) -> (B, L, H)``; ``step`` ``(B, H) -> (B, H)``.
    """

    def __init__(self, d_model, d_state=64, l_max=1024, *, init="inv", dt_min=1e-3, dt_max=1e-1,
                 p0=0.1, theta0=math.pi, theta_jitter=0.1, delay_init="grid", tau0=None, s_min=1.0,
                 s_max=None, bidirectional=False, transposed=False, dt_lr=None, eps="auto", M=None,
                 kernel_dtype=torch.float64, seed=None):
        super().__init__()
        s_max = float(l_max - 1) if s_max is None else float(s_max)
        if not (1.0 <= s_min < s_max):
            raise ValueError(f"need 1 <= s_min < s_max (= l_max - 1 by default), got s_min={s_min}, s_max={s_max}")
        if not 0.0 <= p0 < 1.0:
            raise ValueError(f"p0 must lie in [0, 1), got {p0}")
        if delay_init not in ("grid", "constant"):
            raise ValueError(f"delay_init must be 'grid' or 'constant', got {delay_init!r}")
        if delay_init == "constant" and (tau0 is None or not s_min < tau0 < s_max):
            raise ValueError(f"delay_init='constant' needs tau0 strictly inside (s_min, s_max) = ({s_min}, "
                             f"{s_max}), got tau0={tau0} (raise l_max or lower tau0)")
        if d_state % 2:
            raise ValueError(f"d_state must be even (conjugate pairs), got {d_state}")
        self.H, self.N2, self.l_max = d_model, d_state // 2, l_max
        self.s_min, self.s_max = float(s_min), s_max
        self.bidirectional, self.transposed = bidirectional, transposed
        self.eps, self.M, self.kernel_dtype = eps, M, kernel_dtype
        C = 2 * d_model if bidirectional else d_model               # kernels: (2H) when bidirectional
        g = torch.Generator().manual_seed(seed) if seed is not None else None
        a = s4d_modes(self.N2, init).expand(C, -1)                  # (C, N2) complex
        self.log_dt = nn.Parameter(init_dt(C, dt_min, dt_max, g))  # (C,)
        self.nu_re = nn.Parameter(torch.log(-a.real).clone())       # (C, N2)
        self.nu_im = nn.Parameter(a.imag.clone())                   # (C, N2)
        p = torch.full((C, self.N2), p0, dtype=torch.float64)
        # p0 = 0: r = -1e4 makes sigmoid(r) exactly 0 (and its gradient 0), i.e. exactly S4D
        self.r = nn.Parameter(torch.logit(p).float() if p0 > 0 else torch.full((C, self.N2), -1e4))
        self.theta = nn.Parameter(theta0 + theta_jitter * torch.randn(C, self.N2, generator=g))
        if delay_init == "grid":
            grid = torch.linspace(s_min, s_max, C + 2, dtype=torch.float64)[1:-1]
            s0 = grid[torch.randperm(C, generator=g)]
        else:
            s0 = torch.full((C,), float(tau0), dtype=torch.float64)
        self.nu_tau = nn.Parameter(torch.logit((s0 - s_min) / (s_max - s_min)).float())   # (C,)
        self.B = nn.Parameter(torch.view_as_real(torch.ones(C, self.N2, dtype=torch.cfloat)).clone())  # (C, N2, 2)
        self.C = nn.Parameter(torch.view_as_real(torch.randn(C, self.N2, dtype=torch.cfloat, generator=g)))
        self.D = nn.Parameter(torch.randn(d_model, generator=g))    # (H,)
        self._step_memo = StepConstants()
        for name in ("log_dt", "nu_tau"):
            register_optim(self, name, {"weight_decay": 0.0, **({"lr": dt_lr} if dt_lr is not None else {})})
        for name in ("nu_re", "nu_im", "r", "theta", "B"):
            register_optim(self, name, {"weight_decay": 0.0})

    # ------------------------------------------------------------------ discretization
    def discrete(self, dtype=None):
        """Discrete parameters, complex ``(C, N2)``: ``lam, mu, bbar, c`` and ``k`` (int), ``alpha``,
        ``delay`` ``(C,)`` (``C = 2H`` when bidirectional). Differentiable; ``dtype`` real precision."""
        dtype = dtype or self.kernel_dtype
        f = lambda p: p.to(dtype)  # noqa: E731
        dt, a = continuous_poles(self.log_dt, self.nu_re, self.nu_im, dtype)   # (C, 1), (C, N2)
        B = torch.view_as_complex(f(self.B).contiguous())           # (C, N2)
        abar, _, bbar = zoh(a, torch.zeros_like(a), B, dt)          # (C, N2) each
        p = torch.sigmoid(f(self.r))                                # (C, N2)
        lam = (1 - p) * abar                                        # (C, N2)
        mu = p * torch.abs(abar) * torch.exp(1j * f(self.theta))    # (C, N2)
        # the delay is split in float64 whatever ``dtype``: every path (FFT kernel, decode step, cache
        # sizing) then agrees on k, which float32 rounding could otherwise move by one step
        s = self.s_min + (self.s_max - self.s_min) * torch.sigmoid(self.nu_tau.double())   # (C,)
        k, alpha = split_delay(s)                                   # (C,) int64, (C,) float64
        s, alpha = s.to(dtype), alpha.to(dtype)
        c = torch.view_as_complex(f(self.C).contiguous())           # (C, N2)
        return lam, mu, bbar, c, k, alpha, s

    def contour(self, L, dtype=None, eps=None, M=None):
        """``(M, rho)`` of the kernel synthesis for length ``L``: ``M = nextpow2(2L)`` unless set, ``eps``
        automatic for that ``M`` (:func:`ddesys.contour.choose_contour` with no decay assumed, so no
        device sync)."""
        M = M or self.M or next_pow2(2 * L)
        eps = eps if eps is not None else self.eps
        ct = choose_contour(L, np.ones(1), unit_roundoff(dtype or self.kernel_dtype), eps=eps, M=M)
        return ct.M, float(ct.rho[0])

    def kernel(self, L, eps=None, M=None):
        """Real kernels ``(H, L)`` (bidirectional: ``(2, H, L)``), in ``kernel_dtype``; ``eps``/``M``
        override the layer's contour settings for this call."""
        lam, mu, bbar, c, k, alpha, _ = self.discrete()
        M, rho = self.contour(L, eps=eps, M=M)
        rho_t = torch.full(k.shape, rho, dtype=self.kernel_dtype, device=lam.device)
        K = synthesize_kernel(lam, mu, c * bbar, k, alpha, L, M, rho_t)   # (C, L)
        return K.view(2, self.H, L) if self.bidirectional else K

    # ------------------------------------------------------------------ training path
    def forward(self, x, mode="fft"):
        """``x`` ``(B, L, H)`` (transposed: ``(B, H, L)``) -> same shape. ``mode``: ``"fft"`` or
        ``"recurrent"`` (exact recurrence, sequential, for verification; no autograd)."""
        x = check_input(self, x)                                    # (B, H, L)
        L = x.shape[-1]
        if mode == "fft":
            K = self.kernel(L).to(x.dtype)                          # (H, L) or (2, H, L)
            if self.bidirectional:
                y = fft_conv(x, K[0]) + fft_conv(x.flip(-1), K[1]).flip(-1)
            else:
                y = fft_conv(x, K)                                  # (B, H, L)
            y = y + self.D[:, None] * x
        elif mode == "recurrent":
            if self.bidirectional:
                raise ValueError("mode='recurrent' is causal; a bidirectional layer has no recurrence")
            y = self._recurrent(x)
        else:
            raise ValueError(f"mode must be 'fft' or 'recurrent', got {mode!r}")
        return y if self.transposed else y.transpose(-1, -2)

    @torch.no_grad()
    def _recurrent(self, x):
        lam, mu, bbar, c, k, alpha, _ = self.discrete(torch.float64)
        Bsz, H, L = x.shape
        rep = lambda z: z.unsqueeze(0).expand(Bsz, *z.shape).reshape(Bsz * H, *z.shape[1:])  # noqa: E731
        y = run_recurrence(rep(lam), rep(mu), rep(bbar), rep(c), rep(k), rep(alpha),
                           rep(self.D.double()), x.double().reshape(Bsz * H, L))
        return y.reshape(Bsz, H, L).to(x.dtype)

    # ------------------------------------------------------------------ decoding
    def allocate_inference_cache(self, batch_size, dtype=None):
        """A fresh :class:`DS4DCache` sized by the layer's largest delay now (``R = k_max + 1`` slots)."""
        if self.bidirectional:
            raise ValueError("a bidirectional DS4D layer sees the future; it cannot decode step by step")
        k = self.discrete(torch.float64)[4]
        R = int(k.max()) + 1
        cdt = torch.complex128 if dtype == torch.float64 else torch.complex64
        return DS4DCache(torch.zeros(batch_size, R, self.H, self.N2, dtype=cdt, device=self.D.device))

    def _step_constants(self, rdt):
        """``lam, m1 = mu (1 - alpha), m2 = mu alpha, bbar, c`` ``(H, N2)``, ``k`` ``(H,)``, ``k_max`` and
        ``arange(H)``."""
        lam, mu, bbar, c, k, alpha, _ = self.discrete(rdt)
        al = alpha[:, None]                                         # (H, 1)
        ar = torch.arange(self.H, device=lam.device)                 # channel index for the gathers
        return lam, mu * (1 - al), mu * al, bbar, c, k, int(k.max()), ar

    @torch.no_grad()
    def step(self, x_t, cache):
        """One token: ``x_t`` ``(B, H)`` -> ``y_t`` ``(B, H)``; updates ``cache`` in place (inference: no
        autograd). The discretized constants are memoized and recomputed whenever a parameter changes
        (:class:`nn.common.StepConstants`), so a weight update never leaves them stale."""
        check_step_input(self, x_t, cache)
        buf, t, R = cache.buf, cache.t, cache.n_slots
        rdt = torch.float64 if buf.dtype == torch.complex128 else torch.float32
        lam, m1, m2, bbar, c, k, k_max, ar = self._step_memo.get(self, rdt, lambda: self._step_constants(rdt))
        if k_max >= R:
            raise RuntimeError(f"the layer's delays now reach {k_max} steps, past the cache's {R - 1}: "
                               "allocate a new cache (delays changed since allocation)")
        if gpu.enabled(buf):
            y = gpu_decode.decode_step(buf, x_t, lam, m1, m2, bbar, c, self.D, k, t)
            cache.t = t + 1
            return y.to(x_t.dtype)
        hk = buf[:, (t - k) % R, ar]                                # (B, H, N2)
        hk1 = buf[:, (t - k - 1) % R, ar]                           # (B, H, N2)
        if t <= k_max:                                              # reads before the start are zero
            zero = torch.zeros((), dtype=buf.dtype, device=buf.device)
            hk = torch.where((t - k >= 0)[:, None], hk, zero)
            hk1 = torch.where((t - k - 1 >= 0)[:, None], hk1, zero)
        prev = buf[:, (t - 1) % R] if t > 0 else torch.zeros_like(hk)                     # (B, H, N2)
        xt = x_t.to(rdt)[..., None]                                 # (B, H, 1)
        h = delay_update(prev, hk, hk1, xt, lam, m1, m2, bbar)      # (B, H, N2)
        buf[:, t % R] = h
        cache.t = t + 1
        return readout(h, c, self.D.to(rdt), x_t.to(rdt)).to(x_t.dtype)              # (B, H)

    @torch.no_grad()
    def prefill(self, x, cache):
        """Consume a prompt ``x`` ``(B, L, H)`` (transposed: ``(B, H, L)``) in parallel: returns the FFT
        output and fills ``cache`` with the last ``R`` states, from per-mode state kernels."""
        if cache.t != 0:
            raise ValueError("prefill expects a fresh cache (t = 0); allocate a new one")
        if x.shape[0] != cache.batch_size:
            raise ValueError(f"prompt has batch {x.shape[0]} but the cache was allocated for {cache.batch_size}")
        y = self.forward(x)
        xb = check_input(self, x)                                   # (B, H, L)
        Bsz, H, L = xb.shape
        R = cache.n_slots
        lam, mu, bbar, c, k, alpha, _ = self.discrete(torch.float64)
        M, rho = self.contour(L, torch.float64)
        rho_t = torch.full(k.shape, rho, dtype=torch.float64, device=k.device)
        G = synthesize_kernel(lam, mu, bbar, k, alpha, L, M, rho_t, per_mode=True)  # (H, N2, L)
        Xf = torch.fft.fft(xb.double(), n=M)[:, :, None, :]          # (B, H, 1, M)
        n_keep = min(R, L)
        for s in range(0, self.N2, 8):
            Gf = torch.fft.fft(G[:, s:s + 8], n=M)                   # (H, n, M)
            hs = torch.fft.ifft(Xf * Gf, n=M)[..., L - n_keep:L]     # (B, H, n, n_keep)
            slots = torch.arange(L - n_keep, L, device=xb.device) % R
            cache.buf[:, slots, :, s:s + 8] = hs.permute(0, 3, 1, 2).to(cache.buf.dtype)
        cache.t = L
        return y

    # ------------------------------------------------------------------ analysis
    @torch.no_grad()
    def to_ddesys(self):
        """The layer's exact :class:`ddesys.DiscreteDelaySystem` (float64; batch ``(H,)``, or ``(2, H)``
        when bidirectional), for stability margins, roots, frequency responses."""
        lam, mu, bbar, c, k, alpha, s = (z.cpu().numpy() for z in self.discrete(torch.float64))
        d = self.D.double().cpu().numpy()
        if self.bidirectional:
            sh = lambda z: z.reshape(2, self.H, *z.shape[1:])  # noqa: E731
            return DiscreteDelaySystem(sh(lam), sh(mu), sh(bbar), sh(c), sh(s), np.stack([d, np.zeros_like(d)]))
        return DiscreteDelaySystem(lam, mu, bbar, c, s, d)
