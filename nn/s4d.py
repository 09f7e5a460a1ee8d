"""S4D baseline (diagonal SSM, ZOH, explicit B) with the same interface as :class:`nn.DS4D`."""
from __future__ import annotations

import torch

from ddesys.parameterization import s4d_discrete

from .autograd import vandermonde
from .base import DiagonalSSM, split_channels
from .common import check_finite_params, check_step_input
from .decode.cache import S4DCache
from .decode.carry import s4d_forward_state
from .decode.engine import S4DConstants
from .decode.select import select_engine
from .optim import register_optim


class S4D(DiagonalSSM):
    """S4D layer (Gu et al. 2022): ``h_t = exp(dt A) h_{t-1} + (exp(dt A) - 1)/A B x_t``.

    The SSM alone (FFT convolution plus the ``D`` skip); :class:`nn.s4compat.S4D` follows the S4
    repository's module contract, :class:`nn.SequenceBlock` wraps it in a residual block.
    Kernel by the Vandermonde product ``K_t = 2 Re sum_n C_n bbar_n e^{t dt A_n}``
    (:func:`ddesys.transfer.vandermonde_kernel`: fused Numba loop with its own backward on the CPU, the
    official ``polar``/``exp`` product elsewhere).

    Parameters are those of :class:`nn.DS4D` that concern the base dynamics: ``d_model``, ``d_state``,
    ``init``, ``dt_min``, ``dt_max``, ``bidirectional``, ``transposed``, ``dt_lr``, ``seed``. The kernel
    runs in float32, or float64 for float64 input. Shapes: ``(B, L, H) -> (B, L, H)``; ``step``
    ``(B, H) -> (B, H)``.
    """

    cache_type = S4DCache

    def __init__(self, d_model, d_state=64, *, init="inv", dt_min=1e-3, dt_max=1e-1, bidirectional=False,
                 transposed=False, dt_lr=None, seed=None):
        super().__init__(d_model, d_state, init=init, dt_min=dt_min, dt_max=dt_max, bidirectional=bidirectional,
                         transposed=transposed, seed=seed)
        register_optim(self, "log_dt", {"weight_decay": 0.0, **({"lr": dt_lr} if dt_lr is not None else {})})
        for name in ("nu_re", "nu_im", "B"):
            register_optim(self, name, {"weight_decay": 0.0})

    def memo_key(self):
        """What the decode constants depend on besides the parameters: nothing (``StepMemo``).

        Returns
        -------
        None
        """
        return None

    def discrete(self, dtype=torch.float32):
        """The discrete system (differentiable).

        Parameters
        ----------
        dtype : torch.dtype, default torch.float32
            Real working precision.

        Returns
        -------
        S4DDiscrete
            :class:`ddesys.parameterization.S4DDiscrete`: complex ``lam, bbar, c`` and ``dtA`` ``(C, N2)``
            (``C = 2H`` when bidirectional).
        """
        f = lambda p: p.to(dtype)  # noqa: E731
        return s4d_discrete(f(self.log_dt), f(self.nu_re), f(self.nu_im), f(self.B), f(self.C))

    def delay_form(self, dtype=torch.float32):
        """The modes and delays as :meth:`nn.DS4D.delay_form`: no delayed branch (``mu = 0``), delays of one
        step.

        Parameters
        ----------
        dtype : torch.dtype, default torch.float32
            Real working precision.

        Returns
        -------
        lam, mu, bbar, c : Tensor ``(C, N2)`` complex
        delay : Tensor ``(C,)`` float64
            All ones.
        """
        d = self.discrete(dtype)
        ones = torch.ones(d.lam.shape[0], dtype=torch.float64, device=d.lam.device)
        return d.lam, torch.zeros_like(d.lam), d.bbar, d.c, ones

    def kernel(self, L, dtype=torch.float32):
        """The layer's convolution kernels (differentiable), ``D`` excluded.

        Parameters
        ----------
        L : int
            Kernel length.
        dtype : torch.dtype, default torch.float32
            Real precision.

        Returns
        -------
        Tensor ``(H, L)``, real
            ``(2, H, L)`` for a bidirectional layer.
        """
        d = self.discrete(dtype)
        return split_channels(vandermonde(d.lam, d.c * d.bbar, L), self.H, self.bidirectional)

    def time_kernel(self, L, dtype=torch.float64):
        """The kernel and its derivative in the layer's time (no gradient): what a learned binary clock's
        gradient needs (:func:`nn.tick_grad.tick_grad`).

        Parameters
        ----------
        L : int
            Kernel length.
        dtype : torch.dtype, default torch.float64
            Real precision.

        Returns
        -------
        tuple of Tensor ``(H, L)``, or None
            ``K(m)`` and ``K'(m) = 2 Re sum_n C_n bbar_n log(lam_n) lam_n^m``, real in ``dtype``; None for a
            bidirectional layer.
        """
        if self.bidirectional:
            return None
        with torch.no_grad():
            d = self.discrete(dtype)
            cb = d.c * d.bbar
            return vandermonde(d.lam, cb, L), vandermonde(d.lam, cb * torch.log(d.lam), L)

    def _kernel_for(self, x, branches=True):
        return self.kernel(x.shape[-1], x.dtype).to(x.dtype)

    def _state_path(self, xin, state, return_state):
        return s4d_forward_state(self, xin, state, return_state)

    def _recurrent(self, x):
        cache = self.allocate_inference_cache(x.shape[0], dtype=x.dtype)
        return torch.stack([self.step(x[..., t], cache) for t in range(x.shape[-1])], dim=-1)   # (B, H, L)

    def allocate_inference_cache(self, batch_size, max_seqlen=None, dtype=None, **kwargs):
        """A fresh :class:`S4DCache` bound to this layer (Mamba's signature; ``allocate_inference_cache(8)``
        works as before).

        Parameters
        ----------
        batch_size : int
        max_seqlen : int, optional
            Validated (a positive int) and recorded, used for nothing else: the state is ``(B, H, N/2)``
            whatever the length.
        dtype : torch.dtype, optional
            ``torch.float64``: complex128 state; None or another float dtype: complex64.
        **kwargs
            ``history_dtype`` (DS4D's 16-bit delay history: None, ``torch.float16`` or ``torch.bfloat16``)
            is accepted so that a script switches layers without edits, and changes nothing: S4D keeps no
            history, only its current state.

        Returns
        -------
        S4DCache
            State ``(B, H, N/2)`` complex.

        Raises
        ------
        TypeError
            A bad ``batch_size``, ``max_seqlen`` or ``dtype``; another keyword.
        ValueError
            A bidirectional layer; a bad ``history_dtype``.
        FloatingPointError
            Non-finite parameters (on the CPU).
        """
        max_seqlen, rdt = self.prepare_decode(batch_size, max_seqlen, dtype)
        hd = kwargs.pop("history_dtype", None)
        if hd not in (None, torch.float16, torch.bfloat16):
            raise ValueError(f"history_dtype must be None, torch.float16 or torch.bfloat16, got {hd!r}")
        if kwargs:
            raise TypeError(f"S4D.allocate_inference_cache got unexpected keyword argument(s) {sorted(kwargs)}")
        check_finite_params(self)
        eng = select_engine("s4d", self.D.device)
        h = eng.allocate((batch_size, self.H, self.N2), self.cache_dtype(rdt), self.D.device)   # (B, H, N2)
        return S4DCache(h).bind(self, eng, max_seqlen)

    def step_constants(self, rdt):
        """The decode constants, computed once per parameter change.

        Parameters
        ----------
        rdt : torch.dtype
            Real precision, ``torch.float32`` or ``torch.float64``.

        Returns
        -------
        S4DConstants
            :class:`nn.decode.engine.S4DConstants`: ``lam, bbar, c`` ``(H, N2)`` complex, ``d`` ``(H,)``.

        Raises
        ------
        FloatingPointError
            Non-finite parameters, named, on every device.
        """
        check_finite_params(self, any_device=True)
        d = self.discrete(rdt)
        return S4DConstants(d.lam.detach(), d.bbar.detach(), d.c.detach(), self.D.detach().to(rdt))

    @torch.no_grad()
    def step(self, x_t, cache):
        """One token of recurrent decoding, updating ``cache`` in place with its engine (no autograd).

        Parameters
        ----------
        x_t : Tensor ``(B, H)``
        cache : S4DCache
            From :meth:`allocate_inference_cache`.

        Returns
        -------
        Tensor ``(B, H)``
            In ``x_t``'s dtype.

        Raises
        ------
        ValueError, TypeError, RuntimeError
            A bidirectional layer, an ``x_t`` of another shape or dtype, a cache of another layer (named).
        """
        check_step_input(self, x_t, cache)
        consts = self.bind_cache(cache)
        y = cache.engine.step(cache, x_t, consts)
        cache.t += 1
        return y.to(x_t.dtype)

    @torch.no_grad()
    def prefill(self, x, cache, lengths=None):
        """Consume a prompt in parallel and move the cache on by its length.

        Parameters
        ----------
        x : Tensor ``(B, L, H)`` (transposed layers: ``(B, H, L)``)
        cache : S4DCache
            Its state set to ``h_n = sum_j bbar_n lam_n^(L-1-j) x_j`` (plus ``lam_n^L h_n`` from a cache
            that already holds tokens: chunked prefill equals one prefill, :mod:`nn.decode.history`).
        lengths : Tensor or sequence of int ``(B,)``, optional
            A right-padded prompt in a fresh cache, as :meth:`nn.DS4D.prefill`.

        Returns
        -------
        Tensor, the shape and dtype of ``x``

        Raises
        ------
        ValueError, TypeError, RuntimeError
            An ``x`` of another shape, a cache of another layer or batch, a cache with autograd history,
            ``lengths`` with a cache that holds tokens.

        Notes
        -----
        The cache's engine runs it: one compiled pass on the CPU (:func:`nn.decode.prefill.fused_s4d`),
        else the Vandermonde product.
        """
        if lengths is not None:                                     # a right-padded batch (nn.lengths)
            return self._prefill_padded(x, cache, lengths)
        xb = self._begin_prefill(x, cache)                          # (B, H, L)
        y = cache.engine.prefill(self, cache, xb)                   # (B, H, L)
        cache.t += xb.shape[-1]
        return (y if self.transposed else y.transpose(-1, -2)).to(x.dtype)
