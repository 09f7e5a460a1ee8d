"""The explicit form of a delay input-output system (docs/theory.md §9.7).

A :class:`~ddesys.DelayIOSystem` keeps its delays on channels ``w_j(t) = z_j(t - tau_j)`` with
``z = C2 x + D21 u + D22 w``. When the channels form no loop among themselves (``D22`` nilpotent by
its pattern: no cycle in the graph ``j -> k`` for ``D22[j, k] != 0``), substituting each ``w_j`` along
every path of that graph gives the explicit form::

    x'(t) = A x + sum_d Ad(d) x(t - d) + B0 u + sum_d Bd(d) u(t - d)
    y(t)  = C0 x + sum_d Cd(d) x(t - d) + D0 u + sum_d Dd(d) u(t - d)

over the distinct path delays ``d`` (sums of channel delays). A path ``j0 -> j1 -> ... -> k`` with
weight ``c = D22[j0, j1] ... `` adds ``c B2[:, j0] C2[k]`` to ``Ad(d)`` (and likewise for the
others), ``d = tau_j0 + ... + tau_k``. Its state part is a retarded :class:`~ddesys.DelayStateSpace`,
whose characteristic roots are the system's (``det(I - Delta(s) D22) = 1`` for such a ``D22``).
A cycle is a delay-algebraic loop (a neutral or difference-equation part): the explicit form refuses it
by name, and :meth:`ddesys.DelayIOSystem.difference_loop` gives its roots and stability.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..matrix.errors import AlgebraicLoopError

MAX_PATHS = 20_000          # paths through the channel graph before the expansion is refused
_GROUP_RTOL = 1e-13         # path delays closer than this (relative) are one delay


class ExplicitForm(NamedTuple):
    """The explicit form (see the module docstring): matrices per distinct delay, sorted.

    Attributes
    ----------
    A, B0, C0, D0 : ndarray
        ``(n, n)``, ``(n, m)``, ``(p, n)``, ``(p, m)``.
    state_delays : ndarray ``(Ks,)``
        Delays of ``Ad`` (only those with a nonzero matrix).
    Ad : ndarray ``(Ks, n, n)``
    input_delays : ndarray ``(Ki,)``
    Bd : ndarray ``(Ki, n, m)``
    output_delays : ndarray ``(Ko,)``
        Delays of ``Cd`` (the state read late by the output).
    Cd : ndarray ``(Ko, p, n)``
    feed_delays : ndarray ``(Kf,)``
    Dd : ndarray ``(Kf, p, m)``
    """

    A: np.ndarray
    B0: np.ndarray
    C0: np.ndarray
    D0: np.ndarray
    state_delays: np.ndarray
    Ad: np.ndarray
    input_delays: np.ndarray
    Bd: np.ndarray
    output_delays: np.ndarray
    Cd: np.ndarray
    feed_delays: np.ndarray
    Dd: np.ndarray


def delay_cycle(D22):
    """A cycle of channels ``[j0, j1, ..., j0]`` through nonzero entries of ``D22``, or ``None``."""
    q = D22.shape[0]
    adj = [np.flatnonzero(D22[j]) for j in range(q)]
    state = np.zeros(q, np.int8)            # 0 new, 1 on the stack, 2 done
    for root in range(q):
        if state[root]:
            continue
        stack, path = [(root, iter(adj[root]))], [root]
        state[root] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                path.pop()
                state[node] = 2
            elif state[nxt] == 1:
                return path[path.index(nxt):] + [int(nxt)]
            elif state[nxt] == 0:
                state[nxt] = 1
                stack.append((nxt, iter(adj[nxt])))
                path.append(int(nxt))
    return None


def _paths(D22, tau):
    """Every path ``(start, end, weight, delay)`` of the acyclic channel graph, length 0 included."""
    q = D22.shape[0]
    out = []
    todo = [(j, j, 1.0, float(tau[j])) for j in range(q)]
    while todo:
        start, end, c, d = todo.pop()
        out.append((start, end, c, d))
        if len(out) > MAX_PATHS:
            raise ValueError(f"the delay channels form more than {MAX_PATHS} paths; this interconnection is "
                             "too deep to expand (simplify the block diagram)")
        for k in np.flatnonzero(D22[end]):
            todo.append((start, int(k), c * D22[end, k], d + float(tau[k])))
    return out


def _group(delays, mats, shape):
    """Sum the matrices of equal delays (relative ``_GROUP_RTOL``), drop zero sums, sort by delay."""
    if not delays:
        return np.zeros(0), np.zeros((0,) + shape)
    order = np.argsort(delays, kind="stable")
    keys, sums = [], []
    for i in order:
        d = delays[i]
        if keys and abs(d - keys[-1]) <= _GROUP_RTOL * max(abs(d), 1.0):
            sums[-1] = sums[-1] + mats[i]
        else:
            keys.append(d)
            sums.append(np.array(mats[i], dtype=float))
    keep = [i for i, M in enumerate(sums) if np.any(M != 0)]
    return np.array([keys[i] for i in keep]), np.array([sums[i] for i in keep]).reshape((-1,) + shape)


def explicit_form(A, B1, C1, D11, B2, C2, D12, D21, D22, tau):
    """The explicit form of a delay input-output system; :class:`AlgebraicLoopError` on a channel cycle.

    Parameters
    ----------
    A, B1, C1, D11, B2, C2, D12, D21, D22 : ndarray
        ``(n, n)``, ``(n, m)``, ``(p, n)``, ``(p, m)``, ``(n, q)``, ``(q, n)``, ``(p, q)``, ``(q, m)``,
        ``(q, q)``.
    tau : ndarray ``(q,)``

    Returns
    -------
    ExplicitForm
    """
    cycle = delay_cycle(D22)
    if cycle is not None:
        names = " -> ".join(f"channel {j} (delay {float(tau[j]):g})" for j in cycle)
        raise AlgebraicLoopError(
            "the delay channels close a loop without dynamics (" + names + "): the system has a "
            "delay-difference part (a neutral or delay-algebraic system). Its frequency response, roots, "
            "stability and strong stability are exact (DelayIOSystem.difference_loop(): roots(re_min > c_D), "
            "spectral_abscissa(), is_stable(), strong_stability()); this analysis (time responses, norms, "
            "delay margins, design) needs a retarded system: break the loop with dynamics (a strictly proper "
            "block)")
    n, m, p = A.shape[0], B1.shape[1], C1.shape[0]
    sd, sm, idl, im, od, om, fd, fm = [], [], [], [], [], [], [], []
    for start, end, c, d in _paths(D22, tau):
        b, dd = c * B2[:, start], c * D12[:, start]
        if np.any(b != 0) and np.any(C2[end] != 0):
            sd.append(d), sm.append(np.outer(b, C2[end]))
        if np.any(b != 0) and np.any(D21[end] != 0):
            idl.append(d), im.append(np.outer(b, D21[end]))
        if np.any(dd != 0) and np.any(C2[end] != 0):
            od.append(d), om.append(np.outer(dd, C2[end]))
        if np.any(dd != 0) and np.any(D21[end] != 0):
            fd.append(d), fm.append(np.outer(dd, D21[end]))
    return ExplicitForm(A, B1, C1, D11, *_group(sd, sm, (n, n)), *_group(idl, im, (n, m)),
                        *_group(od, om, (p, n)), *_group(fd, fm, (p, m)))


__all__ = ["ExplicitForm", "MAX_PATHS", "delay_cycle", "explicit_form"]
