"""The DS4D and S4D parameterizations: unconstrained parameters -> discrete system (docs/theory.md §7).

The one definition of the map used by the neural layers (:mod:`nn`), the checks (:mod:`verification`)
and the benchmarks. Written against the array API: NumPy and CuPy arrays, and torch tensors with
autograd through every parameter (the delay's fraction ``alpha`` included).

Per channel (``C`` channels, ``N2`` complex modes)::

    dt     = exp(log_dt)                                a_n = -exp(nu_re_n) + i nu_im_n
    abar_n = exp(dt a_n)                                p_n = sigmoid(r_n)
    lam_n  = (1 - p_n) abar_n                           mu_n = p_n |abar_n| exp(i theta_n)
    bbar_n = (abar_n - 1) / a_n * B_n                   s = s_min + (s_max - s_min) sigmoid(nu_tau)

so ``|lam_n| + |mu_n| = |abar_n| < 1``: stable by construction (:func:`ddesys.sufficient_margin`).
"""
from __future__ import annotations

import math
from typing import Any, NamedTuple

from ._array import get_namespace, is_torch
from .discretize import zoh
from .interpolation import split_delay

__all__ = ["ABLATIONS", "ablation_kinds", "DS4DDiscrete", "S4DDiscrete", "LOG_DT_RANGE", "LOG_RATE_RANGE",
           "continuous_poles", "delay_steps", "ds4d_discrete", "s4d_discrete"]

LOG_DT_RANGE = (-20.0, 10.0)
LOG_RATE_RANGE = (math.log(1e-6), math.log(100.0))
ABLATIONS = (None, "tau_min", "mu_zero", "tap_zero")


class DS4DDiscrete(NamedTuple):
    """Discrete DS4D system: complex ``lam, mu, bbar, c`` ``(C, N2)``; integer ``k`` ``(C,)``, real
    ``alpha`` and ``delay`` ``(C,)`` (``delay = k + alpha`` steps)."""
    lam: Any
    mu: Any
    bbar: Any
    c: Any
    k: Any
    alpha: Any
    delay: Any


class S4DDiscrete(NamedTuple):
    """Discrete S4D system: complex ``lam = exp(dt a)``, ``bbar``, ``c`` and ``dtA = dt a`` ``(C, N2)``."""
    lam: Any
    bbar: Any
    c: Any
    dtA: Any


def ablation_kinds(ablation):
    """The ablations named by ``ablation`` (None, one of ``ABLATIONS`` or a tuple of them) as a tuple.

    ``"tau_min"``: every delay one step; ``"mu_zero"``: no delayed branch (both applied by
    :func:`ds4d_discrete`); ``"tap_zero"``: the DS4D layer's input tap removed (applied by the layer,
    ``nn.DS4D(ablation=...)``: forward, recurrent path, decoding and ``to_ddesys``; no effect here)."""
    kinds = () if ablation is None else (ablation,) if isinstance(ablation, str) else tuple(ablation)
    bad = [k for k in kinds if k not in ABLATIONS[1:]]
    if bad:
        raise ValueError(f"ablation must be None, one of {ABLATIONS[1:]} or a tuple of them, got {ablation!r}")
    return kinds


def _sigmoid(xp, x):
    if is_torch(xp):
        return x.sigmoid()
    return 0.5 * (1 + xp.tanh(x / 2))             # exact 0 / 1 in the tails, no overflow


def continuous_poles(log_dt, nu_re, nu_im):
    """``dt`` ``(C, 1)`` and ``a = -exp(nu_re) + i nu_im`` ``(C, N2)``, guarded.

    ``log_dt`` is clamped to ``LOG_DT_RANGE = [-20, 10]`` and the decay per step ``dt exp(nu_re)`` to
    ``LOG_RATE_RANGE = [1e-6, 100]``, so ``|abar| = exp(-dt exp(nu_re))`` stays in ``[e^-100, 1 - 1e-6]``:
    strictly stable and finite for any finite parameters. Inside the range this is exactly the
    parameterization of the module docstring. Inputs: real ``log_dt`` ``(C,)``, ``nu_re, nu_im``
    ``(C, N2)`` in the working precision.
    """
    xp = get_namespace(log_dt, nu_re)
    ldt = xp.clip(log_dt, *LOG_DT_RANGE)[:, None]                  # (C, 1)
    dt = xp.exp(ldt)                                               # (C, 1)
    rate = xp.exp(xp.clip(nu_re + ldt, *LOG_RATE_RANGE))           # (C, N2)  dt |Re a|
    cdt = xp.complex128 if nu_re.dtype == xp.float64 else xp.complex64
    a = xp.astype(-rate / dt, cdt) + 1j * xp.astype(nu_im, cdt)    # (C, N2)
    return dt, a


def _as_complex(xp, z):
    """Complex ``(..., N2)`` from a complex array or trailing real pairs ``(..., N2, 2)``."""
    if xp.isdtype(z.dtype, "complex floating"):
        return z
    cdt = xp.complex128 if z.dtype == xp.float64 else xp.complex64
    return xp.astype(z[..., 0], cdt) + 1j * xp.astype(z[..., 1], cdt)


def s4d_discrete(log_dt, nu_re, nu_im, B, C):
    """S4D with ZOH and explicit ``B``: :class:`S4DDiscrete` ``(lam, bbar, c, dtA)``, all ``(C, N2)``.

    ``B``, ``C`` complex ``(C, N2)`` or real pairs ``(C, N2, 2)``; the working precision is that of
    ``nu_re`` (cast the inputs first)."""
    xp = get_namespace(log_dt, nu_re)
    dt, a = continuous_poles(log_dt, nu_re, nu_im)                  # (C, 1), (C, N2)
    lam, _, bbar = zoh(a, xp.zeros_like(a), _as_complex(xp, B), dt)  # (C, N2)
    return S4DDiscrete(lam, bbar, _as_complex(xp, C), a * dt)


def delay_steps(nu, s_min, s_max, dtype=None):
    """A delay in steps from its unconstrained parameter: ``s = s_min + (s_max - s_min) sigmoid(nu)``,
    in float64 unless ``dtype`` is given (the feedback delay ``nu_tau`` and the tap delay ``tap.nu``)."""
    xp = get_namespace(nu)
    return s_min + (s_max - s_min) * _sigmoid(xp, xp.astype(nu, dtype or xp.float64))


def ds4d_discrete(log_dt, nu_re, nu_im, r, theta, nu_tau, B, C, s_min, s_max, ablation=None):
    """The DS4D map of the module docstring: :class:`DS4DDiscrete`.

    Parameters
    ----------
    log_dt, nu_tau : real ``(C,)``.
    nu_re, nu_im, r, theta : real ``(C, N2)``; their dtype is the working precision.
    B, C : complex ``(C, N2)`` or real pairs ``(C, N2, 2)``.
    s_min, s_max : float, the delay range in steps (``1 <= s_min < s_max``).
    ablation : None, ``"tau_min"`` (every delay one step: ``k = 1, alpha = 0``), ``"mu_zero"`` (no
        delayed branch: ``mu = 0``, ``lam`` kept), or a tuple of both: the paper's mechanism probes
        (its Table 1).

    Returns
    -------
    DS4DDiscrete
        ``k`` int64 and ``alpha`` in the working precision. The delay is split in float64 whatever
        the precision, so every path (FFT kernel, decode step, cache sizing) agrees on ``k``.

    Examples
    --------
    >>> import numpy as np
    >>> C, N2 = 2, 3
    >>> d = ds4d_discrete(np.log([0.01, 0.1]), np.full((C, N2), np.log(0.5)), np.ones((C, N2)),
    ...                   np.full((C, N2), -2.0), np.full((C, N2), np.pi), np.zeros(C),
    ...                   np.ones((C, N2), complex), np.ones((C, N2), complex), 1.0, 63.0)
    >>> d.delay                      # the middle of [1, 63]
    array([32., 32.])
    >>> bool(np.all(np.abs(d.lam) + np.abs(d.mu) < 1))
    True
    """
    kinds = ablation_kinds(ablation)
    xp = get_namespace(log_dt, nu_re)
    dt, a = continuous_poles(log_dt, nu_re, nu_im)                  # (C, 1), (C, N2)
    abar, _, bbar = zoh(a, xp.zeros_like(a), _as_complex(xp, B), dt)  # (C, N2) each
    p = _sigmoid(xp, r)                                             # (C, N2)
    cdt = abar.dtype
    lam = xp.astype(1 - p, cdt) * abar                              # (C, N2)
    rot = xp.astype(xp.cos(theta), cdt) + 1j * xp.astype(xp.sin(theta), cdt)
    mu = xp.astype(p * xp.abs(abar), cdt) * rot                     # (C, N2)
    s = delay_steps(nu_tau, s_min, s_max)                           # (C,) float64
    k, alpha = split_delay(s)                                       # (C,) int64, (C,) float64
    if "mu_zero" in kinds:
        mu = xp.zeros_like(mu)
    if "tau_min" in kinds:
        k, alpha, s = xp.ones_like(k), xp.zeros_like(alpha), xp.ones_like(s)
    rdt = nu_re.dtype
    return DS4DDiscrete(lam, mu, bbar, _as_complex(xp, C), k, xp.astype(alpha, rdt), xp.astype(s, rdt))
