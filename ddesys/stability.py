"""Stability of the discrete delayed mode (docs/theory.md §3).

Characteristic polynomial of one mode (degree ``k + 1``)::

    P(z) = z^(k+1) - lam z^k - mu ((1 - alpha) z + alpha)

* Sufficient (Rouche on ``|z| = 1``): ``|lam| + |mu| < 1`` puts every root inside the unit disk;
  :func:`sufficient_margin` returns ``1 - |lam| - |mu|`` (not a "stability margin" in the control
  sense of gain and phase margins).
* Exact, ``O(k)`` per mode: ``P(z) = z^(k+1) Q(z)`` with ``Q(z) = 1 - lam/z - mu((1-alpha) z^-k +
  alpha z^-(k+1))`` (the transfer function's denominator), so the number of roots of ``P`` in
  ``|z| < r`` is ``k + 1 + wind(Q on |z| = r)``. :func:`winding_number` samples ``Q`` on the circle
  and *certifies* each sampled arc: with ``Lip`` a bound on ``|dQ/dtheta|`` and spacing ``h``, an arc
  whose start satisfies ``|Q| > Lip h`` stays inside a disk that excludes 0, so its phase increment
  is exact. The sampling is refined until every arc is certified. No companion matrix, no ``O(k^3)``.
* :func:`spectral_radius`: companion eigenvalues for small degree, otherwise bisection on the radius
  with the certified root count.

Memory and work: the count samples ``M = nextpow2(8 (k + 2))`` points per mode, about
``BYTES_PER_SAMPLE`` bytes each while a block is evaluated. Modes are processed in blocks (and the
refinement in slices) sized to ``max_bytes`` (default :data:`EXACT_MAX_BYTES`, 1 GiB); a single mode
whose samples alone exceed it is refused with a ``ValueError`` *before* anything is allocated (with the
default, delays up to ``k = 2**20 - 2``, about a million steps; the time grows linearly with the samples).
Delays with ``M > 2**31`` (``k`` above about 2.7e8) are refused whatever the budget:
the phase index ``(m k) mod M`` would leave int64. The sufficient criterion costs nothing at any delay,
and modes it certifies are never sampled.
"""
from __future__ import annotations

import numpy as np

from .charpoly import coefficients
from .winding import (BLOCK_SAMPLES, BYTES_PER_POINT, BYTES_PER_SAMPLE, EXACT_MAX_BYTES,  # noqa: F401 - re-exported
                      MAX_ARCS, MAX_DEPTH, MAX_SAMPLES, SUBDIVIDE, budget_bytes, check_cost, exact_test_bytes,
                      flat_modes, samples_per_mode, winding_number)

EIG_MAX_DEGREE = 96        # companion eigenvalues below this degree, winding bisection above


def sufficient_margin(lam, mu):
    """Margin ``1 - |lam| - |mu|`` of the sufficient stability criterion (Rouche on ``|z| = 1``).

    Not a "stability margin" in the control sense (gain and phase margins): a positive value proves
    the mode stable for every delay, a non-positive one proves nothing.

    Parameters
    ----------
    lam, mu : array_like, complex
        Broadcast together.

    Returns
    -------
    ndarray, real
        Elementwise; positive means certified stable for every delay.

    See Also
    --------
    is_stable_exact : the exact test, for modes this does not certify.

    Examples
    --------
    >>> sufficient_margin([0.5, 0.5j], [0.25, 0.7])
    array([ 0.25, -0.2 ])
    """
    return 1.0 - np.abs(lam) - np.abs(mu)


def is_stable_exact(lam, mu, k, alpha, max_bytes=None):
    """Exact per-mode test: all ``k + 1`` roots of ``P`` strictly inside the unit disk.

    Modes the sufficient criterion certifies are not sampled. A mode whose root sits on the circle
    to within the certification limit counts as not stable (it is at best marginally stable).

    Parameters
    ----------
    lam, mu : array_like, complex
    k : array_like of int
        Integer part of the delay, ``>= 0``.
    alpha : array_like, real
        Fractional part. All four broadcast together.
    max_bytes : int or None
        Memory budget (default :data:`EXACT_MAX_BYTES`).

    Returns
    -------
    ndarray of bool
        The broadcast shape.

    Raises
    ------
    ValueError
        ``k < 0``; a mode that needs more than ``max_bytes`` (saying the size and how to raise the
        budget), before anything is allocated.

    See Also
    --------
    winding_number, sufficient_margin

    Examples
    --------
    The third mode lies outside the sufficient diamond ``|lam| + |mu| < 1`` but is stable:

    >>> is_stable_exact([0.5, 0.5, 0.8], [0.25, 0.7, -0.3], 2, 0.0)
    array([ True, False,  True])
    """
    shape, lam, mu, k, alpha = flat_modes(lam, mu, k, alpha)
    out = sufficient_margin(lam, mu) > 0
    rest = np.flatnonzero(~out)
    if rest.size:
        w, cert = winding_number(lam[rest], mu[rest], k[rest], alpha[rest], 1.0, max_bytes=max_bytes)
        out[rest] = (w == 0) & cert
    return out.reshape(shape)


def radius_bound(lam, mu, k, alpha):
    """Rouche upper bound ``r_b >= spectral radius``: the root of ``r = |lam| + |mu|((1-a) r^(1-k) + a r^-k)``.

    Cheap (bisection in ``log r``), rigorous, and tight when the delayed branch is small; used to
    pick the contour of the FFT synthesis from the system's decay.

    Parameters
    ----------
    lam, mu : array_like, complex
    k : array_like of int
        Integer part of the delay, ``>= 0``.
    alpha : array_like, real
        Fractional part (``a`` above). All four broadcast together.

    Returns
    -------
    ndarray, real
        The broadcast shape.

    Raises
    ------
    ValueError
        ``k < 0``.

    Examples
    --------
    >>> np.round(radius_bound([0.5, 0.9], [0.25, 0.3], [2, 200], [0.0, 0.5]), 4)
    array([0.809 , 1.0053])
    """
    shape, lam, mu, k, alpha = flat_modes(lam, mu, k, alpha)
    al, am, kf = np.abs(lam), np.abs(mu), k.astype(float)

    def g(logr):  # > 0 while the circle may still hold roots outside
        with np.errstate(over="ignore", invalid="ignore"):
            t1 = np.where(alpha < 1, (1 - alpha) * np.exp((1 - kf) * logr), 0.0)
            t2 = np.where(alpha > 0, alpha * np.exp(-kf * logr), 0.0)
            return al + np.where(am > 0, am * (t1 + t2), 0.0) - np.exp(logr)

    hi = np.log(np.maximum(al + am, 1e-300)) + 1e-12
    hi = np.where(g(hi) > 0, np.maximum(hi, 0.0) + 1.0, hi)
    for _ in range(60):                          # grow until g(hi) <= 0 (ample for |lam|+|mu| up to e^60)
        bad = g(hi) > 0
        if not bad.any():
            break
        hi = np.where(bad, hi + 1.0, hi)
    lo = np.full_like(hi, -745.0)
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        pos = g(mid) > 0
        lo, hi = np.where(pos, mid, lo), np.where(pos, hi, mid)
    return np.exp(hi).reshape(shape)


def _companion_radius(lam, mu, k, alpha):
    out = np.empty(lam.size)
    for kk in np.unique(k):
        idx = np.flatnonzero(k == kk)
        deg = int(kk) + 1
        C = np.zeros((idx.size, deg, deg), np.complex128)
        c1, c2, c3 = coefficients(lam[idx], mu[idx], alpha[idx])
        C[:, 0, 0] = c1                            # first row: coefficients of z^k .. z^0
        C[:, 0, deg - 2] += c2
        C[:, 0, deg - 1] += c3
        C[:, np.arange(1, deg), np.arange(deg - 1)] = 1.0
        out[idx] = np.abs(np.linalg.eigvals(C)).max(axis=1)
    return out


def spectral_radius(lam, mu, k, alpha, rtol=1e-12, max_bytes=None):
    """Largest root modulus of ``P`` per mode (exact to ``rtol``).

    Degree ``< EIG_MAX_DEGREE``: companion eigenvalues. Otherwise bisection between a lower bound
    (geometric mean of the nonzero roots, from the constant term) and :func:`radius_bound`, counting
    roots outside each circle with :func:`winding_number`, down to relative width ``rtol``. Cost
    ``O(k log(1/rtol))`` per mode (plus local refinement where roots touch a sampled circle).

    Parameters
    ----------
    lam, mu : array_like, complex
    k : array_like of int
        Integer part of the delay, ``>= 0``.
    alpha : array_like, real
        Fractional part. All four broadcast together.
    rtol : float, default 1e-12
        Relative width at which the bisection stops.
    max_bytes : int or None
        Memory budget of each count (see :func:`winding_number`); checked before any work.

    Returns
    -------
    ndarray, real
        The broadcast shape.

    Raises
    ------
    ValueError
        ``k < 0``, a mode over the budget.

    Examples
    --------
    >>> np.round(spectral_radius([0.5, 0.9], [0.7, 0.3], [2, 200], [0.0, 0.5]), 4)
    array([1.1232, 1.0053])
    """
    shape, lam, mu, k, alpha = flat_modes(lam, mu, k, alpha)
    budget = budget_bytes(max_bytes)
    out = np.empty(lam.size)
    small = k + 1 < EIG_MAX_DEGREE
    if small.any():
        out[small] = _companion_radius(lam[small], mu[small], k[small], alpha[small])
    if lam.size == 0:
        return out.reshape(shape)
    nodelay = np.abs(mu) == 0                    # P = z^k (z - lam): radius |lam|
    out[nodelay] = np.abs(lam[nodelay])
    big = np.flatnonzero(~small & ~nodelay)
    if big.size:
        l, m, kk, a = lam[big], mu[big], k[big], alpha[big]
        check_cost(kk, budget)
        hi = radius_bound(l, m, kk, a)
        const = np.where(a > 0, np.abs(m) * a, np.abs(m))
        nz = np.where(a > 0, kk + 1, kk).astype(float)
        lo = np.where(const > 0, np.exp(np.log(np.maximum(const, 1e-300)) / nz), np.abs(l)) * (1 - 1e-9)
        lo = np.minimum(lo, hi * (1 - 1e-9))
        # keep |mu| r^-k finite on every sampled circle (otherwise Q overflows)
        lo = np.maximum(lo, np.exp((np.log(np.abs(m)) - 600.0) / np.maximum(kk, 1)))
        for _ in range(200):
            live = (hi - lo) > rtol * hi
            if not live.any():
                break
            i = np.flatnonzero(live)
            mid = 0.5 * (lo[i] + hi[i])
            w, cert = winding_number(l[i], m[i], kk[i], a[i], mid, max_bytes=budget)
            # uncertified: a root lies within the refinement limit of this circle, so radius ~>= mid
            outside = (w < 0) | ~cert
            lo[i] = np.where(outside, mid, lo[i])
            hi[i] = np.where(outside, hi[i], mid)
        out[big] = 0.5 * (lo + hi)
    return out.reshape(shape)


__all__ = ["BLOCK_SAMPLES", "BYTES_PER_POINT", "BYTES_PER_SAMPLE", "EIG_MAX_DEGREE", "EXACT_MAX_BYTES", "MAX_ARCS",
           "MAX_DEPTH", "MAX_SAMPLES", "SUBDIVIDE", "exact_test_bytes", "is_stable_exact", "radius_bound",
           "samples_per_mode", "spectral_radius", "sufficient_margin", "winding_number"]
