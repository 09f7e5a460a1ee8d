"""Frequency ranges and the Nyquist count of systems with delays, for readable plots at default settings.

python-control's conventions (``_default_frequency_range``, ``nyquist_response``), exact with the delays:

* ``default_frequency_range``: the features of the system decide the grid: the moduli of the
  eigenvalues of ``A``, the inverse delays, the gain crossovers (``|G| = 1``) and the first phase
  crossovers (``G`` real negative, ``|G| >= 0.1``), a decade on either side of them. A delay turns the
  phase without bound, so with delays the grid stops a few times after the last crossover (about
  ``CROSSOVER_FACTOR`` times it): the phase that decides the margins is in view and does not wind to
  thousands of degrees;
* :func:`~ddesys.nyquist_response`: the number of clockwise encirclements of ``-1`` by ``L(s)`` along the Nyquist
  contour (the imaginary axis, indented to the right around poles on it, closed by a large half circle),
  counted by the argument principle on ``1 + L`` with the adaptive sampling that certifies the roots of
  ``ddesys.matrix.roots``: ``N = Z - P`` (``Z`` closed-loop roots in the open
  right half-plane, ``P`` open-loop poles there).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from . import _lft
from ._zero_floor import zero_cluster

CROSSOVER_FACTOR = 3.0      # with delays, the default grid ends near this multiple of the last crossover
PHASE_FLOOR = 0.1           # phase crossovers with |G| below this (gain margin above 20 dB) do not set the range
SCAN_PER_DECADE = 300       # points per decade of the scan that finds the crossovers
MAX_POINTS = 100_000        # points of a default grid, at most


def _coerce(sys):
    return _lft.coerce(sys)


def _siso(sys):
    g = _coerce(sys)
    p, m = g.C1.shape[0], g.B1.shape[1]
    if (p, m) != (1, 1):
        raise ValueError(f"the Nyquist plot is defined for a SISO loop; this one has {p} outputs and {m} inputs")
    return g


def _nice_up(x):
    """The smallest of ``1, 2, 5 x 10^k`` at or above ``x > 0``."""
    e = math.floor(math.log10(x))
    for c in (1.0, 2.0, 5.0, 10.0):
        if c * 10.0 ** e >= x * (1 - 1e-12):
            return c * 10.0 ** e
    return 10.0 ** (e + 1)


def _zero_cluster(g):
    """``(m, floor)``: the poles at ``s = 0`` to rounding (the margins' rounding floor, ``zero_cluster``)."""
    return zero_cluster(g)


def _eig_scales(g):
    """Moduli of the eigenvalues of ``A`` that are not zero (to rounding): the system's corner frequencies."""
    ev = np.abs(np.linalg.eigvals(g.A)) if g.A.size else np.zeros(0)
    floor = _zero_cluster(g)[1]
    return ev[ev > max(floor, 1e-12 * max(1.0, float(ev.max(initial=0.0))))]


class Crossovers(NamedTuple):
    """Crossover frequencies found on a scan (bracket midpoints, for choosing ranges, not for margins).

    Attributes
    ----------
    gain : ndarray
        Frequencies where some ``|G_ij|`` crosses 1.
    phase : ndarray
        Frequencies where some ``G_ij`` crosses the negative real axis with ``|G_ij| >=`` :data:`PHASE_FLOOR`.
    """

    gain: np.ndarray
    phase: np.ndarray


def crossovers(sys, lo=None, hi=None):
    """Gain and phase crossover frequencies of every input-output pair, located on a log scan.

    Parameters
    ----------
    sys : DelayIOSystem, DelayStateSpace, python-control LTI
    lo, hi : float, optional
        The scanned band (default: four decades beyond the eigenvalues' moduli and inverse delays).

    Returns
    -------
    Crossovers
    """
    g = _coerce(sys)
    feats = np.concatenate([_eig_scales(g), 1.0 / g.tau[g.tau > 0]])
    if lo is None or hi is None:
        f_lo, f_hi = (float(feats.min()), float(feats.max())) if feats.size else (1.0, 1.0)
        lo = f_lo * 1e-4 if lo is None else lo
        hi = f_hi * 1e4 if hi is None else hi
    n = int(np.clip(SCAN_PER_DECADE * np.log10(hi / lo), 64, MAX_POINTS))
    w = np.logspace(np.log10(lo), np.log10(hi), n)
    with np.errstate(all="ignore"):
        G = _lft.transfer(g, 1j * w).reshape(-1, n)
    mag = np.abs(G)
    gain, phase = [], []
    for row, a in zip(G, mag):
        ok = np.isfinite(row)
        d = a - 1.0
        i = np.flatnonzero(ok[:-1] & ok[1:] & (np.sign(d[:-1]) * np.sign(d[1:]) < 0))
        gain.append(np.sqrt(w[i] * w[i + 1]))
        im = row.imag
        i = np.flatnonzero(ok[:-1] & ok[1:] & (np.sign(im[:-1]) * np.sign(im[1:]) < 0)
                           & (row.real[:-1] + row.real[1:] < 0) & (np.maximum(a[:-1], a[1:]) >= PHASE_FLOOR))
        phase.append(np.sqrt(w[i] * w[i + 1]))
    return Crossovers(np.unique(np.concatenate(gain)), np.unique(np.concatenate(phase)))


def default_frequency_range(sys, points=None):
    """Log-spaced frequencies a plot of ``sys`` reads well on, chosen from its features.

    A decade below the lowest and above the highest feature (eigenvalue moduli of ``A``, inverse delays,
    gain crossovers, the first phase crossovers), rounded to decades as in python-control. With delays
    the grid ends at about :data:`CROSSOVER_FACTOR` times the last crossover (rounded up to 1, 2 or 5
    times a power of ten), or at one turn of the longest delay's phase when there is no crossover, so
    the phase stays in a readable range.

    Parameters
    ----------
    sys : DelayIOSystem, DelayStateSpace, python-control LTI
    points : int, optional
        Number of frequencies (default: 1000, more when needed so that the longest delay turns the phase
        by at most ``pi / 8`` between neighbours).

    Returns
    -------
    ndarray ``(F,)``
        Rad per time unit.

    Examples
    --------
    >>> import ddesys
    >>> from ddesys.control.freqplot import default_frequency_range
    >>> L = ddesys.tf([0.8, 0.3], [1.0, 0.0]) * ddesys.tf([1.0], [3.0, 1.0], delay=1.0)
    >>> w = default_frequency_range(L)
    >>> float(w[0]), float(w[-1])
    (0.01, 5.0)
    """
    g = _coerce(sys)
    eig, tau = _eig_scales(g), g.tau[g.tau > 0]
    cross = crossovers(g)
    first_pc = cross.phase[:1]
    after = cross.phase[cross.phase > cross.gain.max()][:1] if cross.gain.size else np.zeros(0)
    relevant = np.concatenate([cross.gain, first_pc, after])
    feats = np.concatenate([eig, 1.0 / tau, relevant])
    if feats.size == 0:
        lo, hi = 0.1, 10.0
    else:
        lo = 10.0 ** (math.floor(math.log10(feats.min())) - 1)
        hi = 10.0 ** (math.ceil(math.log10(feats.max())) + 1)
    if tau.size:
        stop = CROSSOVER_FACTOR * relevant.max() if relevant.size else 2 * np.pi / tau.sum()
        hi = min(hi, _nice_up(stop))
        hi = max(hi, 100.0 * lo)
    tmax = float(tau.sum())
    need = int(np.ceil(hi * tmax * np.log(hi / lo) / (np.pi / 8))) if tmax else 0
    n = int(min(MAX_POINTS, max(points or 1000, need)))
    w = np.logspace(np.log10(lo), np.log10(hi), n)
    w[0], w[-1] = lo, hi                                     # the round ends exactly
    return w


# ---------------------------------------------------------------------------------------------- Nyquist


class NyquistResponse(NamedTuple):
    """The Nyquist count of a loop ``L`` (python-control's ``nyquist_response(...).count``), exact with delays.

    Attributes
    ----------
    count : int or None
        Clockwise encirclements of ``-1`` by ``L`` along the Nyquist contour: ``N = Z - P``. ``None``
        when the contour could not be resolved (``reason`` says why).
    open_loop_rhp_poles : int or None
        ``P``: poles of ``L`` with positive real part (eigenvalues of the realization's ``A``, or the
        characteristic roots when ``L`` has an internal delay loop); ``None`` when not computed.
    closed_loop_rhp_roots : int or None
        ``Z = N + P``: roots of ``1 + L`` in the open right half-plane (the closed loop's unstable roots).
    indented : ndarray
        Imaginary parts of the poles on the imaginary axis the contour went around (to their right).
    multiplicity : ndarray of int
        How many poles sit at each of ``indented``.
    radius : float
        Radius of the half circle that closes the contour.
    reason : str
        Empty, or why ``count`` is None.
    """

    count: int | None
    open_loop_rhp_poles: int | None
    closed_loop_rhp_roots: int | None
    indented: np.ndarray
    multiplicity: np.ndarray
    radius: float
    reason: str


def _poles(g):
    """``(poles, axis_tol)`` of the SISO loop ``g`` (eigenvalues, or characteristic roots with a real part
    above ``-1e-6`` when a state is read late), or ``(None, reason)`` if they cannot be had."""
    from ._io_reduce import explicit_form
    from ..matrix.errors import AlgebraicLoopError

    try:
        f = explicit_form(*g)
    except AlgebraicLoopError as exc:
        return None, str(exc)
    if f.state_delays.size == 0:
        ev = np.linalg.eigvals(f.A) if f.A.size else np.zeros(0, complex)
        m = _zero_cluster(g)[0]
        ev[np.argsort(np.abs(ev), kind="stable")[:m]] = 0.0        # a multiple integrator split by rounding
        return ev, ""
    from ..matrix.roots import characteristic_roots

    try:
        r = characteristic_roots(f.A, f.Ad, f.state_delays, -1e-6)
    except Exception as exc:                                          # noqa: BLE001 - reported, not raised
        return None, f"the poles of L could not be computed ({exc})"
    return np.asarray(getattr(r, "roots", r)), ""


class _NyquistContour:
    """The Nyquist contour traversed counterclockwise around the right half-plane (as the argument principle's
    count of the matrix roots wants): down the imaginary axis from ``i R`` to
    ``-i R``, around each pole ``i w_k`` on it by a half circle of radius ``r_k`` to its right, back up by
    the half circle ``R e^{i theta}``. ``t in [0, 1)``; the pieces share ``t`` by their initial samples."""

    def __init__(self, R, axis_poles, radii, y_small, dense_to, tmax):
        pieces = []                                    # (kind, a, b, samples)
        marks = [(float(R), None)]
        for y, r in sorted(zip(axis_poles, radii), reverse=True):
            marks += [(y + r, ("indent", y, r)), (y - r, None)]
        if not any(abs(y) <= r for y, r in zip(axis_poles, radii)):       # no indentation at 0: split there
            marks += [(y_small, ("line",)), (-y_small, None)]
            marks.sort(key=lambda m: -m[0])
        marks.append((-float(R), None))
        for (ya, kind), (yb, _) in zip(marks[:-1], marks[1:]):
            if kind is not None and kind[0] == "indent":
                pieces.append(("indent", kind[1], kind[2], 24))
            elif ya * yb > 0:
                lo, hi = sorted((abs(ya), abs(yb)))
                n = int(60 * np.log10(hi / lo)) + 16
                top = min(hi, dense_to)
                if tmax and top > lo:
                    n += int((top - lo) * tmax / (np.pi / 8))
                pieces.append(("log", ya, yb, min(n, 2 ** 15)))
            else:
                pieces.append(("line", ya, yb, 16))
        pieces.append(("arc", float(R), 0.0, 256))
        counts = np.array([p[3] for p in pieces], float)
        self.starts = np.concatenate([[0.0], np.cumsum(counts)[:-1]]) / counts.sum()
        self.widths = counts / counts.sum()
        self.pieces = pieces
        self.length = 1.0

    def initial(self, h0):
        t = [s + w * np.arange(p[3]) / p[3] for s, w, p in zip(self.starts, self.widths, self.pieces)]
        return np.concatenate(t)

    def points(self, t):
        t = np.asarray(t, float)
        k = np.clip(np.searchsorted(self.starts, t, side="right") - 1, 0, len(self.pieces) - 1)
        u = (t - self.starts[k]) / self.widths[k]
        out = np.empty(t.shape, complex)
        for i, (kind, a, b, _) in enumerate(self.pieces):
            sel = k == i
            if not sel.any():
                continue
            v = u[sel]
            if kind == "log":
                out[sel] = 1j * np.sign(a) * np.exp(np.log(abs(a)) + v * (np.log(abs(b)) - np.log(abs(a))))
            elif kind == "line":
                out[sel] = 1j * (a + v * (b - a))
            elif kind == "indent":
                out[sel] = 1j * a + b * np.exp(1j * (np.pi / 2 - np.pi * v))
            else:
                out[sel] = a * np.exp(1j * (-np.pi / 2 + np.pi * v))
        return out


def nyquist_response(L, max_samples=2 ** 18):
    """Encirclements of ``-1`` by a SISO loop with delays along the whole Nyquist contour, exact.

    The winding number of ``1 + L`` along the imaginary axis (indented to the right around poles of ``L``
    on it) closed by a half circle of radius ``R`` in the right half-plane, on which ``|L| < 1/2`` is
    checked (``R`` grows tenfold, up to three times, until it holds). The argument principle's adaptive
    sampling (that of the certified roots, :mod:`ddesys.matrix.roots`) bisects every arc along which the phase
    of ``1 + L`` could turn unseen, so the count does not depend on a plotting grid.

    Parameters
    ----------
    L : DelayIOSystem, DelayStateSpace, python-control LTI
        SISO loop transfer function (negative unit feedback).
    max_samples : int, default 2**18
        Evaluations of ``L`` allowed.

    Returns
    -------
    NyquistResponse
        ``count`` (``N = Z - P``), ``open_loop_rhp_poles`` (``P``), ``closed_loop_rhp_roots`` (``Z``), ...

    Examples
    --------
    ``3 e^{-s} / (s + 1)`` is past its critical gain 2.26: two closed-loop roots in the right half-plane.

    >>> import ddesys
    >>> from ddesys.control.freqplot import nyquist_response
    >>> r = nyquist_response(3.0 * ddesys.tf([1.0], [1.0, 1.0], delay=1.0))
    >>> r.count, r.open_loop_rhp_poles, r.closed_loop_rhp_roots
    (2, 0, 2)
    """
    from ..matrix._roots_count import winding_numbers

    g = _siso(L)
    poles, why = _poles(g)
    if poles is None:
        return NyquistResponse(None, None, None, np.zeros(0), np.zeros(0, int), float("nan"), why)
    scale = np.abs(poles)
    tol = 1e-9 * (1.0 + scale)
    on_axis = np.abs(poles.real) <= tol
    P = int(np.count_nonzero(poles.real > tol))
    ys, mult = np.unique(np.round(poles.imag[on_axis], 12), return_counts=True)
    eig = _eig_scales(g)
    tau = g.tau[g.tau > 0]
    cross = crossovers(g)
    feats = np.concatenate([eig, 1.0 / tau, cross.gain, cross.phase[:2], np.abs(ys[ys != 0])])
    f_lo, f_hi = (float(feats.min()), float(feats.max())) if feats.size else (1.0, 1.0)
    radii = []
    for y in ys:
        others = np.abs(ys[ys != y] - y)
        r = 1e-4 * max(f_lo, abs(y)) if y == 0 else 1e-4 * abs(y)
        radii.append(min(r, 0.25 * others.min()) if others.size else r)
    off_axis = np.abs(poles[~on_axis])
    R = 10.0 * max(f_hi, float(off_axis.max(initial=0.0)))
    f = lambda s: _fn(g, s)                                                      # noqa: E731
    for _ in range(4):
        arc = R * np.exp(1j * np.linspace(-np.pi / 2, np.pi / 2, 1025))
        with np.errstate(all="ignore"):
            Larc = _lft.transfer(g, arc)[0, 0]
        if np.all(np.abs(Larc) < 0.5):
            break
        R *= 10.0
    else:
        return NyquistResponse(None, P, None, ys, mult, R, "|L| does not fall below 1/2 on large half circles: L is "
                               "not strictly proper (or its delay terms do not decay); the count is undefined")
    dense_to = max(f_hi, float(cross.gain.max(initial=0.0)), float(cross.phase.max(initial=0.0))) * 10
    curve = _NyquistContour(R, ys, radii, 1e-3 * f_lo, dense_to, float(tau.sum()))
    (count,), (reason,) = winding_numbers(None, None, None, [curve], h0=1.0, max_samples=max_samples, fn=f)
    Z = None if count is None else count + P
    return NyquistResponse(count, P, Z, ys, mult, float(R), reason)


def _fn(g, s):
    with np.errstate(all="ignore"):
        Ls, dL = _lft.transfer_and_derivative(g, s)
        F = 1.0 + Ls
        a = np.abs(F)
        return np.log(a), np.where(a > 0, F / a, 0.0), dL / F



# ---------------------------------------------------------------------------------------------- plots

SPIRAL_END = 0.05           # the default Nyquist grid ends where |L| stays below this (the spiral's centre)
MAX_CURVE_MAGNITUDE = 20.0  # largest radius drawn by default; beyond it the curve is drawn on this circle


def nyquist_frequencies(sys, points=1000):
    """Positive frequencies for the Nyquist curve of ``sys``: from the low end of
    :func:`default_frequency_range` to where ``|L|`` has fallen below :data:`SPIRAL_END` for good (a delay's
    spiral is drawn into the origin), dense enough that the delay turns the phase by at most ``pi / 16``
    between neighbours.

    Parameters
    ----------
    sys : DelayIOSystem, DelayStateSpace, python-control LTI
        SISO.
    points : int, default 1000
        Log-spaced points (the delay's linear points come on top).

    Returns
    -------
    ndarray ``(F,)``
    """
    g = _siso(sys)
    w0 = default_frequency_range(g, points=points)
    lo = float(w0[0])
    top = float(w0[-1]) * 1e4
    scan = np.logspace(np.log10(lo), np.log10(top), int(SCAN_PER_DECADE * np.log10(top / lo)))
    with np.errstate(all="ignore"):
        mag = np.abs(_lft.transfer(g, 1j * scan)[0, 0])
    big = np.flatnonzero(~(mag < SPIRAL_END))
    hi = max(float(w0[-1]), float(scan[min(big[-1] + 1, scan.size - 1)]) if big.size else 0.0)
    w = np.logspace(np.log10(lo), np.log10(hi), points)
    tmax = float(g.tau.sum())
    if tmax > 0:
        step = np.pi / 16 / tmax
        w = np.union1d(w, np.arange(step, hi, step)[: MAX_POINTS])
    return w


def _segments(mask):
    """``(start, stop)`` index ranges of the runs of True in ``mask``."""
    d = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(d == 1), np.flatnonzero(d == -1)))


def _arrows(ax, z, color, n=2):
    """Arrowheads along the points ``z`` (the direction of increasing frequency), at ``n`` evenly spaced
    fractions of the arc length."""
    if z.size < 3:
        return
    d = np.abs(np.diff(z))
    arc = np.concatenate([[0.0], np.cumsum(d)])
    if arc[-1] <= 0:
        return
    for frac in (np.arange(n) + 0.5) / n:
        i = int(np.clip(np.searchsorted(arc, frac * arc[-1]), 1, z.size - 1))
        ax.annotate("", xy=(z[i].real, z[i].imag), xytext=(z[i - 1].real, z[i - 1].imag),
                    arrowprops=dict(arrowstyle="-|>", color=color, lw=1.2, mutation_scale=14))


def _clockwise_arc(a, b, m, R, n=64):
    """Points on the circle of radius ``R`` from the direction of ``a`` to that of ``b``, clockwise, turning
    by about ``m`` half turns (the image of an indentation around an ``m``-fold pole)."""
    t0 = np.angle(a)
    d = np.angle(b) - t0 + m * np.pi
    d = (d + np.pi) % (2 * np.pi) - np.pi - m * np.pi                   # in (-(m + 1) pi, -(m - 1) pi]
    return R * np.exp(1j * (t0 + d * np.linspace(0.0, 1.0, n)))


def _bridge(w, Gs, big, G, resp, R):
    """Insert, between the two samples around each pole ``i y`` (``y > 0``) on the axis, the clockwise arc
    on the circle of radius ``R`` that the indentation maps to."""
    for y, m in sorted(zip(resp.indented, resp.multiplicity), reverse=True):
        if not (y > 0 and w[0] < y < w[-1]):
            continue
        i = int(np.searchsorted(w, y)) - 1
        if not (big[i] and big[i + 1] and np.isfinite(Gs[i]) and np.isfinite(Gs[i + 1])):
            continue
        arc = _clockwise_arc(Gs[i], Gs[i + 1], int(m), R)[1:-1]
        Gs = np.concatenate([Gs[:i + 1], arc, Gs[i + 1:]])
        G = np.concatenate([G[:i + 1], arc, G[i + 1:]])
        big = np.concatenate([big[:i + 1], np.ones(arc.size, bool), big[i + 1:]])
    return Gs, big, G


def nyquist_figure(L, omega=None, ax=None, max_curve_magnitude=None):
    """Draw the Nyquist plot of a SISO loop with delays (the body of :func:`ddesys.nyquist_plot`).

    Parameters
    ----------
    L : DelayIOSystem, DelayStateSpace, python-control LTI
    omega : array_like, optional
        Positive frequencies (default :func:`nyquist_frequencies`).
    ax : matplotlib Axes, optional
    max_curve_magnitude : float, optional
        Points of the curve with ``|L|`` above this are drawn on the circle of this radius, dash-dotted
        (their phase kept, so the encirclements read the same). Default: 1.5 times the largest ``|L|``
        beyond the neighbourhood of the poles on the imaginary axis (a third of the lowest gain crossover
        and above), between 2 and :data:`MAX_CURVE_MAGNITUDE`.

    Returns
    -------
    matplotlib Figure
        With the attributes ``nyquist_response`` (:class:`NyquistResponse`) and ``encirclements`` (its
        ``count``).
    """
    from ..plot import new_figure

    g = _siso(L)
    resp = nyquist_response(g)
    w = nyquist_frequencies(g) if omega is None else np.asarray(omega, float).reshape(-1)
    with np.errstate(all="ignore"):
        G = _lft.transfer(g, 1j * w)[0, 0]
    finite = np.isfinite(G)
    if max_curve_magnitude is None:                  # the radius the curve needs away from axis poles
        keep = finite.copy()
        for y in resp.indented[resp.indented > 0]:
            keep &= np.abs(w - y) > 0.2 * y
        if np.any(resp.indented == 0):
            cross = crossovers(g)
            keep &= w >= (cross.gain.min() / 3 if cross.gain.size else 10 * float(w.min()))
        M = float(np.abs(G[keep]).max()) if keep.any() else 1.0
        R = float(np.clip(1.5 * M, 2.0, MAX_CURVE_MAGNITUDE))
    else:
        R = float(max_curve_magnitude)
    big = ~(np.abs(G) <= R)
    Gs = np.where(big & finite, R * G / np.abs(G), G)
    Gs[~finite] = np.nan
    Gs, big, G = _bridge(w, Gs, big, G, resp, R)
    finite = np.isfinite(Gs)
    if ax is None:
        fig, ax = new_figure(figsize=(5.6, 6.0))
    else:
        fig = ax.figure
    inner = np.where(big, np.nan + 0j, G)
    arc = None
    if resp.indented.size and resp.indented.min() == 0 and big[0] and np.isfinite(Gs[0]):
        m = int(resp.multiplicity[np.flatnonzero(resp.indented == 0)[0]])
        arc = _clockwise_arc(np.conj(Gs[0]), Gs[0], m, R)     # the image of the indentation around s = 0
        ax.plot(arc.real, arc.imag, "C0-.", lw=1.0)

    ax.plot(inner.real, inner.imag, "C0-", lw=1.4, label=r"$L(i\omega)$, $\omega > 0$")
    ax.plot(inner.real, -inner.imag, "C0--", lw=0.9, alpha=0.6, label=r"$\omega < 0$ (mirror)")
    label = f"|L| > {R:.3g}: drawn at radius {R:.3g}"
    for a, b in _segments(big & finite):
        seg = Gs[max(a - 1, 0):min(b + 1, Gs.size)]
        ax.plot(seg.real, seg.imag, "C0-.", lw=1.0, label=label)
        ax.plot(seg.real, -seg.imag, "C0:", lw=0.9, alpha=0.6)
        label = None
    for a, b in _segments(~big & finite):
        if b - a >= 3:
            _arrows(ax, G[a:b], "C0", n=1 if b - a < 20 else 2)
            break
    th = np.linspace(0, 2 * np.pi, 361)
    ax.plot(np.cos(th), np.sin(th), color="0.65", lw=0.7, label="unit circle")
    ax.axhline(0.0, color="0.8", lw=0.6, zorder=0)
    ax.axvline(0.0, color="0.8", lw=0.6, zorder=0)
    ax.plot([-1], [0], "r+", ms=13, mew=2.2, label="critical point -1", zorder=5)
    pts = np.concatenate([Gs[np.isfinite(Gs)], np.conj(Gs[np.isfinite(Gs)]), [-1.0 + 0j, 1.0 + 0j, 1j, -1j]]
                         + ([arc] if arc is not None else []))
    x0, x1 = float(pts.real.min()), float(pts.real.max())
    y0, y1 = float(pts.imag.min()), float(pts.imag.max())
    half = 0.53 * max(x1 - x0, y1 - y0)                      # a square view: the aspect is equal
    cx, cy = 0.5 * (x0 + x1), 0.5 * (y0 + y1)
    ax.set_xlim(cx - half, cx + half)
    ax.set_ylim(cy - half, cy + half)
    ax.set_xlabel("Re L(i\N{GREEK SMALL LETTER OMEGA})")
    ax.set_ylabel("Im L(i\N{GREEK SMALL LETTER OMEGA})")
    ax.set_aspect("equal", adjustable="box")
    ax.grid(True, alpha=0.3)
    if resp.count is None:
        line = "encirclements of -1: not resolved"
    else:
        line = f"N = {resp.count} clockwise encirclement{'' if abs(resp.count) == 1 else 's'} of -1"
        if resp.open_loop_rhp_poles is not None:
            line += (f"\nunstable poles: open loop P = {resp.open_loop_rhp_poles}, "
                     f"closed loop Z = N + P = {resp.closed_loop_rhp_roots}")
    ax.set_title("Nyquist plot\n" + line, fontsize=10)
    ax.legend(loc="best", fontsize=8, framealpha=0.85)
    fig.nyquist_response = resp
    fig.encirclements = resp.count
    return fig

__all__ = ["CROSSOVER_FACTOR", "Crossovers", "MAX_CURVE_MAGNITUDE", "NyquistResponse", "SPIRAL_END", "crossovers",
           "default_frequency_range", "nyquist_figure", "nyquist_frequencies", "nyquist_response"]
