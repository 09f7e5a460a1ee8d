"""Transmission zeros of a delay input-output system, where they are finitely many (docs/theory.md §9.7).

With no state read late, a square system whose every input and output carries at most one dead time
(``G(s) = diag(e^{-s h_out}) R(s) diag(e^{-s h_in})``, ``R`` rational) has the zeros of ``R``: the finite
generalized eigenvalues of the Rosenbrock pencil ``[[A, B], [C, D]] - s [[I, 0], [0, 0]]`` (python-control's
``zeros``). Otherwise the zeros are the roots of a quasi-polynomial (infinitely many in general) and are
refused by name.
"""
from __future__ import annotations

import numpy as np
from scipy.linalg import eigvals


def _single_delays(f, axis):
    """Per input (``axis=1``) or output (``axis=0``): the one dead time of its delayed terms, or ``None``
    when the terms of one input (output) carry different delays or mix with undelayed ones."""
    delays = f.input_delays if axis == 1 else f.output_delays
    mats = f.Bd if axis == 1 else f.Cd
    base = f.B0 if axis == 1 else f.C0
    size = base.shape[1] if axis == 1 else base.shape[0]
    out = np.zeros(size)
    for j in range(size):
        sel = (lambda M: M[:, j]) if axis == 1 else (lambda M: M[j])
        used = [d for d, M in zip(delays, mats) if np.any(sel(M) != 0)]
        if len(used) > 1 or (used and np.any(sel(base) != 0)):
            return None
        out[j] = used[0] if used else 0.0
    return out


def _rational_feedthrough(f, hin, hout):
    """``D`` of the rational part: entry ``(i, j)`` carries the dead time ``hout_i + hin_j`` or is zero;
    ``None`` when some feedthrough term has another delay."""
    total = hout[:, None] + hin[None, :]
    D = np.where(total == 0, f.D0, 0.0)
    if np.any(f.D0[total > 0] != 0):
        return None
    for d, M in zip(f.feed_delays, f.Dd):
        on = M != 0
        if np.any(np.abs(total[on] - d) > 1e-12 * (1 + d)):
            return None
        D = D + np.where(on, M, 0.0)
    return D


def transmission_zeros(sys):
    """The transmission zeros of ``sys`` (see the module docstring), sorted by descending real part.

    Raises
    ------
    ValueError
        A non-square system, a state read late, a feedthrough with dead time, or an input or output with
        more than one dead time: the zeros are then roots of a quasi-polynomial, not computed here.
    """
    f = sys.explicit_form()
    p, m = f.C0.shape[0], f.B0.shape[1]
    if p != m:
        raise ValueError(f"transmission zeros are defined here for square systems; this one is {p}x{m}")
    hin, hout = _single_delays(f, 1), _single_delays(f, 0)
    D = _rational_feedthrough(f, hin, hout) if hin is not None and hout is not None else None
    if f.state_delays.size or D is None:
        raise ValueError("the zeros of this system are roots of a quasi-polynomial (a state read late, or an input "
                         "or output with more than one dead time); transmission zeros are computed for systems "
                         "with one dead time per input and output")
    B = f.B0 + sum(f.Bd) if f.input_delays.size else f.B0       # the rational part R(s)
    C = f.C0 + sum(f.Cd) if f.output_delays.size else f.C0
    n = f.A.shape[0]
    if n == 0:
        return np.zeros(0, complex)
    P = np.block([[f.A, B], [C, D]])
    Q = np.zeros_like(P)
    Q[:n, :n] = np.eye(n)
    with np.errstate(all="ignore"):
        z = eigvals(P, Q)
    z = z[np.isfinite(z) & (np.abs(z) < 1e12 * (1 + np.linalg.norm(P)))]
    return z[np.argsort(-z.real, kind="stable")]


__all__ = ["transmission_zeros"]
