"""Shared independent references and helpers for the ``nn`` tests (``tests/test_nn_*.py``).

References defined or used here never run the layer's own code path:

* :mod:`ddesys.verification.reference` (written from the formulas of docs/theory.md; its loops import nothing
  but NumPy): ``brute_force`` (plain Python loop over channel, mode and time) and ``impulse_response``
  (NumPy loop over time);
* :func:`spec_discrete`: the parameterization of docs/theory.md §7.2, recomputed in NumPy from the raw
  parameters (``log_dt, nu_re, nu_im, r, theta, nu_tau, B, C``), so ``layer.discrete`` is checked too;
  :func:`spec_s4d`: the same for an S4D layer (``mu = 0``);
* :func:`vec_recurrence`: a NumPy delay recurrence vectorized over (batch, channel, mode), checked
  against ``brute_force`` (``test_nn_layers.py``) and used where the brute-force loop would be too
  slow (models, see :func:`reference_model_forward`);
* :func:`vandermonde_kernel`: the S4D kernel ``2 Re sum_n C_n bbar_n exp(t dt a_n)`` in NumPy;
* :func:`causal_conv`: direct (``np.convolve``) convolutions;
* finite differences of the oracle (in ``test_nn_grad.py``).

The oracles take NumPy arrays or read a layer's raw parameters. Only :func:`make_model` and
:func:`_s4d_twin` build ``nn`` objects (the modules under test), and :func:`reference_model_forward`
reuses a model's norms and linears but replaces every DS4D / S4D layer by :func:`vec_recurrence`.
The error measures (``rel_err``, ``rel_max``, ``rel_rmse``) are :mod:`ddesys.verification.reference`'s.
"""
from __future__ import annotations

import numpy as np
import torch

from ddesys.nn import S4D, SequenceModel

from ddesys.verification.reference import brute_force

F64 = torch.float64

DS4D_PARAMS = ("log_dt", "nu_re", "nu_im", "r", "theta", "nu_tau", "B", "C", "D")
S4D_KEYS = ("log_dt", "nu_re", "nu_im", "B", "C", "D")

D_IN, D_OUT, D_MODEL = 8, 8, 16


# ---------------------------------------------------------------------------------------------------
# Independent references and helpers
# ---------------------------------------------------------------------------------------------------
def _np(t):
    return t.detach().cpu().double().numpy()


def _cplx(p):
    """``(..., 2)`` real view -> complex128."""
    p = _np(p)
    return p[..., 0] + 1j * p[..., 1]


def _abar(layer):
    """``a = -exp(nu_re) + i nu_im`` and ``abar = exp(dt a)``, ``(C, N2)``."""
    dt = np.exp(_np(layer.log_dt))[:, None]
    a = -np.exp(_np(layer.nu_re)) + 1j * _np(layer.nu_im)
    return a, np.exp(a * dt)


def spec_discrete(layer):
    """docs/theory.md §7 in NumPy from the raw parameters: ``lam, mu, bbar, c`` ``(C, N2)`` complex128,
    ``delay`` ``(C,)`` and ``d`` ``(H,)`` float64. Written without ``nn`` / ``ddesys``."""
    a, abar = _abar(layer)
    p = 1.0 / (1.0 + np.exp(-_np(layer.r)))
    lam = (1 - p) * abar
    mu = p * np.abs(abar) * np.exp(1j * _np(layer.theta))
    bbar = (abar - 1) / a * _cplx(layer.B)
    delay = layer.s_min + (layer.s_max - layer.s_min) / (1.0 + np.exp(-_np(layer.nu_tau)))
    return lam, mu, bbar, _cplx(layer.C), delay, _np(layer.D)


def spec_s4d(layer):
    """An S4D layer as the delayed system with ``mu = 0`` (ZOH, explicit B): ``lam = abar``,
    ``bbar = (abar - 1)/a B``, ``c = C``, delay 1 step (never read), ``d = D``; same layout as
    :func:`spec_discrete`."""
    a, abar = _abar(layer)
    return abar, np.zeros_like(abar), (abar - 1) / a * _cplx(layer.B), _cplx(layer.C), np.ones(abar.shape[0]), \
        _np(layer.D)


def vandermonde_kernel(log_dt, nu_re, nu_im, B, C, L):
    """S4D kernel ``K_t = 2 Re sum_n C_n (exp(dt a_n) - 1)/a_n B_n exp(t dt a_n)`` (ZOH, explicit B)."""
    dt = np.exp(_np(log_dt))[:, None]
    a = -np.exp(_np(nu_re)) + 1j * _np(nu_im)
    bbar = (np.exp(a * dt) - 1) / a * _cplx(B)
    t = np.arange(L)
    V = np.exp((a * dt)[..., None] * t)                              # (H, N2, L)
    return 2 * np.einsum("hn,hnt->ht", _cplx(C) * bbar, V).real


def vec_recurrence(lam, mu, bbar, c, delay, d, x):
    """The docs/theory.md §2 recurrence, NumPy, vectorized over (batch, channel, mode), loop over time.

    ``lam, mu, bbar, c`` ``(H, N2)``; ``delay, d`` ``(H,)``; ``x`` ``(B, H, L)`` -> ``y`` ``(B, H, L)``.
    The history is front-padded with ``P = k_max + 1`` zeros so ``t - k - 1`` is always a valid index.
    """
    x = np.asarray(x, dtype=np.float64)
    Bsz, H, L = x.shape
    k = np.floor(delay).astype(np.int64)
    al = (delay - k)[:, None]
    P = int(k.max()) + 1
    hist = np.zeros((Bsz, H, lam.shape[1], P + L), dtype=np.complex128)
    ch = np.arange(H)
    y = np.empty((Bsz, H, L))
    for t in range(L):
        i = P + t
        hk = hist[:, ch, :, i - k].transpose(1, 0, 2)                # advanced index lands first: (B, H, N2)
        hk1 = hist[:, ch, :, i - k - 1].transpose(1, 0, 2)
        delayed = (1 - al) * hk + al * hk1                           # (B, H, N2)
        h = lam * hist[:, :, :, i - 1] + mu * delayed + bbar * x[:, :, t, None]
        hist[:, :, :, i] = h
        y[:, :, t] = 2 * (c * h).real.sum(-1) + d * x[:, :, t]
    return y


def causal_conv(x, K):
    """``y_t = sum_{j <= t} K_j x_{t-j}`` by ``np.convolve``: ``x`` ``(B, H, L)``, ``K`` ``(H, L)``."""
    Bsz, H, L = x.shape
    return np.array([[np.convolve(x[b, h], K[h])[:L] for h in range(H)] for b in range(Bsz)])


def layer_oracle(layer, x_bhl):
    """``brute_force`` on the layer's parameters (docs/theory.md §7.2): ``x`` ``(B, H, L)`` -> ``(B, H, L)``."""
    lam, mu, bbar, c, delay, d = spec_discrete(layer)
    Bsz, H, L = x_bhl.shape
    return brute_force(lam, mu, bbar, c, delay, d, x_bhl).reshape(Bsz, H, L)


def next_pow2(n):
    return 1 << (int(n) - 1).bit_length()


def bhl(x, transposed=False):
    """Layer input/output ``(B, L, H)`` (or transposed ``(B, H, L)``) -> NumPy ``(B, H, L)``."""
    x = _np(x)
    return x if transposed else x.transpose(0, 2, 1)


# ---------------------------------------------------------------------------------------------------
# Models under test and a reference model
# ---------------------------------------------------------------------------------------------------
def make_model(L, seed, layer="ds4d", n_layers=4, **kw):
    torch.manual_seed(seed)
    layer_kw = dict(d_state=64, l_max=L) if layer == "ds4d" else dict(d_state=64)
    layer_kw.update(kw)
    return SequenceModel(D_IN, D_OUT, d_model=D_MODEL, n_layers=n_layers, layer=layer, layer_kw=layer_kw,
                         glu=True)


def reference_model_forward(model, x):
    """SequenceModel's forward (pre-norm, GLU, no dropout, no pooling) with every DS4D / S4D layer
    replaced by :func:`vec_recurrence` on :func:`spec_discrete` / :func:`spec_s4d` parameters; the
    embedding, norms and linears are the model's."""
    assert model.pool is None
    h = model.encoder(x)
    for blk in model.blocks:
        assert blk.prenorm and blk.drop.p == 0.0
        z = blk.norm(h)
        spec = spec_s4d if isinstance(blk.layer, S4D) else spec_discrete
        y = torch.from_numpy(vec_recurrence(*spec(blk.layer), bhl(z))).transpose(1, 2)
        h = h + blk.glu(blk.out(blk.act(y)))
    return model.decoder(model.norm(h))


def _s4d_twin(ds4d, H, N):
    """An S4D layer carrying the DS4D layer's shared parameters (``S4D_KEYS``)."""
    s4 = S4D(H, d_state=N)
    s4.load_state_dict({k: v for k, v in ds4d.state_dict().items() if k in S4D_KEYS})
    return s4


def s4_setup_optimizer(model, lr, weight_decay, epochs):
    """The S4 example's recipe: parameters without ``_optim`` in the main AdamW group, then one group per
    distinct ``_optim`` dict."""
    params = list(model.parameters())
    optimizer = torch.optim.AdamW([p for p in params if not hasattr(p, "_optim")], lr=lr,
                                  weight_decay=weight_decay)
    distinct = []
    for p in params:
        if hasattr(p, "_optim") and p._optim not in distinct:
            distinct.append(p._optim)
    for hp in distinct:
        optimizer.add_param_group({"params": [p for p in params if getattr(p, "_optim", None) == hp], **hp})
    return optimizer, torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, epochs)


def live_states(cache, layer):
    """What a cache's later steps read, independent of how it was filled: a DS4D cache's ring in time order
    ``(B, H, N2, R)`` complex128, zero outside each channel's last ``k + 1`` positions (a prefill leaves
    older slots unspecified; ``nn.decode.history.ring_past``), or an S4D cache's state ``(B, H, N2)``."""
    if not hasattr(cache, "buf"):
        return cache.h
    from ddesys.nn.decode.history import ring_past
    return ring_past(cache, torch.complex128, layer.discrete(torch.float64).k)
