"""Choice of the shifted contour for the FFT kernel synthesis (docs/theory.md §5).

Sampling on ``|z| = 1/rho`` and restoring with ``rho^-t`` leaves two errors in the kernel, relative to
its largest value:

* aliasing: ``sum_j rho^(jM) K_(t+jM)``, at most ``(rho r)^M`` where ``r`` bounds the system's spectral
  radius (so a kernel that has decayed by ``M`` steps aliases little even at ``rho = 1``);
* rounding of the sampled transfer function amplified by the restoration: ``kappa u rho^-(L-1)``,
  ``u`` the unit roundoff of the working precision.

The automatic rule minimizes the predicted error::

    E(rho) = (rho r)^M + kappa u rho^-(L-1)
    rho*   = min(1, (kappa u (L-1) / (M r^M))^(1 / (M + L - 1))),     eps = rho*^M

with ``kappa = 1`` (measured: 0.3-1 over random S4D-Lin/Inv delay systems, dt in [1e-3, 1e-1]). For a
non-decaying kernel (``r^M ~ 1``) this is ``eps ~ u^(M/(M+L))``: about 1e-11 (float64) and 1e-5
(float32) at ``M = 2L``, 1e-13 and 1e-6 at ``M = 4L``, the balanced settings of the literature. With
no ``M`` given, ``M = nextpow2(2L)`` is kept when its predicted error is within the tolerance of the
precision (``1e-12`` float64, ``1e-6`` float32) and ``nextpow2(4L)`` is used otherwise (slow modes).
Predicted errors (max over channels) are returned so callers can report them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ._array import next_pow2, unit_roundoff

KAPPA = 1.0
TOLERANCE = {"float64": 1e-12, "float32": 1e-6}


@dataclass(frozen=True)
class Contour:
    """A sampling contour ``|z| = 1/rho`` of the FFT kernel synthesis (docs/theory.md §5).

    Returned by :func:`choose_contour` and by ``DiscreteDelaySystem.contour(L)`` (the one ``kernel(L)`` uses).

    Attributes
    ----------
    M : int
        FFT length.
    rho : ndarray, real ``(...)``
        Per-channel contour parameter in ``(0, 1]``.
    eps : ndarray, real ``(...)``
        Aliasing suppression ``rho^M``.
    predicted_error : ndarray, real ``(...)``
        Predicted relative kernel error per channel (:func:`predicted_error`).
    """
    M: int
    rho: np.ndarray
    eps: np.ndarray
    predicted_error: np.ndarray


def predicted_error(L, M, rho, r, u, kappa=KAPPA):
    """Predicted relative kernel error ``E = (rho r)^M + kappa u rho^-(L-1)`` (see module docstring).

    Parameters
    ----------
    L, M : int
        Kernel and FFT lengths.
    rho, r : array_like, real
        Contour parameter and decay bound (broadcast together).
    u : float
        Unit roundoff of the synthesis precision.
    kappa : float, default :data:`KAPPA`
        Rounding constant.

    Returns
    -------
    ndarray, real
        Elementwise: aliasing plus amplified rounding.
    """
    rho = np.asarray(rho, float)
    r = np.asarray(r, float)
    with np.errstate(divide="ignore", over="ignore", under="ignore"):
        alias = np.exp(M * (np.log(rho) + np.log(np.maximum(r, 1e-300))))
        round_ = kappa * u * np.exp(-(L - 1) * np.log(rho))
    return alias + round_


def optimal_rho(L, M, r, u, kappa=KAPPA):
    """The ``rho`` minimizing :func:`predicted_error` for decay bound ``r``, clipped to ``(0, 1]``.

    Parameters
    ----------
    L, M : int
        Kernel and FFT lengths.
    r : array_like, real
        Decay bound per channel.
    u : float
        Unit roundoff of the synthesis precision.
    kappa : float, default :data:`KAPPA`
        Rounding constant.

    Returns
    -------
    ndarray, real, ``r``'s shape
    """
    logr = np.log(np.maximum(np.asarray(r, float), 1e-300))
    logrho = (math.log(kappa * u * max(L - 1, 1) / M) - M * logr) / (M + L - 1)
    return np.exp(np.minimum(logrho, 0.0))


def fft_length(L, u, u_out):
    """The layer's FFT length for a length-``L`` kernel synthesized with unit roundoff ``u`` and delivered
    in a dtype of unit roundoff ``u_out``, for a non-decaying bound (``r = 1``): ``nextpow2(L)`` when its
    predicted error at ``rho*`` is within ``u_out`` (the output's own rounding then dominates: float64
    synthesis delivering float32, about ``2 sqrt(u) = 2e-8``), else ``nextpow2(2L)``.

    >>> from ddesys.contour import unit_roundoff
    >>> fft_length(4096, unit_roundoff(np.float64), unit_roundoff(np.float32))
    4096
    >>> fft_length(4096, unit_roundoff(np.float64), unit_roundoff(np.float64))
    8192
    """
    M = next_pow2(L)
    rho = optimal_rho(L, M, 1.0, u)
    return M if float(predicted_error(L, M, rho, 1.0, u)) <= u_out else next_pow2(2 * L)


def choose_contour(L, r, u, eps="auto", M=None):
    """Pick ``(M, rho)`` for a length-``L`` kernel (docs/theory.md §5).

    Parameters
    ----------
    L : int
        Kernel length (``>= 1``).
    r : array_like, real ``(...)``
        Decay bound per channel (``>= spectral radius``, ``< 1`` for a stable system).
    u : float
        Unit roundoff of the synthesis precision.
    eps : "auto" or float
        The aliasing suppression ``rho^M``, in ``(0, 1)``; ``"auto"`` minimizes the predicted error.
    M : int or None
        FFT length (``>= L``: restoring ``K_t`` for ``t < L`` needs ``L`` samples; aliasing is the
        contour's job), or None for the rule in the module docstring.

    Returns
    -------
    Contour
        ``rho``, ``eps`` and ``predicted_error`` of shape ``(...)``.

    Raises
    ------
    ValueError
        eps outside (0, 1); M < L; an eps whose restoration would amplify rounding past 10% of the
        kernel (``kappa u eps^-(L-1)/M >= 0.1``): that kernel would be a wrong number.

    See Also
    --------
    DiscreteDelaySystem.kernel : picks its contour with this function from ``decay_bound()``.

    Examples
    --------
    A fast channel needs no shift (``rho = 1``); a slow one gets ``rho < 1`` and ``M = nextpow2(4L)``:

    >>> import numpy as np
    >>> from ddesys import choose_contour
    >>> from ddesys.contour import unit_roundoff
    >>> c = choose_contour(1024, np.array([0.5, 0.999]), unit_roundoff(np.float64))
    >>> c.M, np.round(c.rho, 4)
    (4096, array([1.    , 0.9935]))
    >>> bool(c.predicted_error.max() < 1e-12)
    True

    The paper's fixed setting:

    >>> c = choose_contour(1024, np.array([0.5, 0.99]), unit_roundoff(np.float64), eps=1e-3)
    >>> c.M, np.round(c.eps, 6)
    (2048, array([0.001, 0.001]))
    """
    r = np.asarray(r, float)
    if M is not None:
        if not isinstance(M, (int, np.integer)) or M < L:
            raise ValueError(f"M must be an integer >= L = {L} (the kernel's length), got {M!r}")
        M = int(M)
    tol = TOLERANCE["float32" if u > 1e-10 else "float64"]
    if isinstance(eps, str):
        if eps != "auto":
            raise ValueError(f"eps must be 'auto' or a float in (0, 1), got {eps!r}")
        cands = [M] if M is not None else [next_pow2(2 * L), next_pow2(4 * L)]
        for Mc in cands:
            rho = optimal_rho(L, Mc, r, u)
            err = predicted_error(L, Mc, rho, r, u)
            if np.max(err, initial=0.0) <= tol:
                break
        M = Mc
    else:
        eps = float(eps)
        if not (0.0 < eps < 1.0) or not math.isfinite(eps):
            raise ValueError(f"eps must lie in the open interval (0, 1), got {eps!r}")
        M = M if M is not None else next_pow2(2 * L)
        rho = np.full(r.shape, eps ** (1.0 / M))
        err = predicted_error(L, M, rho, r, u)
        amp = KAPPA * u * eps ** (-(L - 1) / M)
        if amp >= 0.1:
            raise ValueError(f"eps={eps:g} with M={M} amplifies rounding by eps^-(L-1)/M = "
                             f"{eps ** (-(L - 1) / M):.3g}: the kernel would be meaningless in this precision; "
                             "use a larger eps, a larger M, or eps='auto'")
    return Contour(M=M, rho=rho, eps=rho**M, predicted_error=err)


__all__ = ["Contour", "KAPPA", "TOLERANCE", "choose_contour", "fft_length", "next_pow2", "optimal_rho",
           "predicted_error", "unit_roundoff"]
