"""Clusters that float64 cannot separate, and certified inclusion disks of single roots (private helper
of :mod:`ddesys.matrix.roots`).

* :func:`wide_clusters`: a root of multiplicity ``m`` is split by rounding into ``m`` roots on a circle
  of radius about ``eps^(1/m) |s|`` (``4e-3 |s|`` for ``m = 6``), inside which ``det M`` is pure rounding:
  Newton's method wanders there and never converges. The iterates that did not converge and lie close
  together are grouped; the zeros inside a circle around each group are counted by the argument
  principle (the circle grown until its phase is resolved). ``m`` zeros in the circle prove only their
  number, not that they coincide: distinct roots close together (two real roots ``5e-4`` apart next to
  the axis) first get separated (:func:`separate`: the zeros of the polynomial with the circle's power
  sums and the converged roots inside, refined by Newton's method, each proven alone in its own disk);
  only a group whose zeros cannot be separated becomes one cluster: its centroid (well conditioned,
  unlike its members) with multiplicity ``m``.
* :func:`inclusion_radius`: the smallest circle around an approximate root ``z`` (``m`` zeros inside,
  counted) among radii growing from the rounding level; every one of those zeros lies in the disk.
"""
from __future__ import annotations

import numpy as np

from ._roots_count import MERGE_RTOL, Circle, centroid, evaluate, group, winding_numbers
from ._roots_igd import newton

__all__ = ["wide_clusters", "separate", "inclusion_radius", "LINK_RTOL"]

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
        ``center`` the centroid of the ``m >= 1`` zeros inside ``|s - center0| < radius``; zeros that
        :func:`separate` tells apart come as simple roots ``(root, radius, 1)``, one disk each.
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
                    if cnt >= 2:                 # a count proves a number of zeros, not that they coincide
                        apart = separate(A, Ad, tau, c, rc, int(cnt), found, fn=fn)
                        if apart is not None:
                            out += [(z, rz, 1) for z, rz in apart]
                            break
                    cen = complex(centroid(A, Ad, tau, c, rc, cnt, fn=fn, points=256))
                    if cnt == 1:                         # a simple root: Newton from the centroid
                        s1, ok = newton(A, Ad, tau, np.array([cen]), fn=fn)
                        if ok[0] and abs(s1[0] - c) < rc:
                            cen = complex(s1[0])
                    out.append((cen, rc, int(cnt)))
                break
            r *= 1.6
    return out


def separate(A, Ad, tau, c, r, m, found=(), *, fn=None, points=256):
    """The ``m`` zeros counted inside ``|s - c| = r`` as ``m`` distinct simple roots, or ``None``.

    Candidates are the zeros of the monic polynomial whose power sums are the circle's moments
    ``(1 / 2 pi i) int (s - c)^k (log f)' ds``, ``k = 1..m`` (Delves & Lyness 1967; trapezoid rule on
    ``points`` points, Newton's identities), and the converged roots ``found`` inside the circle. Each is
    refined by Newton's method; the refined points inside the circle, merged within
    :data:`ddesys.matrix._roots_count.MERGE_RTOL`, must be exactly ``m``, and each must be alone in a
    counted disk (:func:`inclusion_radius`, ``m = 1``) of radius below ``0.45`` of its distance to the
    next one and inside the circle. The ``m`` disjoint disks then hold the ``m`` zeros the circle holds:
    the roots are separated, and proven simple. A genuine multiple root (split by rounding into a cloud
    where ``f`` is noise) fails the test: its members do not converge, or no disk of one zero is counted.

    Parameters
    ----------
    A, Ad, tau : the system
    c : complex
        Center of the circle.
    r : float
        Its radius (``m`` zeros counted inside, its phase resolved).
    m : int
        The count.
    found : array_like of complex
        Converged roots; those inside the circle join the candidates.
    fn : callable, optional
        The function instead of ``det M`` (see :func:`ddesys.matrix._roots_count.winding_numbers`).
    points : int
        Points of the trapezoid rule for the moments.

    Returns
    -------
    list of ``(root, radius)`` or None
        ``m`` roots, each the only zero in ``|s - root| < radius`` (disjoint disks inside the circle).
    """
    c = complex(c)
    found = np.asarray(found, dtype=np.complex128).reshape(-1)
    cand = [found[np.isfinite(found) & (np.abs(found - c) < r)]]
    s = c + r * np.exp(2j * np.pi * np.arange(points) / points)
    g = (evaluate(A, Ad, tau, s) if fn is None else fn(s))[2]
    if np.all(np.isfinite(g)):
        w = (s - c) / r
        p = np.array([np.mean(w ** k * (s - c) * g) for k in range(1, m + 1)])   # power sums of (z - c) / r
        e = np.zeros(m + 1, complex)                                           # elementary symmetric ones
        e[0] = 1.0
        for k in range(1, m + 1):
            e[k] = sum((-1) ** (i - 1) * e[k - i] * p[i - 1] for i in range(1, k + 1)) / k
        with np.errstate(all="ignore"):
            x = np.roots(e * (-1.0) ** np.arange(m + 1))
        cand.append(c + r * x[np.isfinite(x)])
    z0 = np.concatenate(cand)
    if z0.size < m:
        return None
    z, ok = newton(A, Ad, tau, z0, fn=fn)
    z = z[ok & np.isfinite(z) & (np.abs(z - c) < r)]
    groups = group(z, MERGE_RTOL)
    if len(groups) != m:
        return None
    roots = np.array([np.mean(z[gi]) for gi in groups], dtype=np.complex128)
    if m > 1:
        d = np.abs(roots[:, None] - roots[None, :]) + np.diag(np.full(m, np.inf))
        near = d.min(axis=1)
    else:
        near = np.full(1, np.inf)
    out = []
    for zi, di in zip(roots, near):
        limit = min(0.45 * di, r - abs(zi - c))
        rz = inclusion_radius(A, Ad, tau, zi, 1, limit=limit, fn=fn)
        if rz is None:
            return None
        out.append((complex(zi), float(rz)))
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
