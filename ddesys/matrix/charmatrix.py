"""Matrix delay systems: input checks and the characteristic matrix (docs/theory.md §9).

A continuous linear system with ``K`` discrete delays::

    x'(t) = A x(t) + sum_k Ad[k] x(t - tau[k]) + B u(t),     y(t) = C x(t) + D u(t)

has the characteristic matrix ``M(s) = s I - A - sum_k Ad[k] exp(-s tau[k])``; its characteristic
roots are the zeros of ``det M(s)``. This module holds the one implementation of ``M``, its
derivative and its scale (for relative residuals), used by :mod:`ddesys.matrix.roots`,
:mod:`ddesys.matrix.crossings`, :mod:`ddesys.matrix.norms` and :class:`ddesys.DelayStateSpace`.

Conventions: ``A`` ``(n, n)``, ``Ad`` ``(K, n, n)``, ``tau`` ``(K,)`` float64 ``> 0``, ``B`` ``(n, m)``,
``C`` ``(p, n)``, ``D`` ``(p, m)``. Entries are float64 or complex128 (complex when any matrix is).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np


class StateSpaceData(NamedTuple):
    """Validated matrices of a delay state-space system (see module docstring for shapes)."""

    A: np.ndarray
    Ad: np.ndarray
    tau: np.ndarray
    B: np.ndarray
    C: np.ndarray
    D: np.ndarray


def _matrix(name, value, complex_ok=True):
    try:
        arr = np.asarray(value)
    except Exception as exc:  # noqa: BLE001 - re-raised with the argument's name
        raise TypeError(f"{name} must be an array of numbers, got {type(value).__name__}") from exc
    if arr.dtype.kind not in "biufc":
        raise TypeError(f"{name} must hold numbers, got dtype {arr.dtype}")
    if arr.dtype.kind == "c" and not complex_ok:
        if np.any(arr.imag != 0):
            raise TypeError(f"{name} must be real, got complex values")
        arr = arr.real
    arr = arr.astype(np.complex128 if arr.dtype.kind == "c" else np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite; it holds {int(arr.size - np.isfinite(arr).sum())} "
                         "non-finite value(s)")
    return arr


def real_vector(value, name, what):
    """``value`` as a finite float64 vector (flattened); ``TypeError`` / ``ValueError`` naming ``name``.
    ``what`` says what the entries are (e.g. "real times"), for the message."""
    try:
        arr = np.asarray(value)
    except Exception as exc:  # noqa: BLE001 - re-raised with the argument's name
        raise TypeError(f"{name} must be an array of {what}, got {type(value).__name__}") from exc
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold {what}, got dtype {arr.dtype}")
    arr = arr.astype(np.float64).reshape(-1)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite")
    return arr


def check_statespace(A, Ad, tau, B=None, C=None, D=None):
    """Validate and normalize ``(A, Ad, tau, B, C, D)``; every bad input raises naming its argument.

    Parameters
    ----------
    A : array_like ``(n, n)``
    Ad : array_like ``(n, n)`` or a sequence of ``K`` such matrices (``(K, n, n)``)
    tau : float or array_like ``(K,)``
        Delays ``> 0`` in time units, one per matrix of ``Ad``.
    B, C, D : array_like, optional
        ``(n, m)``, ``(p, n)``, ``(p, m)``; defaults ``B = I``, ``C = I``, ``D = 0``. A 1-D ``B`` is a
        column ``(n, 1)``, a 1-D ``C`` a row ``(1, n)``; a scalar ``D`` is broadcast to ``(p, m)``.

    Returns
    -------
    StateSpaceData
        float64 arrays, or complex128 for all the matrices when any of them is complex; ``tau`` float64.

    Raises
    ------
    ValueError
        Shapes that do not fit, non-finite entries, non-positive delays, no state.
    TypeError
        Non-numeric input, complex delays.

    Examples
    --------
    >>> from ddesys.matrix.charmatrix import check_statespace
    >>> d = check_statespace([[-1.0, 0.0], [0.0, -2.0]], [[0.0, 1.0], [0.0, 0.0]], 1.0, B=[1.0, 0.0])
    >>> d.Ad.shape, d.B.shape, d.C.shape, d.D.shape           # one delay; C = I, D = 0 by default
    ((1, 2, 2), (2, 1), (2, 2), (2, 1))
    >>> check_statespace([[-1.0]], [[0.5]], 0.0)
    Traceback (most recent call last):
    ...
    ValueError: every delay tau must be > 0 (time units), got [0.0]; a zero delay belongs in A
    """
    A = _matrix("A", A)
    if A.ndim != 2 or A.shape[0] != A.shape[1] or A.shape[0] < 1:
        raise ValueError(f"A must be a square matrix (n, n) with n >= 1, got shape {A.shape}")
    n = A.shape[0]
    if isinstance(Ad, (list, tuple)) and len(Ad) and np.ndim(Ad[0]) == 1:
        Ad = [Ad]                                        # one matrix written as nested lists
    if isinstance(Ad, (list, tuple)):
        if len(Ad) == 0:
            raise ValueError("Ad must hold at least one delayed matrix (use scipy.signal for systems "
                             "without delay)")
        mats = [_matrix(f"Ad[{k}]", m) for k, m in enumerate(Ad)]
        for k, m in enumerate(mats):
            if m.shape != (n, n):
                raise ValueError(f"Ad[{k}] must have A's shape {(n, n)}, got {m.shape} (several delays: pass a "
                                 "list of (n, n) matrices, e.g. Ad=[[[0.3]], [[0.4]]] for n = 1)")
        Ad = np.stack([m.astype(np.result_type(*mats)) for m in mats])
    else:
        Ad = _matrix("Ad", Ad)
        if Ad.ndim == 2:
            Ad = Ad[None]
        if Ad.ndim != 3 or Ad.shape[1:] != (n, n) or Ad.shape[0] < 1:
            raise ValueError(f"Ad must be an (n, n) matrix or a sequence of them with n = {n}, got shape "
                             f"{Ad.shape}")
    K = Ad.shape[0]
    tau = _matrix("tau", tau, complex_ok=False).reshape(-1)
    if tau.size != K:
        raise ValueError(f"tau must hold one delay per delayed matrix: {K} matrices, {tau.size} delays")
    if np.any(tau <= 0):
        raise ValueError(f"every delay tau must be > 0 (time units), got {tau.tolist()}; a zero delay "
                         "belongs in A")
    B = np.eye(n) if B is None else _matrix("B", B)
    if B.ndim == 1:
        B = B[:, None]
    if B.ndim != 2 or B.shape[0] != n:
        raise ValueError(f"B must have shape (n, m) with n = {n}, got {B.shape}")
    C = np.eye(n) if C is None else _matrix("C", C)
    if C.ndim == 1:
        C = C[None, :]
    if C.ndim != 2 or C.shape[1] != n:
        raise ValueError(f"C must have shape (p, n) with n = {n}, got {C.shape}")
    p, m = C.shape[0], B.shape[1]
    D = np.zeros((p, m)) if D is None else _matrix("D", D)
    if D.ndim == 0:
        D = np.full((p, m), D[()])
    if D.shape != (p, m):
        raise ValueError(f"D must have shape (p, m) = {(p, m)} (C has p = {p} rows, B has m = {m} "
                         f"columns), got {D.shape}")
    dt = np.result_type(A, Ad, B, C, D)
    return StateSpaceData(*(x.astype(dt) for x in (A, Ad, B, C, D)[:2]), tau,
                          *(x.astype(dt) for x in (B, C, D)))


def char_matrix(A, Ad, tau, s):
    """``M(s) = s I - A - sum_k Ad[k] exp(-s tau[k])`` at the points ``s``.

    Parameters
    ----------
    A : ``(n, n)``;  Ad : ``(K, n, n)``;  tau : ``(K,)``
    s : complex array ``(...)``

    Returns
    -------
    complex ndarray ``(..., n, n)``

    Examples
    --------
    >>> import numpy as np
    >>> from ddesys.matrix.charmatrix import char_matrix
    >>> M = char_matrix(np.array([[0.0]]), np.array([[[-1.0]]]), np.array([1.0]), np.array([0.0, 1j]))
    >>> M.shape, complex(M[0, 0, 0])                          # M(0) = 0 - 0 + 1
    ((2, 1, 1), (1+0j))
    """
    s = np.asarray(s, dtype=np.complex128)
    E = np.exp(-s[..., None] * tau)                                      # (..., K)
    n = A.shape[0]
    M = s[..., None, None] * np.eye(n) - A - np.einsum("...k,kij->...ij", E, Ad)
    return M


def char_matrix_ds(A, Ad, tau, s):
    """``dM/ds = I + sum_k tau[k] Ad[k] exp(-s tau[k])`` at the points ``s``: ``(..., n, n)``."""
    s = np.asarray(s, dtype=np.complex128)
    E = tau * np.exp(-s[..., None] * tau)                                # (..., K)
    return np.eye(A.shape[0]) + np.einsum("...k,kij->...ij", E, Ad)


def char_scale(A, Ad, tau, s):
    """Scale of ``M(s)``: ``|s| + ||A||_2 + sum_k ||Ad[k]||_2 |exp(-s tau[k])|``, shape of ``s``.

    The relative residual of a root ``s`` is ``sigma_min(M(s)) / char_scale(s)`` (a backward error).
    """
    s = np.asarray(s, dtype=np.complex128)
    nA = np.linalg.norm(A, 2)
    nAd = np.array([np.linalg.norm(m, 2) for m in Ad])
    return np.abs(s) + nA + np.abs(np.exp(-s[..., None] * tau)) @ nAd


def relative_residual(A, Ad, tau, s):
    """``sigma_min(M(s)) / char_scale(s)`` for each point of ``s`` (real, shape of ``s``)."""
    s = np.asarray(s, dtype=np.complex128)
    sv = np.linalg.svd(char_matrix(A, Ad, tau, s), compute_uv=False)
    return sv[..., -1] / char_scale(A, Ad, tau, s)


__all__ = ["StateSpaceData", "char_matrix", "real_vector", "char_matrix_ds", "char_scale", "check_statespace",
           "relative_residual"]
