"""Transfer functions with dead time and state-space models with input, output and state delays:
:func:`tf` and :func:`ss` (python-control's names), each returning a :class:`~ddesys.DelayIOSystem`.
"""
from __future__ import annotations

import numpy as np

from . import _lft
from .charmatrix import real_vector
from .iosystem import DelayIOSystem
from .statespace import DelayStateSpace


def _coefficients(name, value):
    v = real_vector(value, name, "real polynomial coefficients (highest power first)")
    nz = np.flatnonzero(v)
    if nz.size == 0:
        if name == "den":
            raise ValueError("den must not be zero")
        return np.zeros(1)
    return v[nz[0]:]


def _delays(name, value, size):
    v = real_vector(value, name, "delays (time units)")
    if v.size == 1:
        v = np.full(size, v[0])
    if v.size != size:
        raise ValueError(f"{name} must be a scalar or have {size} entries, got {v.size}")
    if np.any(v < 0):
        raise ValueError(f"{name} must be >= 0, got {v.tolist()}")
    return v


def delay_block(delays):
    """The pure delay ``diag(e^{-s d_j})`` (zero delays pass straight through).

    Parameters
    ----------
    delays : array_like ``(k,)``, ``>= 0``

    Returns
    -------
    DelayIOSystem
        ``k`` inputs and outputs, no state.
    """
    d = _delays("delays", delays, np.size(delays))
    return DelayIOSystem.from_data(_lft.delay_block(d))


def tf(num, den, delay=0.0):
    """A SISO transfer function with dead time, ``e^{-delay s} num(s) / den(s)``.

    Parameters
    ----------
    num, den : array_like
        Polynomial coefficients, highest power first (python-control's and scipy's convention).
    delay : float, default 0
        Dead time ``>= 0``, in time units.

    Returns
    -------
    DelayIOSystem
        A controllable-canonical realization of ``num / den`` with the delay on its input.

    Raises
    ------
    ValueError
        An improper ``num / den`` (degree of ``num`` above ``den``'s), a zero ``den``, a negative delay.

    Examples
    --------
    The first-order plant with dead time, and its frequency response at ``omega = 1``:

    >>> import numpy as np
    >>> import ddesys
    >>> G = ddesys.tf([1.0], [1.0, 1.0], delay=1.0)
    >>> complex(np.round(G.freqresp([1.0])[0, 0, 0], 6))        # e^{-i} / (1 + i)
    (-0.150584-0.690887j)
    """
    from scipy.signal import tf2ss

    num, den = _coefficients("num", num), _coefficients("den", den)
    if num.size > den.size:
        raise ValueError(f"num / den is improper (degree {num.size - 1} over {den.size - 1}): a delay system "
                         "needs a proper transfer function")
    d = _delays("delay", delay, 1)
    if den.size == 1:
        A, B, C, D = np.zeros((0, 0)), np.zeros((0, 1)), np.zeros((1, 0)), np.array([[num[-1] / den[0]]])
    else:
        A, B, C, D = tf2ss(num, den)
    plant = DelayIOSystem(A, B, C, D)
    return plant if d[0] == 0 else DelayIOSystem.from_data(_lft.series(_lft.delay_block(d), plant.io_data()))


def ss(A, B=None, C=None, D=None, *, Ad=None, tau=None, input_delay=0.0, output_delay=0.0):
    """A state-space model with delays: ``x' = A x + sum_k Ad[k] x(t - tau[k]) + B u(t - h_in)``,
    ``y(t) = C x(t - h_out) + D u(t - h_in - h_out)`` per channel.

    Parameters
    ----------
    A : array_like ``(n, n)``, or a DelayStateSpace / DelaySystem / DelayIOSystem
        A system given here takes the delays of the keywords (``B``, ``C``, ``D``, ``Ad`` unused).
    B, C, D : array_like
        ``(n, m)``, ``(p, n)``, ``(p, m)`` (``D`` zero by default).
    Ad, tau : optional
        State delays as in :class:`~ddesys.DelayStateSpace`.
    input_delay : float or array_like ``(m,)``, default 0
        Dead time of each input.
    output_delay : float or array_like ``(p,)``, default 0
        Dead time of each output.

    Returns
    -------
    DelayIOSystem

    Examples
    --------
    >>> import ddesys
    >>> sys = ddesys.ss([[-1.0]], [[1.0]], [[1.0]], input_delay=0.5)
    >>> round(abs(complex(sys.freqresp([2.0])[0, 0, 0])), 6)        # |1 / (2i + 1)|
    0.447214
    """
    if hasattr(A, "dt") or type(A).__module__.split(".")[0] == "control":
        base = _lft.coerce(A)
    elif Ad is None:
        if B is None or C is None:
            raise TypeError("ss needs A, B and C (or a system)")
        A2 = np.atleast_2d(np.asarray(A, dtype=float))
        B2 = np.asarray(B, dtype=float).reshape(A2.shape[0], -1)
        C2 = np.asarray(C, dtype=float).reshape(-1, A2.shape[0])
        base = DelayIOSystem(A2, B2, C2, D).io_data()
    else:
        if tau is None:
            raise TypeError("Ad needs its delays tau")
        base = _lft.coerce(DelayStateSpace(A, Ad, tau, B, C, D))
    hin = _delays("input_delay", input_delay, base.B1.shape[1])
    hout = _delays("output_delay", output_delay, base.C1.shape[0])
    parts = ([_lft.delay_block(hin)] if np.any(hin > 0) else []) + [base] + \
        ([_lft.delay_block(hout)] if np.any(hout > 0) else [])
    return DelayIOSystem.from_data(_lft.series(*parts))


__all__ = ["delay_block", "ss", "tf"]
