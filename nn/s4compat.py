"""Drop-ins for the official S4 repository's ``S4D`` module (``models/s4/s4d.py`` of state-spaces/s4).

:class:`S4D` and :class:`DS4D` here follow that module's contract, so an S4-style training script
(``example.py``: ``z, _ = layer(z)``, ``setup_optimizer`` grouping parameters by their ``_optim`` dict)
runs unchanged after ``from nn.s4compat import DS4D as S4D``.

Each wraps the SSM core (:class:`nn.DS4D` / :class:`nn.S4D`, which are the SSM alone: FFT convolution
plus the ``D`` skip) and adds S4's pointwise tail: GELU, channel dropout (one mask per (batch, channel),
tied over the sequence, as S4's ``DropoutNd``), and ``Conv1d(H, 2H, 1)`` followed by ``GLU`` over the
channel axis.

Examples
--------
>>> import torch
>>> from ddesys.nn.s4compat import DS4D as S4D           # was: from src.models.s4.s4d import S4D
>>> layer = S4D(16, d_state=8, dropout=0.1, transposed=True, lr=1e-3)
>>> y, _ = layer(torch.randn(2, 16, 32))          # u, y: (B, H, L)
>>> y.shape
torch.Size([2, 16, 32])
"""
from __future__ import annotations

import hashlib
import inspect
import math
import numbers

import torch
from torch import nn

from .common import check_layout
from .ds4d import DS4D as _DS4DCore
from .optim import declared_hints, register_optim
from .s4d import S4D as _S4DCore

# arguments the wrapper owns (S4's names) and so never forwards to the core
_OWN = ("self", "d_model", "d_state", "transposed")


class _S4Compat(nn.Module):
    """Shared body of :class:`S4D` and :class:`DS4D` (see the module docstring)."""

    _core = None        # the SSM core class
    _defaults = {}      # core arguments whose default differs in the drop-in

    def __init__(self, d_model, d_state=64, dropout=0.0, transposed=True, **kernel_args):
        super().__init__()
        kernel_args = {**self._defaults, **kernel_args}
        lr = kernel_args.pop("lr", None)
        if "dt_lr" in kernel_args:
            raise TypeError(f"{type(self).__name__}() got an unexpected keyword argument 'dt_lr': this S4-style "
                            "module takes S4's 'lr' (one learning rate for all SSM parameters)")
        unknown = sorted(set(kernel_args) - set(self.kernel_arg_names()))
        if unknown:
            raise TypeError(f"{type(self).__name__}() got unexpected keyword argument(s) "
                            f"{', '.join(repr(k) for k in unknown)}; accepted kernel args: "
                            f"{', '.join(('lr',) + self.kernel_arg_names())}")
        if lr is not None and (isinstance(lr, bool) or not isinstance(lr, numbers.Real)):
            raise TypeError(f"lr must be a real number or None, got {lr!r}")
        if lr is not None and not (math.isfinite(lr) and lr >= 0):
            raise ValueError(f"lr must be a finite number >= 0 (0 freezes the SSM parameters) or None (the "
                             f"optimizer's rate), got {lr!r}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout probability has to be in [0, 1), got {dropout}")

        self.h = self.d_output = d_model
        self.n = d_state
        self.transposed = transposed
        self.lr = lr

        # SSM core, always on (B, H, L): this module transposes like S4 does
        self.kernel = self._build_core(d_model, d_state, kernel_args)
        self._register_s4_optim(lr)

        # pointwise tail, as S4's S4D
        self.activation = nn.GELU()
        self.dropout = nn.Dropout1d(dropout) if dropout > 0.0 else nn.Identity()  # mask (B, H, 1)
        self.output_linear = nn.Sequential(
            nn.Conv1d(d_model, 2 * d_model, kernel_size=1),         # (B, H, L) -> (B, 2H, L)
            nn.GLU(dim=-2),                                         # (B, 2H, L) -> (B, H, L)
        )

    def _build_core(self, d_model, d_state, kernel_args):
        return self._core(d_model, d_state, transposed=True, **kernel_args)

    @classmethod
    def kernel_arg_names(cls):
        """Keyword arguments forwarded to the core (S4's ``dt_min``, ``dt_max`` and the core's own).

        Returns
        -------
        tuple of str
            ``lr`` is handled here and not listed; ``dt_lr`` is refused (S4's ``lr`` replaces it).
        """
        sig = inspect.signature(cls._core.__init__).parameters.values()
        return tuple(p.name for p in sig if p.name not in _OWN and p.name != "dt_lr"
                     and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))

    def _register_s4_optim(self, lr):
        """S4's rule on the core's own hints (:func:`nn.optim.declared_hints`): every parameter the core
        declared in its SSM set (``ssm=True``: dt, A, B and the delay branch) gets ``{"weight_decay": 0.0}``
        plus ``"lr": lr`` when ``lr`` is set (``lr == 0.0`` freezes them: S4 makes them buffers, here they
        stop requiring grad); parameters hinted outside the SSM set (the input tap's gain and delay) keep
        their own hints (``tap_lr``, no weight decay); unhinted ones (``C``, ``D``) join the optimizer's
        main group."""
        for mod, name, hp, ssm in declared_hints(self.kernel):
            if not ssm:
                continue
            register_optim(mod, name, {"weight_decay": 0.0} if lr is None else {"lr": lr, "weight_decay": 0.0})
            if lr == 0.0:
                getattr(mod, name).requires_grad_(False)

    @property
    def layer(self):
        """The SSM core (:class:`nn.DS4D` / :class:`nn.S4D`, transposed), same object as ``.kernel``."""
        return self.kernel

    @property
    def D(self):
        """The skip ``D`` ``(H,)`` (a parameter of the core)."""
        return self.kernel.D

    def forward(self, u, **kwargs):
        """SSM, GELU, dropout and the GLU output layer, S4's ``forward`` contract.

        Parameters
        ----------
        u : Tensor ``(B, H, L)``
            (``transposed=False``: ``(B, L, H)``).
        **kwargs
            Accepted and ignored, as in S4 (which absorbs ``return_output`` and transformer masks).

        Returns
        -------
        y : Tensor
            In ``u``'s layout.
        state : None

        Raises
        ------
        ValueError
            ``u`` not a 3-D tensor in this module's layout with ``d_model`` channels (the message quotes
            the layout and the shape given).
        """
        check_layout(type(self).__name__, self.h, self.transposed, u)  # the caller's layout, before transposing
        if not self.transposed:
            u = u.transpose(-1, -2)                                 # (B, L, H) -> (B, H, L)
        y = self.kernel(u)                                          # (B, H, L): FFT conv + D skip
        y = self.dropout(self.activation(y))                        # (B, H, L)
        y = self.output_linear(y)                                   # (B, H, L)
        if not self.transposed:
            y = y.transpose(-1, -2)                                 # (B, H, L) -> (B, L, H)
        return y, None

    # ------------------------------------------------------------------ decoding (inference only)
    def default_state(self, *batch_shape, device=None, dtype=None):
        """A fresh decode state: the core's inference cache, on the layer's device.

        Parameters
        ----------
        *batch_shape : int
            ``(B,)``: one batch dimension.
        device : torch.device or str, optional
            If given, must be the layer's device.
        dtype : torch.dtype, optional
            Passed to the core's ``allocate_inference_cache``.

        Returns
        -------
        DS4DCache or S4DCache
            The core's inference cache.

        Raises
        ------
        ValueError
            Not exactly one batch dimension; a ``device`` other than the layer's.
        """
        if len(batch_shape) != 1:
            raise ValueError(f"default_state takes one batch dimension, got {batch_shape}")
        if device is not None and torch.device(device) != self.D.device:
            raise ValueError(f"layer is on {self.D.device}, state requested on {device}")
        return self.kernel.allocate_inference_cache(batch_shape[0], dtype=dtype)

    @torch.no_grad()
    def step(self, u, state):
        """One position, S4's ``step`` contract (inference: no dropout, no autograd).

        Parameters
        ----------
        u : Tensor ``(B, H)``
        state
            From :meth:`default_state`; updated in place.

        Returns
        -------
        y : Tensor ``(B, H)``
        state
            The same object, updated.
        """
        y = self.activation(self.kernel.step(u, state))            # (B, H)
        y = self.output_linear(y.unsqueeze(-1)).squeeze(-1)         # (B, H, 1) -> (B, H)
        return y, state

    def extra_repr(self):
        return f"d_model={self.h}, d_state={self.n}, transposed={self.transposed}, lr={self.lr}"


class S4D(_S4Compat):
    """S4D with the official S4 repository's ``S4D`` contract, on :class:`nn.S4D`.

    This module mirrors S4's S4D contract; :class:`nn.S4D` is the SSM alone (FFT convolution and
    ``D`` skip), this adds GELU, dropout and ``Conv1d(H, 2H, 1)`` + GLU.

    Parameters
    ----------
    d_model : int
        Channels ``H``.
    d_state : int, default 64
        State size ``N`` (``N/2`` complex modes), as in S4.
    dropout : float, default 0.0
        Channel dropout after the activation, mask tied over the sequence (S4's ``DropoutNd``).
    transposed : bool, default True
        Inputs and outputs ``(B, H, L)``; ``False``: ``(B, L, H)``.
    **kernel_args
        ``lr`` (float or None): S4's learning-rate hint; ``log_dt``, ``nu_re``, ``nu_im`` and ``B`` get
        ``_optim = {"lr": lr, "weight_decay": 0.0}`` (``{"weight_decay": 0.0}`` when ``None``; ``0.0``
        freezes them). ``dt_min``, ``dt_max`` and the other keyword arguments of :class:`nn.S4D`
        (``init``, ``seed``, ...) are forwarded; anything else raises ``TypeError``.

    Attributes
    ----------
    kernel, layer : nn.S4D
        The SSM core (built with ``transposed=True``).

    Raises
    ------
    TypeError
        ``dt_lr`` (use ``lr``), an unknown keyword argument, a non-real ``lr``.
    ValueError
        ``dropout`` outside ``[0, 1)``; ``lr`` NaN, infinite or negative.

    Notes
    -----
    ``forward(u) -> (y, None)``: ``(B, H, L) -> (B, H, L)`` (transposed). ``step(u, state) -> (y, state)``
    with ``(B, H)`` and ``state = default_state(B)``.

    See Also
    --------
    DS4D : the delay version, same contract.
    """

    _core = _S4DCore


class DS4D(_S4Compat):
    """DS4D with the official S4 repository's ``S4D`` contract, on :class:`nn.DS4D`.

    This module mirrors S4's S4D contract; :class:`nn.DS4D` is the SSM alone (FFT convolution and
    ``D`` skip), this adds GELU, dropout and ``Conv1d(H, 2H, 1)`` + GLU.

    Parameters
    ----------
    d_model : int
        Channels ``H``.
    d_state : int, default 64
        State size ``N`` (``N/2`` complex modes), as in S4.
    dropout : float, default 0.0
        Channel dropout after the activation, mask tied over the sequence (S4's ``DropoutNd``).
    transposed : bool, default True
        Inputs and outputs ``(B, H, L)``; ``False``: ``(B, L, H)``.
    **kernel_args
        ``lr`` (float or None): S4's learning-rate hint; the SSM parameters ``log_dt``, ``nu_re``,
        ``nu_im``, ``B`` and the delay-branch ``nu_tau``, ``r``, ``theta`` get
        ``_optim = {"lr": lr, "weight_decay": 0.0}`` (``{"weight_decay": 0.0}`` when ``None``; ``0.0``
        freezes them). With ``tap=True`` the input tap keeps its own hints: ``kernel.tap.nu``
        ``{"lr": tap_lr, "weight_decay": 0.0}`` (without ``"lr"`` when ``tap_lr`` is None: the base rate,
        docs/theory.md §8.4) and ``kernel.tap.e`` ``{"weight_decay": 0.0}``. ``dt_min``, ``dt_max`` and the
        other keyword arguments of :class:`nn.DS4D` (``l_max``, ``p0``, ``delay_init``, ``tau0``,
        ``s_min``, ``s_max``, ``tap``, ``tap_width``, ``tap_lr``, ``init``, ``seed``, ...) are forwarded;
        anything else raises ``TypeError``.

        ``p0`` defaults to ``0.015`` here (:class:`nn.DS4D`'s own default is the paper's ``0.1``): in S4's
        recipe every SSM parameter trains at S4's small ``lr``, so the branch allocation ``p`` barely moves
        from its start, and ``p0 = 0.1`` shortens every mode's memory (the main branch ``(1 - p) abar``
        decays by ``0.9`` per step). On 64-step digits that cost 8 points after 5 epochs and 0.5 after
        10 (docs/experiments/s4-recipe/report.md). ``0.015`` is the paper's value for its image benchmarks;
        ``p0=0.1`` gives the paper's synthetic-task initialization back. The parameters DS4D shares with
        S4D are drawn from the caller's random stream exactly as :class:`S4D` draws them (the delay
        branch from a generator of its own): after ``torch.manual_seed(s)`` the swap builds S4D's network
        plus the delayed branch, and ``p0=0`` trains exactly as S4D.

    Attributes
    ----------
    kernel, layer : nn.DS4D
        The SSM core (built with ``transposed=True``).

    Raises
    ------
    TypeError
        ``dt_lr`` (use ``lr``), an unknown keyword argument, a non-real ``lr``.
    ValueError
        ``dropout`` outside ``[0, 1)``; ``lr`` NaN, infinite or negative.

    Notes
    -----
    ``forward(u) -> (y, None)``: ``(B, H, L) -> (B, H, L)`` (transposed). ``step(u, state) -> (y, state)``
    with ``(B, H)`` and ``state = default_state(B)``.

    Examples
    --------
    >>> import torch
    >>> from ddesys.nn.s4compat import DS4D
    >>> layer = DS4D(16, d_state=8, dropout=0.1, transposed=True, lr=1e-3, l_max=32)
    >>> y, _ = layer(torch.randn(2, 16, 32))                 # (B, H, L) -> (B, H, L)
    >>> y.shape
    torch.Size([2, 16, 32])
    >>> layer.kernel.log_dt._optim                           # S4's hint, read by setup_optimizer
    {'lr': 0.001, 'weight_decay': 0.0}
    >>> state = layer.eval().default_state(2)
    >>> y_t, state = layer.step(torch.randn(2, 16), state)   # (B, H) -> (B, H)
    >>> y_t.shape
    torch.Size([2, 16])
    """

    _core = _DS4DCore
    _defaults = {"p0": 0.015}      # the paper's p0 = 0.1 costs points in S4's recipe (see above)
    _SHARED = ("init", "dt_min", "dt_max", "bidirectional", "seed")     # the core arguments S4D also takes

    def _build_core(self, d_model, d_state, kernel_args):
        """The core, with every parameter it shares with S4D (``log_dt``, ``nu``, ``B``, ``C``, ``D``) drawn
        exactly as :class:`S4D` with the same arguments draws it, from the same random stream, and the
        delay branch's draws (``theta``, the grid order) from a generator of their own: the swap consumes
        the caller's random numbers as S4D does, so every module built after it is initialized as in the
        S4D script, and ``p0=0`` trains exactly as S4D (otherwise the seeds compared different
        ``C``, ``D`` and GLU weights). ``seed=None``: the branch's generator is seeded from a digest of
        torch's random state (read, not advanced)."""
        ref = _S4DCore(d_model, d_state, transposed=True, **{k: v for k, v in kernel_args.items() if k in self._SHARED})
        own = kernel_args.get("seed")
        if own is None:
            digest = hashlib.blake2b(torch.get_rng_state().numpy().tobytes(), digest_size=8).digest()
            own = int.from_bytes(digest, "little") >> 1
        core = self._core(d_model, d_state, transposed=True, **{**kernel_args, "seed": own})
        with torch.no_grad():
            for name, p in ref.named_parameters():
                getattr(core, name).copy_(p)
        core.clear_decode_memo()
        return core
