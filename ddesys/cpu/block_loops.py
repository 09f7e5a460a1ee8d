"""The compiled loops of the fused model step (:mod:`ddesys.nn.model_step`): a residual block's
parts after its layer, for a few batch rows in NumPy arrays. Numba only (:func:`available`; without it
the loops are plain Python, and the model step runs through the modules).

Per block, ``s`` the layer's output ``(B, H)``, ``h`` the block's input ``(B, H)``::

    a = act(s)                        erf- or tanh-GELU
    o = W a + bias                    W: (O, H), O = 2H with GLU
    r = o[:H] * sigmoid(o[H:])        (without GLU: r = o)
    h' = h + r                        (a post-norm block: h' = norm(h + r))
    z' = next_norm(h')                the next block's input

The elementwise parts (LayerNorm moments, GELU, the sigmoid) are evaluated in float64 and rounded to the
arrays' dtype; the matrix-vector products accumulate in the arrays' dtype with the options of the row
``"block.fused"`` of :data:`ddesys.cpu.options.LOOPS` (FMA, reordered sums): the loops are serial, so
their results do not depend on the thread count, but they agree with torch's modules to the dtype's
rounding only, not bitwise.

Entry points: :func:`norm_rows` ``(src, kind, w, bias, eps, dst)``, :func:`act_rows` ``(s, act, a)``,
:func:`linear_rows` ``(x, W, bias, zero, out)`` and :func:`block_post` (the whole pass above); ``kind`` is
:data:`NORM_NONE` or :data:`NORM_LAYER`, ``act`` a value of :data:`ACTS`.
"""
from __future__ import annotations

import math

from ._numba import available
from .options import loop

__all__ = ["ACTS", "NORM_LAYER", "NORM_NONE", "act_rows", "available", "block_post", "linear_rows", "norm_rows"]

NORM_NONE, NORM_LAYER = 0, 1           #: the identity; LayerNorm over the channels (biased variance)
ACTS = {"gelu": 0, "gelu_tanh": 1}     #: nn.GELU(approximate="none") and nn.GELU(approximate="tanh")
_ROW = "block.fused"                   #: every loop's row of the options table: serial, may reassociate


@loop(_ROW)
def _norm_row(src, b, kind, w, bias, eps, dst):              # pragma: no cover - compiled
    H = src.shape[1]
    if kind == NORM_NONE:
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


@loop(_ROW)
def norm_rows(src, kind, w, bias, eps, dst):                 # pragma: no cover - compiled
    for b in range(src.shape[0]):
        _norm_row(src, b, kind, w, bias, eps, dst)
    return 0


@loop(_ROW)
def act_rows(s, act, a):                                     # pragma: no cover - compiled
    B, H = s.shape
    for b in range(B):
        for i in range(H):
            v = float(s[b, i])
            if act == 0:
                a[b, i] = 0.5 * v * (1.0 + math.erf(v * 0.7071067811865476))
            else:
                a[b, i] = 0.5 * v * (1.0 + math.tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)))
    return 0


@loop(_ROW)
def linear_rows(x, W, bias, zero, out):                      # pragma: no cover - compiled
    for b in range(x.shape[0]):                              # out = x W^T + bias, a few rows
        for j in range(W.shape[0]):
            acc = zero
            for k in range(W.shape[1]):
                acc += W[j, k] * x[b, k]
            out[b, j] = acc + bias[j]
    return 0


@loop(_ROW)
def block_post(s, h, W, bias, zero, act, glu, have_o, pk, pw, pb, peps, nk, nw, nb, neps,
               a, o, h_out, z_out):                          # pragma: no cover - compiled
    """``s``, ``h`` ``(B, H)`` -> ``h_out`` (the block's output) and ``z_out`` (the next input), both
    ``(B, H)``; ``have_o``: ``o`` ``(B, O)`` already holds ``W act(s) + bias`` (else computed into
    ``a``, ``o``); ``pk, pw, pb, peps``: the post-norm (``NORM_NONE`` for a pre-norm block); ``nk, ...``:
    the norm making the next input."""
    B, H = h.shape
    if not have_o:                                           # a = act(s); o = W a + bias
        act_rows(s, act, a)
        linear_rows(a, W, bias, zero, o)
    for b in range(B):
        for i in range(H):
            r = float(o[b, i])
            if glu:
                r = r / (1.0 + math.exp(-float(o[b, i + H])))
            h_out[b, i] = float(h[b, i]) + r
        if pk != NORM_NONE:                                  # post-norm block
            _norm_row(h_out, b, pk, pw, pb, peps, h_out)
        _norm_row(h_out, b, nk, nw, nb, neps, z_out)         # the next block's input
    return 0
