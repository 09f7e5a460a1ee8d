"""A DS4D layer and model as NumPy float64 loops, written from docs/theory.md's formulas.

Nothing here runs :mod:`ddesys`'s recurrence or kernel synthesis, or a layer's own forward, kernel,
recurrent or decode path, so a check that compares those with these functions compares two
implementations, not one implementation with itself. The one thing shared is the DS4D parameter map:
it has one home, :func:`ddesys.ds4d_discrete`, evaluated here in NumPy on the layer's raw parameters and
checked against an independent restatement in the tests (``spec_discrete`` in ``tests/nn_helpers.py``).
Torch modules are only read: a layer's raw parameters, and in :func:`model_forward` a model's embedding,
norms, linears and activation (standard torch modules, not what the checks verify).
``tests/verification/test_reference.py`` checks these functions against the plain loops of :mod:`.loops`.

* :func:`ds4d_params`: a DS4D layer's discrete system, as NumPy arrays;
* :func:`recurrence`: the §2 recurrence ``h_t = lam h_{t-1} + mu((1 - alpha) h_{t-k} + alpha h_{t-k-1})
  + bbar x_t``, ``y_t = 2 Re sum_n c_n h_t + d x_t``, a loop over time vectorized over (batch, channel,
  mode), channels taken in chunks so the stored history stays under ``MEMORY_BYTES``;
* :func:`recurrence_kernel`: the kernel ``K_t`` (``d`` excluded), the recurrence driven by a unit impulse;
* :func:`tap`: the delayed input tap of §8, ``e sum_{j >= 0} w_j x_{t-j}`` with the hat window, a loop
  over the window's offsets;
* :func:`clocked_recurrence`: the same recurrence run in ticks (docs/theory.md §10): a loop over real
  time with a tick counter per row; between ticks nothing moves, the output is the held state's plus
  ``d x_t``;
* :func:`soft_clock_recurrence`: the soft clock of §10.4, a loop over real time with internal times
  ``tau_t = sum c_j`` and the delayed read interpolated on the polyline of (internal time, state);
* :func:`model_forward`: ``nn.SequenceModel``'s forward (pre-norm, dropout 0) with every DS4D layer
  replaced by :func:`recurrence` on :func:`ds4d_params` (plus :func:`tap` for layers with a tap).
"""
from __future__ import annotations

import numpy as np

from ddesys import ds4d_discrete
from ddesys.parameterization import delay_steps

__all__ = ["clocked_recurrence", "ds4d_params", "model_forward", "recurrence", "recurrence_kernel",
           "soft_clock_recurrence", "tap", "tap_params"]

MEMORY_BYTES = 256 * 2**20            # history kept per chunk of channels


def _np(t):
    return t.detach().cpu().double().numpy()


def ds4d_params(layer):
    """``lam, mu, bbar, c`` complex ``(H, N2)``, ``delay`` and ``d`` float64 ``(H,)`` of an ``nn.DS4D``
    layer (causal): :func:`ddesys.ds4d_discrete` in NumPy float64 on the layer's raw parameters."""
    if getattr(layer, "bidirectional", False):
        raise ValueError("ds4d_params: a causal DS4D layer expected")
    p = {n: _np(getattr(layer, n)) for n in ("log_dt", "nu_re", "nu_im", "r", "theta", "nu_tau", "B", "C")}
    d = ds4d_discrete(p["log_dt"], p["nu_re"], p["nu_im"], p["r"], p["theta"], p["nu_tau"], p["B"], p["C"],
                      layer.s_min, layer.s_max, ablation=layer.ablation)
    return d.lam, d.mu, d.bbar, d.c, np.asarray(d.delay, dtype=np.float64), _np(layer.D)


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


def clocked_recurrence(lam, mu, bbar, c, delay, d, x, ticks):
    """As :func:`recurrence`, with ``ticks`` bool ``(B, L)``: at a tick the row takes one step (its
    delays count ticks), elsewhere its state and history stay and the input is not read; the output is
    ``2 Re sum_n c_n h + d x_t`` with ``h`` the row's last tick state (zero before its first tick)."""
    lam, mu, bbar, c = (np.asarray(v, dtype=np.complex128) for v in (lam, mu, bbar, c))
    delay, d = np.asarray(delay, dtype=np.float64), np.asarray(d, dtype=np.float64)
    x, ticks = np.asarray(x, dtype=np.float64), np.asarray(ticks, dtype=bool)
    Bsz, H, L = x.shape
    k = np.floor(delay).astype(np.int64)
    alpha = delay - k
    y = np.empty((Bsz, H, L))
    rows = np.arange(H)
    for b in range(Bsz):
        hist = np.zeros((L + 1, H, lam.shape[-1]), dtype=np.complex128)   # by tick; row L stays zero
        n = 0
        for t in range(L):
            if ticks[b, t]:
                j1 = np.where(n - k >= 0, n - k, L)
                j2 = np.where(n - k - 1 >= 0, n - k - 1, L)
                hist[n] = (lam * hist[n - 1 if n else L] + mu * (1 - alpha[:, None]) * hist[j1, rows]
                           + mu * alpha[:, None] * hist[j2, rows] + bbar * x[b, :, t, None])
                n += 1
            held = hist[n - 1] if n else hist[L]
            y[b, :, t] = 2 * (c * held).real.sum(-1) + d * x[b, :, t]
    return y


def soft_clock_recurrence(lam, mu, bbar, c, delay, d, x, clock):
    """§10.4: ``h_t = lam^{c_t} h_{t-1} + c_t mu H(tau_t - s) + c_t bbar x_t`` with ``tau_t = sum_{j <= t} c_j``
    and ``H`` the history through the points ``(0, 0), (tau_0, h_0), ...`` joined linearly (zero for
    internal times ``<= 0``); ``y_t = 2 Re sum_n c_n h_t + d x_t``. ``clock`` ``(B, L)`` in ``[0, 1]``."""
    lam, mu, bbar, c = (np.asarray(v, dtype=np.complex128) for v in (lam, mu, bbar, c))
    delay, d = np.asarray(delay, dtype=np.float64), np.asarray(d, dtype=np.float64)
    x, clock = np.asarray(x, dtype=np.float64), np.asarray(clock, dtype=np.float64)
    Bsz, H, L = x.shape
    loglam = np.log(lam)
    y = np.empty((Bsz, H, L))
    for b in range(Bsz):
        for hch in range(H):
            ts, hs = [0.0], [np.zeros(lam.shape[-1], complex)]        # the polyline's points
            h = hs[0]
            tau = 0.0
            for t in range(L):
                ct = clock[b, t]
                tau += ct
                r = tau - delay[hch]
                hd = np.zeros_like(h)
                if r > 0:
                    j = next(i for i in range(1, len(ts)) if ts[i] >= r)    # right-closed segment
                    wgt = (r - ts[j - 1]) / (ts[j] - ts[j - 1])
                    hd = (1 - wgt) * hs[j - 1] + wgt * hs[j]
                h = np.exp(ct * loglam[hch]) * h + ct * (mu[hch] * hd + bbar[hch] * x[b, hch, t])
                ts.append(tau)
                hs.append(h)
                y[b, hch, t] = 2 * (c[hch] * h).real.sum() + d[hch] * x[b, hch, t]
    return y


def tap(e, s, width, x):
    """§8's tap: ``e_h sum_{j >= 0} w_{h,j} x_{h,t-j}``, ``w_j = max(0, 1 - |j - s_h| / width) / Z_h`` with
    ``Z_h`` the hat's sum over all integers. ``e, s`` ``(H,)``, ``x`` ``(B, H, L)`` -> float64 ``(B, H, L)``."""
    x = np.asarray(x, dtype=np.float64)
    L = x.shape[-1]
    y = np.zeros_like(x)
    for h, (eh, sh) in enumerate(zip(np.asarray(e, np.float64), np.asarray(s, np.float64))):
        js = np.arange(int(np.floor(sh - width)) - 1, int(np.ceil(sh + width)) + 2)
        hat = np.maximum(0.0, 1.0 - np.abs(js - sh) / width)
        for j, wj in zip(js, hat / hat.sum()):
            if wj > 0 and 0 <= j < L:
                y[:, h, j:] += eh * wj * x[:, h, :L - j]
    return y


def tap_params(layer):
    """``(e, s, width)`` of a DS4D layer's tap (NumPy float64), or None without a tap."""
    if layer.tap is None:
        return None
    s = delay_steps(_np(layer.tap.nu), layer.s_min, layer.s_max)          # the one delay map (ddesys)
    return _np(layer.tap.e), s, layer.tap.width


def recurrence_kernel(lam, mu, bbar, c, delay, L):
    """Kernel ``K`` float64 ``(H, L)``: the response to a unit impulse at ``t = 0`` without ``d``."""
    H = np.shape(delay)[0]
    x = np.zeros((1, H, L))
    x[:, :, 0] = 1.0
    return recurrence(lam, mu, bbar, c, delay, np.zeros(H), x)[0]


def model_forward(model, x):
    """``nn.SequenceModel`` output (no pooling) for float64 ``x``, every DS4D layer replaced by
    :func:`recurrence` (:func:`clocked_recurrence` for a model with a clock, whose ticks are the clock
    applied to ``x``: a module, not what is verified); the model must be pre-norm, without dropout, in
    float64."""
    import torch
    ticks = None if getattr(model, "clock", None) is None else model.clock(x).cpu().numpy()
    if getattr(model, "pool", None) is not None:
        raise ValueError("model_forward: a model without pooling expected")
    with torch.no_grad():
        h = model.encoder(x)                                                   # (B, L, H)
        for blk in model.blocks:
            if not blk.prenorm or blk.drop.p != 0.0:
                raise ValueError("model_forward: pre-norm blocks without dropout expected")
            z = blk.norm(h).double().cpu().numpy().transpose(0, 2, 1)          # (B, H, L)
            layer = blk.layer if ticks is None else blk.layer.inner
            y = recurrence(*ds4d_params(layer), z) if ticks is None else \
                clocked_recurrence(*ds4d_params(layer), z, ticks)             # (B, H, L)
            tp = tap_params(layer)
            if tp is not None:
                y = y + tap(*tp, z)
            y = y.transpose(0, 2, 1)                                           # (B, L, H)
            h = h + blk.glu(blk.out(blk.act(torch.from_numpy(np.ascontiguousarray(y)).to(h))))
        return model.decoder(model.norm(h))
