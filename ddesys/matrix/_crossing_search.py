"""Search and refinement for :mod:`ddesys.matrix.crossings`: starting points from the quadratic eigenvalue
problem or the theta sweep, the roots on the imaginary axis for every delay, and the Newton iterations
in ``(omega, theta)`` and in ``s``.

*QEP* (``n <= QEP_MAX_N``): a pair ``(i omega, z)``, ``|z| = 1``, with ``det(i omega I - A - A1 z) = 0``
makes ``i omega`` a common eigenvalue of ``X = A + A1 z`` and ``Y = -(conj(A) + conj(A1) / z)``; the
Sylvester operator ``P -> X P - P Y`` is then singular, and multiplying by ``z`` gives the quadratic
eigenvalue problem ``det(z^2 I(x)A1 + z (I(x)A + A^H(x)I) + A1^H(x)I) = 0`` of size ``n^2``, linearized
to a generalized eigenproblem of size ``2 n^2``. Its unit-modulus eigenvalues contain every crossing
(and spurious pairs ``lambda, -conj(lambda)`` of ``X``, rejected by the Newton refinement).

*Sweep* (larger ``n`` or a singular QEP): the eigenvalues ``lambda_j(theta)`` of
``A + A1 exp(-i theta)`` are computed on a grid of ``theta`` in ``[0, 2 pi]``, matched from one grid
point to the next (assignment on the distance to the first-order prediction ``lambda + h
dlambda/dtheta``), and each branch's real part is interpolated on each step by
the cubic Hermite polynomial of its values and slopes. A sign change, or a near-zero minimum, of that
cubic gives a starting point ``(omega, theta)`` for the Newton refinement in :mod:`ddesys.matrix.crossings`.
Not a certified search: a branch that crosses and crosses back within one grid step, with a cubic
that misses it, is lost (refine ``n_theta``).
"""
from __future__ import annotations

import numpy as np
import scipy.linalg
from scipy.optimize import linear_sum_assignment

from .charmatrix import char_matrix, char_matrix_ds

UNIT_TOL = 1e-5         # | |z| - 1 | accepted as a unit-modulus QEP eigenvalue (touches: double, ~sqrt(eps))
RES_TOL = 1e-10         # sigma_min(M) / scale accepted as a root after Newton
CAND_TOL = 1e-4         # |Re lambda| / scale for a candidate eigenvalue of A + A1 z before Newton

_T = np.linspace(0.0, 1.0, 17)


def sigma_min(M):
    """Smallest singular value of ``M`` (``inf`` when ``M`` has a non-finite entry: not a root)."""
    M = np.asarray(M)
    if not np.all(np.isfinite(M)):
        return np.inf
    return np.linalg.svd(M, compute_uv=False)[-1]


_Z_TEST = (0.61 + 0.27j, -0.43 + 1.13j)      # generic points (off the unit circle) for the regularity test


def qep_candidates(A, A1, scale):
    """Unit-modulus eigenvalues of the QEP ``z^2 (I(x)A1) + z (I(x)A + A^H(x)I) + A1^H(x)I``, as
    ``(omega0, theta0)`` starting points; ``None`` when the QEP is singular."""
    n = A.shape[0]
    In = np.eye(n)
    A, A1 = A / scale, A1 / scale
    for z in _Z_TEST:     # P(z) / z = I (x) X + W^T (x) I has the eigenvalues lam_i(X) + mu_j(W)
        lx = np.linalg.eigvals(A + A1 * z)
        lw = np.linalg.eigvals(A.conj() + A1.conj() / z)
        if np.min(np.abs(lx[:, None] + lw[None, :])) > 1e-10 * (1 + 1 / abs(z)):
            break
    else:
        return None                                     # det P(z) == 0 identically: singular problem
    K2 = np.kron(In, A1)
    K1 = np.kron(In, A) + np.kron(A.conj().T, In)
    K0 = np.kron(A1.conj().T, In)
    N = n * n
    Z, I = np.zeros((N, N)), np.eye(N)
    L = np.block([[-K1, -K0], [I, Z]])
    R = np.block([[K2, Z], [Z, I]])
    al, be = scipy.linalg.eig(L, R, right=False, homogeneous_eigvals=True)
    unit = np.abs(np.abs(al) - np.abs(be)) <= UNIT_TOL * np.maximum(np.abs(al), np.abs(be))
    unit &= np.abs(be) > 0
    cands = []
    for z in al[unit] / be[unit]:
        z = z / abs(z)
        lam = np.linalg.eigvals(A + A1 * z) * scale
        for l in lam[np.abs(lam.real) <= CAND_TOL * scale]:
            cands.append((l.imag, -np.angle(z)))
    return cands


def persistent_frequencies(A, A1, scale):
    """Frequencies ``omega`` with a root at ``i omega`` for every delay: ``omega = 0`` when ``A + A1`` is
    singular; ``omega != 0`` when ``i omega`` is an eigenvalue of ``A + A1 z`` for every ``z``."""
    out = [0.0] if sigma_min(A + A1) <= 1e-12 * scale else []
    zs = np.exp(-1j * np.array([0.7, 2.3, 4.1]))
    lam = np.linalg.eigvals(A + A1 * zs[0])
    for l in lam[np.abs(lam.real) <= 1e-9 * scale]:
        w = float(l.imag)
        if abs(w) > 1e-12 * scale and all(
                sigma_min(1j * w * np.eye(len(A)) - A - A1 * z) <= 1e-9 * (abs(w) + scale) for z in zs[1:]):
            if not any(abs(w - v) <= 1e-8 * scale for v in out):
                out.append(w)
    return out


def _eig_slopes_fast(A, A1, z):
    """As :func:`eig_with_slopes` for the sweep: left eigenvectors as the rows of ``V^-1``."""
    lam, vr = np.linalg.eig(A + A1 * z)
    try:
        c = np.diagonal(np.linalg.solve(vr, (A1 * z) @ vr))
    except np.linalg.LinAlgError:
        return eig_with_slopes(A, A1, z)
    c = np.where(np.isfinite(c), c, 0)
    return lam, -1j * c, c


def eig_with_slopes(A, A1, z):
    """Eigenvalues ``lam`` of ``A + A1 z`` (``z = exp(-i theta)``), their slopes ``dlam/dtheta`` and
    ``c = u^* A1 z v / u^* v`` (``dlam/dtheta = -i c``; ``u, v`` left and right eigenvectors)."""
    lam, vl, vr = scipy.linalg.eig(A + A1 * z, left=True, right=True)
    num = np.einsum("ij,ij->j", vl.conj(), (A1 * z) @ vr)
    den = np.einsum("ij,ij->j", vl.conj(), vr)
    with np.errstate(divide="ignore", invalid="ignore"):
        c = np.where(np.abs(den) > 0, num / np.where(den == 0, 1, den), 0)
    c = np.where(np.isfinite(c), c, 0)
    return lam, -1j * c, c


def sweep_candidates(A, A1, n_theta, scale, persistent=()):
    """Starting points ``(omega0, theta0)`` from a sweep of ``n_theta`` steps over ``[0, 2 pi]``.

    Branches that stay within ``1e-8 scale`` of a persistent root ``i omega_p`` are skipped.
    """
    h = 2 * np.pi / n_theta
    lam0, sl0, _ = _eig_slopes_fast(A, A1, 1.0 + 0j)
    first = (lam0, sl0, None)
    cands = []
    pers = np.asarray(list(persistent), dtype=float)
    for j in range(1, n_theta + 1):
        lam1, sl1, _ = first if j == n_theta else _eig_slopes_fast(A, A1, np.exp(-1j * j * h))
        pred = lam0 + h * sl0
        _, col = linear_sum_assignment(np.abs(pred[:, None] - lam1[None, :]))
        lam1, sl1 = lam1[col], sl1[col]
        f0, f1 = lam0.real, lam1.real
        g0, g1 = h * sl0.real, h * sl1.real
        c2 = -3 * f0 - 2 * g0 + 3 * f1 - g1
        c3 = 2 * f0 + g0 - 2 * f1 + g1
        T = _T[None, :]
        P = f0[:, None] + g0[:, None] * T + c2[:, None] * T ** 2 + c3[:, None] * T ** 3   # (n, 17)
        sign_change = np.any(np.signbit(P[:, 1:]) != np.signbit(P[:, :-1]), axis=1)
        small = np.min(np.abs(P), axis=1) <= 1e-6 * scale
        for i in np.flatnonzero(sign_change | small):
            if pers.size and np.min(np.abs(lam0[i] - 1j * pers)) <= 1e-8 * scale \
                    and np.min(np.abs(lam1[i] - 1j * pers)) <= 1e-8 * scale:
                continue
            p = P[i]
            ks = np.flatnonzero(np.signbit(p[1:]) != np.signbit(p[:-1]))
            ts = [_T[k] - p[k] * (_T[k + 1] - _T[k]) / (p[k + 1] - p[k]) for k in ks] if ks.size \
                else [_T[int(np.argmin(np.abs(p)))]]
            for t in ts:
                lam_t = lam0[i] + t * (lam1[i] - lam0[i])
                cands.append((float(lam_t.imag), float((j - 1 + t) * h)))
        lam0, sl0 = lam1, sl1
    return cands


def newton_pair(A, A1, w, th, scale, maxit=60):
    """Newton in the real unknowns ``(omega, theta)`` on ``det(i omega I - A - A1 e^{-i theta}) = 0``.

    The step solves ``[a b] [dw dth]^T = -1`` (real and imaginary parts) with the log-derivatives of
    Jacobi's formula ``a = tr(M^-1 dM/dw)``, ``b = tr(M^-1 dM/dth)``; least squares where the 2x2
    Jacobian is singular (touches). Returns ``(omega, theta, ok)``.
    """
    n = A.shape[0]
    eye = np.eye(n)
    prev = np.inf
    for _ in range(maxit):
        E = A1 * np.exp(-1j * th)
        M = 1j * w * eye - A - E
        try:
            X = np.linalg.solve(M, np.hstack([eye, E]))
        except np.linalg.LinAlgError:            # exactly singular: a root
            break
        a, b = 1j * np.trace(X[:, :n]), 1j * np.trace(X[:, n:])
        J = np.array([[a.real, b.real], [a.imag, b.imag]])
        if not np.all(np.isfinite(J)):
            break
        dw, dth = np.linalg.lstsq(J, np.array([-1.0, 0.0]), rcond=1e-12)[0]
        big = max(abs(dw) / (0.5 * scale), abs(dth) / 0.5, 1.0)    # no jumps beyond the basin
        w, th = w + dw / big, th + dth / big
        step = abs(dw) / scale + abs(dth) / max(1.0, abs(th))
        if step <= 1e-15 or (step <= 1e-12 and step >= 0.5 * prev):      # converged, or stagnating at rounding
            break
        prev = step
    M = 1j * w * eye - A - A1 * np.exp(-1j * th)
    ok = bool(np.isfinite(w) and np.isfinite(th) and sigma_min(M) <= RES_TOL * (abs(w) + scale))
    return float(w), float(th), ok


EXP_MAX = 700.0         # |Re(s) tau| beyond this: exp(-s tau) over- or underflows in float64


def _in_range(s, tau):
    """``s`` finite and ``exp(-s tau)`` representable (the source of non-finite characteristic matrices)."""
    return bool(np.isfinite(s) and abs(s.real) * tau <= EXP_MAX)


def newton_s(A, Ad, tau, s, scale, maxit=50):
    """Newton on ``det M(s) = 0`` at the delay ``tau`` (step ``-1 / tr(M^-1 dM/ds)``).

    Returns ``(s, ok)``; ``ok`` is False (and no matrix is formed) when ``s`` leaves the range where
    ``M(s)`` is finite.
    """
    t = np.array([tau])
    s = complex(s)
    if not _in_range(s, tau):
        return s, False
    for _ in range(maxit):
        M = char_matrix(A, Ad, t, s)
        try:
            g = np.trace(np.linalg.solve(M, char_matrix_ds(A, Ad, t, s)))
        except np.linalg.LinAlgError:
            break
        if not np.isfinite(g) or g == 0:
            break
        ds = -1.0 / g
        if not _in_range(s + ds, tau):
            return s + ds, False
        s = s + ds
        if abs(ds) <= 1e-15 * (abs(s) + scale):
            break
    ok = sigma_min(char_matrix(A, Ad, t, s)) <= RES_TOL * (abs(s) + scale)
    return s, bool(ok)


def local_roots(A, Ad, tau, center, r, scale, polish=True, n=256):
    """The roots of ``det M(s)`` (delay ``tau``) in the disk ``|s - center| < r``, with multiplicity.

    The count and the power sums of ``s - center`` are the contour moments: the integrals of ``(s -
    center)^k tr(M^-1 dM/ds) / (2 pi i)`` around the circle (trapezoidal rule on ``n`` points,
    exponentially accurate for roots well inside). Newton's identities give the polynomial whose roots
    are the offsets, each then polished by :func:`newton_s` when ``polish``.

    Returns
    -------
    complex ndarray ``(m,)`` or None
        None when the count is not an integer to ``1e-6`` (a root near the circle), exceeds 8, or a
        polish fails.
    """
    if not _in_range(complex(center) + r, tau) or not _in_range(complex(center) - r, tau):
        return None
    t = np.array([tau])
    e = r * np.exp(2j * np.pi * np.arange(n) / n)
    s = center + e
    try:
        h = np.trace(np.linalg.solve(char_matrix(A, Ad, t, s), char_matrix_ds(A, Ad, t, s)), axis1=-2, axis2=-1)
    except np.linalg.LinAlgError:
        return None
    if not np.all(np.isfinite(h)):
        return None
    u = e / r
    mu0 = np.mean(e * h)
    m = round(mu0.real)
    if abs(mu0 - m) > 1e-6 or not 0 <= m <= 8:
        return None
    if m == 0:
        return np.zeros(0, complex)
    p = [np.mean(e * u ** k * h) for k in range(1, m + 1)]       # power sums of (s - center) / r
    el = [1.0 + 0j]
    for k in range(1, m + 1):                                    # Newton's identities
        el.append(sum((-1) ** (i - 1) * el[k - i] * p[i - 1] for i in range(1, k + 1)) / k)
    roots = center + r * np.roots([(-1) ** k * el[k] for k in range(m + 1)])
    if not polish:
        return roots
    out = []
    for z in roots:
        zp, ok = newton_s(A, Ad, tau, z, scale)
        if not ok or abs(zp - z) > 0.1 * r:
            return None
        out.append(zp)
    return np.array(out)


def local_directions(A, A1, w, tau, scale, gap):
    """Directions of the root(s) at ``i omega`` for the delay ``tau`` from the roots nearby at ``tau -+
    delta``: the multiplicity ``m`` is the number of roots at ``i omega`` (:func:`local_roots` on a disk
    that holds no other root), ``net`` the number in ``Re s > 0`` just after minus just before.

    Parameters
    ----------
    A, A1 : ``(n, n)``
    w, tau : float
        The crossing ``i omega`` and its delay.
    scale : float
    gap : float
        Distance from ``i omega`` to the other eigenvalues of ``A + A1 exp(-i omega tau)`` (``inf`` if none).

    Returns
    -------
    list of int or None
        ``m`` entries: ``|net|`` times ``sign(net)``, then zeros; None when undecided.
    """
    Ad = A1[None]
    r = 0.25 * min(gap, 1.0 / tau, abs(w))
    for _ in range(4):                      # a disk around i omega holding the root(s) at i omega only
        at = local_roots(A, Ad, tau, 1j * w, r, scale, polish=False)
        if at is not None and at.size and np.all(np.abs(at - 1j * w) <= 0.05 * r):
            break
        r /= 8
    else:
        return None
    m, delta = at.size, 1e-4 * tau
    for _ in range(4):                      # delta small enough that the m roots stay well inside
        sides = [local_roots(A, Ad, tau + sg * delta, 1j * w, r, scale) for sg in (-1.0, 1.0)]
        if all(x is not None and x.size == m and np.all(np.abs(x - 1j * w) <= 0.5 * r) for x in sides):
            break
        delta /= 100
    else:
        return None
    if any(np.any(np.abs(x.real) <= 1e-13 * (abs(w) + scale)) for x in sides):
        return None                         # a root on the axis beside tau: undecided
    net = int(np.sum(sides[1].real > 0)) - int(np.sum(sides[0].real > 0))
    k = min(abs(net), m)
    return [int(np.sign(net))] * k + [0] * (m - k)


def sign_min(F):
    """``prod_i sign(F_i) * min_i |F_i|`` over the last axis: continuous where the ``F_i`` are (a symmetric
    function of them), zero exactly where one of them is, and of the opposite sign across a simple zero."""
    F = np.asarray(F, float)
    return np.prod(np.sign(F), axis=-1) * np.min(np.abs(F), axis=-1)


def axis_roots_1d(G, grid, refine):
    """The zeros of the continuous function ``G`` (values ``G(grid)`` given): sign changes on the grid
    (a value that is exactly zero is a zero itself), each refined by Brent's method with ``refine`` (the
    scalar function). Zeros that come in pairs within one grid step are missed (refine the grid)."""
    from scipy.optimize import brentq

    Gv = np.asarray(G, float)
    out = [float(grid[i]) for i in np.flatnonzero(Gv == 0)]
    idx = np.flatnonzero(np.sign(Gv[:-1]) * np.sign(Gv[1:]) < 0)
    for i in idx:
        out.append(brentq(refine, grid[i], grid[i + 1], xtol=1e-15 * max(abs(grid[i + 1]), 1e-300),
                          rtol=4 * np.finfo(float).eps))
    return sorted(out)


def sweep_values(fun, grid, batch=2048):
    """``fun`` (vectorised over a batch of grid points) on ``grid`` in batches."""
    return np.concatenate([fun(grid[i:i + batch]) for i in range(0, grid.size, batch)]) if grid.size \
        else np.zeros(0)


__all__ = ["axis_roots_1d", "eig_with_slopes", "local_directions", "local_roots", "newton_pair", "newton_s",
           "persistent_frequencies", "qep_candidates", "sigma_min", "sign_min", "sweep_candidates", "sweep_values"]
