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

    def simulate(self, u, t, x0=None, h=None):
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
            Step of the method of steps.

        Returns
        -------
        TimeResponse
            ``(t, y (p, T), x (n, T))``.

        Examples
        --------
        >>> import numpy as np
        >>> from ddesys import DelayStateSpace
        >>> sys = DelayStateSpace([[-1.0]], [[0.5]], 1.0, B=[1.0], C=[1.0])
        >>> t, y, x = sys.simulate(np.ones_like, np.linspace(0, 20, 5))     # unit step, settling to 2
        >>> np.round(y[0], 4)
        array([0.    , 1.6098, 1.9192, 1.9833, 1.9965])
        """
        return simulate(self.A, self.Ad, self.tau, self.B, self.C, self.D, u, t, x0=x0, h=h)

    def impulse(self, t, h=None):
        """Impulse response on the times ``t``: ``TimeResponse`` with ``y (p, m, T)`` (``D`` excluded).

        Examples
        --------
        >>> from ddesys import DelayStateSpace
        >>> r = DelayStateSpace([[-1.0]], [[0.5]], 1.0, B=[1.0], C=[1.0]).impulse([0.0, 1.0, 2.0])
        >>> r.y.shape, [round(float(v), 4) for v in r.y[0, 0]]          # e^{-t} until the delay acts
        ((1, 1, 3), [1.0, 0.3679, 0.3193])
        """
        return impulse(self.A, self.Ad, self.tau, self.B, self.C, self.D, t, h=h)

    def step(self, t, h=None):
        """Step response on the times ``t``: ``TimeResponse`` with ``y (p, m, T)``.

        Examples
        --------
        >>> from ddesys import DelayStateSpace
        >>> r = DelayStateSpace([[-1.0]], [[0.5]], 1.0, B=[1.0], C=[1.0]).step([0.0, 20.0])
        >>> [round(float(v), 4) for v in r.y[0, 0]]
        [0.0, 1.9965]
        """
        return step(self.A, self.Ad, self.tau, self.B, self.C, self.D, t, h=h)


__all__ = ["ContinuousSSResponses"]
