"""The certified winding count of one discrete delayed mode's ``Q`` on a circle (docs/theory.md §3).

``Q(z) = 1 - lam/z - mu((1-alpha) z^-k + alpha z^-(k+1))`` (the transfer function's denominator; the
characteristic polynomial is ``P(z) = z^(k+1) Q(z)``): :func:`winding_number` samples ``Q`` on the
circle ``|z| = r`` and *certifies* each sampled arc (with ``Lip`` a bound on ``|dQ/dtheta|`` and spacing
``h``, an arc whose start satisfies ``|Q| > Lip h`` stays inside a disk that excludes 0, so its phase
increment is exact), refining until every arc is certified. :mod:`ddesys.stability` builds the exact
test and the spectral radius on it. Memory: see :mod:`ddesys.stability` (``max_bytes``, the budget of
one count, default :data:`EXACT_MAX_BYTES`).
"""
from __future__ import annotations

import numpy as np

from ._validate import check_memory
from .budget import resolve
from .charpoly import coefficients, q_eval

MAX_DEPTH = 8              # levels of arc subdivision before giving up certification
SUBDIVIDE = 16             # parts per subdivided arc
MAX_ARCS = 2**16           # failing arcs refined at once before giving up certification
EXACT_MAX_BYTES = 2**30    # default memory budget of one exact test (argument ``max_bytes`` overrides)
BYTES_PER_SAMPLE = 128     # peak working memory per sample of Q on the circle (measured: 88, + 24 per arc)
BYTES_PER_POINT = 128      # the same per point of the refinement's subdivided arcs (measured: 61)
BLOCK_SAMPLES = 2**22      # samples per block at most (the budget may lower it)
MAX_SAMPLES = 2**31        # largest M: (m k) mod M is computed as m (k mod M) < M**2 <= 2**62


def samples_per_mode(k):
    """``M = nextpow2(8 (k + 2))``: the points at which the winding count samples one mode.

    Parameters
    ----------
    k : array_like of int
        Integer parts of the delays.

    Returns
    -------
    ndarray of int64, ``k``'s shape

    Examples
    --------
    >>> samples_per_mode([0, 10, 100])
    array([  16,  128, 1024])
    """
    k = np.asarray(k, np.int64)
    return (2 ** np.ceil(np.log2(8.0 * (k + 2.0)))).astype(np.int64)


def exact_test_bytes(k):
    """Working memory of the winding count of one mode of integer delay ``k``.

    Parameters
    ----------
    k : array_like of int
        Integer parts of the delays.

    Returns
    -------
    ndarray of int64
        Bytes: ``samples_per_mode(k) * BYTES_PER_SAMPLE``.
    """
    return samples_per_mode(k) * BYTES_PER_SAMPLE


def budget_bytes(max_bytes):
    """``max_bytes`` checked (a positive number of bytes); for None, :data:`EXACT_MAX_BYTES` or the memory
    budget (:mod:`ddesys.budget`), whichever is smaller."""
    return resolve(max_bytes, EXACT_MAX_BYTES)


def check_cost(k, budget):
    """Refuse, before allocating, a mode whose samples do not fit ``budget`` or int64 phase arithmetic."""
    if np.size(k) == 0:
        return
    kmax = int(np.max(k))
    M = int(samples_per_mode(kmax))
    if M > MAX_SAMPLES:
        raise ValueError(f"exact stability test: a delay of k = {kmax} steps needs M = {M} samples per mode, "
                         f"beyond the limit {MAX_SAMPLES} of the integer phase arithmetic (k up to about "
                         f"{MAX_SAMPLES // 8 - 2}). Use the sufficient test (is_stable(method='sufficient'), "
                         "sufficient_margin()), which holds for every delay")
    check_memory(M * BYTES_PER_SAMPLE, budget,
                 f"exact stability test (certified winding count) of a mode with delay k = {kmax} steps "
                 f"({M} samples on the circle)",
                 f"pass max_bytes= (bytes; default ddesys.stability.EXACT_MAX_BYTES = {EXACT_MAX_BYTES}) to "
                 f"allow it (time grows with it: about {M * 3e-7:.2g} s per mode), or use the sufficient "
                 "test (is_stable(method='sufficient'), sufficient_margin()), which costs nothing at any delay")


def flat_modes(lam, mu, k, alpha):
    """``(shape, lam, mu, k, alpha)``: the broadcast shape and the four flattened (complex128, complex128,
    int64, float64); ``ValueError`` for ``k < 0``."""
    lam, mu, k, alpha = np.broadcast_arrays(np.asarray(lam, np.complex128), np.asarray(mu, np.complex128),
                                            np.asarray(k, np.int64), np.asarray(alpha, np.float64))
    shape = lam.shape
    if k.size and k.min() < 0:
        raise ValueError(f"k must be >= 0 (the integer part of the delay), got {int(k.min())}")
    return shape, lam.ravel(), mu.ravel(), k.ravel(), alpha.ravel()


def _q_on_circle(lam, mu, k, alpha, r, M):
    """``Q(r e^{i theta_m})``, ``theta_m = 2 pi m / M``, for P modes: ``(P, M)`` complex.

    ``e^{-i m k theta}`` comes from the integer ``(m k) mod M``, exact for any ``k``."""
    m = np.arange(M, dtype=np.int64)
    ang = -2.0 * np.pi / M
    km = (k % M)[:, None]                                           # m (k mod M) < M**2 <= 2**62
    zk = np.exp(1j * ang * ((m * km) % M))                          # (P, M)
    zk1 = np.exp(1j * ang * ((m * ((km + 1) % M)) % M))            # (P, M)
    z1 = np.exp(1j * ang * m)                                       # (M,)
    rr = np.broadcast_to(np.asarray(r, np.float64), k.shape)[:, None]   # (P, 1) radius per mode
    rk = rr ** (-k.astype(float))[:, None]                          # (P, 1) r^{-k}
    c1, c2, c3 = (c[:, None] for c in coefficients(lam, mu, alpha))  # (P, 1) each
    return q_eval(c1, c2, c3, z1 / rr, rk * zk, rk * zk1 / rr)      # Q(r e^{i theta_m}), (P, M)


def _q_at(lam, mu, k, alpha, r, theta):
    """``Q(r e^{i theta})`` elementwise (all arguments broadcast)."""
    rk = r ** (-k.astype(float))
    zk = rk * np.exp(-1j * k * theta)                               # (r e^{i theta})^{-k}
    return q_eval(*coefficients(lam, mu, alpha), np.exp(-1j * theta) / r, zk, zk * np.exp(-1j * theta) / r)


def _lipschitz(lam, mu, k, alpha, r):
    """Bound on ``|dQ/dtheta|`` on the circle of radius ``r``."""
    rk = r ** (-k.astype(float))
    return np.abs(lam) / r + np.abs(mu) * rk * ((1 - alpha) * k + alpha * (k + 1) / r)


def winding_number(lam, mu, k, alpha, r=1.0, max_depth=MAX_DEPTH, max_bytes=None):
    """Certified winding number of ``Q`` around 0 on the circle ``|z| = r``, per mode.

    ``Q`` is sampled at ``M = nextpow2(8 (k + 2))`` points. An arc of angular width ``h`` whose larger
    end value exceeds ``Lip h`` in modulus stays in a disk that excludes 0, so its phase increment is
    the principal ``arg(Q_end / Q_start)``; arcs failing that test are split in ``SUBDIVIDE`` parts,
    recursively, up to ``max_depth`` levels (only those arcs: cost stays ``O(k)`` per mode unless a
    root sits on the circle).

    Parameters
    ----------
    lam, mu : array_like, complex
    k : array_like of int
        Integer part of the delay, ``>= 0``.
    alpha : array_like, real
        Fractional part. ``lam``, ``mu``, ``k``, ``alpha`` broadcast together.
    r : float or array_like, default 1.0
        Radius of the circle (broadcastable).
    max_depth : int, default :data:`MAX_DEPTH`
        Levels of arc subdivision before giving up certification.
    max_bytes : int or None
        Memory budget in bytes (default :data:`EXACT_MAX_BYTES`): blocks of modes are sized to it, and a
        mode whose ``M`` samples alone exceed it raises ``ValueError`` before allocating.

    Returns
    -------
    wind : ndarray of int64
        ``<= 0``; ``-wind`` roots of ``P`` lie in ``|z| >= r``.
    certified : ndarray of bool
        False where a root lies so close to the circle that the refinement could not certify every arc
        (the count is then a best effort).

    Raises
    ------
    ValueError
        ``k < 0``, or a delay too long for the budget or for int64 phase arithmetic.

    Examples
    --------
    >>> wind, certified = winding_number([0.5, 0.5], [0.25, 0.7], 2, 0.0)
    >>> wind, certified                  # the second mode has one root outside the unit circle
    (array([ 0, -1]), array([ True,  True]))
    """
    budget = budget_bytes(max_bytes)
    with np.errstate(divide="ignore", invalid="ignore"):
        return _winding(lam, mu, k, alpha, r, max_depth, budget)


def _winding(lam, mu, k, alpha, r, max_depth, budget):
    shape, lam, mu, k, alpha = flat_modes(lam, mu, k, alpha)
    check_cost(k, budget)
    r = np.broadcast_to(np.asarray(r, float), shape).ravel()
    total = np.zeros(lam.size)
    cert = np.ones(lam.size, bool)
    lip = _lipschitz(lam, mu, k, alpha, r)
    M_of = samples_per_mode(k)
    block = max(1, min(BLOCK_SAMPLES, budget // BYTES_PER_SAMPLE))          # samples per block
    arc_slice = max(1, budget // (BYTES_PER_POINT * (SUBDIVIDE + 1)))       # arcs refined at once
    for M in np.unique(M_of):
        grp = np.flatnonzero(M_of == M)
        chunk = max(1, block // int(M))
        for s in range(0, grp.size, chunk):
            idx = grp[s:s + chunk]
            q = _q_on_circle(lam[idx], mu[idx], k[idx], alpha[idx], r[idx], int(M))   # (P, M)
            qn = np.roll(q, -1, axis=1)
            h = 2 * np.pi / M
            ok = np.maximum(np.abs(q), np.abs(qn)) > (lip[idx] * h)[:, None]      # (P, M)
            bad = ~np.isfinite(q).all(axis=1) | ~np.isfinite(lip[idx])            # overflowed r^-k
            cert[idx[bad]] = False
            ok[bad] = True                       # nothing to refine: the count is meaningless there
            inc = np.angle(qn / q)
            total[idx] += np.where(ok, inc, 0.0).sum(axis=1)
            del q, qn, inc
            pi_, mi_ = np.nonzero(~ok)
            del ok
            arcs = (idx[pi_], mi_ * h, np.full(pi_.size, h))
            _refine(lam, mu, k, alpha, r, lip, arcs, max_depth, arc_slice, total, cert)
    on_circle = ~np.isfinite(total)               # Q vanished at a sample: a root on the circle
    cert[on_circle] = False
    wind = np.rint(np.where(on_circle, 0.0, total) / (2 * np.pi)).astype(np.int64)
    return wind.reshape(shape), cert.reshape(shape)


def _refine(lam, mu, k, alpha, r, lip, arcs, max_depth, arc_slice, total, cert):
    """Split the uncertified arcs ``(mode, start, width)`` level by level, ``arc_slice`` arcs at a time;
    more than ``MAX_ARCS`` failing sub-arcs at one level gives up certification of their modes."""
    arcs_p, arcs_t, arcs_h = arcs
    for depth in range(max_depth + 1):
        if arcs_p.size == 0:
            return
        last = depth == max_depth
        nxt, n_fail, give_up = [], 0, []
        for s in range(0, arcs_p.size, arc_slice):
            ap, at, ah = arcs_p[s:s + arc_slice], arcs_t[s:s + arc_slice], arcs_h[s:s + arc_slice]
            sub_h = ah / SUBDIVIDE
            th = at[:, None] + sub_h[:, None] * np.arange(SUBDIVIDE + 1)       # (A, S+1)
            p = ap[:, None]
            qq = _q_at(lam[p], mu[p], k[p], alpha[p], r[p], th)                  # (A, S+1)
            a0, a1 = qq[:, :-1], qq[:, 1:]
            ok = np.maximum(np.abs(a0), np.abs(a1)) > (lip[ap] * sub_h)[:, None]
            inc = np.angle(a1 / a0)
            np.add.at(total, ap, np.where(ok | last, inc, 0.0).sum(axis=1))
            ai, si = np.nonzero(~ok)
            if last:
                cert[np.unique(ap[ai])] = False
                continue
            n_fail += ai.size
            if n_fail > MAX_ARCS:            # too many failing arcs: give up on those modes
                give_up.extend(np.unique(a[0]) for a in nxt)
                give_up.append(np.unique(ap[ai]))
                nxt = []
                continue
            nxt.append((ap[ai], th[ai, si], sub_h[ai]))
        if give_up:
            cert[np.unique(np.concatenate(give_up))] = False
            return
        if last or not nxt:
            return
        arcs_p, arcs_t, arcs_h = (np.concatenate(v) for v in zip(*nxt))


__all__ = ["BLOCK_SAMPLES", "BYTES_PER_POINT", "BYTES_PER_SAMPLE", "EXACT_MAX_BYTES", "MAX_ARCS", "MAX_DEPTH",
           "MAX_SAMPLES", "SUBDIVIDE", "budget_bytes", "check_cost", "exact_test_bytes", "flat_modes",
           "samples_per_mode", "winding_number"]
