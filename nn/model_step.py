"""The compiled decode step of a whole :class:`nn.SequenceModel` on the CPU: an opt-in plan over one list of
caches, derived from what each block publishes (:meth:`nn.SequenceBlock.fused_form`).

``SequenceModel.step`` through its modules costs about 15 torch calls per block (norm, GELU, the GLU
linear, dropout, the residual), each a few microseconds of dispatch at batch 1, which together cost as
much as the layers' own fused steps. ``plan = model.compile_step(caches)`` derives a :class:`StepPlan`
from the blocks' forms; ``plan.step(x_t)`` then runs, per block, the layer's compiled step (its cache's
handle, as ``DS4D.step``) and one compiled pass for the rest (:func:`ddesys.cpu.block_loops.block_post`)::

    a = act(s)                        s: the layer's output (B, H)
    r = GLU(W a + b)                  W: (2H, H) (or W a + b without GLU)
    h' = h + r                        (post-norm blocks: h' = norm(h + r))
    z' = next norm(h')                the next block's input (the last block: the model's final norm)

so a token is the encoder, ``2 n_layers`` compiled calls and the decoder (up to :data:`MATVEC_MAX_BATCH`
rows a linear encoder's and the decoder's products are compiled loops too; above it torch's ``addmm``
between two compiled passes). The numbers agree with the module path to the model dtype's rounding (the
loops' precision: :mod:`ddesys.cpu.block_loops`), and do not depend on the thread count.

The layers. Each block's layer runs the step it publishes for a plan (``layer.compiled_step(cache)``):
a :class:`nn.DS4D` with an unmodified ``step`` and no tap on a fused-engine cache (not
``parallel="auto"``) runs its cache's bound compiled step on the plan's arrays; every other layer (a tap,
another engine, S4D, a given or learned clock, a subclass with its own ``step``) runs its own ``step``,
called as the block calls it, and the rest of its block stays compiled.

What runs compiled (judged when the plan is derived): every block publishes a form, of one width ``H``
and one norm placement; every cache that layer's own, in the parameters' dtype; parameters on the CPU,
contiguous; Numba available. A plan that cannot run compiled says why (:attr:`StepPlan.reason`) and
steps through the modules. Per token the plan also takes the module path under autograd, for another
batch size, device or input dtype; it derives itself again when the model's mode changed or a parameter
object or its storage was replaced (in-place updates are seen directly through its views). Per token it
allocates the decoder's output only (and an embedding's or, above :data:`MATVEC_MAX_BATCH` rows, the
encoder's; a layer's own step allocates its output).
"""
from __future__ import annotations

from operator import is_
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ddesys.cpu import block_loops as loops

from .block import runs_hooks

__all__ = ["MATVEC_MAX_BATCH", "StepPlan"]

#: batch rows up to which the block's linear is the compiled loop (above: torch's addmm, faster there)
MATVEC_MAX_BATCH = 2
_DATA_PTR = torch.Tensor.data_ptr


class _Norm(NamedTuple):
    kind: int                   #: loops.NORM_NONE or loops.NORM_LAYER
    w: np.ndarray               #: (H,) weight (ones without one)
    b: np.ndarray               #: (H,) bias (zeros without one)
    eps: float


class _Block(NamedTuple):
    own: _Norm                  #: the block's norm (applied to its output when post-norm)
    W: np.ndarray               #: (O, H) the output linear, O = 2H with GLU
    bias: np.ndarray            #: (O,)
    act: int                    #: a value of loops.ACTS
    glu: bool
    nxt: _Norm                  #: makes the next input from the block's output
    post: bool                  #: post-norm block


def _hook_count(modules):
    """How many forward (pre-)hooks the modules hold (see :func:`nn.block.runs_hooks`)."""
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in modules)


def _state_ptr(cache):
    """Where a cache's state lives (a prefill or a user may replace the tensor)."""
    state = getattr(cache, "state", None)
    return state.data_ptr() if isinstance(state, torch.Tensor) else id(state)


class _Unfusable(Exception):
    """Why a plan steps through the modules (its message)."""


def _host(t, dt, what):
    """``t``'s NumPy view, of dtype ``dt``, on the CPU and contiguous."""
    a = t.detach().numpy() if t.device.type == "cpu" and t.is_contiguous() else None
    if a is None or a.dtype != dt:
        raise _Unfusable(f"{what}: a contiguous CPU tensor of the model's dtype is needed")
    return a


def _norm(mod, H, dt, watch):
    """A norm module's :class:`_Norm` (``None``: the identity); its parameters go to ``watch``."""
    if mod is None or type(mod) is nn.Identity:
        one = np.zeros(1, dt)
        return _Norm(loops.NORM_NONE, one, one, 0.0)
    if type(mod) is not nn.LayerNorm or tuple(mod.normalized_shape) != (H,) or runs_hooks(mod):
        raise _Unfusable("a norm that is neither a plain LayerNorm over the channels nor the identity")
    watch.append(mod)
    w = _host(mod.weight, dt, "the norm's weight") if mod.weight is not None else np.ones(H, dt)
    b = _host(mod.bias, dt, "the norm's bias") if mod.bias is not None else np.zeros(H, dt)
    return _Norm(loops.NORM_LAYER, w, b, float(mod.eps))


def _linear(lin, dt, watch):
    """``(W, bias)`` NumPy views of an ``nn.Linear`` the plan may run compiled, or None (torch's then): no
    hooks, CPU, contiguous, of the model's dtype; a missing bias is zeros."""
    if type(lin) is not nn.Linear or runs_hooks(lin):
        return None
    try:
        W = _host(lin.weight, dt, "")
        b = _host(lin.bias, dt, "") if lin.bias is not None else np.zeros(W.shape[0], W.dtype)
    except _Unfusable:
        return None
    watch.append(lin)
    return W, b


class _OwnStep:
    """A layer's own ``step`` on the plan's rows, called as :meth:`nn.SequenceBlock.step` calls it."""

    def __init__(self, layer, cache):
        self.layer, self.cache = layer, cache

    def __call__(self, z, s, z_t, s_t, tick):
        y = self.layer.step(z_t, self.cache) if tick is None else self.layer.step(z_t, self.cache, tick)
        s[...] = y.numpy()                                      # (B, H)


def _layer_step(layer, cache, B, dtype):
    """The step of ``layer`` over ``cache`` in the plan (a callable ``(z, s, z_t, s_t, tick)``): the
    compiled step the layer publishes (``layer.compiled_step(cache)``, e.g. :meth:`nn.DS4D.compiled_step`),
    else its own ``step``."""
    try:
        mine = cache.owner is layer and cache.batch_size == B and cache.real_dtype == dtype
    except AttributeError:
        mine = False
    if not mine:
        raise _Unfusable("a cache that is not its layer's, of the batch and the model's dtype")
    publish = getattr(layer, "compiled_step", None)
    run = publish(cache) if publish is not None else None
    return run if run is not None else _OwnStep(layer, cache)


class _Program:
    """The compiled step of one model over its caches, as derived (see :meth:`StepPlan.step`)."""

    def __init__(self, model, caches):
        if not loops.available():
            raise _Unfusable("Numba is not available")
        if model.training and any(m.p > 0 for m in model.modules() if isinstance(m, nn.Dropout)):
            raise _Unfusable("active dropout (training mode)")
        forms = [blk.fused_form() for blk in model.blocks]
        if not forms:
            raise _Unfusable("a model without blocks")
        for i, (blk, f) in enumerate(zip(model.blocks, forms)):
            if f is None:
                raise _Unfusable(f"block {i} has no fused form: {blk.unfused_reason()} "
                                 "(see SequenceBlock.fused_form)")
        w = model.encoder.weight
        if w.dtype not in (torch.float32, torch.float64) or w.device.type != "cpu":
            raise _Unfusable("parameters that are not float32 / float64 on the CPU")
        H = forms[0].out.in_features
        if any(f.out.in_features != H for f in forms) or len({f.prenorm for f in forms}) != 1:
            raise _Unfusable("blocks of different widths or norm placements")
        self.dt = dt = np.dtype(np.float32 if w.dtype == torch.float32 else np.float64)
        B = caches[0].batch_size
        self.steps = [_layer_step(f.layer, c, B, w.dtype) for f, c in zip(forms, caches)]
        watch = []
        final = _norm(model.norm, H, dt, watch)
        self.specs = []
        for i, f in enumerate(forms):
            own = _norm(f.norm, H, dt, watch)
            nxt = final if i == len(forms) - 1 else _norm(forms[i + 1].norm, H, dt, watch) if f.prenorm \
                else _norm(None, H, dt, watch)
            W, bias = _host(f.out.weight, dt, "a block's linear"), _host(f.out.bias, dt, "a block's bias")
            watch.append(f.out)
            self.specs.append(_Block(own, W, bias, loops.ACTS[f.act], f.glu, nxt, not f.prenorm))
        self.first = self.specs[0].own if forms[0].prenorm else _norm(None, H, dt, watch)
        dec = model.decoder
        if runs_hooks(dec) or dec.weight.dtype != w.dtype:
            raise _Unfusable("a hooked decoder or one of another dtype")
        self.matvec = B <= MATVEC_MAX_BATCH
        self.encoder, self.decoder = model.encoder, dec
        self.enc = _linear(model.encoder, dt, watch) if self.matvec and isinstance(model.encoder, nn.Linear) \
            and model.encoder.out_features == H else None               # (W, bias) compiled, or torch's
        self.dec = _linear(dec, dt, watch) if self.matvec else None
        self.x_dtype = None if isinstance(model.encoder, nn.Embedding) else w.dtype   # a float input: its dtype
        self.training = model.training
        self.modules = tuple(model.modules())                           # what the plan was derived from
        self.hooks = _hook_count(self.modules)
        places = [(model, n) for n in ("encoder", "decoder", "norm", "blocks")]
        places += [(model.blocks, str(i)) for i in range(len(model.blocks))]
        places += [(blk, n) for blk in model.blocks for n in ("layer", "norm", "act", "drop", "out", "glu")]
        self.owners, self.attrs = zip(*places)                          # where each module the plan read sits
        self.held = tuple(map(getattr, self.owners, self.attrs))
        self.n_blocks = len(model.blocks)
        self.cache_ptrs = tuple(_state_ptr(c) for c in caches)
        seen = {}
        for mod in watch + [dec, model.encoder]:                    # each parameter once, with its storage
            for name, p in mod.named_parameters(recurse=False):
                seen.setdefault(id(p), (mod, name, p))
        self.mods, self.names, self.params = zip(*seen.values())     # (module, name, parameter) columns
        self.ptrs = tuple(map(_DATA_PTR, self.params))
        self.zero = dt.type(0)
        self.hA, self.hB, self.z, self.s, self.a = (np.zeros((B, H), dt) for _ in range(5))   # (B, H) each
        self.o = np.zeros((B, self.specs[0].W.shape[0]), dt)                                # (B, O)
        self.z_t, self.s_t, self.a_t, self.o_t = map(torch.from_numpy, (self.z, self.s, self.a, self.o))
        self.Wt = [torch.from_numpy(sp.W).t() for sp in self.specs]                        # (H, O) views
        self.bias_t = [torch.from_numpy(sp.bias) for sp in self.specs]
        self.h_in = np.zeros((B, H), dt)                                                   # the encoder's output

    def current(self, model, caches):
        """The program still describes ``model`` and ``caches``: the model's mode, the modules it read (none
        replaced; the number of blocks), the forward hooks of every module, its parameter objects and their
        storage, the caches' state storage."""
        return model.training == self.training and all(map(is_, map(getattr, self.mods, self.names), self.params)) \
            and tuple(map(_DATA_PTR, self.params)) == self.ptrs \
            and tuple(_state_ptr(c) for c in caches) == self.cache_ptrs \
            and all(map(is_, map(getattr, self.owners, self.attrs), self.held)) \
            and len(model.blocks) == self.n_blocks and _hook_count(self.modules) == self.hooks

    def fits(self, x):
        return x.shape[0] == self.z.shape[0] and x.device.type == "cpu" and \
            (self.x_dtype is None or x.dtype == self.x_dtype)

    def run(self, x, tick):
        """``x`` ``(B, d_input)`` (or token ids ``(B,)``), ``tick`` ``(B,)`` or None -> ``(B, d_output)``."""
        if self.enc is not None:                                 # the encoder's product, compiled
            loops.linear_rows(np.ascontiguousarray(x.detach().numpy()), *self.enc, self.zero, self.h_in)
            hn = self.h_in                                       # (B, H)
        else:
            hn = self.encoder(x).detach().numpy()                # (B, H)
        z, s = self.z, self.s
        f = self.first
        loops.norm_rows(hn, f.kind, f.w, f.b, f.eps, z)          # the first block's input
        for layer_step, sp, W_t, b_t in zip(self.steps, self.specs, self.Wt, self.bias_t):
            layer_step(z, s, self.z_t, self.s_t, tick)           # z -> s (B, H), the layer's step
            if not self.matvec:                                  # torch's product above a few rows
                loops.act_rows(s, sp.act, self.a)
                torch.addmm(b_t, self.a_t, W_t, out=self.o_t)
            own, nxt = sp.own, sp.nxt
            out = self.hA if hn is not self.hA else self.hB
            loops.block_post(s, hn, sp.W, sp.bias, self.zero, sp.act, sp.glu, not self.matvec,
                             own.kind if sp.post else loops.NORM_NONE, own.w, own.b, own.eps,
                             nxt.kind, nxt.w, nxt.b, nxt.eps, self.a, self.o, out, z)   # out: output; z: next input
            hn = out
        if self.dec is None:
            return F.linear(self.z_t, self.decoder.weight, self.decoder.bias)
        y = np.empty((z.shape[0], self.dec[0].shape[0]), z.dtype)                          # (B, d_output)
        loops.linear_rows(z, *self.dec, self.zero, y)
        return torch.from_numpy(y)


class StepPlan:
    """A :class:`nn.SequenceModel`'s compiled decode step over one list of caches (``model.compile_step``;
    see the module docstring).

    Attributes
    ----------
    model : SequenceModel
    caches : list
        The caches it advances (from ``model.allocate_inference_cache``).
    reason : str or None
        Why the plan steps through the modules; None while it runs compiled. Per token the plan checks
        that it still describes the model and the caches (the mode, the modules and their hooks, the
        parameter objects and their storage, the caches' state storage) and derives itself again when
        not; values written in place (an optimizer step) are read through its views.
    fused_tokens : int
        Tokens stepped compiled so far (the others went through the modules).
    """

    def __init__(self, model, caches):
        self.model, self.caches = model, list(caches)
        self.fused_tokens = 0
        self.program, self.reason = None, None
        self._derive()

    def _derive(self):
        self._training = self.model.training
        self._modules = tuple(self.model.modules())
        self._hooks = _hook_count(self._modules)
        self._ptrs = self._storage()
        try:
            self.program, self.reason = _Program(self.model, self.caches), None
        except _Unfusable as why:
            self.program, self.reason = None, str(why)

    def _storage(self):
        return tuple(p.data_ptr() for p in self.model.parameters()) + tuple(_state_ptr(c) for c in self.caches)

    def _stale(self):
        """The model or the caches changed since the plan was derived (see :attr:`reason`)."""
        model, prog = self.model, self.program
        if prog is not None:
            return not prog.current(model, self.caches)
        return model.training != self._training or tuple(model.modules()) != self._modules \
            or _hook_count(self._modules) != self._hooks or self._storage() != self._ptrs

    def step(self, x_t):
        """One position, as ``model.step(x_t, caches)``: ``(B, d_input)`` or ``(B, 1, d_input)`` (token ids
        ``(B,)`` or ``(B, 1)``) -> ``(B, d_output)`` (``(B, 1, d_output)`` with the length axis); advances
        the caches by one token. Raises as ``model.step``."""
        model, prog = self.model, self.program
        if self._stale():
            self._derive()                                       # the model or a cache changed: derive again
            prog = self.program
        if prog is None or torch.is_grad_enabled():
            return model.module_step(x_t, self.caches)
        x, tick, seq_axis = model.step_input(x_t, self.caches)
        if not prog.fits(x):
            return model.module_step(x_t, self.caches)           # the module path (or its error)
        y = prog.run(x, tick)                                    # (B, d_output)
        self.fused_tokens += 1
        return y[:, None] if seq_axis else y
