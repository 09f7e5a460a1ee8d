"""The residual block around a DS4D / S4D layer (pre- or post-norm, GLU output), optionally clocked."""
from __future__ import annotations

from typing import NamedTuple

from torch import nn

from .clock import Clocked
from .ds4d import DS4D
from .decode.cache import allocate_caches, refuse_dtype_as_max_seqlen
from .s4d import S4D
from .learned_clock import BinaryClock
from .selective import SoftClock

__all__ = ["BlockForm", "SequenceBlock", "clock_parts", "make_layer", "named_clock", "norm_layer", "runs_hooks"]

LAYERS = {"ds4d": DS4D, "s4d": S4D}
NORMS = ("layer", "none")


def norm_layer(kind, d_model):
    if kind not in NORMS:
        raise ValueError(f"norm must be one of {NORMS}, got {kind!r}")
    return nn.LayerNorm(d_model) if kind == "layer" else nn.Identity()


def runs_hooks(module):
    """True when a forward (pre-)hook is registered on ``module`` or any of its submodules: a compiled
    path that skips the modules' ``forward`` must then not replace them. torch has no public query for a
    module's hooks; this reads the two hook dictionaries ``nn.Module.register_forward_hook`` and
    ``register_forward_pre_hook`` fill (module-global hooks are not seen)."""
    return any(m._forward_hooks or m._forward_pre_hooks for m in module.modules())


class BlockForm(NamedTuple):
    """:meth:`SequenceBlock.step` as parts a compiled model step can run (:meth:`SequenceBlock.fused_form`)::

        z = norm(x) if prenorm else x
        y = x + r,  r = GLU(out(act(layer.step(z))))  (without GLU: r = out(act(...)))
        y' = y if prenorm else norm(y)
    """
    layer: nn.Module                #: the layer; its step maps (B, H) -> (B, H)
    norm: nn.LayerNorm | None       #: a LayerNorm over the H channels, or None (the identity)
    prenorm: bool                   #: the norm before the layer (else after the residual)
    act: str                        #: "gelu" (erf) or "gelu_tanh"
    out: nn.Linear                  #: H -> O with a bias; O = 2H with GLU
    glu: bool                       #: r = o[:H] * sigmoid(o[H:]) over the last axis


def make_layer(layer, d_model, index=0, layer_kw=None):
    """A block's layer: ``layer`` a name of :data:`LAYERS` (built with ``layer_kw``), a module (used as
    it is) or a factory ``(d_model, index) -> module`` (``index``: the block's place in the model)."""
    if isinstance(layer, str):
        if layer not in LAYERS:
            raise ValueError(f"layer must be one of {sorted(LAYERS)}, a module or a factory (d_model, index) -> "
                             f"module, got {layer!r}")
        return LAYERS[layer](d_model, **(layer_kw or {}))
    if layer_kw:
        raise ValueError("layer_kw configures a layer named by a string; a module or a factory is built as it is "
                         "(pass its options to it)")
    out = layer if isinstance(layer, nn.Module) else layer(d_model, index) if callable(layer) else None
    if not isinstance(out, nn.Module):
        raise TypeError(f"layer must be a name ({', '.join(sorted(LAYERS))}), a module or a factory (d_model, index) "
                        f"-> module, got {type(layer if out is None else out).__name__}"
                        + ("" if out is None else " from the factory"))
    return out


def named_clock(clock, seed=None):
    """``clock`` with its sugar resolved: ``"learned"`` is :class:`nn.selective.SoftClock` ``(seed=seed)``,
    ``"binary"`` :class:`nn.learned_clock.BinaryClock` ``(seed=seed)``; anything else is returned as it is
    (a part, a given clock or None: :func:`clock_parts`)."""
    if not isinstance(clock, str):
        return clock
    if clock == "learned":
        return SoftClock(seed=seed)
    if clock == "binary":
        return BinaryClock(seed=seed)
    raise ValueError(f"a learned clock by name is 'learned' or 'binary', got {clock!r}")


def clock_parts(clock):
    """``(ticks, wrap)`` of a model's ``clock``: the function from the model's input to bool ticks (a given
    clock: :class:`nn.clock.TokenClock` or any callable; None for a part that clocks each layer by
    itself) and ``wrap(layer, index)``, the clocked layer of each block (None without a clock).

    A part (an object with ``wrap``) clocks each layer itself; any other callable is a given clock, whose
    blocks run in :class:`nn.clock.Clocked`."""
    if clock is None:
        return None, None
    wrap = getattr(clock, "wrap", None)
    if callable(wrap):
        return None, wrap
    if callable(clock):
        return clock, lambda layer, index: Clocked(layer)
    raise TypeError(f"clock must be a clock part (an object with wrap(layer, index), e.g. nn.BinaryClock()), a "
                    f"given clock (a callable from the input to ticks, e.g. nn.TokenClock), 'learned' or 'binary', "
                    f"got {type(clock).__name__}")


class SequenceBlock(nn.Module):
    """Pre-norm residual block: ``x + Dropout(GLU(Linear(Dropout(act(layer(norm(x)))))))``.

    Parameters
    ----------
    d_model : int
        Channels ``H``.
    layer : "ds4d", "s4d", module or callable
        The SSM layer: a name (:class:`nn.DS4D` or :class:`nn.S4D`, built with ``layer_kw``), a module,
        or a factory ``(d_model, index) -> module``.
    layer_kw : dict, optional
        Keyword arguments of a layer named by string.
    activation : str, default "gelu"
        ``"gelu"`` or the name of any ``torch.nn`` activation class.
    dropout : float, default 0.0
        Dropout rate.
    glu : bool, default True
        Output linear ``H -> 2H`` followed by GLU (the paper's setting); else ``H -> H``.
    prenorm : bool, default True
        Normalize the layer's input; ``False``: normalize the block's output (post-norm).
    norm : {"layer", "none"}, default "layer"
        ``nn.LayerNorm`` or the identity (no normalization).
    clock : part, given clock, "learned", "binary" or None
        Run the layer in its own time (``forward`` / ``prefill`` then take ``ticks`` ``(B, L)``, ``step``
        a ``tick`` ``(B,)``): a part's ``wrap(layer, index)`` builds the clocked layer
        (:class:`nn.selective.SoftClock`, :class:`nn.learned_clock.BinaryClock` or any object with
        ``wrap``; ``"learned"`` and ``"binary"`` build those two); a given clock (:class:`nn.clock.TokenClock`,
        any other callable) runs the layer in :class:`nn.clock.Clocked` on the ticks passed in.
    index : int, default 0
        The block's place in its model (passed to a layer factory and a clock's ``wrap``).

    Raises
    ------
    ValueError
        An unknown ``layer``, ``norm`` or clock name; ``layer_kw`` with a layer that is not a name.
    TypeError
        A ``layer`` or ``clock`` of another kind.

    Notes
    -----
    Shapes: ``(B, L, H) -> (B, L, H)``; ``step`` ``(B, H) -> (B, H)``.
    """

    def __init__(self, d_model, layer="ds4d", layer_kw=None, activation="gelu", dropout=0.0, glu=True,
                 prenorm=True, norm="layer", clock=None, index=0):
        super().__init__()
        _, wrap = clock_parts(named_clock(clock, (layer_kw or {}).get("seed")))
        self.norm = norm_layer(norm, d_model)
        self.layer = make_layer(layer, d_model, index, layer_kw)
        if wrap is not None:
            self.layer = wrap(self.layer, index)
        self.act = nn.GELU() if activation == "gelu" else getattr(nn, activation)()
        self.drop = nn.Dropout(dropout)
        self.out = nn.Linear(d_model, 2 * d_model if glu else d_model)
        self.glu = nn.GLU(dim=-1) if glu else nn.Identity()
        self.prenorm = bool(prenorm)

    def unfused_reason(self):
        """Why this block's step is not a :class:`BlockForm` (a short phrase), or None when it is one."""
        act, glu, out, norm, H = self.act, self.glu, self.out, self.norm, self.out.in_features
        if type(self).step is not SequenceBlock.step:
            return "its class overrides step"
        if self.training and self.drop.p > 0:
            return "active dropout (training mode)"
        if runs_hooks(self):
            return "a forward hook on one of its modules"
        if type(act) is not nn.GELU or act.approximate not in ("none", "tanh"):
            return f"its activation is {type(act).__name__}, not GELU"
        is_glu = type(glu) is nn.GLU and glu.dim in (-1, 1)
        if not is_glu and type(glu) is not nn.Identity:
            return f"its gate is {type(glu).__name__}, not GLU over the channels"
        if type(out) is not nn.Linear or out.bias is None or out.out_features != (2 * H if is_glu else H):
            return "its output is not a biased Linear of the block's width"
        if type(norm) is not nn.Identity and (type(norm) is not nn.LayerNorm or tuple(norm.normalized_shape) != (H,)):
            return f"its norm is {type(norm).__name__}, not a LayerNorm over the channels"
        return None

    def fused_form(self):
        """This block's :class:`BlockForm`, or None when its step is not one (:meth:`unfused_reason` says
        why: another activation or norm, an overridden ``step``, active dropout (training mode), hooks on
        its modules). What the layer and its cache can run compiled is the decode step's to judge
        (:mod:`nn.model_step`)."""
        if self.unfused_reason() is not None:
            return None
        norm = None if type(self.norm) is nn.Identity else self.norm
        return BlockForm(self.layer, norm, self.prenorm, "gelu" if self.act.approximate == "none" else "gelu_tanh",
                         self.out, type(self.glu) is nn.GLU)

    def _post(self, z):
        return self.drop(self.glu(self.out(self.drop(self.act(z)))))

    def forward(self, x, mode="fft", lengths=None, ticks=None, state=None, return_state=False):
        """``x`` ``(B, L, H)`` -> ``(B, L, H)``.

        Parameters
        ----------
        x : Tensor ``(B, L, H)``
        mode : {"fft", "recurrent"}
            The layer's path: FFT convolution (training) or the exact recurrence (verification; its
            gradient the FFT path's).
        lengths : Tensor ``(B,)``, optional
            A right-padded batch (see :meth:`SequenceModel.forward`).
        ticks : Tensor ``(B, L)`` bool, optional
            A clocked layer's clock.
        state : cache, optional
            The layer's state to continue from (its ``forward(state=)``; DS4D / S4D layers).
        return_state : bool, default False
            Also return the layer's state after the sequence (a new cache).

        Returns
        -------
        Tensor ``(B, L, H)``, or ``(y, state)`` with ``return_state``
        """
        z = self.norm(x) if self.prenorm else x
        kw = {} if lengths is None else {"lengths": lengths}
        if ticks is not None:
            kw = {"ticks": ticks}
        if state is not None or return_state:
            kw.update(state=state, return_state=return_state)
        out = self.layer(z, mode=mode, **kw)
        out, new = out if return_state else (out, None)
        y = x + self._post(out)
        y = y if self.prenorm else self.norm(y)
        return (y, new) if return_state else y

    def allocate_inference_cache(self, batch_size, max_seqlen=None, dtype=None, **kwargs):
        """The layer's fresh decode cache (see :meth:`nn.SequenceModel.allocate_inference_cache`).

        Parameters
        ----------
        batch_size : int
        max_seqlen : int, optional
            The longest sequence the cache will see (passed to a layer that takes it).
        dtype : torch.dtype, optional
            ``torch.float64`` for complex128 states (default complex64).
        **kwargs
            Passed to the layer's ``allocate_inference_cache`` (e.g. ``history_dtype``).

        Returns
        -------
        cache
            The layer's (:class:`nn.DS4DCache`, :class:`nn.S4DCache`, a clocked layer's).

        Raises
        ------
        ValueError
            A negative ``batch_size``, a ``max_seqlen < 1``, a ``dtype`` that is not a float or complex dtype.
        TypeError
            A dtype given as ``max_seqlen``; a keyword the layer does not take.
        """
        refuse_dtype_as_max_seqlen(max_seqlen, "SequenceBlock")
        return allocate_caches([self.layer], batch_size, max_seqlen, dtype, kwargs)[0]

    def step(self, x_t, cache, tick=None):
        """One position of decoding; updates ``cache`` in place.

        Parameters
        ----------
        x_t : Tensor ``(B, H)``
        cache
            From :meth:`allocate_inference_cache`.
        tick : Tensor ``(B,)`` bool, optional
            A clocked layer's clock (False: the layer's time stands still for that row).

        Returns
        -------
        Tensor ``(B, H)``

        Raises
        ------
        ValueError, TypeError, RuntimeError
            As the layer's ``step`` (an input of another shape, a cache of another layer).
        """
        z = self.norm(x_t) if self.prenorm else x_t
        y = x_t + self._post(self.layer.step(z, cache) if tick is None else self.layer.step(z, cache, tick))
        return y if self.prenorm else self.norm(y)

    def prefill(self, x, cache, mask=None, ticks=None):
        """Consume a prompt in parallel: fills ``cache``, returns the outputs.

        Parameters
        ----------
        x : Tensor ``(B, L, H)``
        cache
            From :meth:`allocate_inference_cache`; moved on by ``L`` tokens in place.
        mask : Tensor ``(B, L)`` bool, optional
            False where the layer's input is zeroed (a left-padded batch: the padding then leaves every
            state at zero, see :meth:`nn.SequenceModel.prefill`).
        ticks : Tensor ``(B, L)`` bool, optional
            A clocked layer's clock.

        Returns
        -------
        Tensor ``(B, L, H)``

        Raises
        ------
        ValueError, TypeError, RuntimeError
            As the layer's ``prefill``.
        """
        z = self.norm(x) if self.prenorm else x
        if mask is not None:
            z = z * mask[..., None].to(z.dtype)
        y = x + self._post(self.layer.prefill(z, cache) if ticks is None else self.layer.prefill(z, cache, ticks))
        return y if self.prenorm else self.norm(y)
