"""Result types, an exception and input checks of :mod:`ddesys.matrix.neutral` (private helpers)."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["EssentialSpectrum", "NeutralAbscissa", "RegionTooClose", "StrongStability", "check_h"]


class RegionTooClose(ValueError):
    """The half-plane ``Re s >= re_min`` asked for lies too close to the essential spectrum to be searched:
    it may hold too many roots, or no lower bound of the difference operator on it can be certified. The
    message says which; raising ``re_min`` helps (callers that walk towards ``c_D`` stop at this type)."""


class EssentialSpectrum(NamedTuple):
    """Spectral data of the difference operator ``D(s) = I - sum_k H_k e^{-s tau_k}``.

    Attributes
    ----------
    c_D : float
        ``sup {Re s : det D(s) = 0}`` for these delays (``-inf`` when ``det D`` has no zero). Exact for one
        delay and for commensurate delays; otherwise ``C_D``, an upper bound that is exact for
        rationally independent delays (``exact`` says which).
    exact : bool
    C_D : float
        The limit of ``c_D`` under arbitrarily small delay changes: the zero of ``gamma(r) - 1``,
        ``gamma(r) = max_theta rho(sum_k H_k e^{-r tau_k} e^{i theta_k})``.
    C_D_bounds : (float, float)
        A bracket of ``C_D`` (certified by a branch-and-bound for matrices; exact for scalars).
    gamma0 : float
        ``gamma(0) = max_theta rho(sum_k H_k e^{i theta_k})``, attained at some ``theta``.
    gamma0_bounds : (float, float)
        A certified bracket of ``gamma0``.
    commensurate : bool
        The delays are integer multiples of ``base``.
    base : float or None
    """

    c_D: float
    exact: bool
    C_D: float
    C_D_bounds: tuple
    gamma0: float
    gamma0_bounds: tuple
    commensurate: bool
    base: float | None


class StrongStability(NamedTuple):
    """Result of :meth:`NeutralStateSpace.strong_stability`.

    Attributes
    ----------
    strongly_stable : bool
        ``gamma0 < 1`` and no characteristic root with ``Re s >= 0``: exponentially stable, and stays so
        under every small enough change of the delays.
    difference_stable : bool
        ``gamma0 < 1``: the difference operator is strongly stable.
    gamma0, gamma0_bounds : float, (float, float)
    n_unstable : int or None
        Roots with ``Re s >= 0`` (counted with multiplicity); ``None`` when ``gamma0 >= 1`` (then roots
        approach the imaginary axis under small delay changes, and the count is not the question).
    certified : bool
        The bracket of ``gamma0`` lies on one side of 1 and the root count is certified.
    message : str
    """

    strongly_stable: bool
    difference_stable: bool
    gamma0: float
    gamma0_bounds: tuple
    n_unstable: int | None
    certified: bool
    message: str


class NeutralAbscissa(NamedTuple):
    """Result of ``spectral_abscissa(detail=True)``.

    Attributes
    ----------
    value : float
        ``max(c_D, rightmost root)``.
    dominant : str
        ``"roots"`` (a root lies right of ``c_D + margin``: ``value`` is its real part) or
        ``"essential"`` (none does: ``value = c_D``, and the true abscissa lies in ``[c_D, c_D +
        margin)``, roots accumulating on the chains near ``c_D``).
    rightmost : complex or None
    c_D, margin : float
    certified : bool
    """

    value: float
    dominant: str
    rightmost: complex | None
    c_D: float
    margin: float
    certified: bool


def check_h(H, n, K):
    """``H`` as ``(K, n, n)`` float64 or complex128; the same delays as ``Ad``."""
    try:
        arr = [np.asarray(h) for h in H] if isinstance(H, (list, tuple)) else np.asarray(H)
        if isinstance(arr, list):
            arr = np.asarray(arr) if all(a.shape == arr[0].shape for a in arr) else None
    except Exception as exc:
        raise TypeError(f"H must be an array of numbers, got {type(H).__name__}") from exc
    if arr is None:
        raise ValueError(f"every H[k] must have A's shape {(n, n)}")
    if arr.dtype.kind not in "biufc":
        raise TypeError(f"H must hold numbers, got dtype {arr.dtype}")
    arr = arr.astype(np.complex128 if arr.dtype.kind == "c" else np.float64)
    if n == 1 and arr.ndim <= 1:
        arr = arr.reshape(-1, 1, 1)
    elif arr.ndim == 2:
        arr = arr[None]
    if arr.ndim != 3 or arr.shape[1:] != (n, n):
        raise ValueError(f"H must be an (n, n) matrix or a sequence of them with n = {n}, got shape {arr.shape}")
    if arr.shape[0] != K:
        raise ValueError(f"H must hold one matrix per delay: {K} delays, {arr.shape[0]} matrices of H "
                         "(pass a zero matrix for a delay without a neutral term)")
    if not np.all(np.isfinite(arr)):
        raise ValueError("H must be finite")
    return arr
