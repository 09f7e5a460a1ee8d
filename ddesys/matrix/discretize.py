"""Discretization of continuous matrix delay systems: :func:`zoh_statespace`.

The continuous ``x' = A x + sum_k Ad_k x(t - tau_k) + B u`` becomes a
:class:`~ddesys.matrix.discrete.DiscreteDelayStateSpace` with the input and the delayed state held over
a step (or by forward Euler); the matrix counterpart of :mod:`ddesys.discretize`.
"""
from __future__ import annotations

import numpy as np
import scipy.linalg

from .._validate import MAX_DELAY_STEPS, check_dt
from .charmatrix import check_statespace
from .discrete import DiscreteDelayStateSpace


def zoh_statespace(A, Ad, tau, B=None, C=None, D=None, dt=None, method="zoh"):
    """Discretize ``x' = A x + sum_k Ad_k x(t - tau_k) + B u`` with step ``dt``.

    ``"zoh"`` holds the input and the delayed state over a step: ``Phi = expm(A dt)``,
    ``Gamma = int_0^dt expm(A s) ds`` (the top-right block of ``expm([[A, I], [0, 0]] dt)``, valid for
    singular ``A``), ``G_k = Gamma Ad_k``, ``B_d = Gamma B``. ``"euler"``: ``Phi = I + A dt``,
    ``G_k = Ad_k dt``, ``B_d = B dt``. The delays become ``tau_k / dt`` steps (linear interpolation of the
    fractional part); ``C``, ``D`` are kept. For diagonal ``A``, ``Ad`` this is :func:`ddesys.zoh` /
    :func:`ddesys.euler` mode by mode.

    Parameters
    ----------
    A, Ad, tau, B, C, D :
        As :func:`ddesys.matrix.charmatrix.check_statespace`.
    dt : float
        Step ``> 0``, at most ``min(tau)`` (every delay at least one step) and at least
        ``max(tau) / MAX_DELAY_STEPS``.
    method : {"zoh", "euler"}

    Returns
    -------
    DiscreteDelayStateSpace
        With ``dt`` kept.

    Raises
    ------
    ValueError
        A bad ``dt`` (saying the allowed range), an overflowing ``expm``, an unknown ``method``, or a
        bad system matrix (naming it).

    Examples
    --------
    >>> import numpy as np
    >>> from ddesys import zoh_statespace
    >>> sd = zoh_statespace([[-1.0]], [[0.5]], tau=1.0, B=[1.0], C=[1.0], dt=0.1)
    >>> float(sd.delay[0]), round(float(sd.Phi[0, 0]), 4), round(float(sd.G[0, 0, 0]), 4), sd.dt
    (10.0, 0.9048, 0.0476, 0.1)
    """
    data = check_statespace(A, Ad, tau, B, C, D)
    if dt is None:
        raise TypeError("zoh_statespace: dt (the step, > 0) is required")
    dt = check_dt(dt, allow_true=False)
    s = data.tau / dt
    if s.min() < 1:
        raise ValueError(f"dt = {dt:g} gives a delay of {s.min():.4g} < 1 step; every delay must be at least one "
                         f"step: use dt <= min(tau) = {data.tau.min():.6g}")
    if s.max() > MAX_DELAY_STEPS:
        raise ValueError(f"dt = {dt:g} gives a delay of {s.max():.4g} steps > MAX_DELAY_STEPS = {MAX_DELAY_STEPS}: "
                         f"use dt >= max(tau) / MAX_DELAY_STEPS = {data.tau.max() / MAX_DELAY_STEPS:.6g}")
    n = data.A.shape[0]
    if method == "zoh":
        blk = np.zeros((2 * n, 2 * n), data.A.dtype)
        blk[:n, :n] = data.A * dt
        blk[:n, n:] = np.eye(n) * dt
        with np.errstate(all="ignore"):
            E = scipy.linalg.expm(blk)
        Phi, Gam = E[:n, :n], E[:n, n:]
    elif method == "euler":
        Phi, Gam = np.eye(n) + data.A * dt, np.eye(n) * dt
    else:
        raise ValueError(f"method must be 'zoh' or 'euler', got {method!r}")
    if not (np.all(np.isfinite(Phi)) and np.all(np.isfinite(Gam))):
        raise ValueError(f"zoh_statespace(dt={dt:g}, method={method!r}) overflows (||A|| dt too large); use a "
                         "smaller dt")
    return DiscreteDelayStateSpace(Phi, Gam @ data.Ad, s, Gam @ data.B, data.C, data.D, dt=dt)


__all__ = ["zoh_statespace"]
