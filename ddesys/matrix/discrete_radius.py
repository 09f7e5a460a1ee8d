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
    ``log r``) between a lower bound and :func:`rouche_radius`, with :func:`winding_count` on each circle,
    to relative width ``rtol``. The lower bound is the geometric mean ``|det E_J|^(1/(n J))`` of the root
    moduli; when ``E_J`` is singular (roots at 0), the first circle with roots outside it, stepping down
    from the Rouche radius by ``e^-t``, ``t = 1/J, 2/J, 4/J, ...``. ``upper`` is a certified upper bound;
    ``certified`` is False when the lower end of the final bracket rests on an uncertified count (a root
    within the resolution of a circle, or a circle too small for ``P`` to be evaluated accurately), or when
    every root lies below the smallest circle that can be counted. A count over the budget ``max_bytes``
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
    if floor >= hi:
        return hi, hi, False                               # no circle below the upper bound can be counted
    sgn, logdet = np.linalg.slogdet(form.E[-1])
    if sgn != 0 and np.isfinite(logdet):
        lo = min(hi, math.exp(logdet / (n * J))) * (1 - 1e-9)    # geometric mean of the nJ root moduli
        lo_proved = lo >= floor
        lo = max(lo, floor)
    else:                                                  # roots at 0: no geometric-mean bound
        lo, hi, lo_proved = _descend(form, hi, floor, max_bytes)
        if lo is None:
            return floor, floor, False                     # every root below the floor: value unknown
    while hi - lo > rtol * hi:
        mid = math.sqrt(lo * hi)
        wc = winding_count(form, mid, max_bytes=max_bytes)
        if wc.wind < 0 or not wc.certified:
            lo, lo_proved = mid, wc.certified
        else:
            hi = mid
    return 0.5 * (lo + hi), hi, bool(lo_proved)


def _descend(form, hi, floor, max_bytes):
    """A lower end for the bisection from the upper bound ``hi`` down: circles ``hi e^-t`` with ``t``
    doubling from ``1 / J`` (so that ``r^-J`` grows by ``e`` at the first step, not by ``2^J``), each
    count free of roots moving ``hi`` down, until a circle has roots outside it, its count is not
    certified (a root near it, or ``P`` too large to evaluate there: the lower end is then not proved),
    or the overflow ``floor`` is passed. Returns ``(lo, hi, proved)``, ``lo = None`` when the count on
    ``|z| = floor`` proves every root below it."""
    t = 1.0 / form.degree
    while True:
        lo = max(hi * math.exp(-t), floor)
        wc = winding_count(form, lo, max_bytes=max_bytes)
        if wc.wind < 0 or not wc.certified:
            return lo, hi, wc.certified
        hi, t = lo, 2 * t
        if lo <= floor:
            return None, hi, True


__all__ = ["EIG_MAX_SIZE", "companion_matrix", "rouche_radius", "spectral_radius"]
