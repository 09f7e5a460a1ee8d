"""Stability of the discrete delayed mode (docs/theory.md §3).

Characteristic polynomial of one mode (degree ``k + 1``)::

    P(z) = z^(k+1) - lam z^k - mu ((1 - alpha) z + alpha)

* Sufficient (Rouche on ``|z| = 1``): ``|lam| + |mu| < 1`` puts every root inside the unit disk;
  :func:`sufficient_margin` returns ``1 - |lam| - |mu|`` (not a "stability margin" in the control
  sense of gain and phase margins; ``stability_margin`` is its deprecated name).
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
default, delays up to ``k = 2**20 - 2``, about a million steps; the time is about 0.3 us per sample, so a
few seconds per mode at that size). Delays with ``M > 2**31`` (``k`` above about 2.7e8) are refused whatever the budget:
the phase index ``(m k) mod M`` would leave int64. The sufficient criterion costs nothing at any delay,
and modes it certifies are never sampled.
"""
from __future__ import annotations

import numpy as np

from ._validate import check_memory
from .charpoly import coefficients, q_eval
from .lti import warn_renamed

MAX_DEPTH = 8              # levels of arc subdivision before giving up certification
SUBDIVIDE = 16             # parts per subdivided arc
MAX_ARCS = 2**16           # failing arcs refined at once before giving up certification
EIG_MAX_DEGREE = 96        # companion eigenvalues below this degree, winding bisection above
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


def _budget(max_bytes):
    b = EXACT_MAX_BYTES if max_bytes is None else max_bytes
    if isinstance(b, bool) or not isinstance(b, (int, float, np.integer, np.floating)) or not b > 0 \
            or not np.isfinite(b):
        raise ValueError(f"max_bytes must be a positive number of bytes, got {max_bytes!r}")
    return int(b)


def _check_cost(k, budget):
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


def stability_margin(lam, mu):
    """Deprecated name of :func:`sufficient_margin` (``FutureWarning``; same values)."""
    warn_renamed("ddesys.stability_margin", "ddesys.sufficient_margin (the margin of the sufficient test)")
    return sufficient_margin(lam, mu)


def _flat(lam, mu, k, alpha):
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
    budget = _budget(max_bytes)
    with np.errstate(divide="ignore", invalid="ignore"):
        return _winding(lam, mu, k, alpha, r, max_depth, budget)


def _winding(lam, mu, k, alpha, r, max_depth, budget):
    shape, lam, mu, k, alpha = _flat(lam, mu, k, alpha)
    _check_cost(k, budget)
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
    shape, lam, mu, k, alpha = _flat(lam, mu, k, alpha)
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
    shape, lam, mu, k, alpha = _flat(lam, mu, k, alpha)
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
    shape, lam, mu, k, alpha = _flat(lam, mu, k, alpha)
    budget = _budget(max_bytes)
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
        _check_cost(kk, budget)
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
