"""Clusters that float64 cannot separate, and certified inclusion disks of single roots (private helper
of :mod:`ddesys.matrix.roots`).

* :func:`wide_clusters`: a root of multiplicity ``m`` is split by rounding into ``m`` roots on a circle
  of radius about ``eps^(1/m) |s|`` (``4e-3 |s|`` for ``m = 6``), inside which ``det M`` is pure rounding:
  Newton's method wanders there and never converges. The iterates that did not converge and lie close
  together are grouped; the zeros inside a circle around each group are counted by the argument
  principle (the circle grown until its phase is resolved), and a group with ``m >= 1`` zeros becomes
  one cluster: its centroid (well conditioned, unlike its members) with multiplicity ``m``.
* :func:`inclusion_radius`: the smallest circle around an approximate root ``z`` (``m`` zeros inside,
  counted) among radii growing from the rounding level; every one of those zeros lies in the disk.
"""
from __future__ import annotations

import numpy as np

from ._roots_count import Circle, centroid, evaluate, group, winding_numbers
from ._roots_igd import newton

__all__ = ["wide_clusters", "inclusion_radius", "LINK_RTOL"]

LINK_RTOL = 0.02           # non-converged iterates closer than this (relative to 1 + |s|) are one group
MAX_GROUPS = 8             # groups examined per call (the largest first)
CIRCLE_SAMPLES = 4096      # sample budget of one circle


def wide_clusters(A, Ad, tau, stuck, found, *, guard=None, fn=None):
    """Clusters around groups of non-converged Newton iterates.

    Parameters
    ----------
    A, Ad, tau : the system
    stuck : complex ``(c,)``
        Iterates that did not converge.
    found : complex ``(f,)``
        Converged roots; a circle keeps clear of those outside its group.
    guard : float, optional
        A line ``Re s = guard`` no circle crosses.
    fn : callable, optional
        The function counted instead of ``det M`` (see :func:`ddesys.matrix._roots_count.winding_numbers`).

    Returns
    -------
    list of ``(center, radius, m)``
        ``center`` the centroid of the ``m >= 1`` zeros inside ``|s - center0| < radius``.
    """
    stuck = np.asarray(stuck, dtype=np.complex128)
    stuck = stuck[np.isfinite(stuck)]
    found = np.asarray(found, dtype=np.complex128)
    groups = sorted((g for g in group(stuck, LINK_RTOL) if g.size >= 2), key=lambda g: -g.size)
    out = []
    for g in groups[:MAX_GROUPS]:
        c = complex(np.mean(stuck[g]))
        spread = float(np.max(np.abs(stuck[g] - c)))
        r = max(1.5 * spread, 1e-3 * (1 + abs(c)))
        limit = np.inf
        far = found[np.abs(found - c) > 3 * r]
        if far.size:
            limit = 0.45 * float(np.min(np.abs(far - c)))
        if guard is not None:
            limit = min(limit, 0.9 * abs(c.real - guard))
        if any(abs(c - d) < rd for d, rd, _ in out):
            continue
        for _ in range(6):
            if r > limit:
                break
            (cnt,), _ = winding_numbers(A, Ad, tau, [Circle(c, r)], h0=r / 4, max_samples=CIRCLE_SAMPLES,
                                        fn=fn)
            if cnt is not None:
                if cnt >= 1:                 # the centroid from the widest circle with the same count:
                    rc = r                   # rounding in f weighs ~ r^-m on it
                    for _ in range(4):
                        if 2 * rc > limit:
                            break
                        (c2,), _ = winding_numbers(A, Ad, tau, [Circle(c, 2 * rc)], h0=rc / 2,
                                                   max_samples=CIRCLE_SAMPLES, fn=fn)
                        if c2 != cnt:
                            break
                        rc *= 2
                    cen = complex(centroid(A, Ad, tau, c, rc, cnt, fn=fn, points=256))
                    if cnt == 1:                         # a simple root: Newton from the centroid
                        s1, ok = newton(A, Ad, tau, np.array([cen]), fn=fn)
                        if ok[0] and abs(s1[0] - c) < rc:
                            cen = complex(s1[0])
                    out.append((cen, rc, int(cnt)))
                break
            r *= 1.6
    return out


def inclusion_radius(A, Ad, tau, z, m, *, limit, fn=None):
    """Radius ``r < limit`` of a circle around ``z`` holding exactly ``m`` zeros (counted, the phase
    resolved), trying ``r = r0 4^j`` from ``r0 = max(8 m |1 / (log f)'(z)|, 64 eps (1 + |z|))``; ``None``
    when no such circle below ``limit`` could be counted."""
    z = complex(z)
    g = (evaluate(A, Ad, tau, np.array([z])) if fn is None else fn(np.array([z])))[2][0]
    step = m / abs(g) if np.isfinite(g) and g != 0 else 0.0
    r = max(8 * step, 64 * np.finfo(float).eps * (1 + abs(z)))
    while r < limit:
        (cnt,), _ = winding_numbers(A, Ad, tau, [Circle(z, r)], h0=r / 2, max_samples=CIRCLE_SAMPLES,
                                    h_rel=1e-3 * r / (1 + abs(z)), fn=fn)
        if cnt == m:
            return r
        r *= 4
    return None
