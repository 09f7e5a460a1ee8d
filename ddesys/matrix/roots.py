"""Characteristic roots of matrix delay systems, with a certificate (docs/theory.md, "Characteristic
roots of matrix delay systems").

For ``x'(t) = A x(t) + sum_k Ad[k] x(t - tau[k])`` the roots are the zeros of ``det M(s)``,
``M(s) = s I - A - sum_k Ad[k] exp(-s tau[k])`` (:mod:`ddesys.matrix.charmatrix`). In every half-plane
``Re s >= re_min`` there are finitely many, inside a box known in advance. :func:`characteristic_roots`

1. discretizes the infinitesimal generator on Chebyshev points (its eigenvalues approximate the roots),
2. refines every eigenvalue near the box by Newton's method on the exact ``M(s)`` and merges duplicates,
3. counts the zeros of ``det M`` in the box by the argument principle, and the multiplicity of each
   root on a small circle around it, and grows the discretization until the two agree.

Two hard cases get their own treatment. A multiple root that rounding splits into a cluster of radius
about ``eps^(1/m) |s|`` (where ``det M`` is rounding noise and Newton's method cannot converge) is counted
as one cluster of multiplicity ``m`` on a circle around it and reported at its centroid
(:mod:`ddesys.matrix._roots_cluster`), but only when its zeros cannot be separated: distinct roots close
together inside such a circle are told apart, refined one by one and each proven alone in its own disk.
Delayed terms that cancel in ``det M`` (a nilpotent delayed coupling in any basis: the degree of ``det M``
in ``exp(-s tau_k)`` below ``rank(Ad_k)``) are detected from the exact coefficients of ``det M`` as a
polynomial in ``(s, exp(-s tau))``, and that quasi-polynomial replaces ``det M``
(:mod:`ddesys.matrix._roots_qp`); when no delayed term is left the roots are the eigenvalues of ``A``.

``certified=True`` means the count and the roots found agree (numerically: the phase of ``det M`` is
resolved on every arc of the boundary, see :func:`ddesys.matrix._roots_count.winding_numbers`; this is not
interval arithmetic). :func:`spectral_abscissa` and :func:`is_stable` build on it, and
:func:`rightmost_roots_batch` is the fast path without certificate for parameter studies
(:mod:`ddesys.matrix.chart`).
"""
from __future__ import annotations

import warnings

import numpy as np

from ._roots_cluster import wide_clusters
from ._roots_count import (
    MERGE_RTOL,
    Rectangle,
    clusters,
    group,
    region_box,
    winding_numbers,
)
from ._roots_edge import edge_decision
from .errors import UndecidableStability
from ._roots_result import RootsResult
from ._roots_igd import auto_grid, igd_eigvals, newton
from ._roots_qp import cancelled_structure
from .charmatrix import check_statespace, relative_residual
from .rightmost import rightmost_roots_batch

__all__ = ["RootsResult", "UndecidableStability", "characteristic_roots", "spectral_abscissa", "is_stable",
           "rightmost_roots_batch"]

MAX_EXPONENT = 700.0      # exp(-re_min tau) must stay finite in float64


# ---------------------------------------------------------------------------------------- checks
def _system(A, Ad, tau):
    d = check_statespace(A, Ad, tau)
    return d.A, d.Ad, d.tau


def _finite_real(name, value):
    if isinstance(value, (bool, np.bool_, str, bytes)) or np.ndim(value) != 0:
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    if np.iscomplexobj(value):
        raise TypeError(f"{name} must be real, got {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number, got {value!r}") from None
    if not np.isfinite(v):
        raise ValueError(f"{name} must be finite, got {v}")
    return v


def _grid(name, value, allowed):
    if value in allowed and isinstance(value, (str, type(None))):
        return value
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer >= 2 or one of {allowed}, got {value!r}")
    if value < 2:
        raise ValueError(f"{name} must be >= 2, got {value}")
    return int(value)


def _default_max_grid(n):
    """Largest degree by default: the eigenvalue problem stays below about 1600 unknowns."""
    return int(max(16, min(400, 1600 // n - 1)))


def _sort(z):
    key_re = np.round(z.real, 9)
    return np.lexsort((-z.imag, -key_re))


# ---------------------------------------------------------------------------------------- main
def characteristic_roots(A, Ad, tau, re_min, *, n_grid="auto", max_grid=None, tol=1e-12, certify=True):
    """All characteristic roots with ``Re s >= re_min``, certified by the argument principle.

    Clusters that float64 cannot separate come as their centroid with their multiplicity; delayed terms
    that cancel in ``det M`` are handled exactly (see the module docstring).

    Parameters
    ----------
    A : array_like ``(n, n)``;  Ad : array_like ``(K, n, n)`` or ``(n, n)``;  tau : array_like ``(K,)``
        The system ``x' = A x + sum_k Ad[k] x(t - tau[k])``, real or complex.
    re_min : float
        Left edge of the region.
    n_grid : int or "auto"
        First Chebyshev degree ``N`` (``"auto"``: ``0.7 tau_max |s|_max + 8`` for the box of the region).
    max_grid : int, optional
        Largest degree tried (default: ``n (N + 1)`` up to about 1600). The degree grows by 1.5 until
        the roots found match the count.
    tol : float
        Newton's relative step tolerance.
    certify : bool
        Count the roots by the argument principle. ``False``: stop when the roots in the region do not
        change from one degree to the next (cheaper, no certificate).

    Returns
    -------
    RootsResult
        ``roots, residuals = result`` also works.

    Raises
    ------
    ValueError
        Non-finite ``re_min``, ``exp(-re_min tau_max)`` beyond float64, bad degrees or ``tol``, and
        every bad system input (:func:`ddesys.matrix.charmatrix.check_statespace`).
    TypeError
        Non-numeric input.

    Examples
    --------
    >>> import numpy as np
    >>> from ddesys.matrix.roots import characteristic_roots
    >>> res = characteristic_roots([[0.0]], [[-1.0]], [1.0], re_min=-2.5)     # x' = -x(t - 1)
    >>> res.certified, res.count
    (True, 4)
    >>> np.round(res.roots[:2], 4)                   # Lambert W: W_0(-1), W_{-1}(-1)
    array([-0.3181+1.3372j, -0.3181-1.3372j])
    """
    A, Ad, tau = _system(A, Ad, tau)
    re_min = _finite_real("re_min", re_min)
    N = _grid("n_grid", n_grid, ("auto",))
    n = A.shape[0]
    Nmax = _grid("max_grid", max_grid, (None,)) or _default_max_grid(n)
    tol = _finite_real("tol", tol)
    if not 0 < tol <= 1e-6:
        raise ValueError(f"tol must be in (0, 1e-6], got {tol}")
    if not isinstance(certify, (bool, np.bool_)):
        raise TypeError(f"certify must be True or False, got {certify!r}")
    tm = float(tau.max())
    if -re_min * tm > MAX_EXPONENT:
        raise ValueError(f"re_min = {re_min} is too far left for float64: exp(-re_min tau_max) = "
                         f"exp({-re_min * tm:.0f}) overflows (keep -re_min * max(tau) <= {MAX_EXPONENT:.0f})")
    qp = cancelled_structure(A, Ad, tau)
    if qp is not None and qp.polynomial:
        return _polynomial_roots(A, Ad, tau, re_min)
    fn = None if qp is None else qp.evaluate
    box_of = (lambda r: region_box(A, Ad, tau, r)) if qp is None else qp.box
    box = box_of(re_min)
    if box is None:
        return _result(A, Ad, tau, np.empty(0, complex), [], True, 0, re_min, 0,
                       f"no root has Re s >= {re_min:.6g}: the a priori bound excludes the region")
    if N == "auto":
        N = auto_grid(tm, max(abs(box[2]), abs(box[3])) + max(abs(box[0]), abs(box[1])))
    N = min(N, Nmax)
    found = np.empty(0, complex)
    wide = []                                       # clusters float64 cannot separate: (center, radius, m)
    re_used, counted, prev, shifts, first = re_min, {}, None, 0, True
    while True:
        x0, x1, y0, y1 = box
        mx, my = 0.25 * (x1 - x0) + 0.5, 0.25 * (y1 - y0) + 0.5
        if qp is not None and tau.size == 1:        # chains exp(-s tau) = w(s) first, then the generator
            ev = qp.starts(box) if first else np.concatenate([qp.starts(box), igd_eigvals(A, Ad, tau, N)])
        else:
            ev = igd_eigvals(A, Ad, tau, N)
        first = False
        keep = (ev.real >= x0 - mx) & (ev.real <= x1 + mx) & (ev.imag >= y0 - my) & (ev.imag <= y1 + my)
        s, conv = newton(A, Ad, tau, ev[keep], tol=tol, fn=fn)
        found = np.concatenate([found, s[conv & (s.real >= x0 - mx)]])
        if certify:
            stuck = s[~conv & np.isfinite(s) & (s.real >= x0 - mx) & (s.real <= x1 + mx)]
            stuck = stuck[~_inside(stuck, wide)]
            for w in wide_clusters(A, Ad, tau, stuck, found, guard=re_used, fn=fn):
                if not any(abs(w[0] - c) <= max(r, w[1]) for c, r, _ in wide):     # one entry per zero
                    wide.append(w)
            found = found[~_inside(found, wide)]
        re_new = _clear_edge(found, re_used)
        if re_new != re_used:
            re_used = re_new
            box = box_of(re_used)
            wide = [w for w in wide if abs(w[0].real - re_used) > w[1]]
        centers, mult = clusters(A, Ad, tau, found, guard=re_used, count=certify, fn=fn)
        found = centers
        centers = np.concatenate([centers, np.array([w[0] for w in wide], dtype=complex)])
        mult = list(mult) + [w[2] for w in wide]
        inreg = centers.real >= re_used
        z, m = centers[inreg], [mult[i] for i in np.nonzero(inreg)[0]]
        if certify:
            if re_used not in counted:
                counted[re_used] = winding_numbers(A, Ad, tau, [Rectangle(*box)], fn=fn)
            (cnt,), (why,) = counted[re_used]
            if cnt is None and why.near_root and shifts < 3:
                shifts += 1                         # a root we have not found sits on the left edge
                re_used -= 1e-4 * (1 + abs(re_min)) * 10 ** shifts
                box = box_of(re_used)
                continue
            total = None if any(mi is None for mi in m) else int(sum(m))
            if cnt is not None and total == cnt:
                msg = (f"certified: the argument principle counts {cnt} roots in [{box[0]:.6g}, "
                       f"{box[1]:.6g}] x [{box[2]:.6g}, {box[3]:.6g}] and all were found (N = {N})")
                if qp is not None:
                    msg += "; delayed terms cancel in det M(s): its exact quasi-polynomial was used"
                return _result(A, Ad, tau, z, m, True, cnt, re_used, N, _shifted(msg, re_min, re_used))
            if cnt is None:
                state = f"the count failed: {why}"
            elif total is None:
                state = f"{cnt} counted; a multiplicity could not be counted"
            else:
                state = f"{total} found (with multiplicity) but {cnt} counted"
        else:
            key = np.sort_complex(np.round(z, 8))
            if prev is not None and prev.shape == key.shape and np.allclose(prev, key, rtol=1e-7, atol=1e-9):
                msg = (f"not certified (certify=False): the {z.size} roots in the region did not change "
                       f"from the previous degree to N = {N}")
                return _result(A, Ad, tau, z, m, False, None, re_used, N, _shifted(msg, re_min, re_used))
            prev, state, cnt = key, "the roots in the region still change with N", None
        if N >= Nmax or (cnt is None and certify):
            msg = (f"not certified: {state} at N = {N} (max_grid = {Nmax}); "
                   "raise max_grid or move re_min")
            return _result(A, Ad, tau, z, m, False, cnt, re_used, N, _shifted(msg, re_min, re_used))
        N = min(Nmax, int(np.ceil(1.5 * N)))


def _inside(z, wide):
    """Which of the points ``z`` lie in one of the disks ``(center, radius, m)`` of ``wide``."""
    out = np.zeros(np.shape(z), bool)
    for c, r, _ in wide:
        out |= np.abs(z - c) <= r
    return out


def _polynomial_roots(A, Ad, tau, re_min):
    """The delayed terms cancel completely: ``det M(s) = det(s I - A)``, the roots are eig(A)."""
    lam = np.linalg.eigvals(A).astype(np.complex128)
    groups = group(lam, MERGE_RTOL)
    z = np.array([lam[g].mean() for g in groups], dtype=np.complex128)
    m = [int(g.size) for g in groups]
    inreg = z.real >= re_min
    z, m = z[inreg], [m[i] for i in np.nonzero(inreg)[0]]
    msg = (f"certified: the delayed terms cancel exactly in det M(s) = det(s I - A); its {int(sum(m))} "
           f"roots with Re s >= {re_min:.6g} are eigenvalues of A")
    return _result(A, Ad, tau, z, m, True, int(sum(m)), re_min, 0, msg)


def _clear_edge(found, re_used, rtol=1e-8):
    """``re_used``, moved left until no known root lies within ``rtol (1 + |s|)`` of the line."""
    for _ in range(50):
        near = np.abs(found.real - re_used) <= rtol * (1 + np.abs(found))
        if not near.any():
            return re_used
        re_used = float(np.min(found.real[near])) - 1e3 * rtol * (1 + abs(re_used))
    return re_used


def _shifted(msg, re_min, re_used):
    if re_used == re_min:
        return msg
    return msg + f"; re_min moved from {re_min:.17g} to {re_used:.17g} (a root lay on the edge)"


def _result(A, Ad, tau, z, mult, certified, count, re_used, N, message):
    reps = np.array([1 if m is None else m for m in mult], dtype=int)
    z = np.array(z, dtype=np.complex128)
    if not (np.iscomplexobj(A) or np.iscomplexobj(Ad)):      # a real system: a cluster this close to the
        on_axis = np.abs(z.imag) <= 0.5 * MERGE_RTOL * (1 + np.abs(z))    # axis holds its own conjugate
        z[on_axis] = z[on_axis].real
    roots = np.repeat(z, reps)
    mult_arr = np.repeat(reps, reps)
    order = _sort(roots)
    roots, mult_arr = roots[order], mult_arr[order]
    res = relative_residual(A, Ad, tau, roots) if roots.size else np.empty(0)
    return RootsResult(roots, mult_arr, np.asarray(res, dtype=float), bool(certified), count,
                       float(re_used), int(N), message)


# ---------------------------------------------------------------------------------------- derived
def spectral_abscissa(A, Ad, tau, *, certify=True):
    """``max Re s`` over all characteristic roots.

    The rightmost Newton-refined eigenvalues of a first discretization give an estimate ``a``; then all
    roots with ``Re s >= a - delta`` (``delta = clip(0.25 / tau_max, 0.05, 1)``) are computed and
    certified by :func:`characteristic_roots`. A result that could not be certified comes with a
    ``RuntimeWarning`` (the value is then the largest real part found).

    Accuracy: about ``eps |s| / |(det M)'(s)|`` at a simple rightmost root. A rightmost root of
    multiplicity ``m`` is split by rounding into ``m`` roots about ``eps^(1/m) |s|`` apart (``4e-3 |s|``
    for ``m = 6``) that float64 cannot tell apart; the value is then the real part of their centroid,
    accurate to about that radius. When the delayed terms cancel in ``det M`` (e.g. a nilpotent delayed
    coupling), the exact quasi-polynomial is used (:func:`characteristic_roots`).

    Parameters
    ----------
    A, Ad, tau : the system (see :func:`characteristic_roots`)
    certify : bool

    Returns
    -------
    float

    Examples
    --------
    >>> from ddesys.matrix.roots import spectral_abscissa
    >>> round(spectral_abscissa([[0.0]], [[-1.0]], [1.0]), 6)                # Re W_0(-1)
    -0.318132
    """
    A, Ad, tau = _system(A, Ad, tau)
    if not isinstance(certify, (bool, np.bool_)):
        raise TypeError(f"certify must be True or False, got {certify!r}")
    qp = cancelled_structure(A, Ad, tau)
    if qp is not None and qp.polynomial:            # det M(s) = det(s I - A)
        return float(np.max(np.linalg.eigvals(A).real))
    fn = None if qp is None else qp.evaluate
    tm = float(tau.max())
    r0 = np.linalg.norm(A, 2) + sum(np.linalg.norm(m, 2) for m in Ad)
    N = min(auto_grid(tm, r0, n_min=12), 60, _default_max_grid(A.shape[0]))
    ev = igd_eigvals(A, Ad, tau, N)
    top = ev[np.argsort(-ev.real)[: 2 * A.shape[0] + 4]]
    s, conv = newton(A, Ad, tau, top, fn=fn)
    a = float(np.max(s[conv].real)) if conv.any() else float(np.max(ev.real))
    delta = float(np.clip(0.25 / tm, 0.05, 1.0))
    re_min = max(a - delta, -MAX_EXPONENT / tm)
    res = characteristic_roots(A, Ad, tau, re_min, certify=certify)
    if res.roots.size == 0:                        # the first estimate was not a root; widen once
        res = characteristic_roots(A, Ad, tau, max(a - 4 * delta - 1, -MAX_EXPONENT / tm), certify=certify)
    if certify and not res.certified:
        warnings.warn(f"spectral_abscissa: {res.message}", RuntimeWarning, stacklevel=2)
    if res.roots.size == 0:
        raise RuntimeError(f"spectral_abscissa: no root found right of {res.re_min:.6g} ({res.message})")
    return float(res.roots[0].real)


def is_stable(A, Ad, tau):
    """Exact stability: no characteristic root with ``Re s >= 0``, decided by a certified sign.

    The zeros of ``det M`` in the box of ``{Re s >= 0}`` are counted by the argument principle (no
    eigenvalue problem). When the boundary passes within rounding of a root (a root on or next to the
    imaginary axis), every root with ``Re s >= -w`` (``w = 1e-6 (1 + |s|_max)``) is computed
    (:func:`characteristic_roots`) and each one near the axis is enclosed in the smallest counted circle
    (:func:`ddesys.matrix._roots_cluster.inclusion_radius`): a circle on one side of the axis decides its
    sign. A root whose circle cannot be kept off the axis (on the axis, or closer to it than float64
    resolves, about ``eps |s| / |(det M)'(s)|``) makes the question undecidable: the answer is then
    ``False`` (stability not proven) with an :class:`UndecidableStability` warning. When the boundary
    needs more samples than the budget, :func:`spectral_abscissa` decides, with a ``RuntimeWarning``.

    Parameters
    ----------
    A, Ad, tau : the system (see :func:`characteristic_roots`)

    Returns
    -------
    bool

    Warns
    -----
    UndecidableStability
        A root within rounding of the imaginary axis (the answer is ``False``).

    Examples
    --------
    >>> from ddesys.matrix.roots import is_stable
    >>> is_stable([[0.0]], [[-1.0]], [1.5]), is_stable([[0.0]], [[-1.0]], [1.6])    # pi/2 = 1.5708
    (True, False)
    """
    A, Ad, tau = _system(A, Ad, tau)
    qp = cancelled_structure(A, Ad, tau)
    fn = None if qp is None else qp.evaluate
    box = region_box(A, Ad, tau, 0.0) if qp is None else qp.box(0.0)
    if box is None:
        return True
    (cnt,), (why,) = winding_numbers(A, Ad, tau, [Rectangle(*box)], fn=fn)
    if cnt is not None:
        return cnt == 0
    if why.near_root or why.at_root:
        # a root on or next to the imaginary axis
        return edge_decision(A, Ad, tau, box, fn, find_roots=characteristic_roots, abscissa=spectral_abscissa)
    warnings.warn(f"is_stable: the count on Re s = 0 failed ({why}); deciding by the spectral abscissa",
                  RuntimeWarning, stacklevel=2)
    return spectral_abscissa(A, Ad, tau) < 0
