"""Discretization of one diagonal delayed mode (docs/theory.md §2).

Both rules map continuous ``(a, d, b)`` and a step ``dt`` to the discrete ``(lam, mu, bbar)`` of::

    h_t = lam h_{t-1} + mu ((1 - alpha) h_{t-k} + alpha h_{t-k-1}) + bbar x_t

Written against the array API: NumPy, CuPy and torch (with autograd) alike.
"""
from __future__ import annotations

from ._array import get_namespace

METHODS = ("zoh", "euler")


def phi1(z):
    """``(exp(z) - 1) / z`` with the removable singularity at 0 filled by 1 (complex ``z``)."""
    xp = get_namespace(z)
    small = xp.abs(z) < 1e-8
    safe = xp.where(small, xp.ones_like(z), z)
    return xp.where(small, 1 + z / 2, (xp.exp(safe) - 1) / safe)


def zoh(a, d, b, dt):
    """Exponential (zero-order hold) rule: input and delayed state held constant over a step.

    Args:
        a, d, b: complex ``(..., N2)`` (diagonal, delayed and input coefficients).
        dt: real step, broadcasting against ``(...)`` as ``dt[..., None]``.
    Returns:
        ``lam = exp(a dt)``, ``mu = (exp(a dt) - 1)/a * d``, ``bbar = (exp(a dt) - 1)/a * b``.
    """
    adt = a * dt
    g = phi1(adt) * dt  # (exp(a dt) - 1) / a, finite at a = 0
    return get_namespace(a).exp(adt), g * d, g * b


def euler(a, d, b, dt):
    """Forward Euler: ``lam = 1 + a dt``, ``mu = d dt``, ``bbar = b dt``."""
    return 1 + a * dt, d * dt, b * dt


def discretize_modes(a, d, b, dt, method="zoh"):
    """Dispatch to :func:`zoh` or :func:`euler` by name."""
    if method == "zoh":
        return zoh(a, d, b, dt)
    if method == "euler":
        return euler(a, d, b, dt)
    raise ValueError(f"method must be one of {METHODS}, got {method!r}")
