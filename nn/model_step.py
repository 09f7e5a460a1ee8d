"""The fused decode step of a whole :class:`nn.SequenceModel` on the CPU: one plan per list of caches.

``SequenceModel.step`` through its modules costs about 15 torch calls per block (norm, GELU, the GLU
linear, dropout, the residual), each a few microseconds of dispatch at batch 1, which together cost
as much as the layers' own fused steps. When every block is a plain DS4D block decoding with the fused
engine, ``step`` runs :class:`ModelStep` instead: per block the layer's compiled step
(:func:`ddesys.cpu.step.bind_step`, as ``DS4D.step``) and one compiled pass for the rest::

    a = act(s)                        s: the layer's output (B, H)
    r = GLU(W a + b)                  W: (2H, H) (or W a + b without GLU)
    h' = h + r                        (post-norm blocks: h' = norm(h + r))
    z' = next norm(h')                the next block's input (the last block: the model's final norm)

so a token is the encoder, ``2 n_layers`` compiled calls and the decoder (up to :data:`MATVEC_MAX_BATCH`
rows a linear encoder's and the decoder's products are compiled loops too: torch's ``linear`` of one
row costs 20-30 us here, the loop a few). The elementwise parts
(LayerNorm moments, erf- or tanh-GELU, the sigmoid) are evaluated in float64 and rounded to the
model's dtype; the matrix-vector products accumulate in the model's dtype (FMA, reordered sums: the
outputs agree with the module path to that dtype's rounding, not bitwise). Above
:data:`MATVEC_MAX_BATCH` rows the product is torch's (``addmm``), between two compiled passes.

Eligible (checked when a plan is built, and per token only by identity tests): Numba available; no
autograd (``torch.no_grad()`` / ``inference_mode``); eval mode or zero dropout; every block a
:class:`nn.SequenceBlock` with an unmodified ``step``, its layer a :class:`nn.DS4D` without a tap (or a
:class:`nn.clock.Clocked` one with a given clock, decoded by :mod:`nn.clock_step`) with an unmodified
``step``, ``nn.LayerNorm`` (over the channels) or no norm, ``nn.GELU``; every cache that layer's own,
``"fused"`` engine (not ``parallel="auto"``), in the parameters' dtype; no hooks on the block's modules;
parameters on the CPU, contiguous. Otherwise ``step`` takes the module path (the same numbers to
rounding). Up to :data:`MAX_PLANS` plans are kept per model, one per list of caches; a plan rebuilds
itself when a parameter object or its storage changes (in-place optimizer updates are seen directly).
Per token the plan allocates the decoder's output only (and an embedding's or, above
:data:`MATVEC_MAX_BATCH` rows, the encoder's).
"""
from __future__ import annotations

import math
import weakref
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ddesys import numba_available

from .block import SequenceBlock
from .cache import DS4DCache
from .clock import Clocked, ClockedCache
from .ds4d import DS4D
from .engine import FusedEngine, check_history16

__all__ = ["MATVEC_MAX_BATCH", "MAX_PLANS", "ModelStep", "current_plan", "plan_for"]

#: batch rows up to which the block's linear is the compiled loop (above: torch's addmm, faster there)
MATVEC_MAX_BATCH = 2
_PLANS = weakref.WeakKeyDictionary()      # model -> {caches key: plan} (no state on the model itself)
MAX_PLANS = 4                             #: plans kept per model (cache lists decoded in turn)
_NORM_NONE, _NORM_LAYER = 0, 1
_ACTS = {"none": 0, "tanh": 1}            # nn.GELU(approximate=...)

_nb = None
if numba_available():                     # Numba present and not disabled (DDESYS_DISABLE_NUMBA)
    import numba as _nb

    _FM = {"contract", "reassoc", "nsz"}
    _OPTS = dict(cache=True, fastmath=_FM, error_model="numpy", nogil=True)

    @_nb.njit(**_OPTS)
    def _norm_row(src, b, kind, w, bias, eps, dst):              # pragma: no cover - compiled
        H = src.shape[1]
        if kind == _NORM_NONE:
            for i in range(H):
                dst[b, i] = src[b, i]
            return
        m = 0.0
        for i in range(H):
            m += float(src[b, i])
        m /= H
        v = 0.0
        for i in range(H):
            d = float(src[b, i]) - m
            v += d * d
        r = 1.0 / math.sqrt(v / H + eps)
        for i in range(H):
            dst[b, i] = (float(src[b, i]) - m) * r * float(w[i]) + float(bias[i])

    @_nb.njit(**_OPTS)
    def _norm_rows(src, kind, w, bias, eps, dst):                # pragma: no cover - compiled
        for b in range(src.shape[0]):
            _norm_row(src, b, kind, w, bias, eps, dst)
        return 0

    @_nb.njit(**_OPTS)
    def _act_rows(s, act, a):                                    # pragma: no cover - compiled
        B, H = s.shape
        for b in range(B):
            for i in range(H):
                v = float(s[b, i])
                if act == 0:
                    a[b, i] = 0.5 * v * (1.0 + math.erf(v * 0.7071067811865476))
                else:
                    a[b, i] = 0.5 * v * (1.0 + math.tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)))
        return 0

    @_nb.njit(**_OPTS)
    def _linear_rows(x, W, bias, zero, out):                     # pragma: no cover - compiled
        for b in range(x.shape[0]):                              # out = x W^T + bias, a few rows
            for j in range(W.shape[0]):
                acc = zero
                for k in range(W.shape[1]):
                    acc += W[j, k] * x[b, k]
                out[b, j] = acc + bias[j]
        return 0

    @_nb.njit(**_OPTS)
    def _block_post(s, h, W, bias, zero, act, glu, have_o, pk, pw, pb, peps, nk, nw, nb, neps,
                    a, o, h_out, z_out):                         # pragma: no cover - compiled
        B, H = h.shape
        if not have_o:                                           # a = act(s); o = W a + bias
            _act_rows(s, act, a)
            _linear_rows(a, W, bias, zero, o)
        for b in range(B):
            for i in range(H):
                r = float(o[b, i])
                if glu:
                    r = r / (1.0 + math.exp(-float(o[b, i + H])))
                h_out[b, i] = float(h[b, i]) + r
            if pk != _NORM_NONE:                                 # post-norm block
                _norm_row(h_out, b, pk, pw, pb, peps, h_out)
            _norm_row(h_out, b, nk, nw, nb, neps, z_out)         # the next block's input
        return 0


class _Norm(NamedTuple):
    kind: int                   #: _NORM_NONE or _NORM_LAYER
    w: np.ndarray               #: (H,) weight (ones without one)
    b: np.ndarray               #: (H,) bias (zeros without one)
    eps: float
    params: tuple               #: (parameter dict, name) of the module's parameters


class _Block(NamedTuple):
    own: _Norm                  #: the block's norm (applied to its output when post-norm)
    W: np.ndarray               #: (O, H) the output linear, O = 2H with GLU
    bias: np.ndarray            #: (O,)
    act: int                    #: index in _ACTS
    glu: bool
    nxt: _Norm                  #: makes the next input from the block's output
    post: bool                  #: post-norm block


def _norm_spec(mod, H, dt):
    """A norm module's :class:`_Norm`, or None when it is not fusable."""
    if type(mod) is nn.Identity:
        one = np.zeros(1, dt)
        return _Norm(_NORM_NONE, one, one, 0.0, ())
    if type(mod) is not nn.LayerNorm or tuple(mod.normalized_shape) != (H,) or _hooked(mod):
        return None
    w = mod.weight.detach().numpy() if mod.weight is not None else np.ones(H, dt)
    b = mod.bias.detach().numpy() if mod.bias is not None else np.zeros(H, dt)
    if w.dtype != dt or b.dtype != dt:
        return None
    params = tuple((mod._parameters, n) for n in ("weight", "bias") if mod._parameters.get(n) is not None)
    return _Norm(_NORM_LAYER, w, b, float(mod.eps), params)


def _hooked(mod):
    return any(m._forward_hooks or m._forward_pre_hooks for m in mod.modules())


def _block_spec(blk, nxt, H, dt):
    """A block's :class:`_Block` and its parameters, or None when it is not fusable. ``nxt``: the norm
    that makes the next input from the block's output (the next block's norm when pre-norm, else the
    identity; the model's final norm after the last block)."""
    layer = blk.layer
    if type(layer) is Clocked and layer.gate is None and type(layer).step is Clocked.step:
        layer = layer.inner                                      # a given clock: the clocked fused step
    if type(blk).step is not SequenceBlock.step or type(layer) is not DS4D or type(layer).step is not DS4D.step:
        return None
    if layer.has_tap or layer.bidirectional or _hooked(blk):
        return None
    act, glu_mod, lin = blk.act, blk.glu, blk.out
    if type(act) is not nn.GELU or act.approximate not in _ACTS:
        return None
    glu = type(glu_mod) is nn.GLU
    if not (glu and glu_mod.dim in (-1, 1)) and type(glu_mod) is not nn.Identity:
        return None
    if type(lin) is not nn.Linear or lin.in_features != H or lin.out_features != (2 * H if glu else H) \
            or lin.bias is None:
        return None
    own = _norm_spec(blk.norm, H, dt)
    if own is None or nxt is None:
        return None
    if lin.weight.device.type != "cpu" or not lin.weight.is_contiguous():
        return None
    W, bias = lin.weight.detach().numpy(), lin.bias.detach().numpy()
    if W.dtype != dt or bias.dtype != dt:
        return None
    params = ((lin._parameters, "weight"), (lin._parameters, "bias")) + own.params + nxt.params
    spec = _Block(own, W, bias, _ACTS[act.approximate], glu, nxt, not blk.prenorm)
    return spec, params


def _cache_ok(layer, cache, B, dtype):
    if cache.owner is not layer or cache.batch_size != B or cache.real_dtype != dtype:
        return False
    if cache.__class__ is ClockedCache:
        return cache.engine == "fused"
    return (cache.__class__ is DS4DCache and type(cache._engine) is FusedEngine and cache._engine.parallel != "auto"
            and cache.xbuf is None)


class ModelStep:
    """A :class:`nn.SequenceModel`'s decode step over one list of caches (see the module docstring).
    Made by :func:`plan_for`; :meth:`run` takes the embedded token and returns the decoder's output."""

    def __init__(self, model, caches, specs, first, params, dt):
        B, H = caches[0].batch_size, model.blocks[0].layer.H
        self.key = tuple(map(id, caches))
        self.refs = tuple(weakref.ref(c) for c in caches)
        self.training = model.training
        seen = {}
        for d, n in params:                                      # each parameter once
            seen.setdefault(id(d[n]), (d, n, d[n], d[n].data_ptr()))
        self.params = tuple(seen.values())
        self.specs, self.first = specs, first
        self.layers = [blk.layer for blk in model.blocks]
        self.clocked = [type(layer) is Clocked for layer in self.layers]
        self.fmt16 = [c.buf.dtype == torch.float16 for c in caches]            # (clocked rings are complex)
        self.zero = dt.type(0)
        self.matvec = B <= MATVEC_MAX_BATCH
        self.hA, self.hB, self.z, self.s, self.a = (np.zeros((B, H), dt) for _ in range(5))   # (B, H) each
        self.o = np.zeros((B, specs[0].W.shape[0]), dt)                                     # (B, O)
        self.z_t, self.s_t, self.a_t, self.o_t = map(torch.from_numpy, (self.z, self.s, self.a, self.o))
        self.Wt = [torch.from_numpy(sp.W).t() for sp in specs]                              # (H, O) views
        self.bias_t = [torch.from_numpy(sp.bias) for sp in specs]
        self.encoder, self.decoder = model.encoder, model.decoder
        self.enc = _encoder_spec(model.encoder, H, dt) if self.matvec else None    # (W, bias) compiled, or torch's
        self.dec = _linear_spec(model.decoder, dt) if self.matvec else None
        self.h_in = np.zeros((B, H), dt)                                                    # the encoder's output

    def valid(self, model, caches):
        """The plan still describes ``model`` and ``caches`` (identity tests only)."""
        if model.training != self.training or tuple(map(id, caches)) != self.key:
            return False
        if any(r() is not c for r, c in zip(self.refs, caches)):
            return False
        return all(d.get(n) is p and p.data_ptr() == ptr for d, n, p, ptr in self.params)

    def run(self, x, caches, tick=None):
        """The step's input ``x`` (``(B, d_input)``, or token ids ``(B,)``; checked by the model) (and a
        clocked model's ``tick`` ``(B,)``) -> outputs ``(B, d_output)``; advances every cache by one token."""
        if self.enc is not None:                                 # the encoder's product, compiled
            _linear_rows(np.ascontiguousarray(x.detach().numpy()), *self.enc, self.zero, self.h_in)
            hn = self.h_in                                       # (B, H)
        else:
            hn = self.encoder(x).detach().numpy()                # (B, H)
        z, s = self.z, self.s
        f = self.first
        _norm_rows(hn, f.kind, f.w, f.b, f.eps, z)               # the first block's input
        for i, (layer, cache, sp) in enumerate(zip(self.layers, caches, self.specs)):
            if self.clocked[i]:                                  # the clocked layer's fused step (nn.clock_step)
                s[...] = layer.step(self.z_t, cache, tick).numpy()
            else:
                layer._bound_constants(cache)                    # memo check; rebinds after a parameter change
                t = cache.t
                cache._run(z, t, s)                              # the layer's fused step: z -> s (B, H)
                cache.t = t + 1
                if self.fmt16[i] and "_warned" not in cache.__dict__:
                    check_history16(cache, self.s_t, self.z_t)
            if not self.matvec:                                  # torch's product above a few rows
                _act_rows(s, sp.act, self.a)
                torch.addmm(self.bias_t[i], self.a_t, self.Wt[i], out=self.o_t)
            own, nxt = sp.own, sp.nxt
            out = self.hA if hn is not self.hA else self.hB
            _block_post(s, hn, sp.W, sp.bias, self.zero, sp.act, sp.glu, not self.matvec,
                        own.kind if sp.post else _NORM_NONE, own.w, own.b, own.eps, nxt.kind, nxt.w, nxt.b, nxt.eps,
                        self.a, self.o, out, z)                  # out: the block's output; z: the next input
            hn = out
        if self.dec is None:
            return F.linear(self.z_t, self.decoder.weight, self.decoder.bias)
        y = np.empty((z.shape[0], self.dec[0].shape[0]), z.dtype)                          # (B, d_output)
        _linear_rows(z, *self.dec, self.zero, y)
        return torch.from_numpy(y)


def _linear_spec(lin, dt):
    """``(W, bias)`` NumPy views of an ``nn.Linear`` the plan may run compiled, or None (torch's then):
    no hooks, CPU, contiguous, of the model's dtype; a missing bias is zeros."""
    if type(lin) is not nn.Linear or _hooked(lin) or lin.weight.device.type != "cpu" or not lin.weight.is_contiguous():
        return None
    W = lin.weight.detach().numpy()
    b = lin.bias.detach().numpy() if lin.bias is not None else np.zeros(W.shape[0], W.dtype)
    return (W, b) if W.dtype == dt and b.dtype == dt else None


def _encoder_spec(enc, H, dt):
    return _linear_spec(enc, dt) if isinstance(enc, nn.Linear) and enc.out_features == H else None


def plan_for(model, caches, x):
    """The fused plan for ``model.step`` over ``caches`` with the step's input ``x`` (``(B, d_input)`` or token
    ids ``(B,)``, already checked by the model), or None when the model, the input or the caches are not
    eligible (the module path then runs)."""
    plans = _PLANS.get(model)
    plan = plans.get(tuple(map(id, caches))) if plans else None
    if plan is not None and x.shape[0] == plan.z.shape[0] and x.device.type == "cpu" and plan.valid(model, caches) \
            and (plan.x_dtype is None or x.dtype == plan.x_dtype):
        return plan
    w = model.encoder.weight
    if _nb is None or not model.blocks or w.dtype not in (torch.float32, torch.float64) or w.device.type != "cpu" \
            or x.device.type != "cpu":
        return None
    x_dtype = None if isinstance(model.encoder, nn.Embedding) else w.dtype      # a float input: the encoder's dtype
    if x_dtype is not None and x.dtype != x_dtype:
        return None                                                             # the module path names the mismatch
    if model.training and any(m.p > 0 for m in model.modules() if isinstance(m, nn.Dropout)):
        return None
    dt = np.dtype(np.float32 if w.dtype == torch.float32 else np.float64)
    B, H = x.shape[0], model.blocks[0].layer.H
    blocks = list(model.blocks)
    if any(type(b) is not SequenceBlock or b.layer.H != H for b in blocks) or len({b.prenorm for b in blocks}) != 1 \
            or any((type(b.layer) is Clocked) != (model.clock is not None) for b in blocks):
        return None
    if not all(_cache_ok(b.layer, c, B, w.dtype) for b, c in zip(blocks, caches)):
        return None
    identity = _norm_spec(nn.Identity(), H, dt)
    final = _norm_spec(model.norm, H, dt)
    specs, params = [], []
    for i, blk in enumerate(blocks):
        nxt = final if i == len(blocks) - 1 else _norm_spec(blocks[i + 1].norm, H, dt) if blk.prenorm else identity
        got = _block_spec(blk, nxt, H, dt)
        if got is None:
            return None
        specs.append(got[0])
        params += got[1]
    dec = model.decoder
    if _hooked(dec) or dec.weight.dtype != w.dtype:
        return None
    params += [(m._parameters, n) for m in (dec, model.encoder) for n in ("weight", "bias")
               if m._parameters.get(n) is not None]
    first = specs[0].own if blocks[0].prenorm else identity
    plan = ModelStep(model, caches, specs, first, params, dt)
    plan.x_dtype = x_dtype
    plans = _PLANS.setdefault(model, {})
    plans.pop(plan.key, None)
    while len(plans) >= MAX_PLANS:                               # the oldest goes
        plans.pop(next(iter(plans)))
    plans[plan.key] = plan
    return plan


def current_plan(model, caches):
    """The plan :func:`plan_for` would reuse for ``model`` and ``caches`` now, or None (for tests and
    benchmarks: whether ``step`` runs fused)."""
    plan = _PLANS.get(model, {}).get(tuple(map(id, caches)))
    return plan if plan is not None and plan.valid(model, caches) else None
