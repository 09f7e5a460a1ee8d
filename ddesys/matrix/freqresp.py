"""Frequency response of matrix delay systems: ``G(i w) = C M(i w)^{-1} B + D`` (docs/theory.md §9).

For ``x' = A x + sum_k Ad[k] x(t - tau[k]) + B u``, ``y = C x + D u`` (validated by
:func:`ddesys.matrix.charmatrix.check_statespace`; real or complex): one linear solve per frequency (no
inverse), in batches within the memory budget (:mod:`ddesys.budget`). :mod:`ddesys.matrix.norms` integrates
and maximizes it.
"""
from __future__ import annotations

import numpy as np

from ..budget import check_bytes
from .charmatrix import char_matrix, real_vector

_CHUNK_BYTES = 2**25            # working set of one batch of frequencies (M(i w) stacks), at most


def response(A, Ad, tau, B, C, omega):
    """``C M(i w)^{-1} B`` as ``(F, p, m)``, in batches of bounded memory."""
    omega = np.asarray(omega, dtype=np.float64).reshape(-1)
    return response_at(A, Ad, tau, B, C, 1j * omega, "the frequency response", "frequencies")


def response_at(A, Ad, tau, B, C, s, what="the transfer function", unit="points"):
    """``C M(s)^{-1} B`` as ``(F, p, m)`` at complex points ``s`` ``(F,)``: the result (twice, for the
    caller's copy) is counted against the memory budget before it is allocated (:mod:`ddesys.budget`),
    and the solves go in batches that fit what is left of it (at most ``_CHUNK_BYTES``)."""
    s = np.asarray(s, dtype=np.complex128).reshape(-1)
    n, m, p = A.shape[0], B.shape[1], C.shape[0]
    per = 16 * (4 * n * n + 3 * n * m + p * m) + 16 * n * n * Ad.shape[0]       # one point's solve
    out_bytes = 2 * 16 * s.size * p * m
    budget = check_bytes(out_bytes + per, f"{what} at {s.size} {unit} ({p} outputs x {m} inputs, n = {n})",
                         f"use fewer {unit}, or fewer outputs and inputs (rows of C, columns of B)")
    step = int(max(1, min(_CHUNK_BYTES, budget - out_bytes) // per))
    out = np.empty((s.size, p, m), np.complex128)
    for i in range(0, s.size, step):
        z = s[i:i + step]
        X = np.linalg.solve(char_matrix(A, Ad, tau, z), np.broadcast_to(B, (z.size,) + B.shape))
        out[i:i + step] = np.einsum("pn,fnm->fpm", C, X)
    return out


def check_omega(omega):
    """``omega`` as a real finite vector ``(F,)`` (rad per time unit), else ``TypeError``/``ValueError``."""
    return real_vector(omega, "omega", "real frequencies (rad per time unit)")


def freqresp(A, Ad, tau, B, C, D, omega):
    """Exact frequency response ``G(i w) = C M(i w)^{-1} B + D``.

    Parameters
    ----------
    A, Ad, tau, B, C, D : ndarray
        Validated matrices (:func:`ddesys.matrix.charmatrix.check_statespace`): ``(n, n)``, ``(K, n, n)``,
        ``(K,)``, ``(n, m)``, ``(p, n)``, ``(p, m)``.
    omega : array_like, real ``(F,)``
        Frequencies, rad per time unit (any sign).

    Returns
    -------
    ndarray, complex ``(p, m, F)``

    Raises
    ------
    TypeError, ValueError
        Non-real or non-finite ``omega``.

    Examples
    --------
    ``x' = -x + 0.5 x(t - 1) + u``: ``G(0) = 1 / (1 - 0.5) = 2``.

    >>> import numpy as np
    >>> from ddesys.matrix.charmatrix import check_statespace
    >>> from ddesys.matrix.freqresp import freqresp
    >>> d = check_statespace([[-1.0]], [[0.5]], 1.0, [[1.0]], [[1.0]])
    >>> np.round(freqresp(*d, [0.0, 1.0])[0, 0], 4)
    array([2.    +0.j    , 0.2861-0.5569j])
    """
    w = check_omega(omega)
    return np.moveaxis(response(A, Ad, tau, B, C, w), 0, -1) + D[..., None]


__all__ = ["check_omega", "freqresp", "response", "response_at"]
