"""What DS4D and S4D share: parameters of the base dynamics, input and output, the FFT forward path."""
from __future__ import annotations

import warnings
from contextlib import contextmanager

import torch
from torch import nn

from .common import (NonFiniteInputError, check_alloc_sizes, check_cache, check_dtype, check_finite_params,
                     check_input, check_sizes,
                     compute_dtype, fft_conv, init_dt, no_autocast, s4d_modes)
from .decode.engine import StepMemo
from .legacy import upgrade_layer_state
from .lengths import check_lengths, left_align, right_align, zero_padding


class DiagonalSSM(nn.Module):
    """Base of :class:`nn.DS4D` and :class:`nn.S4D`: ``H`` channels of ``N/2`` complex modes.

    Parameters (``C = 2H`` kernels when bidirectional, else ``H``): ``log_dt`` ``(C,)``, ``nu_re``,
    ``nu_im`` ``(C, N2)`` (``a = -exp(nu_re) + i nu_im``), ``B``, ``C`` ``(C, N2, 2)`` (complex as real
    pairs), ``D`` ``(H,)``. Subclasses add their own parameters between the base dynamics and ``B``
    (:meth:`_init_branch`), and define ``kernel``, ``_kernel_for``, ``_recurrent`` and decoding.
    """

    cache_type = None

    def __init__(self, d_model, d_state, *, init, dt_min, dt_max, bidirectional, transposed, seed):
        super().__init__()
        check_sizes(self, d_model, d_state)
        self.H, self.N2 = d_model, d_state // 2
        self.bidirectional, self.transposed = bidirectional, transposed
        self._step_memo = StepMemo()
        C = 2 * d_model if bidirectional else d_model
        g = torch.Generator().manual_seed(seed) if seed is not None else None
        a = s4d_modes(self.N2, init).expand(C, -1)                  # (C, N2) complex
        self.log_dt = nn.Parameter(init_dt(C, dt_min, dt_max, g))  # (C,)
        self.nu_re = nn.Parameter(torch.log(-a.real).clone())       # (C, N2)
        self.nu_im = nn.Parameter(a.imag.clone())                   # (C, N2)
        self._init_branch(C, g)
        self.B = nn.Parameter(torch.view_as_real(torch.ones(C, self.N2, dtype=torch.cfloat)).clone())   # (C, N2, 2)
        self.C = nn.Parameter(torch.view_as_real(torch.randn(C, self.N2, dtype=torch.cfloat, generator=g)))
        self.D = nn.Parameter(torch.randn(d_model, generator=g))    # (H,)

    def _init_branch(self, C, g):
        """Parameters of a subclass, drawn after the base dynamics (keeps seeded layers reproducible)."""

    def _prepare(self, L):
        """Hook run by ``forward`` before anything else with the sequence length."""

    def prepare(self, L):
        """Fix what ``forward`` fixes at a sequence of length ``L`` (DS4D with ``l_max=None``: its delay
        range, at the first one), for paths that read :meth:`delay_form` without calling ``forward`` (the
        learned clocks' scan, :func:`nn.selective.soft_forward`).

        Parameters
        ----------
        L : int
            Sequence length.

        Raises
        ------
        ValueError
            A DS4D layer whose delay range is still open and ``L - 1 <= s_min`` (no range fits).
        """
        self._prepare(int(L))

    def time_kernel(self, L, dtype=torch.float64):
        """The kernel and its derivative in the layer's time (:meth:`nn.S4D.time_kernel`), or ``None`` where
        it is not defined.

        Parameters
        ----------
        L : int
            Kernel length.
        dtype : torch.dtype, default torch.float64
            Real precision.

        Returns
        -------
        None
            Here (and for DS4D): with a delayed branch a change of the clock moves the delayed reads across
            the interpolation's kinks, and a learned clock's training runs the scan (:mod:`nn.selective`).
        """
        return None

    # ------------------------------------------------------------------ training path
    def forward(self, x, mode="fft", state=None, return_state=False, lengths=None):
        """The layer over a whole sequence: ``x`` ``(B, L, H)`` (transposed: ``(B, H, L)``) -> the same shape.

        Parameters
        ----------
        x : Tensor ``(B, L, H)`` (transposed layers: ``(B, H, L)``), any float dtype
            Non-finite values are refused (see Raises).
        mode : {"fft", "recurrent"}, default "fft"
            ``"fft"``: the FFT convolution (training); float16 / bfloat16 inputs and autocast run it in
            float32. ``"recurrent"``: the exact recurrence, sequential, for verification; under autograd its
            gradient is the FFT path's (the derivative of the same function, to the kernel synthesis
            error), so a model run in this mode still trains.
        state : cache of this layer, optional
            From ``allocate_inference_cache``, ``prefill``, decoding or a previous ``return_state``: the
            sequence continues from it (read, never modified), as S4's ``forward_state``. FFT path only;
            not for bidirectional layers, not with ``lengths``.
        return_state : bool, default False
            Also return the state after the sequence, a new cache of this layer, differentiable (autograd
            flows through a carried state, within and across chunks; ``state.detach()`` truncates it); it
            decodes like any cache once detached.
        lengths : Tensor or sequence of int ``(B,)``, optional
            A right-padded batch (ints in ``[1, L]``; ``[]`` for an empty batch): each sequence gets the
            outputs it would get alone (:mod:`nn.lengths`): the padding is replaced by zeros before anything
            reads it (it may hold anything, NaN and inf included: only valid positions are checked), outputs
            at ``t >= len_b`` are zero, a bidirectional layer's reverse kernel runs over each sequence's own
            tokens, and ``return_state=True`` returns each sequence's state after its own last token.

        Returns
        -------
        y : Tensor, the shape and dtype of ``x``
        state : cache of this layer
            Only with ``return_state=True``: ``(y, state)``.

        Raises
        ------
        ValueError
            An unknown ``mode``; a NaN or inf in ``x`` (naming the first position holding one: the FFT mixes
            all positions, so one would reach every output, earlier ones included).

        Notes
        -----
        A sequence cut into chunks, each forwarded from the previous one's state, gives the outputs of the
        whole-sequence forward (to the kernels' synthesis error: the history term uses the per-mode state
        kernels, :mod:`nn.decode.history`). The non-finite check is one sum over the input (no temporary; a
        small cost next to the FFTs), and on CUDA one device synchronization per call; under
        ``torch.compile`` it is a graph break. Finite but huge values are not refused: the FFT's rounding
        error at every position scales with the largest input of the sequence (float32: about ``1e-7 *
        max|x|``), so a value of 1e30 at the last position shows as errors of about 1e23 at earlier ones;
        normalize inputs, or use ``mode="recurrent"`` (exactly causal).
        """
        if mode not in ("fft", "recurrent"):
            raise ValueError(f"mode must be 'fft' or 'recurrent', got {mode!r}")
        xin = check_input(self, x)                                  # (B, H, L), any float dtype
        n = None if lengths is None else check_lengths(lengths, xin.shape[0], xin.shape[-1], device=xin.device)
        if n is not None:
            xin = zero_padding(xin, n, dim=-1)                      # the padding is never read, whatever it holds
        if state is None and not return_state:
            self._prepare(xin.shape[-1])
        else:                                # a chunk of a longer sequence: short by design, no length warning
            with self.as_prompt():
                self._prepare(xin.shape[-1])
        check_finite_params(self)
        if not bool(torch.isfinite(xin.sum(dtype=compute_dtype(xin)))):   # any NaN / inf makes the sum so
            bad = ~torch.isfinite(xin)                              # (B, H, L); the sum may only have overflowed
            if bool(bad.any()):
                t = int(bad.any(0).any(0).nonzero()[0, 0])          # the first position, over batch and channels
                b, h = (int(i) for i in bad[:, :, t].nonzero()[0])
                raise NonFiniteInputError(f"{type(self).__name__}: input is not finite at position {t} (batch {b}, "
                                 f"channel {h}: {float(xin[b, h, t])}; {int(bad.sum())} non-finite entries): "
                                 "the FFT path mixes all positions, so it would reach every output, earlier "
                                 "positions included; clean or mask the input")
        if n is not None:
            return self._forward_padded(xin, mode, state, return_state, n)
        if state is not None or return_state:
            y, new = self._forward_state(xin, mode, state, return_state)
            y = y if self.transposed else y.transpose(-1, -2)
            return (y, new) if return_state else y
        if mode == "fft":
            y = self._fft(xin)
        elif self.bidirectional:
            raise ValueError("mode='recurrent' is causal; a bidirectional layer has no recurrence")
        elif xin.shape[0] == 0:
            y = self.D[:, None] * xin
        else:
            y = self._exact(xin)
        return y if self.transposed else y.transpose(-1, -2)

    def _exact(self, x):
        """``mode="recurrent"`` on ``x`` ``(B, H, L)``: the recurrence's values. Under autograd (a parameter or
        ``x`` requiring grad) the gradient is the FFT path's, the derivative of the same function (to the
        kernel synthesis error): the sequential recurrence has no autograd of its own, and a model trained
        in this mode would otherwise leave its layers without gradients."""
        if x.shape[0] == 0:                                         # empty batch: empty output
            return self.D[:, None] * x
        y = self._recurrent(x)
        if torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in self.parameters())):
            yf = self._fft(x)
            y = y + (yf - yf.detach())                              # the recurrence's values exactly (+ 0),
                                                                    # the FFT's gradient
        return y

    def _forward_padded(self, xin, mode, state, return_state, n):
        """``forward`` of a right-padded batch ``(B, H, L)``, its padding zeroed, with lengths ``n`` (see
        :meth:`forward`)."""
        out = (lambda y: y if self.transposed else y.transpose(-1, -2))  # noqa: E731
        if state is not None:
            raise ValueError("lengths= with a carried state= is not supported: the padding would sit between "
                             "the state and the chunk's tokens; pass chunks of one length per state")
        if return_state:                         # left-padded, the state after L steps is each sequence's own
            y, new = self._forward_state(left_align(xin, n, dim=-1), mode, None, True)
            return out(right_align(y, n, dim=-1)), new
        if mode != "fft" and self.bidirectional:
            raise ValueError("mode='recurrent' is causal; a bidirectional layer has no recurrence")
        # the padding is zero: the reverse kernel of a bidirectional layer reads none of it
        y = self._fft(xin) if mode == "fft" else self._exact(xin)
        return out(zero_padding(y, n, dim=-1))

    def _prefill_padded(self, x, cache, lengths):
        """``prefill`` of a right-padded prompt with ``lengths``: run left-aligned (zero inputs before a
        sequence's first token leave its state at zero; the padding itself is never read), outputs
        right-aligned again."""
        check_cache(self, cache, check_input(self, x).shape[0], what="prefill")
        if cache.t != 0:
            raise ValueError("prefill(lengths=...) needs a fresh cache (t = 0): in a cache that already holds "
                             "tokens the padding would sit between them and the prompt")
        dim = -1 if self.transposed else 1
        n = check_lengths(lengths, x.shape[0], x.shape[dim], device=x.device)
        return right_align(self.prefill(left_align(x, n, dim=dim), cache), n, dim=dim)

    def chunk_forward(self, xb):
        """The FFT outputs of a chunk from a zero history, optional branches included (the state path adds
        the history's terms to it, :mod:`nn.decode.carry`).

        Parameters
        ----------
        xb : Tensor ``(B, H, L)``
            The chunk, channels first, any float dtype.

        Returns
        -------
        Tensor ``(B, H, L)``
            In ``xb``'s dtype.
        """
        return self._fft(xb)

    def ssm_forward(self, xb):
        """The FFT outputs of a chunk from a zero history, of the SSM alone (without optional branches such
        as the tap; the engines' spectral prefill).

        Parameters
        ----------
        xb : Tensor ``(B, H, L)``
            The chunk, channels first, any float dtype.

        Returns
        -------
        Tensor ``(B, H, L)``
            In ``xb``'s dtype.
        """
        return self._fft(xb, branches=False)

    def _fft(self, xin, branches=True):
        """FFT path on ``(B, H, L)`` input of any float dtype -> ``(B, H, L)`` in that dtype."""
        if xin.shape[0] == 0:                                       # empty batch: empty output
            return self.D[:, None] * xin
        with no_autocast(xin):                                      # FFTs and the kernel in float32 or better
            x = xin.to(compute_dtype(xin))                          # (B, H, L)
            K = self._kernel_for(x, branches)                       # (H, L) or (2, H, L), x's dtype
            if self.bidirectional:
                y = fft_conv(x, K[0]) + fft_conv(x.flip(-1), K[1]).flip(-1)
            else:
                y = fft_conv(x, K)                                  # (B, H, L)
            return (y + self.D[:, None] * x).to(xin.dtype)

    def _forward_state(self, xin, mode, state, return_state):
        """``forward`` from ``state`` and/or returning the state after the chunk: ``(y (B, H, L), new)``."""
        if mode != "fft":
            raise ValueError("state= and return_state= run the FFT path: use mode='fft' (the recurrent mode is a "
                             "verification path without state)")
        if self.bidirectional:
            raise ValueError(f"a bidirectional {type(self).__name__} layer sees the future; it has no state to "
                             "continue from (state=, return_state=)")
        if state is not None:
            check_cache(self, state, xin.shape[0], what="forward")
        with no_autocast(xin):
            y, new = self._state_path(xin, state, return_state)     # nn.decode.carry: (B, H, L) compute dtype
        return y.to(xin.dtype), new

    # ------------------------------------------------------------------ decoding
    @contextmanager
    def as_prompt(self):
        """Inside this context forward passes read their inputs as prompts (a layer with a delay range
        then skips its "delays never act" warning; here nothing changes)."""
        yield

    def branches(self):
        """The optional branches beside the SSM (none here; DS4D's tap)."""
        return ()

    def check_decodable(self):
        """``ValueError`` for a layer that cannot decode (bidirectional)."""
        if self.bidirectional:
            raise ValueError(f"a bidirectional {type(self).__name__} layer sees the future; it cannot decode "
                             "step by step")

    def _begin_prefill(self, x, cache):
        """Validate a prompt and its cache (fresh, or holding ``cache.t`` tokens: the prompt continues
        them); return the prompt ``(B, H, L)``."""
        xb = check_input(self, x)                                   # (B, H, L)
        check_cache(self, cache, xb.shape[0], what="prefill")
        if cache.state.requires_grad:
            raise RuntimeError(f"{type(self).__name__}.prefill: this cache carries autograd history (from forward(..., "
                               "return_state=True)); prefill writes in place: pass cache.detach()")
        check_finite_params(self)
        return xb

    @staticmethod
    def _end_prefill(cache, slots, t, y):
        """Set the cache's position; a float16 history whose new states overflowed warns once."""
        cache.t = t
        if cache.state.dtype == torch.float16 and not cache.warned and \
                not bool(torch.isfinite(cache.state[:, slots]).all()):
            cache.warned = True
            warnings.warn("prefill: states passed 65504, float16's largest value, and became infinite in the "
                          "float16 decode history; use history_dtype=torch.bfloat16 (float32's range), a complex "
                          "cache, or smaller inputs", RuntimeWarning, stacklevel=3)
        return y

    # ------------------------------------------------------------------ decode constants
    def clear_decode_memo(self):
        """Forget the memoized decode constants (the next step recomputes them)."""
        self._step_memo.clear()

    def decode_constants(self, rdt):
        """The decode constants (:meth:`step_constants`), memoized (:class:`nn.decode.engine.StepMemo`):
        recomputed only after a parameter changed.

        Parameters
        ----------
        rdt : torch.dtype
            Real precision, ``torch.float32`` or ``torch.float64``.

        Returns
        -------
        DS4DConstants or S4DConstants
            The layer's :meth:`step_constants`.

        Raises
        ------
        FloatingPointError
            Non-finite parameters (named).
        """
        return self._step_memo.get(self, rdt, self.step_constants)

    def bind_cache(self, cache):
        """The memoized decode constants, bound to ``cache``: when they are new to the cache (first use,
        after a reset, after a parameter changed) its engine's ``bind`` runs and ``cache.handle`` is set.

        Parameters
        ----------
        cache : DS4DCache or S4DCache
            This layer's cache; its precision selects the constants'.

        Returns
        -------
        DS4DConstants or S4DConstants
            As :meth:`decode_constants`.
        """
        consts = self._step_memo.get(self, cache.real_dtype, self.step_constants)
        cache.bound(consts)
        return consts

    def prepare_decode(self, batch_size, max_seqlen, dtype):
        """Validate ``allocate_inference_cache``'s common arguments for this layer (decodable, sizes,
        dtype; a layer whose delay range is still open takes it from ``max_seqlen``).

        Parameters
        ----------
        batch_size : int
            ``>= 0``.
        max_seqlen : int or None
            ``>= 1``.
        dtype : torch.dtype or None
            A float or complex dtype (see ``allocate_inference_cache``).

        Returns
        -------
        max_seqlen : int or None
        rdt : torch.dtype
            The real precision of the update, ``torch.float32`` or ``torch.float64``.

        Raises
        ------
        ValueError
            A bidirectional layer.
        TypeError
            A bad ``batch_size``, ``max_seqlen`` or ``dtype`` (a dtype given as ``max_seqlen`` named).
        """
        self.check_decodable()
        check_alloc_sizes(self, batch_size, max_seqlen)
        rdt = check_dtype(self, dtype)
        return max_seqlen, torch.float64 if rdt == torch.float64 else torch.float32

    def setup_step(self, dtype=None):
        """Recompute the decode constants now (``step`` then reuses them until a parameter changes).

        Parameters
        ----------
        dtype : torch.dtype, optional
            The real precision of the caches to serve: ``torch.float32`` (complex64 and 16-bit caches, the
            default) or ``torch.float64`` (complex128 caches; ``torch.complex128`` means the same).

        Raises
        ------
        FloatingPointError
            Non-finite parameters (named).

        Notes
        -----
        ``step`` notices optimizer steps, ``load_state_dict`` and writes under ``torch.no_grad()`` by
        itself; call this after a write torch does not track (through ``param.data``), or to move the
        discretization (and its NaN check, which names the parameter) out of the first token.
        """
        self._step_memo.clear()
        rdt = torch.float64 if dtype in (torch.float64, torch.complex128) else torch.float32
        with torch.no_grad():
            self._step_memo.get(self, rdt, self.step_constants)

    def __getstate__(self):
        """Pickled without derived state (the decode memo): ``torch.save(model)`` then ``torch.load`` with
        ``weights_only=True`` needs only the project's layer classes allowlisted."""
        return {k: v for k, v in super().__getstate__().items() if k not in ("_step_memo", "_memo_names")}

    def __setstate__(self, state):
        """Unpickling: the decode memo starts empty; a layer pickled by an earlier version gets today's
        attributes (:func:`nn.legacy.upgrade_layer_state`)."""
        super().__setstate__(upgrade_layer_state(state))
        self._step_memo = StepMemo()

    @staticmethod
    def cache_dtype(dtype):
        """Complex dtype of a decode cache.

        Parameters
        ----------
        dtype : torch.dtype or None
            Real precision of the update.

        Returns
        -------
        torch.dtype
            ``torch.complex128`` for ``torch.float64``, else ``torch.complex64``.
        """
        return torch.complex128 if dtype == torch.float64 else torch.complex64


def split_channels(K, H, bidirectional):
    """Kernels ``(C, L)`` as ``(2, H, L)`` when bidirectional."""
    return K.view(2, H, K.shape[-1]) if bidirectional else K

