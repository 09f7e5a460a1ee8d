"""Delay sweeps of a matrix system with one delay: imaginary-axis crossings and the delay margin.

For ``x'(t) = A x(t) + A1 x(t - tau)`` (``A``, ``A1`` real or complex ``(n, n)``) a characteristic root
lies on the imaginary axis at ``s = i omega`` exactly when ``det(i omega I - A - A1 z) = 0`` with
``z = exp(-i theta)``, ``theta = omega tau (mod 2 pi)``. Each such *crossing pair* ``(omega, theta)``
gives the delays ``tau_k = (theta + 2 pi k) / omega > 0``. The pairs are found as the unit-modulus
eigenvalues ``z`` of a quadratic eigenvalue problem of size ``n^2`` (``n <= QEP_MAX_N``), or by a
sweep of the eigenvalues of ``A + A1 exp(-i theta)`` over ``theta`` (larger ``n``, or when that
problem is singular), and refined by Newton's method in ``(omega, theta)``. docs/theory.md §9.3 states the
method, the direction rule and the tolerances.

Real systems (complex dtype with zero imaginary parts included): only ``omega > 0`` is listed; the
conjugate root ``-i omega`` crosses at the same delay in the same direction. Complex systems: both
signs of ``omega`` are listed.
"""
from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np

from ._crossing_search import (RES_TOL, eig_with_slopes, local_directions, newton_pair, newton_s,
                               persistent_frequencies, qep_candidates, sigma_min, sweep_candidates)
from .charmatrix import check_statespace

QEP_MAX_N = 12          # QEP (size 2 n^2 after linearization) up to this n, theta sweep above
CLUSTER_TOL = 1e-6      # eigenvalues of A + A1 z within this (relative) of i omega count as one cluster
DIR_TOL = 1e-6          # |Im c| / |c| below this: first-order direction undecided, decided by continuation
MULT_TOL = 1e-6         # |1 + tau c| / (1 + tau |c|) below this: a multiple root at i omega for this tau
TAU_RTOL = 1e-12        # a crossing at tau <= tau_max (1 + TAU_RTOL) is inside (0, tau_max]
MAX_CROSSINGS = 100_000
METHODS = ("auto", "qep", "sweep")


class Crossing(NamedTuple):
    """A characteristic root on the imaginary axis at ``s = i omega`` for the delay ``tau``.

    ``direction``: ``+1`` the root moves right as ``tau`` grows (destabilizing), ``-1`` left
    (stabilizing), ``0`` it touches the axis and goes back. ``tau = nan`` marks a root at ``i omega`` for
    *every* delay (reported first, with a ``RuntimeWarning``).

    A root of multiplicity ``m`` at ``i omega`` for this ``tau`` (a multiple eigenvalue of ``A + A1
    exp(-i omega tau)``, or a multiple root of the delay equation, where ``1 + tau c = 0`` in
    docs/theory.md §9.3) gives ``m`` records with the same ``tau`` and ``omega``: ``|net|`` of them carry
    ``sign(net)`` and the others ``0``, where ``net`` is the number of roots near ``i omega`` in the right
    half-plane just after ``tau`` minus just before. The directions at one delay thus always add up to
    the change of the number of unstable roots there. A double root whose two roots lie one on each
    side of the axis both before and after ``tau`` gives two records with direction ``0``.
    """

    tau: float
    omega: float
    direction: int


class CrossingFrequency(NamedTuple):
    """A crossing pair: ``det(i omega I - A - A1 exp(-i theta)) = 0``; delays ``(theta + 2 pi k) / omega``.

    ``theta`` is in ``[0, 2 pi)`` for ``omega > 0`` and ``(-2 pi, 0]`` for ``omega < 0``, so the first
    crossing is at ``theta / omega`` (``2 pi / omega`` when ``theta = 0``). ``direction`` holds for every
    ``k`` when decided at first order; a touch-like pair (first order zero) shows the direction found by
    continuation at the first delay.
    """

    omega: float
    theta: float
    direction: int


def _check(A, A1):
    a1 = A1 if isinstance(A1, (list, tuple)) else np.asarray(A1)
    k = len(a1) if isinstance(a1, (list, tuple)) and np.ndim(a1[0]) == 2 else (
        a1.shape[0] if isinstance(a1, np.ndarray) and a1.ndim == 3 else 1)
    if k != 1:
        raise ValueError(f"crossings and delay_margin handle one delay: A1 must be one (n, n) matrix, got "
                         f"{k} delayed matrices")
    try:
        data = check_statespace(A, A1, 1.0)
    except (TypeError, ValueError) as exc:        # name the argument as this API calls it
        raise type(exc)(str(exc).replace("Ad[0]", "A1").replace("Ad ", "A1 ")) from None
    A, A1 = data.A, data.Ad[0]
    if np.iscomplexobj(A) and not np.any(A.imag) and not np.any(A1.imag):
        A, A1 = A.real.copy(), A1.real.copy()          # complex dtype, real values: a real system
    return A, A1, float(np.linalg.norm(A, 2) + np.linalg.norm(A1, 2)) or 1.0


def _check_method(method, n_theta):
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if not isinstance(n_theta, (int, np.integer)) or isinstance(n_theta, bool) or n_theta < 16:
        raise ValueError(f"n_theta must be an integer >= 16 (theta grid of the sweep), got {n_theta!r}")


def normalize_theta(w, th):
    th = float(np.mod(th, 2 * np.pi))
    if min(th, 2 * np.pi - th) <= 1e-14:
        th = 0.0
    return th if w > 0 or th == 0.0 else th - 2 * np.pi


def first_tau(w, th):
    return (th if th != 0.0 else 2 * np.pi * np.sign(w)) / w


def _continuation(A, A1, w, tau, dsdtau, scale):
    """Direction at a touch-like crossing: track the root by Newton at ``tau -+ delta`` (``delta =
    1e-4 tau``) and compare the signs of its real part. ``None`` when the tracking fails, or when the
    first-order prediction leaves the neighbourhood of ``i omega`` (a nearly multiple root)."""
    Ad = A1[None]
    if not np.isfinite(dsdtau) or abs(dsdtau) * 1e-4 * tau > 1e-2 * (abs(w) + scale):
        return None
    re = []
    for sgn in (-1.0, 1.0):
        d = sgn * 1e-4 * tau
        s, ok = newton_s(A, Ad, tau + d, 1j * w + dsdtau * d, scale)
        if not ok or abs(s - 1j * w) > 10 * abs(dsdtau * d) + 1e-2 * (abs(w) + scale):
            return None
        re.append(s.real)
    noise = 1e-13 * (abs(w) + scale)
    if re[0] < -noise and re[1] > noise:
        return 1
    if re[0] > noise and re[1] < -noise:
        return -1
    return 0


class _Pair(NamedTuple):
    omega: float
    theta: float
    mult: int          # eigenvalues of A + A1 z in the cluster at i omega
    c: complex         # u^* A1 z v / u^* v (simple eigenvalue; nan for a cluster)
    first: int         # first-order direction for every tau: +1 / -1; 0 undecided (touch-like)
    net: int           # cluster: net number of roots entering the right half-plane (tau increasing)
    gap: float         # distance from i omega to the other eigenvalues of A + A1 z (inf: none)


def _refine_touch(A, A1, w, th, c, scale):
    """A touch-like pair: Newton in ``(omega, theta)`` meets a singular Jacobian there and stops at
    ``~sqrt(eps)``. The touch is where ``Re lambda(theta)`` has a double zero, so its slope ``Im c``
    has a simple one: secant steps on ``Im c(theta)`` locate it to rounding. Kept when ``Re lambda`` is
    zero there to ``RES_TOL``; otherwise the Newton result stands."""
    def at(t, w_ref):
        lam, _, cc = eig_with_slopes(A, A1, np.exp(-1j * t))
        i = int(np.argmin(np.abs(lam - 1j * w_ref)))
        return complex(cc[i]), complex(lam[i])
    t0, t1 = th, th + 1e-7
    (h0, _), (c1, l1) = at(t0, w), at(t1, w)
    h0, h1 = h0.imag, c1.imag
    for _ in range(40):
        if h1 == h0:
            break
        t0, t1, h0 = t1, t1 - h1 * (t1 - t0) / (h1 - h0), h1
        c1, l1 = at(t1, l1.imag)
        h1 = c1.imag
        if abs(t1 - t0) <= 4e-16 * max(1.0, abs(t1)):
            break
    if abs(t1 - th) <= 1e-5 and abs(l1.real) <= RES_TOL * scale and abs(l1.imag - w) <= 1e-5 * scale:
        return l1.imag, normalize_theta(l1.imag, t1), c1
    return w, th, c


def _analyse(A, A1, w, th, scale):
    """Cluster size and first-order direction of a refined pair (``sign Re ds/dtau = sign(omega Im c)``,
    ``c = u^* A1 z v / u^* v`` with ``u, v`` the left and right eigenvectors of ``A + A1 z`` at ``i
    omega``; a cluster of ``m > 1`` eigenvalues is decided by counting them in the right half-plane at
    ``theta -+ 1e-5``)."""
    z = np.exp(-1j * th)
    lam, slope, c = eig_with_slopes(A, A1, z)
    dist = np.abs(lam - 1j * w)
    cl = dist <= CLUSTER_TOL * (abs(w) + scale)
    cl[np.argmin(dist)] = True
    m = int(cl.sum())
    gap = float(dist[~cl].min()) if np.any(~cl) else np.inf
    if m == 1:
        ci = complex(c[cl][0])
        undecided = abs(ci.imag) <= DIR_TOL * abs(ci) or abs(ci) <= 1e-10 * scale
        if undecided and abs(ci) > 1e-10 * scale:
            w, th, ci = _refine_touch(A, A1, w, th, ci, scale)
        return _Pair(w, th, 1, ci, 0 if undecided else int(np.sign(w * ci.imag)), 0, gap)
    rest = dist[~cl]
    r = 0.5 * rest.min() if rest.size else scale
    counts = []
    for dth in (-1e-5, 1e-5):
        l2 = np.linalg.eigvals(A + A1 * np.exp(-1j * (th + dth)))
        near = np.abs(l2 - 1j * w) < r
        counts.append(int(np.sum(near & (l2.real > 0))))
    net = int(np.sign(w)) * (counts[1] - counts[0])
    return _Pair(w, th, m, complex("nan"), int(np.sign(net)), net, gap)


def _pairs(A, A1, scale, method, n_theta):
    """All crossing pairs (refined, deduplicated, analysed) and the persistent frequencies."""
    real = not np.iscomplexobj(A)
    persistent = persistent_frequencies(A, A1, scale)
    use_qep = method == "qep" or (method == "auto" and A.shape[0] <= QEP_MAX_N)
    cands = qep_candidates(A, A1, scale) if use_qep else None
    if cands is None:
        if use_qep and method == "qep":
            warnings.warn("crossings: the quadratic eigenvalue problem is singular (a block of the system "
                          "has eigenvalues symmetric about the imaginary axis for every delay); using the "
                          "theta sweep, which is not certified", RuntimeWarning, stacklevel=3)
        cands = sweep_candidates(A, A1, n_theta, scale, persistent)
    pairs = []
    for w0, th0 in cands:
        E = A1 * np.exp(-1j * th0)
        start_ok = sigma_min(1j * w0 * np.eye(len(A)) - A - E) <= 1e-8 * (abs(w0) + scale)
        w, th, ok = newton_pair(A, A1, w0, th0, scale)
        if not ok:
            if start_ok:
                warnings.warn(f"crossings: Newton did not converge from the candidate omega = {w0:.6g}, "
                              f"theta = {th0:.6g}; a crossing may be missing", RuntimeWarning, stacklevel=3)
            continue
        if abs(w) <= 1e-12 * scale or (real and w < 0):
            continue                    # omega = 0: persistent (or none); real: conjugate of omega > 0
        if any(abs(w - v) <= 1e-8 * scale for v in persistent):
            continue
        th = normalize_theta(w, th)
        dup = any(abs(w - p.omega) <= 1e-7 * scale and
                  min(abs(th - p.theta), 2 * np.pi - abs(th - p.theta)) <= 1e-6 for p in pairs)
        if not dup:
            pairs.append(_analyse(A, A1, w, th, scale))
    pairs.sort(key=lambda p: (first_tau(p.omega, p.theta), p.omega))
    if persistent:
        warnings.warn("crossings: the system has a characteristic root on the imaginary axis for every delay "
                      f"at omega = {persistent} (reported as Crossing(tau=nan, ...)); it is not asymptotically "
                      "stable for any delay", RuntimeWarning, stacklevel=3)
    return pairs, persistent


def _directions(A, A1, p, tau, scale):
    """The entries (one per root at ``i omega``, with multiplicity) for the pair ``p`` at the delay ``tau``.

    A simple eigenvalue of ``A + A1 z`` is a root of the delay equation of multiplicity ``> 1`` where
    ``1 + tau c = 0`` (``d det M / ds = 0``); there, and where the continuation fails, the roots near
    ``i omega`` at ``tau -+ delta`` are counted (:func:`local_directions`).
    """
    if p.mult > 1:
        sgn = int(np.sign(p.net))
        return [sgn] * min(abs(p.net), p.mult) + [0] * (p.mult - min(abs(p.net), p.mult))
    q = 1 + tau * p.c
    multiple = abs(q) <= MULT_TOL * (1 + tau * abs(p.c))
    if p.first != 0 and not multiple:
        return [p.first]
    d = None
    if not multiple:
        dsdtau = -1j * p.omega * p.c / q           # -(u^* dM/dtau v) / (u^* dM/ds v), divided by u^* v
        d = _continuation(A, A1, p.omega, tau, dsdtau, scale)
    if d is None:
        entries = local_directions(A, A1, p.omega, tau, scale, p.gap)
        if entries is not None:
            return entries
        warnings.warn(f"crossings: the direction at tau = {tau:.10g}, omega = {p.omega:.10g} is zero to first "
                      "order and the continuation failed; reported as 0", RuntimeWarning, stacklevel=3)
        return [0]
    return [d]


def crossing_frequencies(A, A1, *, method="auto", n_theta=512):
    """The crossing pairs ``(omega, theta)`` of ``x' = A x + A1 x(t - tau)``, sorted by first delay.

    Parameters
    ----------
    A, A1 : array_like ``(n, n)``, real or complex
    method : {"auto", "qep", "sweep"}
        ``"auto"``: the quadratic eigenvalue problem for ``n <= QEP_MAX_N`` (12), else the theta sweep
        (also the fallback when the QEP is singular).
    n_theta : int
        Grid points of the theta sweep on ``[0, 2 pi)``.

    Returns
    -------
    list of CrossingFrequency
        One per distinct pair (a cluster of equal crossings appears once); persistent roots are not
        listed here (see :func:`crossings`).

    Examples
    --------
    >>> from ddesys.matrix.crossings import crossing_frequencies
    >>> [tuple(round(x, 6) for x in p) for p in crossing_frequencies([[0.0]], [[-1.0]])]
    [(1.0, 1.570796, 1)]
    """
    A, A1, scale = _check(A, A1)
    _check_method(method, n_theta)
    pairs, _ = _pairs(A, A1, scale, method, n_theta)
    out = []
    for p in pairs:
        d = _directions(A, A1, p, first_tau(p.omega, p.theta), scale)
        out.append(CrossingFrequency(p.omega, p.theta, int(np.sign(sum(d)))))
    return out


def crossings(A, A1, tau_max, *, method="auto", n_theta=512):
    """Every delay ``tau`` in ``(0, tau_max]`` at which ``x' = A x + A1 x(t - tau)`` has a characteristic
    root on the imaginary axis, sorted by ``tau``.

    A crossing at ``tau_max`` itself is included: every computed delay ``tau <= tau_max (1 + 1e-12)``
    is listed (the delays are computed to about that relative accuracy, so a ``tau_max`` equal to an
    exact crossing delay always includes it).

    Parameters
    ----------
    A, A1 : array_like ``(n, n)``, real or complex
        One delayed matrix (several delays raise ``ValueError``).
    tau_max : float
        End of the delay range, finite and ``> 0``.
    method, n_theta
        As in :func:`crossing_frequencies`.

    Returns
    -------
    list of Crossing
        ``(tau, omega, direction)``; a root of multiplicity ``m`` appears ``m`` times (directions as
        described in :class:`Crossing`). Real systems list ``omega > 0`` only (its conjugate crosses
        with it). Roots on the axis for every delay come first with ``tau = nan`` (and a
        ``RuntimeWarning``).

    Examples
    --------
    >>> from ddesys.matrix.crossings import crossings
    >>> [(round(c.tau, 6), c.omega, c.direction) for c in crossings([[0.0]], [[-1.0]], 10.0)]
    [(1.570796, 1.0, 1), (7.853982, 1.0, 1)]
    """
    A, A1, scale = _check(A, A1)
    if np.ndim(tau_max) != 0 or np.asarray(tau_max).dtype.kind not in "iuf":
        raise TypeError(f"tau_max must be a real number, got {type(tau_max).__name__} {tau_max!r}")
    tau_max = float(tau_max)
    if not np.isfinite(tau_max) or tau_max <= 0:
        raise ValueError(f"tau_max must be a finite delay > 0, got {tau_max}")
    _check_method(method, n_theta)
    pairs, persistent = _pairs(A, A1, scale, method, n_theta)
    total = sum(p.mult * (tau_max * abs(p.omega) / (2 * np.pi) + 1) for p in pairs)
    if total > MAX_CROSSINGS:
        raise ValueError(f"tau_max = {tau_max} gives about {int(total)} crossings (more than {MAX_CROSSINGS}); "
                         "use crossing_frequencies() and tau_k = (theta + 2 pi k) / omega")
    out = [Crossing(float("nan"), float(w), 0) for w in persistent]
    found = []
    limit = tau_max * (1 + TAU_RTOL)
    for p in pairs:
        tau, k = first_tau(p.omega, p.theta), 0
        while tau <= limit:
            found += [Crossing(float(tau), p.omega, d) for d in _directions(A, A1, p, tau, scale)]
            k += 1
            tau = first_tau(p.omega, p.theta) + 2 * np.pi * k / abs(p.omega)
    return out + sorted(found, key=lambda c: (c.tau, c.omega))


def delay_margin(A, A1, *, method="auto", n_theta=512):
    """The smallest destabilizing delay of ``x' = A x + A1 x(t - tau)``, stable at ``tau -> 0+``.

    The system is stable for every ``tau`` in ``[0, delay_margin)`` (``A + A1`` Hurwitz at ``tau = 0``),
    except at isolated delays where a root touches the axis and goes back (``direction = 0`` in
    :func:`crossings`: marginal stability there), and unstable just beyond it. The first crossing of each
    pair is at ``theta / omega`` and its direction holds for all its delays, so no ``tau_max`` is needed.

    Parameters
    ----------
    A, A1 : array_like ``(n, n)``, real or complex
    method, n_theta
        As in :func:`crossing_frequencies`.

    Returns
    -------
    float
        The margin, ``inf`` when no crossing destabilizes the system.

    Raises
    ------
    ValueError
        ``A + A1`` is not Hurwitz (the system is not stable for small delays); the message gives its
        spectral abscissa.

    Examples
    --------
    >>> from ddesys.matrix.crossings import delay_margin
    >>> round(delay_margin([[-2.0, 0.0], [0.0, -0.9]], [[-1.0, 0.0], [-1.0, -1.0]]), 5)
    6.17258
    """
    A, A1, scale = _check(A, A1)
    _check_method(method, n_theta)
    alpha = float(np.max(np.linalg.eigvals(A + A1).real))
    if alpha >= 0:
        raise ValueError(f"delay_margin needs a system stable at tau -> 0+ (A + A1 Hurwitz); the spectral "
                         f"abscissa of A + A1 is {alpha:.6g} >= 0")
    pairs, _ = _pairs(A, A1, scale, method, n_theta)
    firsts = [(first_tau(p.omega, p.theta), sum(_directions(A, A1, p, first_tau(p.omega, p.theta), scale)))
              for p in pairs]
    if firsts and firsts[0][1] < 0:
        warnings.warn("delay_margin: the first crossing of a system stable at tau -> 0+ came out stabilizing, "
                      "which is impossible; the result is not reliable", RuntimeWarning, stacklevel=2)
    return min((t for t, d in firsts if d > 0), default=float("inf"))


__all__ = ["Crossing", "CrossingFrequency", "QEP_MAX_N", "crossing_frequencies", "crossings", "delay_margin",
           "first_tau", "normalize_theta"]
