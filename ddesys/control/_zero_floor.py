"""The poles of a loop at ``s = 0`` to rounding, and the frequency floor below which its response is
rounding only (python-control's conventions for integrators; used by :mod:`ddesys.control.margins` and
:mod:`ddesys.control.freqplot`)."""
from __future__ import annotations

import numpy as np

ZERO_TOL = 1e3 * np.finfo(float).eps     # relative size of a zero eigenvalue's rounding (per symmetric function)
FLOOR_FACTOR = 10.0          # the rounding floor: this times the modulus of the zero cluster's eigenvalues


def _static_matrix(g):
    """``A + B2 (I - D22)^-1 C2``: the state matrix at ``s = 0`` (every delay factor is 1 there); ``None``
    when ``I - D22`` is singular."""
    q = g.tau.size
    if q == 0:
        return g.A
    M = np.eye(q) - g.D22
    try:
        return g.A + g.B2 @ np.linalg.solve(M, g.C2)
    except np.linalg.LinAlgError:
        return None


def _conjugate_closed(roots):
    """Whether the roots are closed under conjugation (``np.poly``'s test for a real polynomial)."""
    r = np.asarray(roots, complex)
    return bool(np.all(np.sort(r) == np.sort(r.conjugate())))


def zero_cluster(g):
    """The poles of ``g`` at ``s = 0`` to rounding: ``(m, floor)``.

    ``m`` is the largest ``k`` such that the ``k`` eigenvalues of the matrix at ``s = 0`` of smallest
    modulus have every elementary symmetric function ``e_j`` within ``ZERO_TOL * S^j`` (``S`` its norm):
    the perturbation of an ``m``-fold zero by rounding. ``floor`` is ``FLOOR_FACTOR`` times their largest
    modulus (0 when they are exactly zero, or when ``m = 0``): the lowest frequency where ``L(i w)`` is
    more than rounding.
    """
    A0 = _static_matrix(g)
    if A0 is None or A0.size == 0:
        return 0, 0.0
    lam = np.linalg.eigvals(A0)
    lam = lam[np.argsort(np.abs(lam), kind="stable")]
    S = float(np.linalg.norm(A0, 2)) or 1.0
    x = lam / S
    m = 0
    c = np.ones(1, dtype=x.dtype)
    for k in range(1, x.size + 1):             # c: np.poly(x[:k]), (-1)^j e_j / S^j, built one root at a time
        c = np.convolve(c, np.array([1, -x[k - 1]], dtype=x.dtype), mode="full")
        if np.all(np.abs(c[1:]) <= ZERO_TOL):
            m = k
        elif np.iscomplexobj(c) and np.all(np.abs(c.real[1:]) <= ZERO_TOL) and _conjugate_closed(x[:k]):
            m = k                               # np.poly keeps the real part when the roots pair up
    floor = FLOOR_FACTOR * float(np.abs(lam[m - 1])) if m else 0.0
    return m, floor


__all__ = ["FLOOR_FACTOR", "ZERO_TOL", "zero_cluster"]
