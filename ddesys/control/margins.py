"""Classical margins of loops with delays, exact: gain, phase and stability margins, sensitivity peaks,
Nyquist plots (python-control's names and return values; docs/theory.md §9.7).

A loop transfer function ``L(i w)`` with dead time is evaluated exactly (no Pade model). Crossings are
bracketed on a frequency grid that resolves both the system's time constants (log-spaced) and the
phase turn of its delays (at most ``pi / 16`` of ``w * delay`` between points), then refined with
Brent's method to the working precision, all brackets at once. The stability margin's minima of
``|1 + L|`` are refined the same way, as zeros of its slope ``Re(conj(1 + L) dL/dw)``, and only those a
lower bound from the grid cannot exclude (the later turns of a dead time's spiral can be excluded; a
pass close to ``-1`` that the grid sees as a shallow dip cannot). As in python-control, a crossing that
touches without a sign change is not reported.

python-control's conventions at the ends of the frequency axis are kept:

* ``omega = 0`` is a phase crossover when ``L(0)`` is finite and ``<= 0`` (its ``-180`` deg is the
  static gain's sign; ``L(0) = 0`` gives ``gm = inf`` there). A pole at ``s = 0`` (an integrator:
  ``L(0)`` infinite) is not a crossing, whatever the limit of the phase. ``omega = 0`` is never a gain
  crossover nor a stability-margin frequency.
* ``omega = inf`` is never a crossing (python-control's crossings are the finite roots of polynomials).
* A rounding floor: eigenvalues of the loop's matrix at ``s = 0`` that are zero to rounding (a cluster
  whose elementary symmetric functions are at the rounding level of the matrix, as a multiple
  integrator's are in a realization that is not exactly triangular) split into eigenvalues of size
  ``eps^(1/m)``; below ten times their modulus the computed ``L(i w)`` is rounding, and no crossing is
  searched there (python-control's ``epsw``: lower frequencies count as the static gain).
* Values within rounding of the crossing level (``| |L| - 1 | <= 1e-10``, ``|Im L| <= 1e-13 |L|``) have no
  sign: a loop with ``|L(i w)| = 1`` at every frequency (a pure delay, an all-pass) has no gain
  crossover (``pm = inf``), as python-control reports for a rational all-pass such as
  ``(1 - s) / (1 + s)``; its stability margin ``sm`` then tells how close the curve comes to ``-1``.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import _lft
from ._zero_floor import FLOOR_FACTOR, ZERO_TOL, zero_cluster  # noqa: F401  (re-exported)

MAX_POINTS = 400_000         # grid points of one margin computation, at most
MAG_TOL = 1e-10              # | |L| - 1 | at or below this: no sign (rounding of an all-pass)
IM_TOL = 1e-13               # |Im L| / |L| at or below this: no sign
SM_POLISH = 1e-6             # |1 + L| below this at a refined minimum: polished to rounding (a touch of -1)
MIN_ROUNDS = 4               # _minima: rounds of eight refinements at most, in branch and bound
FEW_BRACKETS = 3             # _zeros: up to this many brackets, scipy's brentq on each (the same steps, less overhead)


class SensitivityPeaks(NamedTuple):
    """Peaks of the sensitivity ``S = 1 / (1 + L)`` and the complementary sensitivity ``T = L / (1 + L)``.

    Attributes
    ----------
    ms, wms : float
        ``max |S(i w)|`` (``1 / sm``) and its frequency.
    mt, wmt : float
        ``max |T(i w)|`` and its frequency.
    """

    ms: float
    wms: float
    mt: float
    wmt: float


def _siso(L):
    g = _lft.coerce(L)
    p, m = g.C1.shape[0], g.B1.shape[1]
    if (p, m) != (1, 1):
        raise ValueError(f"margins are defined for a SISO loop; this one has {p} outputs and {m} inputs")
    return g


def _scales(g, floor=0.0):
    ev = np.abs(np.linalg.eigvals(g.A)) if g.A.size else np.zeros(0)
    ev = ev[ev > max(floor, 0.0)]
    inv = 1.0 / g.tau
    s = np.concatenate([ev, inv, [1.0]]) if ev.size + inv.size == 0 else np.concatenate([ev, inv])
    return float(s.min()), float(s.max())


def default_omega(sys, points=None):
    """Log-spaced frequencies for plots, chosen from the system's features as python-control does: a decade
    around the eigenvalue moduli, inverse delays and crossovers; with delays, ending a few times after
    the last crossover so the phase stays readable (:func:`ddesys.control.freqplot.default_frequency_range`)."""
    from .freqplot import default_frequency_range

    return default_frequency_range(sys, points=points)


def margin_grid(sys, floor=1e-3):
    """The grid crossings are bracketed on: log-spaced from ``1e-4`` of the slowest scale to ``1e4`` of
    the fastest, densified so that ``w * delay`` turns by at most ``pi / 16`` between points up to twice
    the last frequency where ``|L| >= floor`` (beyond, a phase crossover has a gain margin above
    ``1 / floor`` and the log grid suffices). Frequencies at or below the rounding floor of
    :func:`zero_cluster` are left out."""
    sys = _lft.coerce(sys)
    return _grid_values(sys, _grid_evaluator(sys), zero_cluster(sys)[1], floor)[0]


def _grid_values(sys, G, w_floor, floor=1e-3):
    """:func:`margin_grid` and the response ``G(i w)`` ``(p, m, F)`` on it (``G`` the fast evaluator of the
    transfer matrix), each point evaluated once: the log grid's values decide
    how far the linear grid goes, and only its new points are evaluated."""
    lo, hi = _scales(sys, w_floor)
    w_lo, w_hi = max(lo * 1e-4, 2 * w_floor), hi * 1e4
    grid = np.logspace(np.log10(w_lo), np.log10(w_hi), 4000)
    with np.errstate(all="ignore"):
        values = G(1j * grid)
    tmax = float(sys.tau.sum())
    if tmax > 0:
        mag = np.abs(values).max(axis=(0, 1))
        big = np.flatnonzero(~(mag < floor))
        w_cut = min(w_hi, 2 * grid[big[-1]]) if big.size else grid[0]
        step = np.pi / 16 / tmax
        w_lin = min(w_cut, step * (MAX_POINTS - grid.size))
        lin = np.arange(step, w_lin, step)
        if lin.size:                           # np.union1d(grid, lin), with the values in the same order
            with np.errstate(all="ignore"):
                values = np.concatenate([values, G(1j * lin)], axis=-1)
            grid, first = np.unique(np.concatenate([grid, lin]), return_index=True)
            values = values[..., first]
    return grid, values


def _grid_evaluator(g, dense=None):
    """The evaluator of the grid: only brackets the crossings and the minima, so the Schur evaluator
    (:func:`ddesys.control._lft.schur_at`) whenever there is a state, tiny systems included (there it is
    several times faster than the dense solve). Its rounding (up to ``eps / CANCEL`` of ``|C Q| |Y|``) can
    only flip a sign within that of zero, which moves a bracket by one grid point, and every bracket's
    signs are read again by the refinement (:func:`_response`)."""
    dense = _lft._dense_at(g) if dense is None else dense
    return _lft.schur_at(g, dense) if g.A.shape[0] else (lambda s: dense(np.asarray(s, complex).reshape(-1)))


def _response(g):
    """``(G, refine, dL)`` of a SISO loop: ``G`` the evaluator of the grid (:func:`_grid_evaluator`),
    ``refine(w)`` the loop at the frequencies ``w`` by the dense solve at every point (batched, bit for bit
    the values of one point at a time: every refinement and every returned value reads it), ``dL(w)`` the
    loop and its derivative ``dL/dw`` (``= i L'(i w)``)."""
    dense, derivative = _lft._dense_at(g), _lft.derivative_at(g)

    def refine(w):
        return dense(1j * np.asarray(w, float).reshape(-1))[0, 0]

    def dL(w):
        v, d = derivative(1j * np.asarray(w, float).reshape(-1))
        return v, 1j * d
    return _grid_evaluator(g, dense), refine, dL


def _sign_pairs(values, tol=0.0):
    """Index pairs ``(i, j)``, ``i < j``, of consecutive grid values with a definite sign (``|v| > tol``)
    and opposite signs; the values between them (if any) are within ``tol`` of zero."""
    v = np.asarray(values, float)
    nz = np.flatnonzero(np.abs(v) > tol)
    if nz.size < 2:
        return np.zeros(0, int), np.zeros(0, int)
    i, j = nz[:-1], nz[1:]
    ch = np.sign(v[i]) * np.sign(v[j]) < 0
    return i[ch], j[ch]


def _brackets(f, grid, values, keep=None, tol=0.0):
    """Refined zeros of the real function ``f`` (vectorized) at sign changes of ``values`` on ``grid``
    (values within ``tol`` of zero have no sign), all at once (:func:`_zeros`, Brent's method); ``keep`` (a
    function of the bracket index arrays ``i, j`` returning a mask) selects the brackets worth refining."""
    i, j = _sign_pairs(values, tol)
    if keep is not None and i.size:
        k = keep(i, j)
        i, j = i[k], j[k]
    if not i.size:
        return np.zeros(0)
    x = _zeros(f, grid[i], grid[j], 1e-15 * grid[j], 4 * np.finfo(float).eps)
    return x[np.isfinite(x)]


def _polish_min(f, x, a, b):
    """Golden-section search on ``[a, b]`` around ``x`` to the rounding of ``x`` (scipy's bounded search
    stops at ``sqrt(eps) |x|``, which leaves ``|f| ~ 1e-8 |x|`` at a V-shaped zero such as ``|1 + L|``
    where the Nyquist curve passes through ``-1``)."""
    g = (np.sqrt(5.0) - 1) / 2
    h = 64 * abs(x) * np.sqrt(np.finfo(float).eps) + 1e-300
    a, b = max(a, x - h), min(b, x + h)
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(200):
        if b - a <= 4 * np.finfo(float).eps * abs(x):
            break
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    best = min((fc, c), (fd, d), (f(x), x))
    return best[1]


def _zeros(f, a, b, xtol, rtol, fa=None, fb=None, maxiter=100):
    """Zeros of the real function ``f`` in the brackets ``[a_k, b_k]``, all brackets at once: ``f`` takes the
    array of one point per unfinished bracket (``fa``, ``fb``: its values at the ends, when known). Each
    bracket follows the steps of scipy's ``brentq`` (its C loop, operation for operation: the same zero
    from the same values), to ``|x - x*| <= (xtol + rtol |x|) / 2``; up to ``FEW_BRACKETS`` brackets go
    through ``brentq`` itself, one by one (less overhead per step than the arrays). Each step keeps a
    bracket, so the zero is where ``f`` changes sign in the direction it does from ``a_k`` to ``b_k``. A
    bracket whose ends have the same sign, or whose ``f`` turns non-finite, gives nan."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.size <= FEW_BRACKETS:                       # scipy's loop itself, one bracket at a time
        from scipy.optimize import brentq

        out = np.full(a.size, np.nan)
        for j in range(a.size):
            known = {} if fa is None or fb is None else {a[j]: float(fa[j]), b[j]: float(fb[j])}

            def one(x):
                v = known.get(x)                     # the ends' values, when given, are not computed again
                v = float(np.asarray(f(np.array([x])), float)[0]) if v is None else v
                if not np.isfinite(v):
                    raise ValueError("not finite")
                return v
            try:
                out[j] = brentq(one, a[j], b[j], xtol=xtol[j], rtol=rtol, maxiter=maxiter, disp=False)
            except ValueError:                       # no sign change, or f not finite
                pass
        return out
    if fa is None or fb is None:
        v = np.asarray(f(np.concatenate([a, b])), float)
        fa, fb = v[:a.size], v[a.size:]
    xpre, xcur, fpre, fcur = a.copy(), b.copy(), np.array(fa, float), np.array(fb, float)
    xblk, fblk, spre, scur = np.zeros_like(xpre), np.zeros_like(xpre), np.zeros_like(xpre), np.zeros_like(xpre)
    out = np.where(fpre == 0, xpre, np.where(fcur == 0, xcur, np.nan))
    live = (fpre != 0) & (fcur != 0) & np.isfinite(fpre) & np.isfinite(fcur) & (np.signbit(fpre) != np.signbit(fcur))
    for _ in range(maxiter):
        k = np.flatnonzero(live)
        if not k.size:
            break
        xp, xc, fp, fc, xb, fbk, sp, sc = xpre[k], xcur[k], fpre[k], fcur[k], xblk[k], fblk[k], spre[k], scur[k]
        new = (fp != 0) & (fc != 0) & (np.signbit(fp) != np.signbit(fc))       # a new bracket [xpre, xcur]
        xb, fbk = np.where(new, xp, xb), np.where(new, fp, fbk)
        sp, sc = np.where(new, xc - xp, sp), np.where(new, xc - xp, sc)
        sw = np.abs(fbk) < np.abs(fc)
        xp, xc, xb = np.where(sw, xc, xp), np.where(sw, xb, xc), np.where(sw, xc, xb)
        fp, fc, fbk = np.where(sw, fc, fp), np.where(sw, fbk, fc), np.where(sw, fc, fbk)
        delta = (xtol[k] + rtol * np.abs(xc)) / 2
        sbis = (xb - xc) / 2
        done = (fc == 0) | (np.abs(sbis) < delta)
        out[k[done]] = xc[done]
        live[k[done]] = False
        step = ~done & (np.abs(sp) > delta) & (np.abs(fc) < np.abs(fp))
        with np.errstate(all="ignore"):
            interp = -fc * (xc - xp) / (fc - fp)
            dpre = (fp - fc) / (xp - xc)
            dblk = (fbk - fc) / (xb - xc)
            extrap = -fc * (fbk * dblk - fp * dpre) / (dblk * dpre * (fbk - fp))
        stry = np.where(xp == xb, interp, extrap)
        good = step & (2 * np.abs(stry) < np.minimum(np.abs(sp), 3 * np.abs(sbis) - delta))
        sp, sc = np.where(good, sc, sbis), np.where(good, stry, sbis)
        xp, fp = xc, fc
        xc = np.where(np.abs(sc) > delta, xc + sc, xc + np.where(sbis > 0, delta, -delta))
        xpre[k], fpre[k], xblk[k], fblk[k], spre[k], scur[k], xcur[k] = xp, fp, xb, fbk, sp, sc, xc
        k = k[~done]
        with np.errstate(all="ignore"):
            fcur[k] = np.asarray(f(xcur[k]), float)
        bad = ~np.isfinite(fcur[k])
        live[k[bad]] = False
    else:
        out[live] = xcur[live]                        # maxiter reached: the last point (brentq would raise)
    return out


def _refine_minima(f, slope, grid, idx):
    """The grid minima ``idx`` of ``f`` refined (see :func:`_minima`)."""
    from scipy.optimize import minimize_scalar

    lo, hi = grid[idx - 1], grid[idx + 1]
    x = np.full(idx.size, np.nan)
    if idx.size:
        with np.errstate(all="ignore"):
            ends = np.asarray(slope(np.concatenate([lo, hi])), float)
        sl, sh = ends[:idx.size], ends[idx.size:]
        ok = (sl < 0) & (sh > 0)
        x[ok] = _zeros(slope, lo[ok], hi[ok], 1e-15 * hi[ok], 4 * np.finfo(float).eps, sl[ok], sh[ok])
    fl = lambda w: float(f(w)[0])                      # noqa: E731
    for j in np.flatnonzero(np.isnan(x)):
        r = minimize_scalar(fl, bounds=(lo[j], hi[j]), method="bounded", options={"xatol": 1e-14 * hi[j]})
        x[j] = r.x
        if r.fun < SM_POLISH:
            x[j] = _polish_min(fl, r.x, lo[j], hi[j])
    return x


def _minima(f, slope, grid, values, slack=None, floor=None):
    """Local minima of ``f`` on the grid, refined, endpoints included: every one, or those that can hold the
    smallest value.

    With ``floor`` (a function of grid indices: a lower bound of ``f`` over the two grid intervals around
    each), by branch and bound: the grid minima whose floor is at most the smallest value known (on the
    grid, then refined) are refined eight at a time, smallest grid value first, at most ``MIN_ROUNDS``
    times; a minimum whose floor is above an attained value cannot be the smallest. The first round holds
    the eight smallest grid minima that can be the smallest, so nothing the slack rule below would refine
    is missed; the floor lets in a minimum that the grid sees only as a shallow dip. Otherwise, with
    ``slack``, the eight smallest grid minima within ``slack`` (relative) of the smallest.

    A grid minimum ``i`` is refined as the zero of ``slope`` between ``grid[i - 1]`` and ``grid[i + 1]``:
    ``slope`` (vectorized) has the sign of ``f'`` and is smooth where ``f`` has a minimum, such as
    ``Re(conj(1 + L) dL/dw)`` for ``|1 + L|``, which has a simple zero even where the Nyquist curve passes
    through ``-1`` and ``|1 + L|`` is V-shaped; Brent's method finds it to the rounding of ``w``, all minima
    at once (:func:`_zeros`), where ``slope`` rises through zero (a minimum, not a maximum). A grid minimum
    whose neighbours do not bracket such a rise takes a bounded scalar search of ``f``, polished where
    ``f`` comes near 0."""
    d = np.sign(np.diff(values))
    idx = np.flatnonzero((d[:-1] < 0) & (d[1:] >= 0)) + 1
    ends = [grid[0], grid[-1]]
    if floor is not None and idx.size:
        idx = idx[np.argsort(values[idx], kind="stable")]
        lb = floor(idx)
        best, out = float(values.min()), []
        for _ in range(MIN_ROUNDS):
            take = np.flatnonzero(lb <= best)[:8]
            if not take.size:
                break
            x = _refine_minima(f, slope, grid, idx[take])
            out.append(x)
            best = min(best, float(np.min(f(x))))
            idx, lb = np.delete(idx, take), np.delete(lb, take)
        return np.concatenate([ends] + out)
    if slack is not None and idx.size:                 # the few that can hold the smallest value
        idx = idx[values[idx] <= values.min() * (1 + slack) + 1e-300]
        idx = idx[np.argsort(values[idx], kind="stable")[:8]]
    return np.concatenate([ends, _refine_minima(f, slope, grid, idx)])


def _sm_slope(dL):
    """The slope of ``|1 + L|``, up to the positive factor ``|1 + L|``: ``Re(conj(1 + L) dL/dw)``."""
    def slope(w):
        v, d = dL(w)
        return (np.conj(1.0 + v) * d).real
    return slope


def _sm_floor(grid, G):
    """A lower bound of ``|1 + L|`` over the two grid intervals around the grid points ``i`` (``G = L`` on the
    grid), as a function of ``i``: the distance of ``-1`` to the polygon ``L(w_{i-1}), L(w_i), L(w_{i+1})``,
    less how far the curve can stray from it, ``h^2 / 8 max |L''|`` on an interval of length ``h``, with
    ``max |L''|`` taken as 16 times the divided second difference of the three points (a curve that strays
    further between its samples is a feature the grid does not resolve, nor any minimum near it). It keeps
    the minima a coarse grid sees only as a shallow dip (the Nyquist curve passing close to ``-1`` between
    two points of a long dead time's spiral) and sets apart the later turns of the spiral where ``|L|`` is
    small (all within about ``|L|`` of 1)."""
    def floor(i):
        a, m, b = G[i - 1], G[i], G[i + 1]
        h1, h2 = grid[i] - grid[i - 1], grid[i + 1] - grid[i]
        d2 = 2.0 * ((b - m) / h2 - (m - a) / h1) / (h1 + h2)
        stray = 2.0 * np.maximum(h1, h2) ** 2 * np.abs(d2)
        return np.minimum(_segment_distance(a, m), _segment_distance(m, b)) - stray
    return floor


def _segment_distance(a, b, p=-1.0):
    """Distance of the point ``p`` to the segments ``[a, b]`` (complex arrays)."""
    d = b - a
    with np.errstate(invalid="ignore", divide="ignore"):
        t = np.clip(((p - a) * np.conj(d)).real / (d * np.conj(d)).real, 0.0, 1.0)
    return np.abs(a + np.where(np.isfinite(t), t, 0.0) * d - p)


def _modulus(z):
    """``|z|`` by ``hypot``, elementwise as for one number (NumPy's ``abs`` of a complex array may round the
    last bit differently): a crossing of ``|L| = 1`` is the same zero whether refined alone or with others."""
    return np.hypot(z.real, z.imag)


def _near_best(score, slack=0.05):
    """A mask keeping the entries within ``slack`` of the smallest ``score``."""
    return lambda i, j: score(i, j) <= score(i, j).min() + slack


def stability_margins(L, returnall=False, epsw=0.0):
    """Gain, phase and stability margins of a SISO loop transfer function with delays, exact.

    Parameters
    ----------
    L : DelayIOSystem, DelayStateSpace, python-control LTI
        The loop transfer function (the loop is closed by negative unit feedback).
    returnall : bool, default False
        Every crossing instead of the deciding one.
    epsw : float, default 0
        As in python-control: frequencies below ``epsw`` count as the static gain and give no margin
        (``epsw > 0`` also drops the phase crossover at ``omega = 0``). The rounding floor of the module
        docstring applies in any case.

    Returns
    -------
    gm : float
        Gain margin ``1 / |L(i wpc)|`` at the phase crossover closest to 0 dB (``inf`` if none).
    pm : float
        Phase margin in degrees at the gain crossover with the smallest ``|pm|`` (``inf`` if none).
    sm : float
        Stability margin: the smallest distance of the Nyquist curve to ``-1``.
    wpc, wgc, wms : float
        Phase crossover, gain crossover and stability-margin frequencies (rad per time unit; ``nan``
        when there is none).

    Notes
    -----
    python-control's ``stability_margins`` with the same conventions (module docstring): ``omega = 0`` is a
    phase crossover when ``L(0) <= 0`` is finite (``L(s) = 1.5 e^{-0.5 s} / (s - 1)`` has ``gm = 2 / 3`` at
    ``omega = 0``), an integrator's ``-180`` deg limit is not, ``omega = inf`` never is, and ``|L| = 1`` at every
    frequency (a pure delay) gives no gain crossover. Its delays would be Pade models, here they are exact.
    The extra dead time the loop tolerates is ``pm / wgc`` (``pm`` in radians).

    Examples
    --------
    ``e^{-s} / (s + 1)``: the critical gain is ``sqrt(1 + w^2)`` with ``w + atan(w) = pi``:

    >>> import ddesys
    >>> gm, pm, sm, wpc, wgc, wms = ddesys.stability_margins(ddesys.tf([1.0], [1.0, 1.0], delay=1.0))
    >>> round(gm, 6), round(wpc, 6)
    (2.261826, 2.028758)
    """
    sys = _siso(L)
    epsw = float(epsw)
    evaluator, refine, dL = _response(sys)
    m0, w_floor = zero_cluster(sys)
    grid, G = _grid_values(sys, evaluator, w_floor)
    G = G[0, 0]
    if epsw > 0:
        keep = grid >= epsw
        grid, G = grid[keep], G[keep]
    absG = np.abs(G)
    neg = lambda i, j: (G.real[i] < 0) | (G.real[j] < 0)                       # noqa: E731
    if returnall:
        keep_pc, keep_gc = neg, None
    else:                                       # refine only the candidates that can decide the margins
        def logmag(i):                          # |log |L||, read at the brackets' ends only
            with np.errstate(divide="ignore"):
                return np.abs(np.log(absG[i]))

        def ph(i):                              # distance of the phase to -180 deg, likewise
            return np.abs(np.remainder(np.angle(G[i], deg=True), 360.0) - 180.0)
        keep_pc = lambda i, j: neg(i, j) & _near_best(                                      # noqa: E731
            lambda a, b: np.where(neg(a, b), np.minimum(logmag(a), logmag(b)), np.inf))(i, j)
        keep_gc = _near_best(lambda a, b: np.minimum(ph(a), ph(b)), 5.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        im_rel = np.where(absG > 0, G.imag / absG, 0.0)
    w180 = _brackets(lambda w: refine(w).imag, grid, im_rel, keep_pc, IM_TOL)
    w180 = w180[refine(w180).real < 0] if w180.size else w180
    if epsw == 0 and m0 == 0:                        # omega = 0: the static gain, when finite and <= 0
        try:
            with np.errstate(all="ignore"):
                L0 = complex(refine(np.zeros(1))[0])
        except np.linalg.LinAlgError:               # a pole at s = 0 exactly
            L0 = complex("nan")
        if np.isfinite(L0) and L0.real <= 0 and abs(L0.imag) <= IM_TOL * abs(L0):
            w180 = np.concatenate([[0.0], w180])
    wc = _brackets(lambda w: _modulus(refine(w)) - 1.0, grid, absG - 1.0, keep_gc, MAG_TOL)
    ws = _minima(lambda w: np.abs(1.0 + refine(w)), _sm_slope(dL), grid, np.abs(1.0 + G),
                 floor=None if returnall else _sm_floor(grid, G))
    L180, Lc, Ls = np.split(refine(np.concatenate([w180, wc, ws])), [w180.size, w180.size + wc.size])
    with np.errstate(divide="ignore"):
        GM = 1.0 / np.abs(L180)
    PM = np.remainder(np.angle(Lc, deg=True), 360.0) - 180.0
    SM = np.abs(1.0 + Ls)
    if returnall:
        return GM, PM, SM, w180, wc, ws
    if GM.size and not np.all(np.isinf(GM)):
        with np.errstate(divide="ignore"):
            i = int(np.argmin(np.abs(np.log(GM))))
        gm, wpc = float(GM[i]), float(w180[i])
    else:
        gm, wpc = float("inf"), float("nan")
    if PM.size:
        j = int(np.argmin(np.abs(PM)))
        pm, wgc = float(PM[j]), float(wc[j])
    else:
        pm, wgc = float("inf"), float("nan")
    k = int(np.argmin(SM))
    return gm, pm, float(SM[k]), wpc, wgc, float(ws[k])


def margin(L):
    """``(gm, pm, wpc, wgc)``: python-control's ``margin`` (see :func:`stability_margins`)."""
    gm, pm, _, wpc, wgc, _ = stability_margins(L)
    return gm, pm, wpc, wgc


def sensitivity_peaks(L):
    """Peaks of ``|S| = |1 / (1 + L)|`` and ``|T| = |L / (1 + L)|`` over frequency, exact with the delays.

    Parameters
    ----------
    L : DelayIOSystem, DelayStateSpace, python-control LTI
        SISO loop transfer function.

    Returns
    -------
    SensitivityPeaks
        ``(ms, wms, mt, wmt)``; ``ms = 1 / sm`` of :func:`stability_margins`.

    Examples
    --------
    >>> import ddesys
    >>> p = ddesys.sensitivity_peaks(0.5 * ddesys.tf([1.0], [1.0, 1.0], delay=1.0))
    >>> round(p.ms, 4), round(p.mt, 4)
    (1.2999, 0.3598)
    """
    sys = _siso(L)
    evaluator, refine, dL = _response(sys)
    grid, G = _grid_values(sys, evaluator, zero_cluster(sys)[1])
    G = G[0, 0]
    ws = _minima(lambda w: np.abs(1.0 + refine(w)), _sm_slope(dL), grid, np.abs(1.0 + G), floor=_sm_floor(grid, G))
    S = np.abs(1.0 + refine(ws))
    k = int(np.argmin(S))

    def t(w):                                              # -|T| and its slope, up to |1 + L|^2 > 0
        v = refine(w)
        return -np.abs(v / (1.0 + v))

    def t_slope(w):
        v, d = dL(w)
        return -(np.conj(v) * d / (1.0 + v)).real
    tg = np.abs(G / (1.0 + G))
    wt = _minima(t, t_slope, grid, tg.max() * (1 + 1e-9) - tg + 1e-300, 0.01) if tg.size else grid[:1]
    Lt = refine(wt)
    T = np.abs(Lt / (1.0 + Lt))
    j = int(np.argmax(T))
    return SensitivityPeaks(float(1.0 / S[k]), float(ws[k]), float(T[j]), float(wt[j]))


def nyquist_plot(L, omega=None, ax=None, max_curve_magnitude=None):
    """Nyquist plot of a SISO loop with delays, exact, readable at default settings; returns the figure.

    ``L(i w)`` for ``w > 0`` (solid, with arrows in the direction of increasing ``w``) and its mirror
    (dashed); the critical point ``-1`` (always in view) and the unit circle. As in python-control, the
    part of the curve beyond ``max_curve_magnitude`` (near a pole on the imaginary axis, such as an
    integrator) is drawn on that circle, dash-dotted, with its phase kept. The title gives the number of
    encirclements of ``-1``, counted over the whole Nyquist contour
    (:func:`ddesys.nyquist_response`), not on the plotted grid.

    Parameters
    ----------
    L : DelayIOSystem, DelayStateSpace, python-control LTI
    omega : array_like, optional
        Positive frequencies; default: from a decade below the system's features to where ``|L|`` has
        fallen below 0.05 for good (the delay's spiral, :func:`ddesys.control.freqplot.nyquist_frequencies`).
    ax : matplotlib Axes, optional
    max_curve_magnitude : float, optional
        Radius beyond which the curve is drawn on the circle (default: chosen from the curve, 2 to 20).

    Returns
    -------
    matplotlib.figure.Figure
        Also carries ``encirclements`` (``N``, clockwise, ``None`` if not resolved) and
        ``nyquist_response`` (:class:`ddesys.control.freqplot.NyquistResponse`: ``N``, ``P``, ``Z = N + P``).

    Examples
    --------
    >>> import ddesys
    >>> L = ddesys.tf([0.8, 0.3], [1.0, 0.0]) * ddesys.tf([1.0], [3.0, 1.0], delay=1.0)
    >>> fig = ddesys.nyquist_plot(L)
    >>> fig.encirclements
    0
    >>> from ddesys.plot import pyplot
    >>> pyplot().close(fig)
    """
    from .freqplot import nyquist_figure

    return nyquist_figure(L, omega=omega, ax=ax, max_curve_magnitude=max_curve_magnitude)


class LoopAnalysis:
    """Margins and the Nyquist plot as methods of a continuous SISO system (the loop transfer function)."""

    def stability_margins(self, returnall=False, epsw=0.0):
        """python-control's ``(gm, pm, sm, wpc, wgc, wms)``, exact with the delays (see
        :func:`ddesys.stability_margins`).

        Parameters
        ----------
        returnall : bool, default False
            Every crossing instead of the deciding one.
        epsw : float, default 0
            Frequencies below ``epsw`` count as the static gain and give no margin.

        Returns
        -------
        gm, pm, sm, wpc, wgc, wms : float, or ndarray with ``returnall``
            Gain margin, phase margin (degrees), stability margin and their frequencies.

        Raises
        ------
        ValueError
            A system that is not SISO.
        """
        return stability_margins(self, returnall=returnall, epsw=epsw)

    def sensitivity_peaks(self):
        """Peaks of ``|1 / (1 + L)|`` and ``|L / (1 + L)|`` (see :func:`ddesys.sensitivity_peaks`)."""
        return sensitivity_peaks(self)

    def nyquist(self, omega=None, ax=None):
        """Nyquist plot, exact with the delays (see :func:`ddesys.nyquist_plot`); returns the figure.

        Parameters
        ----------
        omega : array_like, real, optional
            Positive frequencies; default chosen from the system (as :func:`ddesys.nyquist_plot`).
        ax : matplotlib Axes, optional

        Returns
        -------
        matplotlib.figure.Figure
            Also carries ``encirclements`` and ``nyquist_response``.

        Raises
        ------
        ValueError
            A system that is not SISO.
        """
        return nyquist_plot(self, omega=omega, ax=ax)


__all__ = ["LoopAnalysis", "SensitivityPeaks", "default_omega", "margin", "margin_grid", "nyquist_plot",
           "sensitivity_peaks", "stability_margins", "zero_cluster"]
