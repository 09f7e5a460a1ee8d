"""DS4D: the diagonal delay state space layer (SPEC sections 5-7), FFT training and recurrent decoding.

The mathematics lives in :mod:`ddesys` (ZOH, delay split, contour choice, kernel synthesis, the
one-step update); this module holds the parameterization, the convolution and the inference cache.
"""
from __future__ import annotations

import math
import warnings
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

from .common import (StepConstants, check_cache, check_finite_params, check_input, check_kernel_dtype, check_sizes,
                     check_step_input, compute_dtype, continuous_poles, decode_range, delay_range_mismatch, encode_range, fft_conv, init_dt,
                     no_autocast, s4d_modes)
from .optim import register_optim


@dataclass
class DS4DCache:
    """Decode state of one DS4D layer: ring buffer ``buf`` ``(B, R, H, N2)`` of the last ``R = k_max + 1``
    states of every mode (slot-major: a token's states are contiguous) and the number ``t`` of tokens
    consumed."""
    buf: torch.Tensor
    t: int = 0

    @property
    def state(self):
        return self.buf

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

    The SSM alone: FFT convolution with the layer's kernel plus the ``D`` skip, returning a tensor. For
    the S4 repository's module contract (activation, dropout, output GLU, ``(y, None)``) use
    :class:`nn.s4compat.DS4D`; for a residual block :class:`nn.SequenceBlock`.

    Args:
        d_model: channels ``H``.  d_state: state size ``N`` (``N/2`` complex modes stored).
        l_max: history horizon: delays live in ``[s_min, s_max]``, ``s_max = l_max - 1``. ``None``
            (default): taken from the first sequence the layer sees (``l_max = L``), then fixed and saved
            in the state dict. A given ``l_max`` more than twice the sequence length warns once (most
            delays would never act). The decode cache holds ``k_max + 1 <= l_max`` states.
        init: ``"inv"`` (S4D-Inv) or ``"lin"`` (S4D-Lin) base dynamics.
        dt_min, dt_max: log-uniform range of the initial step.
        p0: initial branch allocation ``p_n`` (0 gives exactly S4D).
        theta0, theta_jitter: delayed-branch phase ``theta0 + theta_jitter N(0, 1)``.
        delay_init: ``"grid"`` (uniform grid over ``[s_min, s_max]`` in random channel order) or
            ``"constant"`` (every channel at ``tau0`` steps).
        s_min, s_max: delay bounds in steps (``s_max`` overrides ``l_max - 1``).
        bidirectional: a second kernel per channel applied to the reversed sequence (no ``step``).
        transposed: inputs ``(B, H, L)`` instead of ``(B, L, H)``.
        dt_lr: learning rate of ``dt`` and the delay (``None``: the optimizer's); no weight decay on
            SSM parameters (see :func:`nn.optim.param_groups`).
        eps, M: contour settings: ``M = nextpow2(2L)`` (the paper's) and ``eps="auto"`` for it, about
            3e-11 relative kernel error in float64 and 2e-5 in float32 (:mod:`ddesys.contour`); pass
            ``M=4L``-sized values for 1e-13.
        kernel_dtype: precision of the kernel synthesis, ``torch.float64`` (default: batch-independent
            cost, no float32 restoration floor) or ``torch.float32``; the convolution runs in the input's
            dtype, or float32 for float16 / bfloat16 input (and under ``torch.autocast``), whose output
            is cast back to the input's dtype.
    Shapes: ``forward`` ``(B, L, H) -> (B, L, H)``; ``step`` ``(B, H) -> (B, H)``.
    """

    cache_type = DS4DCache

    def __init__(self, d_model, d_state=64, l_max=None, *, init="inv", dt_min=1e-3, dt_max=1e-1,
                 p0=0.1, theta0=math.pi, theta_jitter=0.1, delay_init="grid", tau0=None, s_min=1.0,
                 s_max=None, bidirectional=False, transposed=False, dt_lr=None, eps="auto", M=None,
                 kernel_dtype=torch.float64, seed=None):
        super().__init__()
        check_sizes(self, d_model, d_state)
        if not 0.0 <= p0 < 1.0:
            raise ValueError(f"p0 must lie in [0, 1), got {p0}")
        if delay_init not in ("grid", "constant"):
            raise ValueError(f"delay_init must be 'grid' or 'constant', got {delay_init!r}")
        if delay_init == "constant" and tau0 is None:
            raise ValueError("delay_init='constant' needs tau0 strictly inside (s_min, s_max): the initial delay "
                             "in steps")
        if not (math.isfinite(s_min) and s_min >= 1.0):
            raise ValueError(f"DS4D needs 1 <= s_min < s_max (delays of at least one step), got s_min={s_min}")
        self.H, self.N2 = d_model, d_state // 2
        self.s_min, self.s_max, self.l_max = float(s_min), None, None
        self.delay_init, self.tau0 = delay_init, tau0
        self.bidirectional, self.transposed = bidirectional, transposed
        self.eps, self.M, self.kernel_dtype = eps, M, check_kernel_dtype(self, kernel_dtype)
        self._length_checked = False
        self._step_memo = StepConstants()
        # (s_min, s_max) as float64 bit patterns in an int64 buffer: saved in the state dict, never cast by
        # .half() / .to(dtype); s_max NaN until the range is fixed (l_max=None, before the first sequence)
        self.register_buffer("delay_range", encode_range(self.s_min, None))
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
        # delay s = s_min + (s_max - s_min) sigmoid(nu_tau): the grid is a fixed set of fractions of the
        # range, so it is drawn now even when the range comes from the first sequence (l_max=None)
        self._grid_order = torch.randperm(C, generator=g) if delay_init == "grid" else None   # (C,)
        self.nu_tau = nn.Parameter(torch.zeros(C))                  # (C,) set by _set_range
        if l_max is not None or s_max is not None:
            self._set_range(l_max, s_max)
        self.B = nn.Parameter(torch.view_as_real(torch.ones(C, self.N2, dtype=torch.cfloat)).clone())  # (C, N2, 2)
        self.C = nn.Parameter(torch.view_as_real(torch.randn(C, self.N2, dtype=torch.cfloat, generator=g)))
        self.D = nn.Parameter(torch.randn(d_model, generator=g))    # (H,)
        for name in ("log_dt", "nu_tau"):
            register_optim(self, name, {"weight_decay": 0.0, **({"lr": dt_lr} if dt_lr is not None else {})})
        for name in ("nu_re", "nu_im", "r", "theta", "B"):
            register_optim(self, name, {"weight_decay": 0.0})

    # ------------------------------------------------------------------ delay range
    def _set_range(self, l_max, s_max=None):
        """Fix the delay range ``[s_min, s_max]`` (``s_max = l_max - 1`` unless given) and place the
        initial delays in it (grid or constant). Called once: at construction, or at the first
        sequence when ``l_max=None``."""
        s_max = float(l_max - 1) if s_max is None else float(s_max)
        if not (1.0 <= self.s_min < s_max) or not math.isfinite(s_max):
            src = "the first sequence's length - 1 (l_max=None)" if l_max is not None and s_max == l_max - 1 \
                else "given"
            raise ValueError(f"DS4D needs 1 <= s_min < s_max, got s_min={self.s_min}, s_max={s_max} ({src}); "
                             "pass a larger l_max (or s_max)")
        if self.delay_init == "constant" and not self.s_min < self.tau0 < s_max:
            raise ValueError(f"delay_init='constant' needs tau0 strictly inside (s_min, s_max) = ({self.s_min}, "
                             f"{s_max}), got tau0={self.tau0} (raise l_max or lower tau0)")
        C, (s_min, ds) = self.nu_tau.shape[0], (self.s_min, s_max - self.s_min)
        if self.delay_init == "grid":
            grid = torch.linspace(s_min, s_max, C + 2, dtype=torch.float64)[1:-1]   # (C,)
            s0 = grid[self._grid_order]
        else:
            s0 = torch.full((C,), float(self.tau0), dtype=torch.float64)
        with torch.no_grad():
            self.nu_tau.copy_(torch.logit((s0 - s_min) / ds).to(self.nu_tau))       # (C,)
        self._adopt_range(s_max, l_max if l_max is not None else int(math.floor(s_max)) + 1)

    def _adopt_range(self, s_max, l_max):
        self.s_max, self.l_max = float(s_max), int(l_max)
        self.delay_range.copy_(encode_range(self.s_min, self.s_max))
        self._step_memo.clear()

    def _ensure_range(self, L):
        """At the first sequence: fix the range from its length (``l_max=None``), or warn once when the
        given range is much longer than the sequences, so most delays would never act."""
        if self.s_max is None:
            self._set_range(L)
        elif not self._length_checked and self.s_max > 2 * L:
            warnings.warn(f"DS4D: delays are spread over [{self.s_min:g}, {self.s_max:g}] steps (l_max={self.l_max}) "
                          f"but the sequence has {L} steps: channels with delays >= {L} never act. Pass "
                          f"l_max={L} (or leave l_max=None: the range then comes from the first sequence).",
                          UserWarning, stacklevel=3)
        self._length_checked = True

    def _require_range(self, what):
        if self.s_max is None:
            raise RuntimeError(f"DS4D(l_max=None) fixes its delay range at the first forward; run one forward "
                               f"pass (or build the layer with l_max) before {what}")

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        """The checkpoint's ``delay_range`` (what gives ``nu_tau`` its meaning) must equal the layer's; a layer
        whose range is not fixed yet adopts it; checkpoints saved before the range was stored load as before."""
        key = prefix + "delay_range"
        saved = decode_range(state_dict[key]) if key in state_dict else None
        err = delay_range_mismatch(self, saved)
        if err:
            error_msgs.append(err)
            return
        if saved is None:                            # checkpoint from before the range was saved
            state_dict[key] = self.delay_range.clone()
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)
        if saved is not None and saved[1] is not None and self.s_max is None:
            self.s_min = saved[0]
            self._adopt_range(saved[1], int(math.floor(saved[1])) + 1)

    # ------------------------------------------------------------------ discretization
    def discrete(self, dtype=None):
        """Discrete parameters, complex ``(C, N2)``: ``lam, mu, bbar, c`` and ``k`` (int), ``alpha``,
        ``delay`` ``(C,)`` (``C = 2H`` when bidirectional). Differentiable; ``dtype`` real precision."""
        self._require_range("discretizing")
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
        if self.s_max is None:
            self._set_range(L)
        lam, mu, bbar, c, k, alpha, _ = self.discrete()
        M, rho = self.contour(L, eps=eps, M=M)
        rho_t = torch.full(k.shape, rho, dtype=self.kernel_dtype, device=lam.device)
        K = synthesize_kernel(lam, mu, c * bbar, k, alpha, L, M, rho_t)   # (C, L)
        return K.view(2, self.H, L) if self.bidirectional else K

    # ------------------------------------------------------------------ training path
    def forward(self, x, mode="fft"):
        """``x`` ``(B, L, H)`` (transposed: ``(B, H, L)``) -> same shape. ``mode``: ``"fft"`` or
        ``"recurrent"`` (exact recurrence, sequential, for verification; no autograd)."""
        if mode not in ("fft", "recurrent"):
            raise ValueError(f"mode must be 'fft' or 'recurrent', got {mode!r}")
        xin = check_input(self, x)                                  # (B, H, L), any float dtype
        self._ensure_range(xin.shape[-1])
        check_finite_params(self)
        if mode == "fft":
            y = self._fft(xin)
        elif self.bidirectional:
            raise ValueError("mode='recurrent' is causal; a bidirectional layer has no recurrence")
        else:
            y = self._recurrent(xin)
        return y if self.transposed else y.transpose(-1, -2)

    def _fft(self, xin):
        """FFT path on ``(B, H, L)`` input of any float dtype -> ``(B, H, L)`` in that dtype."""
        if xin.shape[0] == 0:                                       # empty batch: empty output
            return self.D[:, None] * xin
        with no_autocast(xin):                                      # FFTs and the kernel in float32 or better
            x = xin.to(compute_dtype(xin))                          # (B, H, L)
            K = self.kernel(x.shape[-1]).to(x.dtype)                # (H, L) or (2, H, L)
            if self.bidirectional:
                y = fft_conv(x, K[0]) + fft_conv(x.flip(-1), K[1]).flip(-1)
            else:
                y = fft_conv(x, K)                                  # (B, H, L)
            return (y + self.D[:, None] * x).to(xin.dtype)

    @torch.no_grad()
    def _recurrent(self, x):
        if x.shape[0] == 0:
            return self.D[:, None] * x
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
        self._require_range("allocate_inference_cache")
        check_finite_params(self)
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
        xb = check_input(self, x)                                   # (B, H, L)
        check_cache(self, cache, xb.shape[0], what="prefill")
        if cache.t != 0:
            raise ValueError("prefill expects a fresh cache (t = 0); allocate a new one")
        check_finite_params(self)
        y = self._fft(xb)                                           # a prompt may be shorter than l_max
        y = y if self.transposed else y.transpose(-1, -2)
        Bsz, H, L = xb.shape
        R = cache.n_slots
        if Bsz == 0:
            cache.t = L
            return y
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
        check_finite_params(self)
        lam, mu, bbar, c, k, alpha, s = (z.cpu().numpy() for z in self.discrete(torch.float64))
        d = self.D.double().cpu().numpy()
        if self.bidirectional:
            sh = lambda z: z.reshape(2, self.H, *z.shape[1:])  # noqa: E731
            return DiscreteDelaySystem(sh(lam), sh(mu), sh(bbar), sh(c), sh(s), np.stack([d, np.zeros_like(d)]))
        return DiscreteDelaySystem(lam, mu, bbar, c, s, d)
