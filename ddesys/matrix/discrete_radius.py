"""Spectral radius of a discrete matrix delay system: the lifted companion matrix, the Rouche bound and
the certified bisection on the radius (docs/theory.md §9.6).

On the lag form ``P(z) = I - sum_j E_j z^-j`` of :mod:`ddesys.matrix.discrete_stability`: the roots of
``det(z^J P(z))`` are the eigenvalues of :func:`companion_matrix` (used up to :data:`EIG_MAX_SIZE`);
beyond it :func:`spectral_radius` bisects the radius with the certified
:func:`~ddesys.matrix.discrete_stability.winding_count` on each circle.
"""
from __future__ import annotations

import math

import numpy as np

from .discrete_stability import check_count, samples_on_circle, winding_count

EIG_MAX_SIZE = 256          # spectral_radius: companion eigenvalues up to this lifted size


def companion_matrix(form):
    """The lifted companion matrix ``(n J, n J)``: first block row ``[E_1 .. E_J]``, identities below;
    its eigenvalues are the roots of ``det(z^J P(z))``."""
    n, J = form.n, form.degree
    C = np.zeros((n * J, n * J), np.complex128)
    for lag, E in zip(form.lags, form.E):
        C[:n, (lag - 1) * n:lag * n] = E
    C[n:, :-n] = np.eye(n * (J - 1))
    return C


def rouche_radius(form):
    """Upper bound on the spectral radius: the ``r`` with ``sum_l ||E_l||_2 r^-lag_l = 1`` (for larger
    ``|z|``, ``||I - P(z)|| < 1`` and ``P`` is invertible). Bisection in ``log r``."""
    nrm = np.linalg.norm(form.E, 2, axis=(1, 2))
    keep = nrm > 0
    if not keep.any():
        return 0.0
    nrm, lags = nrm[keep], form.lags[keep].astype(float)
    g = lambda lr: float(np.exp(np.log(nrm) - lags * lr).sum()) - 1.0  # noqa: E731 - decreasing in lr
    lo, hi = -745.0, max(0.0, float(np.log(nrm.sum()))) + 1e-12
    with np.errstate(over="ignore"):
        while g(hi) > 0:
            hi += 1.0
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if g(mid) > 0 else (lo, mid)
            if hi - lo < 1e-15:
                break
    return math.exp(hi)


def spectral_radius(form, rtol=1e-12, max_bytes=None, eig_max_size=EIG_MAX_SIZE):
    """Largest root modulus of ``det(z^J P)``: ``(radius, upper, certified)``.

    Companion eigenvalues when ``n J <= eig_max_size`` (``upper = radius``); otherwise bisection (in
    ``log r``) between a lower bound (the geometric mean ``|det E_J|^(1/(n J))`` of the root moduli) and
    :func:`rouche_radius`, with :func:`winding_count` on each circle, to relative width ``rtol``.
    ``upper`` is a certified upper bound; ``certified`` is False when an uncertified count (a root within
    the resolution of a circle) moved the lower end. A count over the budget ``max_bytes``
    (:func:`~ddesys.matrix.discrete_stability.check_count`) is refused before the bisection starts.
    """
    n, J = form.n, form.degree
    if n * J <= eig_max_size:
        rad = float(np.abs(np.linalg.eigvals(companion_matrix(form))).max())
        return rad, rad, True
    check_count(form, max_bytes, f"spectral_radius: bisection on the radius with certified winding counts "
                f"(n = {n}, largest lag J = {J}, {samples_on_circle(form)} samples per count, some 40 counts)",
                "or ask is_stable(), which answers with one count, and with none when sufficient_margin() > 0")
    hi = rouche_radius(form)
    if hi == 0.0:
        return 0.0, 0.0, True
    nrm = np.linalg.norm(form.E, 2, axis=(1, 2))
    floor = float(np.max(np.exp((np.log(np.maximum(nrm, 1e-300)) - 600.0) / form.lags)))   # r^-J finite
    sgn, logdet = np.linalg.slogdet(form.E[-1])
    certified = True
    if sgn != 0 and np.isfinite(logdet):
        lo = min(hi, math.exp(logdet / (n * J))) * (1 - 1e-9)
    else:
        lo = hi / 2
        while lo > floor:
            wc = winding_count(form, lo, max_bytes=max_bytes)
            if wc.wind < 0 or not wc.certified:
                break
            hi, lo = lo, lo / 2
        else:
            return floor, hi, True                         # every root below the overflow floor
    lo = max(lo, floor)
    while hi - lo > rtol * hi:
        mid = math.sqrt(lo * hi)
        wc = winding_count(form, mid, max_bytes=max_bytes)
        if wc.wind < 0 or not wc.certified:
            lo = mid
            certified &= wc.certified
        else:
            hi = mid
    return 0.5 * (lo + hi), hi, certified


__all__ = ["EIG_MAX_SIZE", "companion_matrix", "rouche_radius", "spectral_radius"]
