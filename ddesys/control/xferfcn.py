"""Transfer functions with dead time and state-space models with input, output and state delays:
:func:`~ddesys.tf` and :func:`~ddesys.ss` (python-control's names), each returning a :class:`~ddesys.DelayIOSystem`.
"""
from __future__ import annotations

import numpy as np

from ..matrix.charmatrix import real_vector
from ..matrix.statespace import DelayStateSpace
from . import _lft
from .iosys import DelayIOSystem


def _depth(x):
    """Nesting depth of lists / tuples / arrays (``0`` for a number)."""
    if isinstance(x, np.ndarray):
        return x.ndim
    if isinstance(x, (list, tuple)):
        return 1 + (_depth(x[0]) if len(x) else 0)
    return 0


def _coefficients(name, value):
    if _depth(value) > 1:
        raise ValueError(f"{name} must be one list of polynomial coefficients (highest power first); a 2-D "
                         f"{name} is not a polynomial. A transfer matrix takes python-control's syntax: "
                         f"{name}[i][j] the coefficients of the entry from input j to output i (three levels "
                         "of lists)")
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
    """A transfer function with dead time, ``e^{-delay s} num(s) / den(s)``, or a transfer matrix with a
    dead time per entry.

    Parameters
    ----------
    num, den : array_like
        Polynomial coefficients, highest power first (python-control's and scipy's convention). A transfer
        matrix takes python-control's MIMO syntax: ``num[i][j]``, ``den[i][j]`` the coefficients of the entry
        from input ``j`` to output ``i`` (lists of ``p`` rows of ``m`` coefficient lists).
    delay : float or array_like ``(p, m)``, default 0
        Dead time ``>= 0``, in time units; for a transfer matrix one per entry or one for all.

    Returns
    -------
    DelayIOSystem
        A controllable-canonical realization of ``num / den`` with the delay on its input (a transfer
        matrix: one such realization per entry, inputs fanned out and outputs summed).

    Raises
    ------
    ValueError
        An improper ``num / den`` (degree of ``num`` above ``den``'s), a zero ``den``, a negative delay; a
        2-D ``num`` or ``den`` (not a polynomial, and not python-control's MIMO syntax); rows of unequal
        length or ``num``, ``den`` and ``delay`` of different shapes.

    Examples
    --------
    The first-order plant with dead time, and its frequency response at ``omega = 1``:

    >>> import numpy as np
    >>> import ddesys
    >>> G = ddesys.tf([1.0], [1.0, 1.0], delay=1.0)
    >>> complex(np.round(G.freqresp([1.0])[0, 0, 0], 6))        # e^{-i} / (1 + i)
    (-0.150584-0.690887j)
    """
    if _depth(num) >= 3 or _depth(den) >= 3:
        return DelayIOSystem.from_data(_transfer_matrix(num, den, delay))
    return DelayIOSystem.from_data(_siso(num, den, delay))


def _transfer_matrix(num, den, delay):
    """python-control's MIMO lists: one SISO realization per entry, side by side, inputs fanned out to
    each row's entries and each row's outputs summed."""
    def rows(name, x):
        if _depth(x) < 3 or not len(x) or any(len(r) != len(x[0]) for r in x) or not len(x[0]):
            raise ValueError(f"{name} must be a list of p rows of m coefficient lists, rows of equal length "
                             "(python-control's MIMO syntax)")
        return [list(r) for r in x]

    N, Dn = rows("num", num), rows("den", den)
    p, m = len(N), len(N[0])
    if (len(Dn), len(Dn[0])) != (p, m):
        raise ValueError(f"num is {p}x{m} entries but den is {len(Dn)}x{len(Dn[0])}")
    d = np.asarray(delay, dtype=float)
    if d.ndim == 0:
        d = np.full((p, m), float(d))
    if d.shape != (p, m):
        raise ValueError(f"delay must be a number or have one entry per transfer-matrix entry {(p, m)}, got "
                         f"shape {d.shape}")
    entries = [(i, j, _siso(N[i][j], Dn[i][j], 0.0), d[i, j]) for i in range(p) for j in range(m)]
    delayed = [k for k, e in enumerate(entries) if e[3] > 0]
    sizes = [e[2].A.shape[0] for e in entries]
    n, q, off = sum(sizes), len(delayed), np.concatenate([[0], np.cumsum(sizes)])
    A, B1, C1, D11 = np.zeros((n, n)), np.zeros((n, m)), np.zeros((p, n)), np.zeros((p, m))
    B2, D12, D21 = np.zeros((n, q)), np.zeros((p, q)), np.zeros((q, m))
    for k, (i, j, g, dk) in enumerate(entries):        # wired exactly: no solve, no rounding
        blk = slice(off[k], off[k + 1])
        A[blk, blk], C1[i, blk] = g.A, g.C1[0]
        if dk > 0:                                      # the entry reads w = u_j(t - d_ij)
            c = delayed.index(k)
            B2[blk, c], D12[i, c], D21[c, j] = g.B1[:, 0], g.D11[0, 0], 1.0
        else:
            B1[blk, j] = g.B1[:, 0]
            D11[i, j] += g.D11[0, 0]
    return _lft.make(A, B1, C1, D11, B2=B2, D12=D12, D21=D21, tau=d.reshape(-1)[delayed])


def _siso(num, den, delay):
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
    plant = DelayIOSystem(A, B, C, D).io_data()
    return plant if d[0] == 0 else _lft.series(_lft.delay_block(d), plant)


def _io_matrix(name, value, n, column):
    """``B (n, m)`` / ``C (p, n)`` as given: 2-D with ``n`` rows (columns), or 1-D of length ``n`` (one input's
    column, one output's row); never reshaped from another shape."""
    M = np.asarray(value, dtype=float)
    if M.ndim <= 1:
        if M.size != n:
            raise ValueError(f"{name} has {M.size} entries; a 1-D {name} must have n = {n} (the states)")
        return M.reshape(n, 1) if column else M.reshape(1, n)
    if M.ndim != 2 or (M.shape[0] if column else M.shape[1]) != n:
        want = "(n, m)" if column else "(p, n)"
        raise ValueError(f"{name} must have shape {want} with n = {n} (the states of A), got {M.shape}")
    return M


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
        n = A2.shape[0]
        B2, C2 = _io_matrix("B", B, n, column=True), _io_matrix("C", C, n, column=False)
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
