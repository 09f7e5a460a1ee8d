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

    Args:
        s: real array ``(...)`` (NumPy, CuPy or torch), finite, in ``[1, MAX_DELAY_STEPS]``. Not checked
            here (no host synchronization in a torch graph): :class:`~ddesys.DiscreteDelaySystem` checks
            at construction, and the recurrence checks ``k`` and ``alpha`` before its compiled loop.
    Returns:
        ``k``: integer part ``floor(s)`` as int64, shape ``(...)``; ``alpha = s - k`` in ``[0, 1)``, same
        dtype as ``s`` (differentiable in ``s`` for torch tensors).
    """
    xp = get_namespace(s)
    kf = xp.floor(s)
    alpha = s - kf  # gradient d alpha / d s = 1: the delay is learned through alpha
    k = xp.astype(kf, xp.int64)
    return k, alpha


def interpolation_response(s, omega):
    """Frequency response of the linear-interpolation delay line next to the exact ``e^{-i w s}``.

    Args:
        s: delay in steps (float, ``>= 1``).
        omega: angular frequencies (radians per step), array ``(F,)``.
    Returns:
        ``(linear, exact)`` complex arrays ``(F,)``: ``(1-alpha) e^{-iwk} + alpha e^{-iw(k+1)}`` and
        ``e^{-iws}``. Their difference is the interpolation error; it vanishes at integer delays and
        is largest at ``alpha = 1/2`` near Nyquist.
    """
    s = float(s)
    k = np.floor(s)
    alpha = s - k
    omega = np.asarray(omega, dtype=float)
    lin = (1 - alpha) * np.exp(-1j * omega * k) + alpha * np.exp(-1j * omega * (k + 1))
    return lin, np.exp(-1j * omega * s)
