"""Characteristic roots of a neutral system right of its essential spectrum (private helpers of
:mod:`ddesys.matrix.neutral`).

``M(s) = s (I - sum_k H_k e^{-s tau_k}) - A - sum_k Ad_k e^{-s tau_k}``. In a half-plane ``Re s >= re_min``
with ``re_min > c_D`` there are finitely many roots, inside ``|s| <= R / m`` where ``R = ||A||_2 + sum_k
||Ad_k||_2 e^{-re_min tau_k}`` and ``m`` is a certified lower bound of ``sigma_min(D(s))`` on the half-plane
(at a root, ``|s| sigma_min(D(s)) <= ||(A + sum_k Ad_k e^{-s tau_k}) v|| <= R``). ``m`` is a minimum over
the circle ``|z| = e^{-re_min h}`` (commensurate delays, ``z = e^{-s h}``) or over the torus of radii
``e^{-re_min tau_k}`` (otherwise, valid for ``re_min > C_D``): ``log ||D^{-1}||`` is plurisubharmonic, so
its maximum over the polydisk of values of ``e^{-s tau}`` lies on that circle or torus.

The roots in the box are found by recursive bisection: the argument principle counts the zeros of
``det M`` in each rectangle (the phase of ``det M`` resolved on every arc, checked against the trapezoid
rule for ``(log det M)' = trace(M^{-1} M')``), and a rectangle holding one root hands it to Newton's
method on ``det M``.
"""
from __future__ import annotations

import numpy as np

from ._neutral_difference import sigma_min_min
from ._neutral_types import RegionTooClose

__all__ = ["find_roots", "neutral_char_matrix", "neutral_char_matrix_ds", "relative_residual", "root_box"]

ARG_STEP = np.pi / 4
TRAP_TOL = 0.2
EVAL_POINTS = 2 ** 14


def neutral_char_matrix(A, Ad, H, tau, s):
    """``M(s) = s (I - sum_k H_k e^{-s tau_k}) - A - sum_k Ad_k e^{-s tau_k}``: ``(..., n, n)``."""
    s = np.asarray(s, dtype=np.complex128)
    E = np.exp(-s[..., None] * tau)
    n = A.shape[0]
    Dm = np.eye(n) - np.einsum("...k,kij->...ij", E, H)
    return s[..., None, None] * Dm - A - np.einsum("...k,kij->...ij", E, Ad)


def neutral_char_matrix_ds(A, Ad, H, tau, s):
    """``M'(s) = I - sum_k H_k e^{-s tau_k} + sum_k tau_k e^{-s tau_k} (s H_k + Ad_k)``."""
    s = np.asarray(s, dtype=np.complex128)
    E = np.exp(-s[..., None] * tau)
    n = A.shape[0]
    return (np.eye(n) - np.einsum("...k,kij->...ij", E, H)
            + np.einsum("...k,kij->...ij", E * tau * s[..., None], H)
            + np.einsum("...k,kij->...ij", E * tau, Ad))


def relative_residual(A, Ad, H, tau, s):
    """``sigma_min(M(s)) / (|s| (1 + sum_k ||H_k|| |e^{-s tau_k}|) + ||A|| + sum_k ||Ad_k|| |e^{-s tau_k}|)``."""
    s = np.asarray(s, dtype=np.complex128)
    E = np.abs(np.exp(-s[..., None] * tau))
    nH = np.array([np.linalg.norm(m, 2) for m in H])
    nAd = np.array([np.linalg.norm(m, 2) for m in Ad])
    scale = np.abs(s) * (1 + E @ nH) + np.linalg.norm(A, 2) + E @ nAd
    sv = np.linalg.svd(neutral_char_matrix(A, Ad, H, tau, s), compute_uv=False)
    return sv[..., -1] / scale


def root_box(A, Ad, H, tau, re_min, commensurate):
    """``(box, m)``: every root with ``Re s >= re_min`` lies in ``box = (x0, x1, y0, y1)`` (``None`` when
    none can); ``m`` the certified lower bound of ``sigma_min(D(s))`` used.

    Parameters
    ----------
    commensurate : tuple ``(h, n)`` or None
        The base delay and the integer multiples; ``None``: the torus bound (needs ``re_min > C_D``).
    """
    active = np.array([np.any(h != 0) for h in H])
    if not active.any():
        m = 1.0
    else:
        Ha, ta = H[active], tau[active]
        if commensurate is not None:
            h, nk = commensurate
            radii = np.exp(-re_min * nk[active] * h)
            P = nk[active].astype(float)[:, None]
        else:
            radii = np.exp(-re_min * ta)
            P = np.eye(Ha.shape[0])
        m, _ = sigma_min_min(Ha, radii, P, rtol=0.5, atol=0.0, max_evals=400_000)
        if not m > 0:
            raise RegionTooClose(f"re_min = {re_min:.6g} is too close to the essential spectrum: no positive "
                             "lower bound of sigma_min(I - sum_k H_k e^{-s tau_k}) on Re s >= re_min could be "
                             "certified; raise re_min")
    R = np.linalg.norm(A, 2) + float(np.exp(-re_min * tau) @ np.array([np.linalg.norm(x, 2) for x in Ad]))
    rad = R / m * (1 + 1e-8) + 1e-12
    if re_min > rad:
        return None, m
    pad = 0.02 * rad + 1e-6
    return (float(re_min), float(rad + pad), float(-rad - pad), float(rad + pad)), m


def _evaluate(sysd, s):
    """``log |det M|``, the phase factor of ``det M`` and ``(log det M)' = trace(M^{-1} M')``."""
    out = [np.empty(s.shape), np.empty(s.shape, complex), np.empty(s.shape, complex)]
    for i in range(0, s.size, EVAL_POINTS):
        z = s[i:i + EVAL_POINTS]
        with np.errstate(all="ignore"):
            M = neutral_char_matrix(*sysd, z)
            sign, logabs = np.linalg.slogdet(M)
            g = np.full(z.shape, np.nan + 0j)
            good = (sign != 0) & np.isfinite(logabs)
            if good.any():
                try:
                    g[good] = np.trace(np.linalg.solve(M[good], neutral_char_matrix_ds(*sysd, z[good])),
                                       axis1=-2, axis2=-1)
                except np.linalg.LinAlgError:
                    pass
        out[0][i:i + EVAL_POINTS], out[1][i:i + EVAL_POINTS], out[2][i:i + EVAL_POINTS] = logabs, sign, g
    return out


def _rect_points(rect, t):
    x0, x1, y0, y1 = rect
    w, h = x1 - x0, y1 - y0
    u = np.asarray(t) * 2 * (w + h)
    x = np.select([u < w, u < w + h, u < 2 * w + h], [x0 + u, x1, x1 - (u - w - h)], x0)
    y = np.select([u < w, u < w + h, u < 2 * w + h], [y0, y0 + (u - w), y1], y1 - (u - 2 * w - h))
    return x + 1j * y


def count_zeros(sysd, rect, h0, max_samples=2 ** 18):
    """Zeros of ``det M`` inside ``rect`` by the argument principle: ``(count or None, reason)``."""
    x0, x1, y0, y1 = rect
    w, h = x1 - x0, y1 - y0
    length = 2 * (w + h)
    m = int(np.clip(np.ceil(length / min(h0, length / 16)), 16, max_samples // 4))
    corners = np.array([0.0, w, w + h, 2 * w + h]) / length
    t = np.unique(np.concatenate([np.arange(m) / m, corners]))
    logabs, sign, g = _evaluate(sysd, _rect_points(rect, t))
    while True:
        s = _rect_points(rect, t)
        if not np.all((sign != 0) & np.isfinite(g)):
            return None, "det M(s) = 0 (numerically) on the boundary"
        j = np.roll(np.arange(t.size), -1)
        d_arg = np.angle(sign[j] * np.conj(sign))
        actual = (logabs[j] - logabs) + 1j * d_arg
        trap = 0.5 * (g + g[j]) * (s[j] - s)
        bad = (np.abs(d_arg) > ARG_STEP) | (np.abs(trap - actual) > TRAP_TOL)
        if not bad.any():
            return int(np.rint(d_arg.sum() / (2 * np.pi))), ""
        seg = np.abs(s[j] - s)
        if np.any(bad & (seg < 1e-12 * (1 + np.abs(s)))):
            return None, "the boundary passes through (or within rounding of) a root"
        te = np.where(j[bad] == 0, 1.0, t[j[bad]])
        new = 0.5 * (t[bad] + te)
        if t.size + new.size > max_samples:
            return None, f"more than {max_samples} samples needed on the boundary"
        vals = _evaluate(sysd, _rect_points(rect, new))
        t = np.concatenate([t, new])
        order = np.argsort(t, kind="stable")
        t = t[order]
        logabs, sign, g = (np.concatenate([a, b])[order] for a, b in zip((logabs, sign, g), vals))


def _newton(sysd, z, maxit=60):
    """Newton's method on ``det M``: ``z <- z - 1 / (log det M)'(z)``; ``(z, converged)``."""
    for _ in range(maxit):
        g = _evaluate(sysd, np.array([z]))[2][0]
        if not np.isfinite(g):
            return z, True                                   # landed on the root
        if g == 0:
            return z, False
        step = 1.0 / g
        z = z - step
        if abs(step) < 1e-14 * (1 + abs(z)):
            return z, True
    return z, abs(step) < 1e-9 * (1 + abs(z))


def find_roots(sysd, box, h0, *, max_rects=20_000):
    """Every zero of ``det M`` in ``box`` (with multiplicity) by recursive bisection.

    Returns
    -------
    roots : complex ndarray, multiplicity : int ndarray, total : int or None, certified : bool, message : str
    """
    total, why = count_zeros(sysd, box, h0)
    if total is None:
        return np.zeros(0, complex), np.zeros(0, int), None, False, f"box not resolved: {why}"
    stack, found, mult, failures, rects = [(box, total)], [], [], [], 0
    while stack:
        rect, N = stack.pop()
        if N == 0:
            continue
        rects += 1
        if rects > max_rects:
            failures.append("too many rectangles")
            break
        x0, x1, y0, y1 = rect
        c = complex(0.5 * (x0 + x1), 0.5 * (y0 + y1))
        size = max(x1 - x0, y1 - y0)
        if N == 1:
            z, ok = _newton(sysd, c)
            tol = 1e-9 * size
            if ok and x0 - tol <= z.real <= x1 + tol and y0 - tol <= z.imag <= y1 + tol:
                found.append(z)
                mult.append(1)
                continue
        if size < 1e-7 * (1 + abs(c)):
            z, _ = _newton(sysd, c)
            found.append(z if abs(z - c) < size else c)
            mult.append(N)
            continue
        for frac in (0.5, 0.4637, 0.5391, 0.4211):
            if x1 - x0 >= y1 - y0:
                xm = x0 + frac * (x1 - x0)
                a, b = (x0, xm, y0, y1), (xm, x1, y0, y1)
            else:
                ym = y0 + frac * (y1 - y0)
                a, b = (x0, x1, y0, ym), (x0, x1, ym, y1)
            na, _ = count_zeros(sysd, a, h0)
            if na is not None and 0 <= na <= N:
                stack += [(a, na), (b, N - na)]
                break
        else:
            failures.append(f"rectangle {rect} with {N} roots could not be split")
    roots = np.array(found, dtype=complex)
    multiplicity = np.array(mult, dtype=int)
    certified = not failures and int(multiplicity.sum()) == total
    msg = (f"{int(multiplicity.sum())} roots found, {total} counted by the argument principle"
           + ("" if not failures else "; " + "; ".join(failures[:3])))
    return roots, multiplicity, total, certified, msg
