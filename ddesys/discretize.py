"""Discretization of one diagonal delayed mode (docs/theory.md §2).

Both rules map continuous ``(a, d, b)`` and a step ``dt`` to the discrete ``(lam, mu, bbar)`` of::

    h_t = lam h_{t-1} + mu ((1 - alpha) h_{t-k} + alpha h_{t-k-1}) + bbar x_t

Written against the array API: NumPy, CuPy and torch (with autograd) alike.
"""
from __future__ import annotations

from ._array import get_namespace

METHODS = ("zoh", "euler")


def phi1(z):
    """``(exp(z) - 1) / z`` with the removable singularity at 0 filled by 1.

    Parameters
    ----------
    z : array, complex
        NumPy, CuPy or torch.

    Returns
    -------
    array, complex, ``z``'s shape
        ``1 + z / 2`` where ``|z| < 1e-8``.
    """
    xp = get_namespace(z)
    small = xp.abs(z) < 1e-8
    safe = xp.where(small, xp.ones_like(z), z)
    return xp.where(small, 1 + z / 2, (xp.exp(safe) - 1) / safe)


def zoh(a, d, b, dt):
    """Exponential (zero-order hold) rule: input and delayed state held constant over a step.

    Parameters
    ----------
    a, d, b : array, complex ``(..., N2)``
        Diagonal, delayed and input coefficients.
    dt : array or float, real
        Step, broadcasting against ``(...)`` as ``dt[..., None]``.

    Returns
    -------
    lam, mu, bbar : array, complex ``(..., N2)``
        ``lam = exp(a dt)``, ``mu = (exp(a dt) - 1)/a * d``, ``bbar = (exp(a dt) - 1)/a * b`` (finite
        at ``a = 0``).

    See Also
    --------
    euler, DelaySystem.discretize

    Examples
    --------
    >>> import numpy as np
    >>> lam, mu, bbar = zoh(np.array([-1 + 0j]), np.array([0.5 + 0j]), np.array([1 + 0j]), 0.1)
    >>> np.round(lam.real, 4), np.round(mu.real, 4), np.round(bbar.real, 4)
    (array([0.9048]), array([0.0476]), array([0.0952]))
    """
    adt = a * dt
    g = phi1(adt) * dt  # (exp(a dt) - 1) / a, finite at a = 0
    return get_namespace(a).exp(adt), g * d, g * b


def euler(a, d, b, dt):
    """Forward Euler rule: ``lam = 1 + a dt``, ``mu = d dt``, ``bbar = b dt``.

    Parameters
    ----------
    a, d, b : array, complex ``(..., N2)``
        Diagonal, delayed and input coefficients.
    dt : array or float, real
        Step, broadcasting as in :func:`zoh`.

    Returns
    -------
    lam, mu, bbar : array, complex ``(..., N2)``
    """
    return 1 + a * dt, d * dt, b * dt


def discretize_modes(a, d, b, dt, method="zoh"):
    """Discretize by the rule named ``method``: :func:`zoh` or :func:`euler`.

    Parameters
    ----------
    a, d, b, dt :
        As :func:`zoh`.
    method : {"zoh", "euler"}

    Returns
    -------
    lam, mu, bbar : array, complex ``(..., N2)``

    Raises
    ------
    ValueError
        An unknown ``method``.
    """
    if method == "zoh":
        return zoh(a, d, b, dt)
    if method == "euler":
        return euler(a, d, b, dt)
    raise ValueError(f"method must be one of {METHODS}, got {method!r}")
