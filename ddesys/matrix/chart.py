"""Stability charts of matrix delay systems over a grid of two parameters (docs/theory.md,
"Characteristic roots of matrix delay systems", stability charts).

At every grid point the rightmost characteristic roots are estimated by the batched fast path
(:func:`ddesys.matrix.rightmost.rightmost_roots_batch`: Chebyshev discretization of fixed degree, the rightmost
eigenvalues refined by Newton's method on the exact characteristic matrix). No point is certified;
:func:`ddesys.matrix.roots.characteristic_roots` certifies one point when needed. The points go in batches
sized to the memory budget (:mod:`ddesys.budget`), serially, in threads, or through any
:class:`concurrent.futures.Executor` (a process pool, a Dask or Ray executor): the systems are built in
the calling process and only arrays travel, so the results are the same numbers whichever way they run.
"""
from __future__ import annotations

import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

import numpy as np

from ..budget import check_bytes
from ._roots_igd import auto_grid, single_blas_thread
from .charmatrix import check_statespace
from .rightmost import rightmost_roots_batch

__all__ = ["StabilityChart", "stability_chart", "delay_chart"]

CHUNK = 64                 # grid points per batched eigenvalue call


class StabilityChart:
    """A stability chart: the spectral abscissa estimate on a grid ``y x x``.

    Attributes
    ----------
    x : float ndarray ``(nx,)``;  y : float ndarray ``(ny,)``
    abscissa : float ndarray ``(ny, nx)``
        ``max Re s`` of the rightmost Newton-refined roots at ``(x[i], y[j])`` in ``abscissa[j, i]``.
    stable : bool ndarray ``(ny, nx)``
        ``abscissa < 0``.
    converged : bool ndarray ``(ny, nx)``
        Newton converged from some eigenvalue (else ``abscissa`` is the discretization's own value).
    n_grid : int ndarray ``(ny, nx)``
        Chebyshev degree used at each point.
    xlabel, ylabel : str
    seconds : float
        Wall time of the computation.
    """

    __slots__ = ("x", "y", "abscissa", "stable", "converged", "n_grid", "xlabel", "ylabel", "seconds")

    def __init__(self, **kw):
        for name in self.__slots__:
            value = kw[name]
            if isinstance(value, np.ndarray):
                value.flags.writeable = False
            object.__setattr__(self, name, value)

    def __setattr__(self, name, value):
        raise AttributeError(f"StabilityChart is immutable: cannot set {name!r}")

    def __repr__(self):
        return (f"StabilityChart({self.y.size} x {self.x.size} points, {self.stable.mean():.0%} stable, "
                f"{(~self.converged).sum()} not converged, {self.seconds:.2f} s)")

    def plot(self, ax=None, title=None):
        """Filled contours of the spectral abscissa, the level 0 (stability boundary) in black.

        The diverging colour map is centred on 0 and each sign is scaled to its own range (ten levels
        from the most negative abscissa to 0, ten from 0 to the largest), so a slightly unstable region
        (abscissa ``+0.05`` beside ``-2`` on the stable side) is as visible as the stable one; the
        colour bar gives each half its own ticks.

        Parameters
        ----------
        ax : matplotlib Axes, optional
        title : str, optional

        Returns
        -------
        matplotlib Figure
        """
        if self.x.size < 2 or self.y.size < 2:
            raise ValueError("plot needs at least 2 points along x and along y")
        from matplotlib.colors import TwoSlopeNorm

        from ..plot import new_figure

        fig, ax = (ax.figure, ax) if ax is not None else new_figure(figsize=(6.5, 4.5))
        a = np.clip(self.abscissa, -5.0 * np.abs(self.abscissa).min() - 1.0, None)
        levels, vmin, vmax = _signed_levels(a)
        cf = ax.contourf(self.x, self.y, a, levels=levels, cmap="RdBu_r",
                         norm=TwoSlopeNorm(vcenter=0.0, vmin=vmin, vmax=vmax))
        bar = fig.colorbar(cf, ax=ax, label="spectral abscissa max Re s (1 / time unit)\n"
                           "each sign scaled to its own range")
        bar.set_ticks(levels[::5] if levels.size > 5 else levels)
        if np.nanmin(a) < 0 < np.nanmax(a):
            ax.contour(self.x, self.y, a, levels=[0.0], colors="k", linewidths=1.5)
        ax.set(xlabel=self.xlabel, ylabel=self.ylabel,
               title=title or "Stability chart (blue: stable, red: unstable; black: max Re s = 0)")
        return fig


def _signed_levels(a):
    """Contour levels with 0 a boundary, ten per sign present, and the norm's ``(vmin, vmax)`` around 0."""
    lo, hi = float(np.nanmin(a)), float(np.nanmax(a))
    if lo < 0 < hi:
        return np.concatenate([np.linspace(lo, 0.0, 11)[:-1], np.linspace(0.0, hi, 11)]), lo, hi
    if lo < 0:                                   # all stable: blues from lo to 0
        return np.linspace(lo, 0.0, 21), lo, -lo
    if hi > 0:                                   # all unstable: reds from 0 to hi
        return np.linspace(0.0, hi, 21), -hi, hi
    return np.array([-1.0, 0.0, 1.0]), -1.0, 1.0   # every abscissa exactly 0


def _axis(name, v):
    try:
        a = np.asarray(v, dtype=float).reshape(-1)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a 1-D array of real numbers") from None
    if a.size == 0 or not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be a non-empty array of finite numbers")
    return a


def stability_chart(system_fn, x, y, *, n_grid="auto", workers=None, executor=None, xlabel="x", ylabel="y"):
    """Spectral abscissa estimate of ``system_fn(x[i], y[j])`` on the grid.

    Parameters
    ----------
    system_fn : callable ``(xi, yj) -> (A, Ad, tau)``
        One system per grid point (``A (n, n)``, ``Ad (K, n, n)``, ``tau (K,)``), the same ``n`` and ``K``
        everywhere.
    x : array_like ``(nx,)``;  y : array_like ``(ny,)``
    n_grid : int or "auto"
        Chebyshev degree. ``"auto"``: per point, enough for the roots with ``Re s >= 0``, whose modulus
        is at most ``||A|| + sum_k ||Ad_k||`` (:func:`ddesys.matrix._roots_igd.auto_grid`, 12 to 64).
    workers : int, optional
        Threads (default :func:`ddesys.cpu.threads.thread_budget`); each runs single-threaded BLAS. With
        an ``executor``: the most batches in flight at once (give the executor's worker count; the
        memory budget is shared among them).
    executor : concurrent.futures.Executor, optional
        Runs the batches instead of threads: anything with ``submit(fn, *args)`` returning a future with
        ``result()`` (``ProcessPoolExecutor``, a Dask or Ray executor). ``system_fn`` is still called in
        the calling process (it need not be picklable: a lambda works with a process pool); each batch
        travels as a module-level function and arrays (its degree and the ``A``, ``Ad``, ``tau`` of up to
        :data:`CHUNK` points). The executor is not shut down. The numbers equal the serial run's: the
        batches are the same and each runs with one BLAS thread.
    xlabel, ylabel : str
        Axis labels of :meth:`StabilityChart.plot`.

    Returns
    -------
    StabilityChart

    Raises
    ------
    ddesys.budget.BudgetError
        A single grid point (its ``n (N + 1)``-square eigenvalue problem) or the grid of systems does not
        fit the memory budget (:mod:`ddesys.budget`). Otherwise the points go in batches sized so that
        the batches running at once fit it (fewer threads when one batch per thread would not).

    Examples
    --------
    >>> import numpy as np
    >>> from ddesys.matrix.chart import stability_chart
    >>> fn = lambda t, k: ([[0.0]], [[-k]], [t])       # x' = -k x(t - t): stable iff k t < pi/2
    >>> ch = stability_chart(fn, [0.5, 1.0, 2.0], [0.5, 1.0], workers=1)
    >>> ch.stable
    array([[ True,  True,  True],
           [ True,  True, False]])
    """
    if not callable(system_fn):
        raise TypeError(f"system_fn must be callable (xi, yj) -> (A, Ad, tau), got {type(system_fn).__name__}")
    x, y = _axis("x", x), _axis("y", y)
    if n_grid != "auto" and (isinstance(n_grid, bool) or not isinstance(n_grid, (int, np.integer))
                             or n_grid < 2):
        raise ValueError(f"n_grid must be 'auto' or an integer >= 2, got {n_grid!r}")
    if workers is None:
        from ..cpu.threads import thread_budget
        workers = thread_budget()
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    if executor is not None and not callable(getattr(executor, "submit", None)):
        raise TypeError("executor must be a concurrent.futures.Executor (an object with submit(fn, *args)), "
                        f"got {type(executor).__name__}")
    t0 = time.perf_counter()
    As, Ads, taus, shape = [], [], [], None
    for yj in y:
        for xi in x:
            try:
                d = check_statespace(*system_fn(xi, yj))
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"system_fn({xi!r}, {yj!r}): {exc}") from exc
            if shape is None:
                shape = d.Ad.shape
                check_bytes(2 * x.size * y.size * (shape[0] + 1) * d.A.nbytes,
                            f"stability chart: the {y.size} x {x.size} grid of systems ({shape[1]} states, "
                            f"{shape[0]} delays)", "use a coarser grid, or chart the parameter plane in parts")
            elif d.Ad.shape != shape:
                raise ValueError(f"system_fn must return systems of one shape: Ad {shape} at the first point, "
                                 f"{d.Ad.shape} at ({xi!r}, {yj!r})")
            As.append(d.A)
            Ads.append(d.Ad)
            taus.append(d.tau)
    A, Ad, tau = np.stack(As), np.stack(Ads), np.stack(taus)
    if n_grid == "auto":
        r0 = np.linalg.norm(A, 2, axis=(1, 2)) + np.linalg.norm(Ad, 2, axis=(2, 3)).sum(axis=1)
        N = np.array([min(64, auto_grid(t, r, n_min=12)) for t, r in zip(tau.max(axis=1), r0)])
        N = 4 * np.ceil(N / 4).astype(int)                      # few distinct degrees: larger batches
    else:
        N = np.full(A.shape[0], int(n_grid))
    n, K, item = A.shape[-1], Ad.shape[1], A.itemsize
    top = int(N.max())
    what = (f"stability chart: one grid point at Chebyshev degree {top} on {n} states (a {n * (top + 1)} x "
            f"{n * (top + 1)} eigenvalue problem)")
    hint = "give a smaller n_grid (the degree resolves roots up to about |s| = (N - 8) / (0.7 tau_max))"
    shared, point = _shared_bytes(n, top, item), _point_bytes(n, K, top, item)
    budget = check_bytes(shared + point, what, hint)             # refused only when one point does not fit
    workers = int(min(workers, budget // (shared + point)))      # concurrent batches share the budget
    jobs = []
    for deg in np.unique(N):
        idx = np.nonzero(N == deg)[0]
        room = budget // workers - _shared_bytes(n, deg, item)
        per = int(max(1, min(CHUNK, room // _point_bytes(n, K, deg, item))))
        jobs += [(int(deg), idx[i:i + per]) for i in range(0, idx.size, per)]

    est = np.empty(A.shape[0])
    ok = np.empty(A.shape[0], bool)
    if executor is not None:
        tasks = ((job, (job[0], A[job[1]], Ad[job[1]], tau[job[1]])) for job in jobs)     # sliced when sent
        for idx, res in _through(executor, workers, tasks):
            est[idx], ok[idx] = _batch_result(res, idx.size, executor)
    else:
        with single_blas_thread():
            if workers == 1 or len(jobs) == 1:
                results = (_chart_batch(deg, A[idx], Ad[idx], tau[idx]) for deg, idx in jobs)
                for (_, idx), (e, o) in zip(jobs, results):
                    est[idx], ok[idx] = e, o
            else:
                with ThreadPoolExecutor(max_workers=int(workers)) as pool:
                    results = pool.map(lambda j: _chart_batch(j[0], A[j[1]], Ad[j[1]], tau[j[1]]), jobs)
                    for (_, idx), (e, o) in zip(jobs, results):
                        est[idx], ok[idx] = e, o
    shp = (y.size, x.size)
    absc = est.reshape(shp)
    return StabilityChart(x=x, y=y, abscissa=absc, stable=absc < 0, converged=ok.reshape(shp),
                          n_grid=N.reshape(shp), xlabel=xlabel, ylabel=ylabel,
                          seconds=time.perf_counter() - t0)


def _chart_batch(deg, A, Ad, tau):
    """One batch of grid points at Chebyshev degree ``deg``: ``(estimate (B,), converged (B,))``, one BLAS
    thread (module level, so that a process pool can run it)."""
    with single_blas_thread():
        _, est, ok = rightmost_roots_batch(A, Ad, tau, n_grid=int(deg))
    return est, ok


def _batch_result(res, size, executor):
    """``(estimate (size,) float, converged (size,) bool)`` from what an executor's future returned for one
    batch, or a TypeError / ValueError naming the executor and what ``_chart_batch`` returns."""
    who = f"stability chart: the executor {type(executor).__module__}.{type(executor).__qualname__} returned"
    want = (f"the pair (estimate, converged) of _chart_batch: two arrays of {size} values (float abscissa "
            "estimates, bool convergence flags), one per grid point of the batch")
    if not isinstance(res, (tuple, list)) or len(res) != 2:
        got = f"a {type(res).__name__} of length {len(res)}" if isinstance(res, (tuple, list)) else \
            f"{type(res).__name__} {res!r:.60}"
        raise TypeError(f"{who} {got} for a batch of {size} points; expected {want}")
    e, o = (np.asarray(v) for v in res)
    if e.shape != (size,) or o.shape != (size,):
        raise ValueError(f"{who} arrays of shapes {e.shape} and {o.shape} for a batch of {size} points; "
                         f"expected {want}")
    if e.dtype.kind not in "fiu" or o.dtype.kind != "b":
        raise TypeError(f"{who} arrays of dtypes {e.dtype} and {o.dtype}; expected {want}")
    return e.astype(float), o


def _through(executor, workers, tasks):
    """Run ``_chart_batch(*args)`` for each ``(job, args)`` of ``tasks`` on ``executor``, at most ``workers``
    in flight; yields ``(job's indices, result)`` as the batches finish (in order for futures that are not
    :class:`concurrent.futures.Future`). On an error the batches still queued are cancelled."""
    pending = []                                                 # (future, indices), oldest first
    try:
        for job, args in tasks:
            while len(pending) >= workers:
                yield from _collect(pending)
            pending.append((executor.submit(_chart_batch, *args), job[1]))
        while pending:
            yield from _collect(pending)
    finally:
        for fut, _ in pending:
            fut.cancel()


def _collect(pending):
    """Remove from ``pending`` the batches that finished (at least one, waiting for it) and yield them."""
    futs = [fut for fut, _ in pending]
    if all(isinstance(fut, Future) for fut in futs):
        done = {id(fut) for fut in wait(futs, return_when=FIRST_COMPLETED).done}
    else:
        done = {id(futs[0])}                                     # other futures: the oldest
    finished = [p for p in pending if id(p[0]) in done]
    pending[:] = [p for p in pending if id(p[0]) not in done]
    for fut, idx in finished:
        yield idx, fut.result()


def _point_bytes(n, K, N, item):
    """Working memory per grid point of one batch at degree ``N``: the generator (``S^2``, ``S = n (N + 1)``)
    and its scaled block rows (float64), the eigenvalues, and the Newton stacks of ``2 n + 2`` starts."""
    S, q = n * (N + 1), 2 * n + 2
    return S * S * (8 + item) + 64 * S + q * n * n * (16 * 8 + 2 * K * item)


def _shared_bytes(n, N, item):
    """Working memory of one batch whatever its size: the differentiation block rows (``Kron(D, I)``) and
    LAPACK's copy of one generator with its workspace."""
    S = n * (N + 1)
    return S * S * (8 + item) + 64 * S


def delay_chart(A, Ad, tau1, tau2, *, n_grid="auto", workers=None, executor=None):
    """Stability chart of ``x' = A x + Ad[0] x(t - tau1) + Ad[1] x(t - tau2)`` over the two delays.

    Parameters
    ----------
    A : array_like ``(n, n)``;  Ad : array_like ``(2, n, n)``
    tau1 : array_like ``(nx,)``, ``> 0`` (x axis);  tau2 : array_like ``(ny,)``, ``> 0`` (y axis)
    n_grid, workers, executor : see :func:`stability_chart`

    Returns
    -------
    StabilityChart

    Examples
    --------
    >>> from ddesys.matrix.chart import delay_chart
    >>> ch = delay_chart([[-1.0]], [[[-0.5]], [[-1.5]]], [0.1, 3.0], [0.1, 3.0], workers=1)
    >>> ch.stable.tolist()             # at tau1 = tau2 = 3: x' = -x - 2 x(t - 3), unstable
    [[True, True], [True, False]]
    """
    d = check_statespace(A, Ad, [1.0, 1.0])
    t1, t2 = _axis("tau1", tau1), _axis("tau2", tau2)
    for name, t in (("tau1", t1), ("tau2", t2)):
        if np.any(t <= 0):
            raise ValueError(f"every delay in {name} must be > 0, got min {t.min()}")
    return stability_chart(lambda a, b: (d.A, d.Ad, np.array([a, b])), t1, t2, n_grid=n_grid,
                           workers=workers, executor=executor, xlabel="tau1 (time units)",
                           ylabel="tau2 (time units)")
