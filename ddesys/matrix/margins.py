"""Classical margins of loops with delays, exact: gain, phase and stability margins, sensitivity peaks,
Nyquist plots (python-control's names and return values; docs/theory.md §9.7).

A loop transfer function ``L(i w)`` with dead time is evaluated exactly (no Pade model). Crossings are
bracketed on a frequency grid that resolves both the system's time constants (log-spaced) and the
phase turn of its delays (at most ``pi / 16`` of ``w * delay`` between points), then refined with
Brent's method to the working precision. As in python-control, a crossing that touches without a
sign change is not reported.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import _lft

MAX_POINTS = 400_000         # grid points of one margin computation, at most


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


def _scales(g):
    ev = np.abs(np.linalg.eigvals(g.A)) if g.A.size else np.zeros(0)
    ev = ev[ev > 0]
    inv = 1.0 / g.tau
    s = np.concatenate([ev, inv, [1.0]]) if ev.size + inv.size == 0 else np.concatenate([ev, inv])
    return float(s.min()), float(s.max())


def default_omega(sys, points=400):
    """Log-spaced frequencies covering the system's time constants and delays (three decades below the
    slowest, two above the fastest), for plots."""
    lo, hi = _scales(_lft.coerce(sys))
    return np.logspace(np.log10(lo) - 3, np.log10(hi) + 2, points)


def margin_grid(sys, floor=1e-3):
    sys = _lft.coerce(sys)
    """The grid crossings are bracketed on: log-spaced from ``1e-4`` of the slowest scale to ``1e4`` of
    the fastest, densified so that ``w * delay`` turns by at most ``pi / 16`` between points up to twice
    the last frequency where ``|L| >= floor`` (beyond, a phase crossover has a gain margin above
    ``1 / floor`` and the log grid suffices)."""
    lo, hi = _scales(sys)
    w_lo, w_hi = lo * 1e-4, hi * 1e4
    grid = np.logspace(np.log10(w_lo), np.log10(w_hi), 4000)
    tmax = float(sys.tau.sum())
    if tmax > 0:
        with np.errstate(all="ignore"):
            mag = np.abs(_lft.transfer(sys, 1j * grid)).max(axis=(0, 1))
        big = np.flatnonzero(~(mag < floor))
        w_cut = min(w_hi, 2 * grid[big[-1]]) if big.size else grid[0]
        step = np.pi / 16 / tmax
        w_lin = min(w_cut, step * (MAX_POINTS - grid.size))
        grid = np.union1d(grid, np.arange(step, w_lin, step))
    return grid


def _response(g):
    def L(w):
        return _lft.transfer(g, 1j * np.atleast_1d(np.asarray(w, float)))[0, 0]
    return L


def _brackets(f, grid, values, keep=None):
    """Refined zeros of the real function ``f`` at sign changes of ``values`` on ``grid``; ``keep``
    (a function of the bracket indices returning a mask) selects the brackets worth refining."""
    from scipy.optimize import brentq

    idx = np.flatnonzero(np.sign(values[:-1]) * np.sign(values[1:]) < 0)
    if keep is not None and idx.size:
        idx = idx[keep(idx)]
    return np.array([brentq(lambda w: float(f(w)), grid[i], grid[i + 1], xtol=1e-15 * grid[i + 1],
                            rtol=4 * np.finfo(float).eps) for i in idx])


def _minima(f, grid, values, slack=None):
    """Local minima of ``f`` (interior ones refined by a bounded scalar search), endpoints included;
    with ``slack``, only those whose grid value is within ``slack`` (relative) of the smallest."""
    from scipy.optimize import minimize_scalar

    out = [grid[0], grid[-1]]
    d = np.sign(np.diff(values))
    idx = np.flatnonzero((d[:-1] < 0) & (d[1:] >= 0)) + 1
    if slack is not None and idx.size:                 # the few that can hold the smallest value
        idx = idx[values[idx] <= values.min() * (1 + slack) + 1e-300]
        idx = idx[np.argsort(values[idx], kind="stable")[:8]]
    for i in idx:
        r = minimize_scalar(lambda w: float(f(w)), bounds=(grid[i - 1], grid[i + 1]), method="bounded",
                            options={"xatol": 1e-14 * grid[i + 1]})
        out.append(r.x)
    return np.array(out)


def _near_best(score, slack=0.05):
    """A mask keeping the entries within ``slack`` of the smallest ``score``."""
    return lambda idx: score(idx) <= score(idx).min() + slack


def stability_margins(L, returnall=False):
    """Gain, phase and stability margins of a SISO loop transfer function with delays, exact.

    Parameters
    ----------
    L : DelayIOSystem, DelayStateSpace, python-control LTI
        The loop transfer function (the loop is closed by negative unit feedback).
    returnall : bool, default False
        Every crossing instead of the deciding one.

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
    python-control's ``stability_margins`` with the same conventions; its delays would be Pade models,
    here they are exact. The extra dead time the loop tolerates is ``pm / wgc`` (``pm`` in radians).

    Examples
    --------
    ``e^{-s} / (s + 1)``: the critical gain is ``sqrt(1 + w^2)`` with ``w + atan(w) = pi``:

    >>> import ddesys
    >>> gm, pm, sm, wpc, wgc, wms = ddesys.stability_margins(ddesys.tf([1.0], [1.0, 1.0], delay=1.0))
    >>> round(gm, 6), round(wpc, 6)
    (2.261826, 2.028758)
    """
    sys = _siso(L)
    f = _response(sys)
    grid = margin_grid(sys)
    G = f(grid)
    neg = lambda idx: (G.real[idx] < 0) | (G.real[idx + 1] < 0)                       # noqa: E731
    if returnall:
        keep_pc, keep_gc, slack = neg, None, None
    else:                                       # refine only the candidates that can decide the margins
        with np.errstate(divide="ignore"):
            logmag = np.abs(np.log(np.abs(G)))
        keep_pc = lambda idx: neg(idx) & _near_best(lambda k: np.where(neg(k), logmag[k], np.inf))(idx)  # noqa: E731
        ph = np.abs(np.remainder(np.angle(G, deg=True), 360.0) - 180.0)
        keep_gc, slack = _near_best(lambda k: np.minimum(ph[k], ph[k + 1]), 5.0), 0.01
    w180 = _brackets(lambda w: f(w)[0].imag, grid, G.imag, keep_pc)
    w180 = w180[f(w180).real < 0] if w180.size else w180
    wc = _brackets(lambda w: abs(f(w)[0]) - 1.0, grid, np.abs(G) - 1.0, keep_gc)
    ws = _minima(lambda w: abs(1.0 + f(w)[0]), grid, np.abs(1.0 + G), slack)
    with np.errstate(divide="ignore"):
        GM = 1.0 / np.abs(f(w180)) if w180.size else np.zeros(0)
    PM = np.remainder(np.angle(f(wc), deg=True), 360.0) - 180.0 if wc.size else np.zeros(0)
    SM = np.abs(1.0 + f(ws))
    if returnall:
        return GM, PM, SM, w180, wc, ws
    if GM.size:
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
    f = _response(sys)
    grid = margin_grid(sys)
    G = f(grid)
    ws = _minima(lambda w: abs(1.0 + f(w)[0]), grid, np.abs(1.0 + G), 0.01)
    S = np.abs(1.0 + f(ws))
    k = int(np.argmin(S))
    t = lambda w: -abs(f(w)[0] / (1.0 + f(w)[0]))          # noqa: E731
    tg = np.abs(G / (1.0 + G))
    wt = _minima(t, grid, tg.max() * (1 + 1e-9) - tg + 1e-300, 0.01) if tg.size else grid[:1]
    T = np.abs(f(wt) / (1.0 + f(wt)))
    j = int(np.argmax(T))
    return SensitivityPeaks(float(1.0 / S[k]), float(ws[k]), float(T[j]), float(wt[j]))


def nyquist_plot(L, omega=None, ax=None):
    """Nyquist plot of a SISO system with delays, exact: ``L(i w)`` for ``w > 0`` (solid) and its mirror
    (dashed), the critical point ``-1`` and the unit circle; returns the figure.

    Parameters
    ----------
    L : DelayIOSystem, DelayStateSpace, python-control LTI
    omega : array_like, optional
        Positive frequencies; default: the margin grid up to where ``|L|`` has fallen below 1e-3 of
        its peak (the delay's spiral is drawn to there).
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    import matplotlib.pyplot as plt

    sys = _siso(L)
    if omega is None:
        omega = margin_grid(sys)
        mag = np.abs(_lft.transfer(sys, 1j * omega)[0, 0])
        keep = np.flatnonzero(mag >= 1e-3 * mag.max())
        omega = omega[: keep[-1] + 1] if keep.size else omega
    omega = np.asarray(omega, float)
    G = _lft.transfer(sys, 1j * omega)[0, 0]
    if ax is None:
        fig, ax = plt.subplots(figsize=(5, 5), layout="constrained")
    else:
        fig = ax.figure
    ax.plot(G.real, G.imag, "C0-", lw=1.2, label=r"$L(i\omega)$, $\omega > 0$")
    ax.plot(G.real, -G.imag, "C0--", lw=0.8, alpha=0.6)
    th = np.linspace(0, 2 * np.pi, 200)
    ax.plot(np.cos(th), np.sin(th), color="0.7", lw=0.6)
    ax.plot([-1], [0], "r+", ms=12, mew=2, label="-1")
    ax.set_xlabel("Re")
    ax.set_ylabel("Im")
    ax.set_aspect("equal", adjustable="box")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best")
    return fig


class LoopAnalysis:
    """Margins and the Nyquist plot as methods of a continuous SISO system (the loop transfer function)."""

    def stability_margins(self, returnall=False):
        """python-control's ``(gm, pm, sm, wpc, wgc, wms)``, exact with the delays (see
        :func:`ddesys.stability_margins`)."""
        return stability_margins(self, returnall=returnall)

    def sensitivity_peaks(self):
        """Peaks of ``|1 / (1 + L)|`` and ``|L / (1 + L)|`` (see :func:`ddesys.sensitivity_peaks`)."""
        return sensitivity_peaks(self)

    def nyquist(self, omega=None, ax=None):
        """Nyquist plot, exact with the delays (see :func:`ddesys.nyquist_plot`); returns the figure."""
        return nyquist_plot(self, omega=omega, ax=ax)


__all__ = ["LoopAnalysis", "SensitivityPeaks", "default_omega", "margin", "margin_grid", "nyquist_plot", "sensitivity_peaks",
           "stability_margins"]
