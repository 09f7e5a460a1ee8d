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

from ._crossing_search import (RES_TOL, axis_roots_1d, eig_with_slopes, local_directions, newton_pair, newton_s,
                               persistent_frequencies, qep_candidates, sigma_min, sign_min, sweep_candidates,
                               sweep_values)
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


def _normalize_theta(w, th):
    th = float(np.mod(th, 2 * np.pi))
    if min(th, 2 * np.pi - th) <= 1e-14:
        th = 0.0
    return th if w > 0 or th == 0.0 else th - 2 * np.pi


def _first_tau(w, th):
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
        return l1.imag, _normalize_theta(l1.imag, t1), c1
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
        th = _normalize_theta(w, th)
        dup = any(abs(w - p.omega) <= 1e-7 * scale and
                  min(abs(th - p.theta), 2 * np.pi - abs(th - p.theta)) <= 1e-6 for p in pairs)
        if not dup:
            pairs.append(_analyse(A, A1, w, th, scale))
    pairs.sort(key=lambda p: (_first_tau(p.omega, p.theta), p.omega))
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
        d = _directions(A, A1, p, _first_tau(p.omega, p.theta), scale)
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
        tau, k = _first_tau(p.omega, p.theta), 0
        while tau <= limit:
            found += [Crossing(float(tau), p.omega, d) for d in _directions(A, A1, p, tau, scale)]
            k += 1
            tau = _first_tau(p.omega, p.theta) + 2 * np.pi * k / abs(p.omega)
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
    firsts = [(_first_tau(p.omega, p.theta), sum(_directions(A, A1, p, _first_tau(p.omega, p.theta), scale)))
              for p in pairs]
    if firsts and firsts[0][1] < 0:
        warnings.warn("delay_margin: the first crossing of a system stable at tau -> 0+ came out stabilizing, "
                      "which is impossible; the result is not reliable", RuntimeWarning, stacklevel=2)
    return min((t for t, d in firsts if d > 0), default=float("inf"))


MD_MAX_POINTS = 400_000     # grid points of one several-delay sweep, at most
MD_DEN = 1000               # largest denominator of a direction's ratios taken as commensurate


def _md_check(A, Ad, tau):
    data = check_statespace(A, Ad, tau)
    A, Ad, tau = data.A, data.Ad, np.asarray(data.tau, float)
    if np.iscomplexobj(A) and not np.any(A.imag) and not np.any(Ad.imag):
        A, Ad = A.real.copy(), Ad.real.copy()
    W = float(np.linalg.norm(A, 2) + sum(np.linalg.norm(M, 2) for M in Ad)) or 1.0
    return A, Ad, tau, W


def _stable(A, Ad, tau):
    """Stability of ``x' = A x + sum Ad_j x(t - tau_j)``; delays equal to 0 are merged into ``A``."""
    from .roots import is_stable

    on = tau > 0
    A0 = A + Ad[~on].sum(axis=0)
    if not np.any(on):
        return bool(np.max(np.linalg.eigvals(A0).real) < 0)
    return bool(is_stable(A0, Ad[on], tau[on]))


def _direction_sign(M, dMs, dMp):
    """``sign Re ds/dp`` at a simple root ``s = i omega`` of ``det M(s, p)``: ``ds/dp = -(u^* dM/dp v) /
    (u^* dM/ds v)`` with ``u, v`` the singular vectors of the smallest singular value; 0 (a touch) when
    the real part is below ``1e-9`` of the modulus."""
    U, _, Vh = np.linalg.svd(M)
    u, v = U[:, -1], Vh[-1].conj()
    den = u.conj() @ dMs @ v
    if den == 0:
        return 0
    ds = -(u.conj() @ dMp @ v) / den
    return 0 if abs(ds.real) <= 1e-9 * abs(ds) else int(np.sign(ds.real))


def _margin_from(pairs, what):
    """The smallest parameter of the destabilizing pairs ``(p, direction)``; a warning when a stabilizing
    one comes first (impossible from a stable start)."""
    pos = [p for p, d in pairs if d > 0]
    best = min(pos, default=float("inf"))
    if any(d < 0 and p < best for p, d in pairs):
        warnings.warn(f"delay_margins: a stabilizing crossing comes before the first destabilizing one in {what}, "
                      "which is impossible from a stable start; the result is not reliable", RuntimeWarning,
                      stacklevel=3)
    return best


def _margin_one_delay(A, Ad, tau, k, W):
    """Smallest ``tau_k`` at which stability is lost, the other delays fixed.

    For ``s = i omega``, ``det(i omega I - A(omega) - Ad_k z) = 0`` with ``A(omega) = A + sum_{j != k} Ad_j
    e^{-i omega tau_j}`` holds when ``1 / z`` is an eigenvalue ``mu`` of ``(i omega I - A(omega))^-1 Ad_k``;
    a crossing needs ``|z| = 1``, hence ``|omega| <= W`` (the sum of the norms). ``prod sign(1 - |mu_i|)
    min |1 - |mu_i||`` changes sign at each such ``omega``; the delays are ``tau_k = (theta + 2 pi m) /
    omega``, ``z = e^{-i theta}``, and the direction of a root's crossing is the same for every ``m``.
    """
    n = A.shape[0]
    others = [j for j in range(len(tau)) if j != k]
    Ak = Ad[k]
    tmax = max([tau[j] for j in others], default=0.0)
    step = min(W / 4000, np.pi / 32 / tmax) if tmax > 0 else W / 4000
    grid = np.union1d(np.logspace(np.log10(W) - 8, np.log10(W), 2000), np.arange(step, W + step, step))
    if grid.size > MD_MAX_POINTS:
        raise ValueError(f"delay_margins: the frequency sweep needs {grid.size} points (more than {MD_MAX_POINTS})")
    real = not np.iscomplexobj(A) and not np.iscomplexobj(Ad)
    grid = grid if real else np.concatenate([-grid[::-1], grid])
    eye = np.eye(n)

    def Aw(w):
        w = np.atleast_1d(w)
        M = 1j * w[:, None, None] * eye - A
        for j in others:
            M = M - np.exp(-1j * w * tau[j])[:, None, None] * Ad[j]
        return M

    def G(w):
        M = Aw(w)
        try:
            X = np.linalg.solve(M, np.broadcast_to(Ak, M.shape))
        except np.linalg.LinAlgError:
            X = np.array([np.linalg.lstsq(m, Ak, rcond=None)[0] for m in M])
        return sign_min(1.0 - np.abs(np.linalg.eigvals(X)))

    pairs = []
    for w in axis_roots_1d(sweep_values(G, grid), grid, lambda w: float(G(w)[0])):
        M = Aw(w)[0]
        mu = np.linalg.eigvals(np.linalg.solve(M, Ak))
        i = int(np.argmin(np.abs(1.0 - np.abs(mu))))
        if not abs(mu[i]) > 0:
            continue
        th = _normalize_theta(w, -np.angle(1.0 / mu[i]))
        t = _first_tau(w, th)
        z = np.exp(-1j * w * t)
        Mk = M - Ak * z
        if sigma_min(Mk) > 1e-8 * (abs(w) + W):
            continue
        s = 1j * w
        dMs = eye + sum(tau[j] * Ad[j] * np.exp(-s * tau[j]) for j in others) + t * Ak * z
        pairs.append((t, _direction_sign(Mk, dMs, s * Ak * z)))
    return _margin_from(pairs, f"delay {k}")


def _commensurate(d):
    """``(c, p)`` with ``d = c p``, ``p`` integers, when the ratios of ``d`` are rationals with denominators up
    to ``MD_DEN`` (to ``1e-12``); ``None`` otherwise."""
    from fractions import Fraction
    from math import lcm

    top = float(d.max())
    fr = [Fraction(float(x) / top).limit_denominator(MD_DEN) for x in d]
    if any(abs(float(f) - x / top) > 1e-12 * (x / top) for f, x in zip(fr, d) if x > 0):
        return None
    L = lcm(*(f.denominator for f in fr))
    return top / L, np.array([int(f * L) for f in fr])


def _margin_direction(A, Ad, d, W, t_max):
    """Smallest ``t`` such that ``tau = t d`` destabilizes the system.

    With ``phi = omega t``, ``s = i omega`` is a root when ``i omega`` is an eigenvalue of ``B(phi) = A + sum_j
    Ad_j e^{-i phi d_j}``; ``prod sign(Re lambda_i) min |Re lambda_i|`` over its eigenvalues changes sign
    at each crossing ``phi``, and ``t = phi / omega``. Commensurate ``d = c p`` makes ``B`` periodic in
    ``phi`` (period ``2 pi / c``): one period holds every crossing family ``t = (phi + 2 pi m / c) / omega``,
    whose direction is the same for every ``m``. Otherwise the sweep runs to ``phi = t_max W``.
    """
    n = A.shape[0]
    com = _commensurate(d)
    if com is not None:
        c, p = com
        phi_end = 2 * np.pi / c
    elif t_max is None:
        raise ValueError("delay_margins: the direction's ratios are not commensurate (rationals with denominators "
                         f"up to {MD_DEN}); give t_max, the end of the search")
    else:
        phi_end = float(t_max) * W
    h = np.pi / 32 / float(d.max())
    npts = int(np.ceil(phi_end / h)) + 1
    if npts > MD_MAX_POINTS:
        raise ValueError(f"delay_margins: the phase sweep needs {npts} points (more than {MD_MAX_POINTS}); "
                         "give a smaller t_max or a direction with smaller integer ratios")
    grid = np.linspace(0.0, phi_end, npts)[1:]
    real = not np.iscomplexobj(A) and not np.iscomplexobj(Ad)
    grid = grid if real else np.concatenate([-grid[::-1], grid])

    def B(phi):
        phi = np.atleast_1d(phi)
        return A + np.einsum("fj,jab->fab", np.exp(-1j * np.multiply.outer(phi, d)), Ad)

    def G(phi):
        return sign_min(np.linalg.eigvals(B(phi)).real)

    pairs = []
    eye = np.eye(n)
    for phi in axis_roots_1d(sweep_values(G, grid), grid, lambda x: float(G(x)[0])):
        lam = np.linalg.eigvals(B(phi)[0])
        i = int(np.argmin(np.abs(lam.real)))
        w = float(lam[i].imag)
        if w == 0 or phi / w <= 0:
            continue
        t, s = phi / w, 1j * w
        E = np.exp(-s * t * d)
        M = s * eye - A - np.einsum("j,jab->ab", E, Ad)
        if sigma_min(M) > 1e-8 * (abs(w) + W):
            continue
        dMs = eye + np.einsum("j,jab->ab", t * d * E, Ad)
        dMt = np.einsum("j,jab->ab", s * d * E, Ad)
        if t_max is None or t <= t_max * (1 + TAU_RTOL):
            pairs.append((t, _direction_sign(M, dMs, dMt)))
    return _margin_from(pairs, "the direction")


def delay_margins(A, Ad, tau, *, which=None, direction=None, t_max=None):
    """Delay margins of ``x' = A x + sum_j Ad_j x(t - tau_j)`` with several delays.

    Two questions, one per keyword:

    * ``which=k`` (per delay): the smallest value of ``tau_k`` at which the system loses stability, the
      other delays fixed at ``tau``; the system must be stable at ``tau_k = 0`` (others fixed). It is then
      stable for every ``tau_k`` in ``[0, margin)``. ``which=None`` and no ``direction``: the list of these
      margins, one per delay.
    * ``direction=d`` (all delays scaled together, ``tau = t d``, ``d >= 0``): the smallest ``t > 0`` at
      which the system loses stability; it needs ``A + sum Ad_j`` Hurwitz (stability for ``t -> 0+``).
      ``direction=tau`` gives the factor by which all the system's delays can be stretched: stable for
      ``t < margin``.

    Each is a sweep in one real parameter of an eigenvalue problem (frequency, or phase ``omega t``),
    with the crossings refined by Brent's method and their directions from ``ds/dp`` (a touch that does
    not cross is not counted). For a commensurate direction (ratios rational with denominators up to
    1000) one period of the phase holds every crossing; otherwise the search ends at ``t_max``. Not a
    certified search: two crossings within one grid step can be missed.

    Parameters
    ----------
    A : array_like ``(n, n)``
    Ad : array_like ``(K, n, n)``
    tau : array_like ``(K,)``
        The delays (the fixed ones for ``which``; ignored with ``direction``).
    which : int, optional
        Index of the delay that varies.
    direction : array_like ``(K,)``, optional
        Non-negative, not all zero.
    t_max : float, optional
        End of the search along an incommensurate ``direction`` (required there); ``inf`` is returned
        when no destabilizing crossing has ``t <= t_max``.

    Returns
    -------
    float or list of float
        The margin (``inf`` when no crossing destabilizes the system); a list for every delay when
        neither ``which`` nor ``direction`` is given.

    Raises
    ------
    ValueError
        An unstable start (``tau_k = 0``, or ``t -> 0+``), both ``which`` and ``direction``, a bad index or
        direction, an incommensurate direction without ``t_max``, a sweep over ``MD_MAX_POINTS`` points.

    Examples
    --------
    ``x' = -x(t - tau_1) - x(t - tau_2)``: along ``tau = t (1, 1)`` it is ``x' = -2 x(t - t)``, margin ``pi / 4``;
    ``x' = -2 x - x(t - tau_1) - x(t - tau_2) / 2`` is stable for all delays (``2 > 1 + 1/2``):

    >>> from ddesys.matrix.crossings import delay_margins
    >>> round(delay_margins([[0.0]], [[[-1.0]], [[-1.0]]], [1.0, 1.0], direction=[1.0, 1.0]), 10)
    0.7853981634
    >>> delay_margins([[-2.0]], [[[-1.0]], [[-0.5]]], [1.0, 3.0], which=0)
    inf
    """
    A, Ad, tau, W = _md_check(A, Ad, tau)
    K = len(tau)
    if which is not None and direction is not None:
        raise ValueError("delay_margins: give which (one delay varies) or direction (all scale), not both")
    if direction is not None:
        d = np.asarray(direction, float).reshape(-1)
        if d.size != K or not np.all(np.isfinite(d)) or np.any(d < 0) or not np.any(d > 0):
            raise ValueError(f"direction must hold {K} finite delays >= 0, not all zero; got {direction!r}")
        alpha = float(np.max(np.linalg.eigvals(A + Ad.sum(axis=0)).real))
        if alpha >= 0:
            raise ValueError("delay_margins needs a system stable for t -> 0+ (A + sum Ad_j Hurwitz); the spectral "
                             f"abscissa of A + sum Ad_j is {alpha:.6g} >= 0")
        if t_max is not None and not (np.isfinite(t_max) and t_max > 0):
            raise ValueError(f"t_max must be a finite number > 0, got {t_max!r}")
        return _margin_direction(A, Ad, d, W, t_max)
    ks = range(K) if which is None else [which]
    out = []
    for k in ks:
        if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or not 0 <= k < K:
            raise ValueError(f"which must be a delay index in [0, {K}), got {k!r}")
        tz = tau.copy()
        tz[k] = 0.0
        if not _stable(A, Ad, tz):
            raise ValueError(f"delay_margins: the system is not stable with delay {k} set to 0 (the others "
                             "fixed); the margin of that delay is not defined")
        out.append(float("inf") if not np.any(Ad[k]) else _margin_one_delay(A, Ad, tau, k, W))
    return out if which is None else out[0]


__all__ = ["Crossing", "CrossingFrequency", "QEP_MAX_N", "crossing_frequencies", "crossings", "delay_margin",
           "delay_margins"]
