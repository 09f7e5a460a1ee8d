"""Delay sweeps of :class:`~ddesys.DelayStateSpace`: crossings, delay margin and the two-delay chart.

The mixin :class:`DelaySweeps` keeps a system's matrices and varies its delays: the imaginary-axis
crossings and the delay margin of a one-delay system (:mod:`ddesys.matrix.crossings`) and the stability
chart of a two-delay system (:mod:`ddesys.matrix.chart`).
"""
from __future__ import annotations


class DelaySweeps:
    """``crossings``, ``delay_margin`` and ``stability_chart`` of a continuous matrix delay system.

    The host class has the matrices ``A``, ``Ad (K, n, n)`` and ``n_delays``.
    """

    def _one_delay(self, what):
        if self.n_delays != 1:
            raise ValueError(f"{what} sweeps the system's one delay; this system has {self.n_delays} delays "
                             "(use stability_chart for two parameters)")
        return self.A, self.Ad[0]

    def crossings(self, tau_max):
        """Every delay in ``(0, tau_max]`` at which a characteristic root lies on the imaginary axis.

        The system's matrices are kept and its delay is swept (one-delay systems). A crossing at exactly
        ``tau_max`` is included; a root of multiplicity ``m`` on the axis appears ``m`` times.

        Parameters
        ----------
        tau_max : float
            Largest delay, ``> 0``.

        Returns
        -------
        list of Crossing
            Named tuples ``(tau, omega, direction)`` sorted by ``tau``: the root is ``i omega``;
            ``direction`` +1 destabilizing, -1 stabilizing, 0 a touch that does not cross.

        Raises
        ------
        ValueError
            More than one delay, a bad ``tau_max``.

        See Also
        --------
        delay_margin, ddesys.matrix.crossings.crossings

        Examples
        --------
        >>> from ddesys import DelayStateSpace
        >>> sys = DelayStateSpace(A=[[0.0]], Ad=[[-1.0]], tau=1.0)     # x' = -x(t - tau)
        >>> c = sys.crossings(8.0)
        >>> [(round(x.tau, 6), round(x.omega, 6), x.direction) for x in c]
        [(1.570796, 1.0, 1), (7.853982, 1.0, 1)]
        """
        from .crossings import crossings

        A, A1 = self._one_delay("crossings")
        return crossings(A, A1, tau_max)

    def delay_margin(self, which=None, direction=None, t_max=None):
        """Delay margins: the smallest delay at which the system, stable for smaller ones, loses stability.

        One delay: the smallest ``tau`` with the matrices kept (the system must be stable as ``tau -> 0+``).
        Several delays (:func:`ddesys.matrix.delay_margins.delay_margins`): with ``which=k`` the smallest value
        of delay ``k`` at which stability is lost, the others fixed at the system's values (stable with
        ``tau_k = 0``); with ``direction=d`` the smallest ``t`` such that the delays ``t d`` destabilize it
        (``direction=sys.tau``: the factor by which all its delays can be stretched); with neither, the list
        of the per-delay margins.

        Parameters
        ----------
        which : int, optional
            Index of the delay that varies.
        direction : array_like ``(K,)``, optional
            Non-negative delays, not all zero: ``tau = t * direction``.
        t_max : float, optional
            End of the search along a direction whose ratios are not commensurate (required there).

        Returns
        -------
        float or list of float
            ``inf`` when no crossing destabilizes the system.

        Raises
        ------
        ValueError
            A system not stable at the start of the sweep (``A + sum Ad`` not Hurwitz for one delay or a
            direction; not stable with ``tau_k = 0`` for ``which``).

        Examples
        --------
        >>> from ddesys import DelayStateSpace
        >>> round(DelayStateSpace(A=[[0.0]], Ad=[[-1.0]], tau=1.0).delay_margin(), 10)   # pi / 2
        1.5707963268
        >>> two = DelayStateSpace(A=[[0.0]], Ad=[[[-1.0]], [[-1.0]]], tau=[1.0, 1.0])
        >>> round(two.delay_margin(direction=[1.0, 1.0]), 10)            # x' = -2 x(t - t): pi / 4
        0.7853981634
        """
        from .crossings import delay_margin
        from .delay_margins import delay_margins

        if self.n_delays == 1 and which is None and direction is None:
            return delay_margin(self.A, self.Ad[0])
        return delay_margins(self.A, self.Ad, self.tau, which=which, direction=direction, t_max=t_max)

    def stability_chart(self, tau1, tau2, *, n_grid="auto", workers=None, executor=None):
        """Stability chart over the two delays of a two-delay system (see :func:`ddesys.matrix.chart.delay_chart`).

        Parameters
        ----------
        tau1, tau2 : array_like ``(n1,)``, ``(n2,)``
            Grids of the first and second delay.
        n_grid : int or "auto"
            Chebyshev degree (:func:`ddesys.matrix.chart.stability_chart`).
        workers : int, optional
            Threads, or with an ``executor`` the most batches in flight at once.
        executor : concurrent.futures.Executor, optional
            Runs the batches of grid points (a ``ProcessPoolExecutor``, a Dask or Ray executor); only
            arrays travel to it. The numbers equal the serial run's.

        Returns
        -------
        StabilityChart
            ``abscissa (n2, n1)``, ``stable``, and ``plot()``.

        Raises
        ------
        ValueError
            A system without exactly two delays.

        Examples
        --------
        >>> import numpy as np
        >>> from ddesys import DelayStateSpace
        >>> sys = DelayStateSpace([[-1.0]], [[[-0.8]], [[-0.8]]], [1.0, 1.0])
        >>> chart = sys.stability_chart(np.linspace(0.1, 3, 4), np.linspace(0.1, 3, 4))
        >>> chart.stable.shape, bool(chart.stable[0, 0]), bool(chart.stable[-1, -1])
        ((4, 4), True, False)
        """
        from .chart import delay_chart

        if self.n_delays != 2:
            raise ValueError(f"stability_chart sweeps two delays; this system has {self.n_delays}")
        return delay_chart(self.A, self.Ad, tau1, tau2, n_grid=n_grid, workers=workers, executor=executor)


__all__ = ["DelaySweeps"]
