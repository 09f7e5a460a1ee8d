"""Independent float64 references for the checks, in NumPy, written from docs/theory.md's formulas.

Nothing here calls :mod:`ddesys` (its recurrence, kernel synthesis or parameterization) or a layer's
own forward, kernel, recurrent or decode path, so a check that compares the library with these
compares two implementations, not one implementation with itself. Torch modules are only read: a
layer's raw parameters, and in :func:`model_forward` a model's embedding, norms, linears and
activation (standard torch modules, not what the checks verify). ``tests/test_verification_oracle.py``
checks these functions against the tests' own oracle (``tests/oracle.py``).

* :func:`ds4d_params`: docs/theory.md §7, the DS4D map from a layer's raw parameters;
* :func:`recurrence`: the §2 recurrence ``h_t = lam h_{t-1} + mu((1 - alpha) h_{t-k} + alpha h_{t-k-1})
  + bbar x_t``, ``y_t = 2 Re sum_n c_n h_t + d x_t``, a loop over time vectorized over (batch, channel,
  mode), channels taken in chunks so the stored history stays under ``MEMORY_BYTES``;
* :func:`impulse_response`: the kernel ``K_t`` (``d`` excluded), the recurrence driven by a unit impulse;
* :func:`model_forward`: ``nn.SequenceModel``'s forward (pre-norm, dropout 0) with every DS4D layer
  replaced by :func:`recurrence` on :func:`ds4d_params`.
"""
from __future__ import annotations

import numpy as np
from scipy.special import expit

__all__ = ["ds4d_params", "impulse_response", "model_forward", "recurrence"]

MEMORY_BYTES = 256 * 2**20            # history kept per chunk of channels


def _np(t):
    return t.detach().cpu().double().numpy()


def _cplx(p):
    """``(..., 2)`` real pairs -> complex128."""
    p = _np(p)
    return p[..., 0] + 1j * p[..., 1]


def ds4d_params(layer):
    """``lam, mu, bbar, c`` complex ``(H, N2)``, ``delay`` and ``d`` float64 ``(H,)`` of an ``nn.DS4D``
    layer (causal, no ablation), from its raw parameters::

        dt = exp(log_dt)   a = -exp(nu_re) + i nu_im   abar = exp(dt a)   p = sigmoid(r)
        lam = (1 - p) abar   mu = p |abar| exp(i theta)   bbar = (abar - 1) / a B
        delay = s_min + (s_max - s_min) sigmoid(nu_tau)
    """
    if getattr(layer, "bidirectional", False) or getattr(layer, "ablation", None) is not None:
        raise ValueError("ds4d_params: a causal DS4D layer without ablation expected")
    dt = np.exp(_np(layer.log_dt))[:, None]
    a = -np.exp(_np(layer.nu_re)) + 1j * _np(layer.nu_im)
    abar = np.exp(a * dt)
    p = expit(_np(layer.r))
    lam = (1 - p) * abar
    mu = p * np.abs(abar) * np.exp(1j * _np(layer.theta))
    bbar = (abar - 1) / a * _cplx(layer.B)
    delay = layer.s_min + (layer.s_max - layer.s_min) * expit(_np(layer.nu_tau))
    return lam, mu, bbar, _cplx(layer.C), delay, _np(layer.D)


def recurrence(lam, mu, bbar, c, delay, d, x):
    """``lam, mu, bbar, c`` ``(H, N2)``; ``delay`` (``>= 1`` step), ``d`` ``(H,)``; real ``x``
    ``(B, H, L)`` -> ``y`` float64 ``(B, H, L)``. States before ``t = 0`` are zero."""
    lam, mu, bbar, c = (np.asarray(v, dtype=np.complex128) for v in (lam, mu, bbar, c))
    delay, d = np.asarray(delay, dtype=np.float64), np.asarray(d, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    Bsz, H, L = x.shape
    N2 = lam.shape[-1]
    k = np.floor(delay).astype(np.int64)
    alpha = delay - k
    y = np.empty((Bsz, H, L))
    chunk = max(1, int(MEMORY_BYTES // ((L + 1) * max(Bsz, 1) * N2 * 16)))
    for c0 in range(0, H, chunk):
        ch = slice(c0, min(H, c0 + chunk))
        lm, bb, cc = lam[ch], bbar[ch], c[ch]
        m1, m2 = mu[ch] * (1 - alpha[ch, None]), mu[ch] * alpha[ch, None]
        kc, dc, xc = k[ch], d[ch], x[:, ch]
        rows = np.arange(lm.shape[0])
        hist = np.zeros((L + 1, Bsz, lm.shape[0], N2), dtype=np.complex128)    # row L stays zero
        for t in range(L):
            j1 = np.where(t - kc >= 0, t - kc, L)                              # (Hc,) before t = 0: zero row
            j2 = np.where(t - kc - 1 >= 0, t - kc - 1, L)
            h1 = hist[j1, :, rows].transpose(1, 0, 2)                          # (B, Hc, N2)
            h2 = hist[j2, :, rows].transpose(1, 0, 2)
            h = lm * hist[t - 1 if t else L] + m1 * h1 + m2 * h2 + bb * xc[:, :, t, None]
            hist[t] = h
            y[:, ch, t] = 2 * (cc * h).real.sum(-1) + dc * xc[:, :, t]
    return y


def impulse_response(lam, mu, bbar, c, delay, L):
    """Kernel ``K`` float64 ``(H, L)``: the response to a unit impulse at ``t = 0`` without ``d``."""
    H = np.shape(delay)[0]
    x = np.zeros((1, H, L))
    x[:, :, 0] = 1.0
    return recurrence(lam, mu, bbar, c, delay, np.zeros(H), x)[0]


def model_forward(model, x):
    """``nn.SequenceModel`` output (no pooling) for float64 ``x``, every DS4D layer replaced by
    :func:`recurrence`; the model must be pre-norm, without dropout, in float64."""
    import torch
    if getattr(model, "pool", None) is not None:
        raise ValueError("model_forward: a model without pooling expected")
    with torch.no_grad():
        h = model.encoder(x)                                                   # (B, L, H)
        for blk in model.blocks:
            if not blk.prenorm or blk.drop.p != 0.0:
                raise ValueError("model_forward: pre-norm blocks without dropout expected")
            z = blk.norm(h).double().cpu().numpy().transpose(0, 2, 1)          # (B, H, L)
            y = recurrence(*ds4d_params(blk.layer), z).transpose(0, 2, 1)      # (B, L, H)
            h = h + blk.glu(blk.out(blk.act(torch.from_numpy(np.ascontiguousarray(y)).to(h))))
        return model.decoder(model.norm(h))
