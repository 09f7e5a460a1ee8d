"""The characteristic function of one delayed mode (docs/theory.md §3-§5), defined once.

Every analysis in the project evaluates the same function of one mode's coefficients,

    Q(z) = 1 - lam z^-1 - mu (1 - alpha) z^-k - mu alpha z^-(k+1) = P(z) / z^(k+1),
    P(z) = z^(k+1) - lam z^k - mu ((1 - alpha) z + alpha),

at different points: the transfer function ``G(z) = bbar / Q(z)`` (§4), the contour-shifted samples of
the FFT synthesis (§5, with the coefficients scaled by powers of ``rho``), the winding-number stability
test on circles (§3), and the polynomial roots. :func:`coefficients` gives the three coefficients of
the negative powers ``z^-1, z^-k, z^-(k+1)``, :func:`q_eval` evaluates ``Q`` from them and the three
powers, and :func:`poly_coefficients` expands ``P`` for root finders. Array API: NumPy, CuPy, torch.
The fused Numba and Triton loops restate ``q_eval`` in their languages; the tests check them against it.
"""
from __future__ import annotations

import numpy as np

from ._array import get_namespace

__all__ = ["coefficients", "q_eval", "poly_coefficients"]


def coefficients(lam, mu, alpha):
    """``(lam, mu (1 - alpha), mu alpha)``: the coefficients of ``z^-1, z^-k, z^-(k+1)`` in ``Q``.

    ``lam``, ``mu`` complex ``(..., N2)``; ``alpha`` real, broadcasting against them. Returns three
    arrays of the broadcast shape, in the complex dtype of ``lam``."""
    xp = get_namespace(lam, mu)
    al = xp.astype(alpha, lam.real.dtype) if hasattr(alpha, "dtype") else alpha
    return lam, mu * (1 - al), mu * al


def q_eval(c1, c2, c3, z1, zk, zk1):
    """``Q = 1 - c1 z1 - c2 zk - c3 zk1`` elementwise (all arguments broadcast), with ``(c1, c2, c3)``
    from :func:`coefficients` (possibly scaled) and ``(z1, zk, zk1) = (z^-1, z^-k, z^-(k+1))``."""
    return 1 - c1 * z1 - c2 * zk - c3 * zk1


def poly_coefficients(lam, mu, k, alpha):
    """Coefficients of ``P(z) = z^(k+1) Q(z)``, highest power first (``numpy.roots`` order): complex
    ``(k + 2,)`` for one mode (scalars ``lam, mu``, integer ``k >= 1``, ``alpha``)."""
    c1, c2, c3 = coefficients(np.complex128(lam), np.complex128(mu), float(alpha))
    p = np.zeros(int(k) + 2, np.complex128)
    p[0] = 1.0
    p[1] -= c1
    p[-2] -= c2
    p[-1] -= c3
    return p
