"""Delay margins of systems with several delays (``x' = A x + sum_k Ad_k x(t - tau_k)``): per delay (the
others fixed) and along a direction (every delay scaled together), by frequency sweeps of the unit-circle
crossings; the one-delay margin is :func:`ddesys.matrix.crossings.delay_margin`."""
from __future__ import annotations

import warnings

import numpy as np

from ._crossing_search import axis_roots_1d, sigma_min, sign_min, sweep_values
from .charmatrix import check_statespace
from .crossings import TAU_RTOL, first_tau, normalize_theta

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
        th = normalize_theta(w, -np.angle(1.0 / mu[i]))
        t = first_tau(w, th)
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

    >>> from ddesys.matrix.delay_margins import delay_margins
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


__all__ = ["delay_margins"]
