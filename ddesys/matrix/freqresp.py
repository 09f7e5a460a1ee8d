"""Frequency response of matrix delay systems: ``G(i w) = C M(i w)^{-1} B + D`` (docs/theory.md §9).

For ``x' = A x + sum_k Ad[k] x(t - tau[k]) + B u``, ``y = C x + D u`` (validated by
:func:`ddesys.matrix.charmatrix.check_statespace`; real or complex): one linear solve per frequency (no
inverse), in batches of bounded memory. :mod:`ddesys.matrix.norms` integrates and maximizes it.
"""
from __future__ import annotations

import numpy as np

from .charmatrix import char_matrix, real_vector

_CHUNK_BYTES = 2**25            # working set of one batch of frequencies (M(i w) stacks)


def response(A, Ad, tau, B, C, omega):
    """``C M(i w)^{-1} B`` as ``(F, p, m)``, in batches of bounded memory."""
    omega = np.asarray(omega, dtype=np.float64).reshape(-1)
    n = A.shape[0]
    step = max(1, _CHUNK_BYTES // (16 * n * (n + B.shape[1]) + 1))
    out = np.empty((omega.size, C.shape[0], B.shape[1]), np.complex128)
    for i in range(0, omega.size, step):
        w = omega[i:i + step]
        X = np.linalg.solve(char_matrix(A, Ad, tau, 1j * w), np.broadcast_to(B, (w.size,) + B.shape))
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


__all__ = ["check_omega", "freqresp", "response"]
