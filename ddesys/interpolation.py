"""Fractional delays by linear interpolation (docs/theory.md §2).

A delay of ``s >= 1`` steps is read between the two stored neighbours::

    s = k + alpha,   k = floor(s) >= 1,   alpha in [0, 1)
    h(t - s) ~= (1 - alpha) h[t - k] + alpha h[t - k - 1]

This is the first-order Lagrange (FIR) fractional delay. Its frequency response
``(1 - alpha) e^{-i w k} + alpha e^{-i w (k + 1)}`` has unit modulus only at ``alpha = 0``: at the
half-sample point the gain drops to ``|cos(w / 2)|``, where a Thiran all-pass of the same order keeps
unit gain and errs in phase instead (see :func:`interpolation_response`). The interpolation is
continuous in ``s`` (``alpha -> 1`` meets ``k + 1`` with ``alpha = 0``), so ``s`` can be learned.
"""
from __future__ import annotations

import numpy as np

from ._array import get_namespace


def split_delay(s):
    """Split a delay ``s`` (in steps, real, ``>= 1``) into ``(k, alpha)``.

    Parameters
    ----------
    s : array, real ``(...)``
        NumPy, CuPy or torch; finite, in ``[1, MAX_DELAY_STEPS]``. Not checked here (no host
        synchronization in a torch graph): :class:`~ddesys.DiscreteDelaySystem` checks at
        construction, and the recurrence checks ``k`` and ``alpha`` before its compiled loop.

    Returns
    -------
    k : array of int64 ``(...)``
        Integer part ``floor(s)``.
    alpha : array, real ``(...)``
        ``s - k`` in ``[0, 1)``, same dtype as ``s`` (differentiable in ``s`` for torch tensors).

    Examples
    --------
    >>> import numpy as np
    >>> split_delay(np.array([1.0, 3.5, 7.25]))
    (array([1, 3, 7]), array([0.  , 0.5 , 0.25]))
    """
    xp = get_namespace(s)
    kf = xp.floor(s)
    alpha = s - kf  # gradient d alpha / d s = 1: the delay is learned through alpha
    k = xp.astype(kf, xp.int64)
    return k, alpha


def interpolation_response(s, omega):
    """Frequency response of the linear-interpolation delay line next to the exact ``e^{-i w s}``.

    Parameters
    ----------
    s : float
        Delay in steps, ``>= 1``.
    omega : array_like, real ``(F,)``
        Angular frequencies (radians per step).

    Returns
    -------
    linear : ndarray, complex ``(F,)``
        ``(1-alpha) e^{-iwk} + alpha e^{-iw(k+1)}``.
    exact : ndarray, complex ``(F,)``
        ``e^{-iws}``. The difference is the interpolation error; it vanishes at integer delays and is
        largest at ``alpha = 1/2`` near Nyquist.

    Examples
    --------
    At the half-sample point the gain is ``|cos(w / 2)|``:

    >>> import numpy as np
    >>> lin, exact = interpolation_response(3.5, [0.0, np.pi / 2])
    >>> np.round(np.abs(lin), 4), np.abs(exact)
    (array([1.    , 0.7071]), array([1., 1.]))
    """
    s = float(s)
    k = np.floor(s)
    alpha = s - k
    omega = np.asarray(omega, dtype=float)
    lin = (1 - alpha) * np.exp(-1j * omega * k) + alpha * np.exp(-1j * omega * (k + 1))
    return lin, np.exp(-1j * omega * s)
