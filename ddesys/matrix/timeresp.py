"""Time responses of matrix delay systems: simulation, impulse and step responses (docs/theory.md §9).

``x'(t) = A x(t) + sum_k Ad[k] x(t - tau[k]) + B u(t)``, ``y = C x + D u`` with zero history before
``t = 0`` (and optionally a state ``x0`` at ``t = 0``, as right after an impulse), matrices validated by
:func:`ddesys.matrix.charmatrix.check_statespace` (real or complex).

Method of steps with classical Runge-Kutta 4 and the delayed states read by cubic Hermite
interpolation of the stored states and derivatives (Oberle & Pesch 1981, Numer. Math. 37, 235-255):
fourth order in the step ``h`` for inputs smooth on ``t > 0``, or smooth between times where ``u`` or ``u'``
jumps (found by sampling, or named by ``breaks=``; they and their breakpoints are grid points, with
``u``'s one-sided values at each, :mod:`ddesys.matrix._timeresp_steps`). The solution is only piecewise smooth:
``x'`` (``x`` itself when ``x0 != 0``) jumps at ``t = 0`` and the jumps propagate to higher derivatives
at the breakpoints ``sum_k j_k tau[k]``. Every breakpoint with ``sum_k j_k <= 4`` is a grid point, and
every step is ``<= min(tau)``, so each delayed argument lies in the already computed past, inside one
smooth piece (a breakpoint inside a delayed step image would put its image ``+ tau[k]``, also a
breakpoint, inside the step). Derivatives are stored one-sided at both ends of each step (``x'`` can
jump at a grid point). Cost: ``3 S n r`` stored values (``S`` steps, ``r`` right-hand sides: 1 for
:func:`simulate`, ``m`` for :func:`impulse` and :func:`step`) and a loop over the ``S`` steps, compiled
(:mod:`ddesys.cpu.dde_rk4`) or, without Numba, in NumPy (``python -m ddesys.experiments.bench.dss`` and
``python -m ddesys.experiments.bench.control`` time it).

Error control (the default, or ``rtol=`` / ``atol=`` given): the grid is refined by halving until the
estimated error of ``y`` is within ``atol + rtol max_t |y|`` for every output channel, over the output
times. The estimate is Richardson's: two solutions on nested grids (every step of one cut in two) differ
by about ``15/16`` of the coarser one's error, so ``2 |y_h - y_{h/2}| / 15`` (a safety factor 2) plus the
rounding errors ``eps sqrt(steps) max_t |y|`` bounds the error of the finer solution ``y_{h/2}``, which is
the one returned (:mod:`ddesys.matrix._timeresp_control`). It is reported as
:attr:`TimeResponse.error_estimate`. A tolerance that cannot be met within the memory budget (or below the
rounding errors) warns and names the error reached. The first estimate costs about 1.5 fixed-step solves
(the steps ``2 h`` and ``h``); each halving after it one solve of twice the steps. An explicit ``h=``
without ``rtol``/``atol`` is one fixed-step solve and reports no estimate (``error_estimate`` None).
"""
from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np

from ._timeresp_control import Readout, solve_controlled
from ._timeresp_steps import BREAKPOINT_ORDER, SIMULATE_MAX_BYTES, breakpoints, input_breaks, solve_fixed
from .charmatrix import real_vector

DEFAULT_RTOL = 1e-6            # relative tolerance of the default error control


class _Fields(NamedTuple):
    t: np.ndarray
    y: np.ndarray
    x: np.ndarray


class TimeResponse(_Fields):
    """A time response: unpacks as ``t, y, x`` (a named tuple of three), with the error estimate beside.

    Attributes
    ----------
    t : ndarray ``(T,)``
        Output times.
    y : ndarray ``(p, T)`` (:func:`simulate`) or ``(p, m, T)`` (:func:`impulse`, :func:`step`: input
        ``j`` in ``[:, j]``)
    x : ndarray ``(n, T)`` or ``(n, m, T)``
        States.
    error_estimate : float or None
        Estimated largest absolute error of ``y`` over the output times (the units of ``y``), from the
        error control; None for a fixed step ``h=`` without a tolerance. Not part of the tuple:
        ``t, y, x = response`` unpacks the three arrays.

    Examples
    --------
    >>> import numpy as np
    >>> from ddesys.matrix.timeresp import TimeResponse
    >>> r = TimeResponse(np.zeros(2), np.ones((1, 2)), np.ones((1, 2)), error_estimate=1e-9)
    >>> t, y, x = r
    >>> len(r), r.error_estimate, TimeResponse(t, y, x).error_estimate
    (3, 1e-09, None)
    """

    error_estimate = None

    def __new__(cls, t, y, x, error_estimate=None):
        self = super().__new__(cls, t, y, x)
        if error_estimate is not None:
            self.__dict__["error_estimate"] = float(error_estimate)
        return self

    def __setattr__(self, name, value):
        raise AttributeError(f"TimeResponse is immutable: cannot set {name!r}")

    def _replace(self, **kw):
        est = kw.pop("error_estimate", self.error_estimate)
        return TimeResponse(*super()._replace(**kw), error_estimate=est)

    def __repr__(self):
        return f"{super().__repr__()[:-1]}, error_estimate={self.error_estimate!r})"

    def plot(self, axes=None, title=None):
        """Outputs against time: one row of axes per output, one column per input (step and impulse
        responses), the error estimate in the title.

        Parameters
        ----------
        axes : array of matplotlib Axes ``(p, m)``, optional
            Default: a new figure.
        title : str, optional
            Figure title (default "Time response").

        Returns
        -------
        matplotlib Figure
            ``fig.axes``: ``p m`` axes, one line each.

        Examples
        --------
        >>> import numpy as np
        >>> import ddesys
        >>> r = ddesys.tf([1.0], [1.0, 1.0], delay=1.0).step(np.linspace(0.0, 5.0, 51))
        >>> fig = r.plot()
        >>> len(fig.axes), len(fig.axes[0].lines)
        (1, 1)
        >>> from ddesys.plot import pyplot
        >>> pyplot().close(fig)
        """
        from .plot import plot_time_response

        return plot_time_response(self.t, self.y, axes=axes, title=title, error_estimate=self.error_estimate)


def _check_t(t):
    arr = real_vector(t, "t", "real times")
    if np.any(arr < 0):
        raise ValueError(f"t must be >= 0 (the history before t = 0 is zero), got min {arr.min():.6g}")
    return arr


def _check_h(h, A, Ad, tau):
    tmin = float(tau.min())
    if h is None:
        e = float(np.linalg.norm(A, 2) + sum(np.linalg.norm(m, 2) for m in Ad))
        return min(tmin / 100, 1.0 / e) if e > 0 else tmin / 100
    try:
        h = float(h)
    except (TypeError, ValueError):
        raise TypeError(f"h must be a real step, got {type(h).__name__}") from None
    if not (h > 0 and np.isfinite(h)):
        raise ValueError(f"h must be a finite step > 0, got {h}")
    h = min(h, tmin)
    rho = float(np.abs(np.linalg.eigvals(A)).max())
    if h * rho > 2.5:
        warnings.warn(f"step h={h:.4g} times the spectral radius of A ({rho:.4g}) exceeds 2.5: RK4 may be "
                      "unstable; use a smaller h", RuntimeWarning, stacklevel=3)
    return h


def _check_tol(h, rtol, atol):
    """``(rtol, atol)`` of the error control, or ``(None, None)`` for one fixed-step solve (``h`` alone)."""
    if h is not None and rtol is None and atol is None:
        return None, None
    out = []
    for name, v, default in (("rtol", rtol, DEFAULT_RTOL), ("atol", atol, 0.0)):
        if v is None:
            out.append(default)
            continue
        try:
            f = float(v)
        except (TypeError, ValueError):
            f = np.nan
        if isinstance(v, (bool, str, bytes)) or not (f >= 0 and np.isfinite(f)):
            raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        out.append(f)
    if out[0] == 0 and out[1] == 0:
        raise ValueError("rtol and atol cannot both be 0 (no error can be guaranteed to vanish)")
    return tuple(out)


def _run(A, Ad, tau, B, x0, forcing, t, h, tols, max_bytes, what, readout, default, breaks=None):
    """States ``(T, n, r)`` at ``t`` and the error estimate of ``readout(states)`` (None for a fixed step);
    ``default``: ``h`` is the default step; ``breaks``: times where the input is not smooth, with the jumps
    and kinks found (:func:`ddesys.matrix._timeresp_steps.input_breaks`) grid points."""
    h0 = min(2 * h, float(tau.min()))            # level 1, the first one returned, has the step h
    if default:                                  # from min(tau / 50, 1 / e): 2 h e <= 2, RK4-stable
        e = float(np.linalg.norm(A, 2) + sum(np.linalg.norm(m, 2) for m in Ad))
        h0 = min(4 * h, 2 / e, float(tau.min())) if e > 0 else min(4 * h, float(tau.min()))
    hf = h if tols[0] is None else h0 / 2
    jumps = input_breaks(A, Ad, tau, B, x0, forcing, t, hf, max_bytes, what, breaks)
    if tols[0] is None:
        return solve_fixed(A, Ad, tau, B, x0, forcing, t, h, max_bytes, what, jumps=jumps), None
    X, est, _ = solve_controlled(A, Ad, tau, B, x0, forcing, t, h0, max_bytes, what, readout, *tols, jumps=jumps)
    return X, est


def simulate(A, Ad, tau, B, C, D, u, t, *, x0=None, h=None, rtol=None, atol=None, max_bytes=None,
             breaks=None):
    """Response to the input ``u`` on the times ``t`` (zero history before ``t = 0``).

    Parameters
    ----------
    A, Ad, tau, B, C, D : ndarray
        Validated matrices (:func:`ddesys.matrix.charmatrix.check_statespace`), real or complex.
    u : callable
        Vectorized ``u(times) -> (m, len(times))`` (``(len(times),)`` allowed for ``m = 1``); only
        ``t >= 0`` is asked (``u = 0`` before). Piecewise smooth on ``t > 0`` for fourth order: the times
        where ``u`` or ``u'`` jumps are found (:func:`ddesys.matrix._timeresp_steps.input_jumps`: sampled at
        a quarter step, each bisected) and made grid points with their breakpoints (one-sided ``u`` at each).
    t : array_like, real ``(T,)``
        Output times ``>= 0``, any order.
    x0 : array_like ``(n,)``, optional
        State at ``t = 0`` (``x(0-) = 0``); default 0.
    h : float, optional
        Largest step; a step above ``min(tau)`` is reduced to it. Given alone: one fixed-step solve, no
        error control (``error_estimate`` None). With ``rtol``/``atol``: the step of the first solution
        the error control checks (against the step ``2 h``). Default: the error control starts from
        ``h = min(min(tau) / 50, 1 / e)``, ``e = ||A||_2 + sum ||Ad_k||_2`` (``2 h e <= 2``: within RK4's
        stability).
    rtol, atol : float, optional
        Error control (module docstring): the grid is refined by halving until the estimated error of
        every output channel is at most ``atol + rtol max_t |y|`` over the output times. Default
        ``rtol = DEFAULT_RTOL`` (``1e-6``), ``atol = 0``, unless ``h`` is given alone.
    max_bytes : int, optional
        Budget of the stored grid, checked before allocating (default ``SIMULATE_MAX_BYTES``, 1 GiB,
        capped by the memory budget of :mod:`ddesys.budget`); it also bounds the error control's
        refinement.
    breaks : array_like, optional
        Further times where ``u`` is not smooth (jumps or kinks closer together than a quarter step, which
        the search can miss), grid points like those found; times outside ``(0, max(t)]`` are ignored.

    Returns
    -------
    TimeResponse
        ``t (T,)``, ``y (p, T)``, ``x (n, T)`` (complex when the system or ``u`` is), and
        ``error_estimate``, the estimated largest absolute error of ``y`` (None for a fixed step).

    Raises
    ------
    TypeError
        ``u`` not callable; non-real ``t`` or ``h``.
    ValueError
        ``t < 0`` or non-finite; ``u`` returning a wrong shape or non-finite values; ``x0`` of a wrong
        shape; ``h <= 0``; ``breaks`` not finite; ``rtol`` or ``atol`` negative or non-finite, or both 0; a
        grid over ``max_bytes`` (for the error control: its first two grids, steps ``2 h`` and ``h``).

    Warns
    -----
    RuntimeWarning
        ``h`` times the spectral radius of ``A`` above 2.5 (RK4 stability); a tolerance not met within
        ``max_bytes``, at the rounding level or at an order of convergence below 2 (the message names the
        error estimate reached, which the returned ``error_estimate`` also holds); ``u`` jumping at more
        than ``MAX_JUMPS`` places (the grid does not follow them).

    Examples
    --------
    ``x' = -x + 0.5 x(t - 1) + u`` with ``u = 1`` settles to the DC gain ``1 / (1 - 0.5) = 2``:

    >>> import numpy as np
    >>> from ddesys.matrix.charmatrix import check_statespace
    >>> from ddesys.matrix.timeresp import simulate
    >>> d = check_statespace([[-1.0]], [[0.5]], 1.0, [[1.0]], [[1.0]])
    >>> r = simulate(*d, np.ones_like, [0.0, 1.0, 80.0])
    >>> np.round(r.y[0], 6), r.error_estimate < 1e-6 * 2
    (array([0.      , 0.632121, 2.      ]), True)
    """
    if not callable(u):
        raise TypeError(f"u must be a callable u(times) -> (m, len(times)), got {type(u).__name__}")
    t = _check_t(t)
    n, m = B.shape
    tols, default = _check_tol(h, rtol, atol), h is None
    h = _check_h(h, A, Ad, tau)
    x0 = np.zeros((n, 1)) if x0 is None else _check_x0(x0, n)

    def fn(times):
        v = np.asarray(u(times))
        if v.dtype.kind not in "biufc":
            raise TypeError(f"u must return numbers, got dtype {v.dtype}")
        if m == 1 and v.shape == (times.size,):
            v = v[None]
        if v.shape != (m, times.size):
            raise ValueError(f"u(times) must return shape (m, len(times)) = {(m, times.size)}"
                             + (" or (len(times),)" if m == 1 else "") + f", got {v.shape}")
        if not np.all(np.isfinite(v)):
            raise ValueError("u returned non-finite values")
        return v.astype(np.result_type(v, np.float64))[:, None, :]

    Du = D @ fn(t)[:, 0, :] if t.size else np.zeros((C.shape[0], 0))

    def readout(X):                                                  # (T, n, 1) -> y (p, T)
        return C @ X[:, :, 0].T + Du

    X, est = _run(A, Ad, tau, B, x0, ("call", fn, 1), t, h, tols, max_bytes, "simulate", readout, default,
                  breaks)
    return TimeResponse(t, readout(X), X[:, :, 0].T, error_estimate=est)


def _check_x0(x0, n):
    try:
        v = np.asarray(x0)
    except Exception as exc:  # noqa: BLE001 - re-raised with the argument's name
        raise TypeError(f"x0 must be an array of numbers, got {type(x0).__name__}") from exc
    if v.dtype.kind not in "biufc":
        raise TypeError(f"x0 must hold numbers, got dtype {v.dtype}")
    if v.shape != (n,):
        raise ValueError(f"x0 must have shape (n,) = ({n},), got {v.shape}")
    if not np.all(np.isfinite(v)):
        raise ValueError("x0 must be finite")
    return v.astype(np.result_type(v, np.float64))[:, None]


def impulse(A, Ad, tau, B, C, D, t, *, h=None, rtol=None, atol=None, max_bytes=None):
    """Impulse response: ``x(0+) = B[:, j]`` for each input ``j``, zero history; ``D delta(t)`` omitted.

    Parameters
    ----------
    A, Ad, tau, B, C, D : ndarray
        Validated matrices (:func:`ddesys.matrix.charmatrix.check_statespace`).
    t : array_like, real ``(T,)``
        Output times ``>= 0``.
    h, rtol, atol, max_bytes
        As in :func:`simulate` (the tolerance per output-input pair ``y[i, j]``).

    Returns
    -------
    TimeResponse
        ``y (p, m, T) = C x``, ``x (n, m, T)``, ``error_estimate``.

    Examples
    --------
    Before the delay acts, ``x' = -x + 0.5 x(t - 1)`` decays as ``exp(-t)``:

    >>> import numpy as np
    >>> from ddesys.matrix.charmatrix import check_statespace
    >>> from ddesys.matrix.timeresp import impulse
    >>> d = check_statespace([[-1.0]], [[0.5]], 1.0, [[1.0]], [[1.0]])
    >>> r = impulse(*d, [0.0, 0.5])
    >>> r.y.shape, np.allclose(r.y[0, 0], np.exp(-r.t), atol=1e-9)
    ((1, 1, 2), True)
    """
    t = _check_t(t)
    tols, default = _check_tol(h, rtol, atol), h is None
    h = _check_h(h, A, Ad, tau)

    readout = Readout(C)                                            # (T, n, m) -> y (p, m, T)
    X, est = _run(A, Ad, tau, B, B.copy(), None, t, h, tols, max_bytes, "impulse", readout, default)
    return TimeResponse(t, readout(X), np.moveaxis(X, 0, -1), error_estimate=est)


def step(A, Ad, tau, B, C, D, t, *, h=None, rtol=None, atol=None, max_bytes=None):
    """Step response: ``u = e_j`` (unit step on input ``j``) for each ``j``, zero history.

    Parameters
    ----------
    A, Ad, tau, B, C, D : ndarray
        Validated matrices (:func:`ddesys.matrix.charmatrix.check_statespace`).
    t : array_like, real ``(T,)``
        Output times ``>= 0``.
    h, rtol, atol, max_bytes
        As in :func:`simulate` (the tolerance per output-input pair ``y[i, j]``).

    Returns
    -------
    TimeResponse
        ``y (p, m, T) = C x + D``, ``x (n, m, T)``, ``error_estimate``; a stable system settles to the
        DC gain ``-C (A + sum_k Ad_k)^{-1} B + D``.

    Examples
    --------
    >>> import numpy as np
    >>> from ddesys.matrix.charmatrix import check_statespace
    >>> from ddesys.matrix.timeresp import step
    >>> d = check_statespace([[-1.0]], [[0.5]], 1.0, [[1.0]], [[1.0]], [[0.25]])
    >>> r = step(*d, [0.0, 80.0])
    >>> np.round(r.y[0, 0], 6), r.error_estimate <= 1e-6 * 2.25
    (array([0.25, 2.25]), True)
    """
    t = _check_t(t)
    tols, default = _check_tol(h, rtol, atol), h is None
    h = _check_h(h, A, Ad, tau)
    n, m = B.shape

    readout = Readout(C, D)                                         # (T, n, m) -> y (p, m, T)
    X, est = _run(A, Ad, tau, B, np.zeros((n, m)), ("const", np.eye(m)), t, h, tols, max_bytes, "step",
                  readout, default)
    return TimeResponse(t, readout(X), np.moveaxis(X, 0, -1), error_estimate=est)


__all__ = ["BREAKPOINT_ORDER", "DEFAULT_RTOL", "SIMULATE_MAX_BYTES", "TimeResponse", "breakpoints", "impulse",
           "simulate", "step"]
