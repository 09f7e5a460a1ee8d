"""Time responses of :class:`~ddesys.DelayStateSpace`: simulation, impulse and step responses.

The mixin :class:`ContinuousSSResponses` gives the class its time-domain methods, as
:class:`~ddesys.continuous_response.ContinuousResponses` does for :class:`~ddesys.DelaySystem` and
:class:`~ddesys.matrix.discrete_response.DiscreteSSResponses` for the discrete matrix class; the
method of steps itself is :mod:`ddesys.matrix.timeresp` (functions on the matrices, docs/theory.md §9).
"""
from __future__ import annotations

from .timeresp import impulse, simulate, step


class ContinuousSSResponses:
    """``simulate``, ``impulse`` and ``step`` of a continuous matrix delay system.

    The host class has the matrices ``A``, ``Ad``, ``tau``, ``B``, ``C``, ``D``.
    """

    def simulate(self, u, t, x0=None, h=None, *, rtol=None, atol=None, max_bytes=None, breaks=None):
        """Response to the input ``u`` on the times ``t`` (zero history; see :func:`ddesys.matrix.timeresp.simulate`).

        Parameters
        ----------
        u : callable
            ``u(times) -> (m, len(times))`` (or ``(len(times),)`` for one input); zero for ``t < 0``.
        t : array_like, real ``(T,)``
            Output times ``>= 0``.
        x0 : array_like ``(n,)``, optional
            State at ``t = 0`` (the history before is zero).
        h : float, optional
            Step of the method of steps: given alone, one fixed-step solve without error estimate;
            with ``rtol``/``atol``, the first step of the error control.
        rtol, atol : float, optional
            Error control: the step is halved until the estimated error of each output is at most
            ``atol + rtol max_t |y|`` (default ``rtol = 1e-6``, ``atol = 0``, unless ``h`` is given
            alone); a tolerance out of reach within the memory budget warns (``RuntimeWarning``).
        max_bytes : int, optional
            Memory budget of the grid (default: :mod:`ddesys.budget`, at most 1 GiB).
        breaks : array_like, optional
            Times where ``u`` or ``u'`` jumps, made grid points besides those found by sampling ``u``
            (name jumps closer together than a quarter step, which the search can miss).

        Returns
        -------
        TimeResponse
            ``(t, y (p, T), x (n, T))``, and ``error_estimate``: the estimated largest absolute error of
            ``y`` (None for a fixed step ``h`` alone).

        Examples
        --------
        >>> import numpy as np
        >>> from ddesys import DelayStateSpace
        >>> sys = DelayStateSpace([[-1.0]], [[0.5]], 1.0, B=[1.0], C=[1.0])
        >>> t, y, x = sys.simulate(np.ones_like, np.linspace(0, 20, 5))     # unit step, settling to 2
        >>> np.round(y[0], 4)
        array([0.    , 1.6098, 1.9192, 1.9833, 1.9965])
        """
        return simulate(self.A, self.Ad, self.tau, self.B, self.C, self.D, u, t, x0=x0, h=h, rtol=rtol,
                        atol=atol, max_bytes=max_bytes, breaks=breaks)

    def impulse(self, t, h=None, *, rtol=None, atol=None, max_bytes=None):
        """Impulse response on the times ``t`` (``x(0+) = B[:, j]`` for each input ``j``; ``D`` excluded).

        Parameters
        ----------
        t : array_like, real ``(T,)``
            Output times ``>= 0``.
        h : float, optional
            Step of the method of steps, as in :meth:`simulate`.
        rtol, atol : float, optional
            Error control as in :meth:`simulate`, the tolerance per output-input pair.
        max_bytes : int, optional
            Memory budget of the grid (see :func:`ddesys.matrix.timeresp.impulse`).

        Returns
        -------
        TimeResponse
            ``y (p, m, T)`` (input ``j`` in ``[:, j]``), ``x (n, m, T)``, ``error_estimate``.

        Raises
        ------
        ValueError
            Negative times, a step ``h <= 0``, negative tolerances or both zero, a grid over the budget.
        TypeError
            A non-real ``h``.

        Examples
        --------
        >>> from ddesys import DelayStateSpace
        >>> r = DelayStateSpace([[-1.0]], [[0.5]], 1.0, B=[1.0], C=[1.0]).impulse([0.0, 1.0, 2.0])
        >>> r.y.shape, [round(float(v), 4) for v in r.y[0, 0]]          # e^{-t} until the delay acts
        ((1, 1, 3), [1.0, 0.3679, 0.3193])
        """
        return impulse(self.A, self.Ad, self.tau, self.B, self.C, self.D, t, h=h, rtol=rtol, atol=atol,
                       max_bytes=max_bytes)

    def step(self, t, h=None, *, rtol=None, atol=None, max_bytes=None):
        """Step response on the times ``t`` (a unit step on each input ``j`` in turn, zero history).

        Parameters
        ----------
        t : array_like, real ``(T,)``
            Output times ``>= 0``.
        h : float, optional
            Step of the method of steps, as in :meth:`simulate`.
        rtol, atol : float, optional
            Error control as in :meth:`simulate`, the tolerance per output-input pair.
        max_bytes : int, optional
            Memory budget of the grid (see :func:`ddesys.matrix.timeresp.step`).

        Returns
        -------
        TimeResponse
            ``y (p, m, T)`` (input ``j`` in ``[:, j]``, ``D`` included), ``x (n, m, T)``, ``error_estimate``.

        Raises
        ------
        ValueError
            As :meth:`impulse`.
        TypeError
            As :meth:`impulse`.

        Examples
        --------
        >>> from ddesys import DelayStateSpace
        >>> r = DelayStateSpace([[-1.0]], [[0.5]], 1.0, B=[1.0], C=[1.0]).step([0.0, 20.0], rtol=1e-8)
        >>> [round(float(v), 4) for v in r.y[0, 0]], r.error_estimate < 1e-8 * 2
        ([0.0, 1.9965], True)
        """
        return step(self.A, self.Ad, self.tau, self.B, self.C, self.D, t, h=h, rtol=rtol, atol=atol,
                    max_bytes=max_bytes)


__all__ = ["ContinuousSSResponses"]
