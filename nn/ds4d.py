"""DS4D: the diagonal delay state space layer (docs/theory.md §5-§7), FFT training and recurrent decoding.

The mathematics lives in :mod:`ddesys` (the parameterization, contour choice, kernel synthesis, the
one-step update); this module holds the parameters, the convolution and the inference cache.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from ddesys import DiscreteDelaySystem, choose_contour, fft_length
from ddesys.contour import next_pow2, unit_roundoff
from ddesys.parameterization import ablation_kinds, ds4d_discrete
from ddesys.recurrence import run_recurrence
from ddesys.transfer import synthesize_kernel

from .autograd import kernel_sampler
from .base import DiagonalSSM, split_channels
from .common import check_finite_params, check_kernel_dtype, check_step_input
from .decode.cache import DS4DCache
from .decode.carry import ds4d_forward_state
from .decode.engine import DS4DConstants, check_history16, host_views
from .decode.select import select_engine
from .decode.prefill import PREFILL_BLOCK  # noqa: F401 (API)
from .delay_range import DelayRange, adopt_loaded_range, check_loaded_range
from .optim import register_optim
from .branch import check_branches
from .tap import TapBranch, rename_old_tap_keys, require_tap, tap_args


HISTORY_DTYPES = (None, torch.float16, torch.bfloat16)


class DS4D(DelayRange, DiagonalSSM):
    """Delay S4D layer: ``H`` channels, ``N/2`` complex modes each, one learnable delay per channel.

    The SSM alone: FFT convolution with the layer's kernel plus the ``D`` skip, returning a tensor. For
    the S4 repository's module contract (activation, dropout, output GLU, ``(y, None)``) use
    :class:`nn.s4compat.DS4D`; for a residual block :class:`nn.SequenceBlock`.

    Parameters
    ----------
    d_model : int
        Channels ``H``.
    d_state : int
        State size ``N`` (``N/2`` complex modes stored).
    l_max : int or None
        History horizon: delays live in ``[s_min, s_max]``, ``s_max = l_max - 1``. ``None`` (default):
        taken from the first sequence the layer sees (``l_max = L``), then fixed and saved in the state
        dict. A given ``l_max`` more than twice the sequence length warns once (most delays would never
        act). The decode cache holds ``k_max + 1 <= l_max`` states.
    init : {"inv", "lin"}
        S4D-Inv or S4D-Lin base dynamics.
    dt_min, dt_max : float
        Log-uniform range of the initial step.
    p0 : float
        Initial branch allocation ``p_n`` in ``[0, 1)`` (0 gives exactly S4D).
    theta0, theta_jitter : float
        Delayed-branch phase ``theta0 + theta_jitter N(0, 1)``.
    delay_init : {"grid", "constant"}
        Uniform grid over ``[s_min, s_max]`` in random channel order, or every channel at ``tau0`` steps.
    s_min, s_max : float
        Delay bounds in steps (``s_max`` overrides ``l_max - 1``).
    bidirectional : bool
        A second kernel per channel applied to the reversed sequence (no ``step``).
    transposed : bool
        Inputs ``(B, H, L)`` instead of ``(B, L, H)``.
    dt_lr : float or None
        Learning rate of ``dt`` and the delay (``None``: the optimizer's); no weight decay on SSM
        parameters (see :func:`nn.optim.param_groups`).
    eps, M :
        Contour: ``eps="auto"`` with ``M = nextpow2(2L)`` (the paper's length), about 3e-11 relative
        kernel error in float64 and 2e-5 in float32 (:mod:`ddesys.contour`; ``M=4L``: 1e-13). A float32
        forward synthesizes at ``M = nextpow2(L)``, whose predicted error (about 2e-8 in float64) stays
        under float32 rounding (:func:`ddesys.fft_length`); ``M`` set here fixes it for every call. The
        layer assumes no decay when choosing ``eps`` (no device synchronization);
        :meth:`contour` gives ``(M, rho)`` to reproduce its kernel with ``to_ddesys().kernel(L, M=M, eps=rho**M)``.
    kernel_dtype : torch.dtype
        Precision of the kernel synthesis, ``torch.float64`` (default: batch-independent cost, no
        float32 restoration floor) or ``torch.float32``. The convolution runs in the input's dtype, or
        float32 for float16 / bfloat16 input (and under ``torch.autocast``), whose output is cast back.
    ablation : None, "tau_min", "mu_zero", "tap_zero" or a tuple of them
        The mechanism probes: every delay one step, no delayed branch, or the input tap's contribution
        removed (forward, recurrent path, decoding and :meth:`to_ddesys`). An attribute: set it on a
        trained layer to probe it (:func:`experiments.synthetic.train.ablate` does).
    tap : bool
        Add a delayed input tap per channel (docs/theory.md §8, :mod:`ddesys.tap`): ``y += e x(t - s_tap)``,
        a pure delay (no echoes), read through a hat window of half-width ``tap_width``. Off by default
        (the paper's layer). The tap is the branch ``layer.tap`` (:class:`nn.tap.TapBranch`: parameters
        ``tap.e``, ``tap.nu`` ``(C,)``, its kernel, input ring and system), ``None`` without it; tap
        delays placed like the feedback delays (grid in another order, or ``tau0``).
    tap_width : float or None
        Initial half-width of the tap window (``>= 1``, at most ``4 l_max``: :func:`nn.tap.max_tap_width`;
        None: 1 = linear interpolation). Settable later (``layer.tap_width``); :class:`nn.TapWidthSchedule`
        shrinks it during training. With ``tap=True`` only (as ``tap_lr``; else ``ValueError``).
    tap_lr : float or None
        Learning rate of the tap delay (``None``: the optimizer's, not ``dt_lr``).
    branches : sequence of :class:`nn.branch.Branch`
        Further branches, each adding its own term to the output (:mod:`nn.branch`: a part with its own
        parameters, kernel, decode state and step), after the tap; ``layer.added_branches``. Default none.
    seed : int or None
        Seeds the initialization (the global RNG is untouched when given).

    Notes
    -----
    Shapes: ``forward`` ``(B, L, H) -> (B, L, H)``; ``step`` ``(B, H) -> (B, H)``.

    Examples
    --------
    >>> import torch
    >>> from ddesys.nn import DS4D
    >>> layer = DS4D(64, d_state=64)                 # l_max from the first sequence
    >>> y = layer(torch.randn(8, 1024, 64))          # (B, L, H), FFT path
    >>> cache = layer.allocate_inference_cache(8)
    >>> y_t = layer.step(torch.randn(8, 64), cache)  # (B, H), O(H N) per token
    """

    cache_type = DS4DCache

    def __init__(self, d_model, d_state=64, l_max=None, *, init="inv", dt_min=1e-3, dt_max=1e-1,
                 p0=0.1, theta0=math.pi, theta_jitter=0.1, delay_init="grid", tau0=None, s_min=1.0,
                 s_max=None, bidirectional=False, transposed=False, dt_lr=None, eps="auto", M=None,
                 kernel_dtype=torch.float64, ablation=None, tap=False, tap_width=None, tap_lr=None, branches=(),
                 seed=None):
        if not 0.0 <= p0 < 1.0:
            raise ValueError(f"p0 must lie in [0, 1), got {p0}")
        if delay_init not in ("grid", "constant"):
            raise ValueError(f"delay_init must be 'grid' or 'constant', got {delay_init!r}")
        if delay_init == "constant" and tau0 is None:
            raise ValueError("delay_init='constant' needs tau0 strictly inside (s_min, s_max): the initial delay "
                             "in steps")
        ablation_kinds(ablation)                                    # validates
        self._p0, self._theta = p0, (theta0, theta_jitter)
        self.delay_init, self.tau0 = delay_init, tau0
        self._tap_args = tap_args(tap, tap_width, tap_lr)          # (on, width, lr); refused without tap=True
        super().__init__(d_model, d_state, init=init, dt_min=dt_min, dt_max=dt_max, bidirectional=bidirectional,
                         transposed=transposed, seed=seed)
        self.eps, self.M, self.kernel_dtype = eps, M, check_kernel_dtype(self, kernel_dtype)
        self.ablation = ablation
        self.added_branches = check_branches(branches, 2 * d_model if bidirectional else d_model)
        self._init_range(s_min, l_max, s_max)
        for name in ("log_dt", "nu_tau"):
            register_optim(self, name, {"weight_decay": 0.0, **({"lr": dt_lr} if dt_lr is not None else {})})
        for name in ("nu_re", "nu_im", "r", "theta", "B"):
            register_optim(self, name, {"weight_decay": 0.0})

    def _init_branch(self, C, g):
        p = torch.full((C, self.N2), self._p0, dtype=torch.float64)
        # p0 = 0: r = -1e4 makes sigmoid(r) exactly 0 (and its gradient 0), i.e. exactly S4D
        self.r = nn.Parameter(torch.logit(p).float() if self._p0 > 0 else torch.full((C, self.N2), -1e4))
        theta0, jitter = self._theta
        self.theta = nn.Parameter(theta0 + jitter * torch.randn(C, self.N2, generator=g))   # (C, N2)
        # the grid: fixed fractions of the delay range, drawn now even for l_max=None; _set_range places nu_tau
        self._grid_order = torch.randperm(C, generator=g) if self.delay_init == "grid" else None   # (C,)
        self.nu_tau = nn.Parameter(torch.zeros(C))                  # (C,)
        tap, width, lr = self._tap_args          # the tap branch draws after the feedback branch (same stream)
        self.tap = TapBranch(C, width, lr=lr, delay_init=self.delay_init, tau0=self.tau0, generator=g) if tap else None

    def memo_key(self):
        """What the decode constants depend on besides the parameters: ablation, delay range, branches
        (``StepMemo``)."""
        return self.ablation, self.s_min, self.s_max, tuple(b.memo_key() for b in self.branches())

    # ------------------------------------------------------------------ branches (the tap: layer.tap)
    @property
    def has_tap(self):
        """Whether the layer has the delayed input tap (``self.tap is not None``)."""
        return self.tap is not None

    tap_width = property(lambda self: require_tap(self).width, lambda self, w: setattr(require_tap(self), "width", w),
                         doc="Half-width of the tap's read window in steps (``layer.tap.width``). Settable.")

    def tap_delay(self, dtype=torch.float64):
        """The tap delays in steps (differentiable): ``layer.tap.delay(dtype)``.

        Parameters
        ----------
        dtype : torch.dtype, default torch.float64
            Real precision.

        Returns
        -------
        Tensor ``(C,)``
            ``C = H``, ``2H`` for a bidirectional layer.

        Raises
        ------
        AttributeError
            A layer built without ``tap=True``.
        RuntimeError
            A delay range not fixed yet (``l_max=None`` before the first sequence).
        """
        return require_tap(self).delay(dtype)

    def _tap_on(self):
        return self.tap is not None and "tap_zero" not in ablation_kinds(self.ablation)

    def branches(self):
        """The optional branches beside the SSM with its delayed feedback (:class:`nn.branch.Branch`): the
        tap (``layer.tap``) if any, then ``layer.added_branches``. Every path runs through them in this
        order: kernels, the recurrent filter, decode states (``cache.branch_states``), steps, prefill,
        carry; their decode constants are ``DS4DConstants.branches``."""
        added = self._modules.get("added_branches")
        return (() if self.tap is None else (self.tap,)) + (() if added is None else tuple(added))

    def _ablated(self, branch):                    # the "tap_zero" ablation removes the tap's term
        return branch is self.tap and not self._tap_on()

    def _live_branches(self):
        return tuple(b for b in self.branches() if not self._ablated(b))

    def branch_constants(self, rdt):
        """The branches' decode constants, in :meth:`branches` order (an ablated branch's with zero gains:
        its state still moves).

        Parameters
        ----------
        rdt : torch.dtype
            Real precision, ``torch.float32`` or ``torch.float64``.

        Returns
        -------
        tuple
            One object per branch (:meth:`nn.branch.Branch.step_constants`).

        Raises
        ------
        FloatingPointError
            A branch with non-finite parameters (named).
        """
        return tuple(b.check_finite(any_device=True) or b.step_constants(rdt, zero=self._ablated(b))
                     for b in self.branches())

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        """The one load hook: old tap keys (``tap_e``, ``nu_tap``, ``tap_width_bits``) load into ``layer.tap``;
        the saved delay range must equal the layer's, or is adopted (:mod:`nn.delay_range`)."""
        if self.tap is not None:
            rename_old_tap_keys(state_dict, prefix)
        saved = check_loaded_range(self, state_dict, prefix, error_msgs)
        if saved is False:
            return
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)
        adopt_loaded_range(self, saved)

    # ------------------------------------------------------------------ discretization
    def discrete(self, dtype=None):
        """The discrete system (differentiable).

        Parameters
        ----------
        dtype : torch.dtype, optional
            Real working precision (default ``kernel_dtype``).

        Returns
        -------
        DS4DDiscrete
            :class:`ddesys.parameterization.DS4DDiscrete`: complex ``lam, mu, bbar, c`` ``(C, N2)``, ``k``
            int64, ``alpha`` and ``delay`` ``(C,)`` (``C = 2H`` when bidirectional).

        Raises
        ------
        RuntimeError
            A delay range not fixed yet (``l_max=None`` before the first sequence).
        """
        self._require_range("discretizing")
        f = lambda p: p.to(dtype or self.kernel_dtype)  # noqa: E731
        return ds4d_discrete(f(self.log_dt), f(self.nu_re), f(self.nu_im), f(self.r), f(self.theta), self.nu_tau,
                             f(self.B), f(self.C), self.s_min, self.s_max, ablation=self.ablation)

    def delay_form(self, dtype=None):
        """The discrete system's modes and delays (differentiable; the form the clocked layers read,
        :mod:`nn.decode.clocked`).

        Parameters
        ----------
        dtype : torch.dtype, optional
            Real working precision (default ``kernel_dtype``).

        Returns
        -------
        lam, mu, bbar, c : Tensor ``(C, N2)`` complex
        delay : Tensor ``(C,)`` real
            In steps.

        Raises
        ------
        RuntimeError
            As :meth:`discrete`.
        """
        d = self.discrete(dtype)
        return d.lam, d.mu, d.bbar, d.c, d.delay

    def contour(self, L, dtype=None, eps=None, M=None, out_dtype=None):
        """The contour ``(M, rho)`` of the kernel synthesis for length ``L``.

        Parameters
        ----------
        L : int
            Kernel length.
        dtype : torch.dtype, optional
            Precision of the synthesis (default ``kernel_dtype``).
        eps : "auto" or float, optional
            Aliasing suppression ``rho^M`` (default the layer's ``eps``); automatic for the chosen ``M``
            (:func:`ddesys.choose_contour` with no decay assumed, so no device sync).
        M : int, optional
            FFT length (default the layer's ``M``, else chosen as in Notes).
        out_dtype : torch.dtype, optional
            The dtype the kernel is delivered in (default ``dtype``).

        Returns
        -------
        M : int
        rho : float

        Raises
        ------
        ValueError
            A bad ``L``, ``eps`` or ``M`` (:func:`ddesys.choose_contour`).

        Notes
        -----
        ``M`` unless set: with the automatic ``eps``, :func:`ddesys.fft_length` (``nextpow2(L)`` when its
        predicted error is within the rounding of ``out_dtype``: a float64 synthesis for a float32 forward;
        else ``nextpow2(2L)``); with a given ``eps``, ``nextpow2(2L)`` (the paper's).
        """
        eps = eps if eps is not None else self.eps
        u = unit_roundoff(dtype or self.kernel_dtype)
        if not (M or self.M):
            auto = isinstance(eps, str)
            M = fft_length(L, u, unit_roundoff(out_dtype or dtype or self.kernel_dtype)) if auto else next_pow2(2 * L)
        ct = choose_contour(L, np.ones(1), u, eps=eps, M=M or self.M)
        return ct.M, float(ct.rho[0])

    def kernel(self, L, eps=None, M=None, out_dtype=None, branches=True):
        """The layer's convolution kernels (differentiable), ``D`` excluded.

        Parameters
        ----------
        L : int
            Kernel length (fixes the delay range at ``l_max = L`` for a layer built with ``l_max=None``).
        eps : "auto" or float, optional
        M : int, optional
            Override the layer's contour settings for this call (:meth:`contour`).
        out_dtype : torch.dtype, optional
            The dtype the caller will round the kernel to (the forward: its input's), which lets
            :meth:`contour` pick a shorter FFT.
        branches : bool, default True
            Include the branches' kernels (the tap's); False: the SSM with its delayed feedback alone.

        Returns
        -------
        Tensor ``(H, L)``, real
            In ``kernel_dtype``; ``(2, H, L)`` for a bidirectional layer.

        Raises
        ------
        ValueError
            A bad ``L``, ``eps`` or ``M``; a length the delay range cannot be fixed from.
        FloatingPointError
            A branch with non-finite parameters.
        """
        if self.s_max is None:
            self._set_range(L)
        d = self.discrete()
        M, rho = self.contour(L, eps=eps, M=M, out_dtype=out_dtype)
        rho_t = torch.full(d.k.shape, rho, dtype=self.kernel_dtype, device=d.lam.device)
        K = synthesize_kernel(d.lam, d.mu, d.c * d.bbar, d.k, d.alpha, L, M, rho_t,
                              sample=kernel_sampler(d.lam))         # (C, L)
        Kb = self.branch_kernel(L) if branches else None             # (C, L) the branches' (the tap's: exact)
        return split_channels(K if Kb is None else K + Kb, self.H, self.bidirectional)

    def branch_kernel(self, L, dtype=None):
        """The sum of the live branches' kernels (an ablated branch is not live).

        Parameters
        ----------
        L : int
            Kernel length.
        dtype : torch.dtype, optional
            Real precision (default ``kernel_dtype``).

        Returns
        -------
        Tensor ``(C, L)`` real, or None
            ``C = H``, ``2H`` for a bidirectional layer; None for a layer without a live branch.

        Raises
        ------
        FloatingPointError
            A branch with non-finite parameters (on the CPU).
        """
        live = self._live_branches()
        if not live:
            return None
        K = None
        for branch in live:
            branch.check_finite()
            Kb = branch.kernel(L, dtype or self.kernel_dtype)               # (H, L)
            K = Kb if K is None else K + Kb
        return K

    def _kernel_for(self, x, branches=True):
        return self.kernel(x.shape[-1], out_dtype=x.dtype, branches=branches).to(x.dtype)

    def _state_path(self, xin, state, return_state):
        return ds4d_forward_state(self, xin, state, return_state)

    @torch.no_grad()
    def _recurrent(self, x):
        d = self.discrete(torch.float64)
        Bsz, H, L = x.shape
        rep = lambda z: z.unsqueeze(0).expand(Bsz, *z.shape).reshape(Bsz * H, *z.shape[1:])  # noqa: E731
        y = run_recurrence(rep(d.lam), rep(d.mu), rep(d.bbar), rep(d.c), rep(d.k), rep(d.alpha),
                           rep(self.D.double()), x.double().reshape(Bsz * H, L))
        y = y.reshape(Bsz, H, L)
        for branch in self._live_branches():
            y = y + branch.filter(x)                                # (B, H, L)
        return y.to(x.dtype)

    # ------------------------------------------------------------------ decoding
    def allocate_inference_cache(self, batch_size, max_seqlen=None, dtype=None, *, history_dtype=None, engine=None,
                                 parallel=None, **kwargs):
        """A fresh :class:`DS4DCache` for ``batch_size`` sequences, bound to this layer and one decode engine
        (:mod:`nn.decode.engine`). Mamba's signature; ``allocate_inference_cache(8)`` and ``(batch_size=8,
        history_dtype=...)`` work as before.

        Parameters
        ----------
        batch_size : int
        max_seqlen : int or None
            The longest sequence the cache will see (Mamba's), recorded as ``cache.max_seqlen``; a layer
            with ``l_max=None`` that has seen no sequence takes its delay range from it. The ring has
            ``R = k_max + 1 <= l_max`` slots whatever the length.
        dtype : torch.dtype or None
            ``torch.float64``: complex128 ring, update in float64; None or another float dtype: complex64,
            update in float32. Anything else raises ``TypeError``.
        history_dtype : None, torch.float16 or torch.bfloat16
            A 16-bit history (half complex64's memory, update in float32; about 1e-3 / 1e-2 relative output
            error, :func:`ddesys.cpu.step.history_error_bound`); float16 overflows past 65504 (``step`` and
            ``prefill`` then warn once), bfloat16 has float32's range. CPU and CUDA.
        engine : None, "fused", "triton" or "reference"
            None: fused on the CPU, Triton on CUDA, else (or ``DDESYS_REFERENCE=1``) the reference.
        parallel : None, False, True or "auto"
            Fused engine: None a fixed rule, bitwise equal at any thread count; ``"auto"`` timed (opt-in).
        **kwargs
            None is taken: any other keyword raises ``TypeError`` naming it.
        """
        max_seqlen, rdt = self.prepare_decode(batch_size, max_seqlen, dtype)
        if kwargs:
            raise TypeError(f"DS4D.allocate_inference_cache got unexpected keyword argument(s) {sorted(kwargs)}")
        if history_dtype not in HISTORY_DTYPES:
            raise ValueError(f"history_dtype must be one of {HISTORY_DTYPES}, got {history_dtype}")
        if history_dtype is not None and rdt == torch.float64:
            raise ValueError("a 16-bit history (history_dtype) runs its update in float32: drop dtype=torch.float64")
        check_finite_params(self)
        R = int(self.discrete(torch.float64).k.max()) + 1
        shape, dt = (batch_size, R, self.H, self.N2), self.cache_dtype(rdt)
        if history_dtype is not None:
            shape, dt = shape + (2,), history_dtype
        states = tuple(b.allocate(batch_size, rdt, self.D.device)
                       for b in self.branches())     # the tap's ring (B, Rx, H)
        eng = select_engine("ds4d", self.D.device, engine, parallel)
        buf = eng.allocate(shape, dt, self.D.device)   # the engine's layout (CPU: channel-major, huge pages)
        return DS4DCache(buf, branch_states=states).bind(self, eng, max_seqlen)

    def step_constants(self, rdt):
        """The decode constants (with the NumPy views of the fused engine on the CPU and the branches'
        constants), computed once per parameter change, not per token.

        Parameters
        ----------
        rdt : torch.dtype
            Real precision, ``torch.float32`` or ``torch.float64``.

        Returns
        -------
        DS4DConstants
            :class:`nn.decode.engine.DS4DConstants`: ``lam, m1, m2, bbar, c`` ``(H, N2)`` complex, ``d``
            ``(H,)``, ``k`` ``(H,)`` int64, ``k_max``, ...

        Raises
        ------
        FloatingPointError
            Non-finite parameters, named, on every device.
        """
        check_finite_params(self, any_device=True)
        d = self.discrete(rdt)
        al = d.alpha[:, None]                                       # (H, 1)
        consts = tuple(v.detach() for v in (d.lam, d.mu * (1 - al), d.mu * al, d.bbar, d.c, self.D.to(rdt), d.k))
        return DS4DConstants(*consts, int(d.k.max()), torch.arange(self.H, device=d.lam.device),
                             host_views(consts), self.branch_constants(rdt))

    @torch.no_grad()
    def step(self, x_t, cache):
        """One token of recurrent decoding, ``O(H N)`` whatever the position.

        Parameters
        ----------
        x_t : Tensor ``(B, H)``
            The token's inputs.
        cache : DS4DCache
            From :meth:`allocate_inference_cache` (or ``prefill``, or a carried ``state``); updated in place
            by the engine it records (no autograd).

        Returns
        -------
        Tensor ``(B, H)``
            ``y_t``, in ``x_t``'s dtype.

        Notes
        -----
        The constants are memoized and recomputed whenever a parameter changes
        (:class:`nn.decode.engine.StepMemo`; :meth:`setup_step` after writes torch does not track).
        """
        check_step_input(self, x_t, cache)
        consts = self.bind_cache(cache)
        t = cache.t
        y = cache.engine.step(cache, x_t, consts)                   # (B, H), the cache's real dtype
        cache.t = t + 1
        if cache.buf.dtype == torch.float16 and not cache.warned:
            check_history16(cache, y, x_t)                          # float16's range: warn once at overflow
        for branch, bc, st in zip(self.branches(), consts.branches, cache.branch_states):   # the branches' terms
            y = y + branch.step(x_t, st, t, bc).to(y.dtype)
        return y.to(x_t.dtype)

    def compiled_step(self, cache):
        """A compiled model plan's :meth:`step` (:mod:`nn.model_step`): the engine's for this class's
        step, no branches.

        Parameters
        ----------
        cache : DS4DCache
            This layer's cache.

        Returns
        -------
        FusedStep or None
            None where the plan must call :meth:`step` (another engine, a subclass's step, branches).
        """
        return cache.engine.compiled_step(self, cache) if type(self).step is DS4D.step and not self.branches() else None

    @torch.no_grad()
    def prefill(self, x, cache, lengths=None):
        """Consume a prompt in parallel and move the cache on by its length.

        Parameters
        ----------
        x : Tensor ``(B, L, H)`` (transposed layers: ``(B, H, L)``)
            The prompt.
        cache : DS4DCache
            Moved on by ``L`` tokens in place, keeping the states later steps read; a cache holding tokens
            continues from its state (chunked prefill equals one prefill; spectral: to the float64 synthesis
            error).
        lengths : Tensor or sequence of int ``(B,)``, optional
            A right-padded prompt in a fresh cache: each sequence's states are those after its own tokens,
            its padding never read.

        Returns
        -------
        Tensor, the shape and dtype of ``x``
            The prompt's outputs.

        Notes
        -----
        The cache's engine runs the SSM (``engine.prefill``, :mod:`nn.decode.prefill`: on the CPU one
        compiled pass of the decode recurrence, else the per-mode state kernels by FFT); each branch then
        adds its term and moves its state. Memory: the prompt's spectrum ``(B, H, M)`` complex128 and blocks
        of at most ``PREFILL_BLOCK`` complex128 elements.
        """
        if lengths is not None:                                     # a right-padded batch (nn.lengths)
            return self._prefill_padded(x, cache, lengths)
        xb = self._begin_prefill(x, cache)                          # (B, H, L)
        t0, L = cache.t, xb.shape[-1]
        consts = self.bind_cache(cache)
        y = cache.engine.prefill(self, cache, xb)                   # (B, H, L): the SSM, its history, its ring
        for branch, bc, st in zip(self.branches(), consts.branches, cache.branch_states):   # terms, then states
            y = y + branch.chunk_output(xb, st, t0, bc).to(y.dtype)
            branch.prefill(xb, st, t0)
        y = (y if self.transposed else y.transpose(-1, -2)).to(x.dtype)
        R = cache.n_slots
        slots = (t0 + torch.arange(L - min(R, L), L, device=xb.device)) % R   # the chunk's ring slots
        return self._end_prefill(cache, slots, t0 + L, y)

    # ------------------------------------------------------------------ analysis
    @torch.no_grad()
    def to_ddesys(self):
        """The layer's exact system in ddesys (float64; batch ``(H,)``, or ``(2, H)`` when bidirectional), for
        stability (exact or sufficient), roots, frequency responses: a :class:`ddesys.DiscreteDelaySystem`,
        or for a layer with a tap the :class:`ddesys.SumSystem` of it and the tap's :class:`ddesys.DelayTap`
        (``layer.tap.to_ddesys()``; poles and stability are the delay system's, ``.parts`` holds both)."""
        check_finite_params(self)
        d = self.discrete(torch.float64)
        lam, mu, bbar, c, s = (z.cpu().numpy() for z in (d.lam, d.mu, d.bbar, d.c, d.delay))
        dd = self.D.double().cpu().numpy()
        if self.bidirectional:
            sh = lambda z: z.reshape(2, self.H, *z.shape[1:])  # noqa: E731
            sysd = DiscreteDelaySystem(sh(lam), sh(mu), sh(bbar), sh(c), sh(s), np.stack([dd, np.zeros_like(dd)]))
        else:
            sysd = DiscreteDelaySystem(lam, mu, bbar, c, s, dd)
        for branch in self._live_branches():
            sysd = sysd + branch.to_ddesys((2, self.H) if self.bidirectional else None)
        return sysd
