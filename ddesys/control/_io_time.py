"""Time responses of a :class:`~ddesys.DelayIOSystem` from its explicit form (docs/theory.md §9.7).

With zero history, a delayed input ``Bd(d) u(t - d)`` drives the state exactly as ``Bd(d) u(t)``
would, ``d`` later: the state is ``x(t) = S_0(t) + sum_d S_d(t - d)``, each ``S`` the response of the
retarded state part to one input matrix (zero before ``0``); the output reads ``x`` and ``u`` at the
output delays. Every ``S`` comes from :mod:`ddesys.matrix.timeresp` at the shifted times.
"""
from __future__ import annotations

import numpy as np

from ..matrix import timeresp
from ..matrix.charmatrix import real_vector
from ..matrix.timeresp import TimeResponse


def _check_t(t):
    arr = real_vector(t, "t", "real times")
    if np.any(arr < 0):
        raise ValueError(f"t must be >= 0 (the history before t = 0 is zero), got min {arr.min():.6g}")
    return arr


def _gain(outs):
    """``sum_o ||C_o||_inf``: how much a state error can grow in the output."""
    return float(sum(np.abs(C).sum(axis=1).max(initial=0.0) for _, C in outs))


def _state_part(f, t_max):
    """``(Ad, tau)`` of the state part; a zero delayed matrix when no state is read late."""
    n = f.A.shape[0]
    if f.state_delays.size:
        return f.Ad, f.state_delays
    return np.zeros((1, n, n)), np.array([max(float(t_max), 1.0)])


def _shifts(f):
    """Input shifts ``[0, d_1, ...]`` with their matrices, and output shifts with theirs."""
    ins = [(0.0, f.B0)] + list(zip(f.input_delays.tolist(), f.Bd))
    outs = [(0.0, f.C0)] + list(zip(f.output_delays.tolist(), f.Cd))
    feeds = [(0.0, f.D0)] + list(zip(f.feed_delays.tolist(), f.Dd))
    return ins, outs, feeds


class _Lookup:
    """Values of responses at shifted times: build once on the union of the nonnegative times asked."""

    def __init__(self, t, shifts):
        times = [t - s for s in shifts]
        self.grid = np.unique(np.concatenate([v[v >= 0] for v in times] + [np.zeros(0)]))

    def index(self, tq):
        """Positions of ``tq`` in the grid (``-1`` for a negative time: a zero contribution)."""
        i = np.searchsorted(self.grid, tq)
        i = np.where(tq >= 0, i, -1)
        return i


def _gather(values, lookup, tq):
    """``values[..., k]`` at the times ``tq`` (zero where ``tq < 0``)."""
    i = lookup.index(tq)
    out = np.zeros(values.shape[:-1] + (tq.size,), values.dtype)
    ok = i >= 0
    out[..., ok] = values[..., i[ok]]
    return out


def _per_input(sys, t, kind, kwargs):
    f = sys.explicit_form()
    t = _check_t(t)
    n, m, p = sys.n_states, sys.n_inputs, sys.n_outputs
    ins, outs, feeds = _shifts(f)
    y = np.zeros((p, m, t.size))
    x = np.zeros((n, m, t.size))
    err = None
    if n:
        shifts = sorted({a + b for a, _ in ins for b, _ in outs})
        look = _Lookup(t, shifts)
        Ad, tau = _state_part(f, t.max(initial=0.0))
        Bs = np.concatenate([B for _, B in ins], axis=1)
        fn = timeresp.step if kind == "step" else timeresp.impulse
        r = fn(f.A, Ad, tau, Bs, np.eye(n), np.zeros((n, Bs.shape[1])), look.grid, **kwargs)
        S = r.x.reshape(n, len(ins), m, -1)
        if r.error_estimate is not None:
            err = float(r.error_estimate) * len(ins) * _gain(outs)
        for (di, _), Sg in zip(ins, np.moveaxis(S, 1, 0)):
            x += _gather(Sg, look, t - di)
            for do, Cm in outs:
                y += np.tensordot(Cm, _gather(Sg, look, t - (di + do)), axes=1)
    if kind == "step":
        for d, Dm in feeds:
            y += Dm[:, :, None] * (t >= d)[None, None, :]
    return TimeResponse(t, y, x, error_estimate=err)


def io_step(sys, t, **kwargs):
    """Step response ``y (p, m, T)``, state ``x (n, m, T)`` of a DelayIOSystem (unit step on each input)."""
    return _per_input(sys, t, "step", kwargs)


def io_impulse(sys, t, **kwargs):
    """Impulse response ``y (p, m, T)`` (impulses passing straight through a feedthrough omitted)."""
    return _per_input(sys, t, "impulse", kwargs)


def io_simulate(sys, u, t, x0=None, **kwargs):
    """Response ``y (p, T)``, ``x (n, T)`` to the input ``u(times) -> (m, T)`` (zero before ``t = 0``)."""
    if not callable(u):
        raise TypeError(f"u must be a callable u(times) -> (m, len(times)), got {type(u).__name__}")
    f = sys.explicit_form()
    t = _check_t(t)
    n, m, p = sys.n_states, sys.n_inputs, sys.n_outputs
    ins, outs, feeds = _shifts(f)

    def uu(times):
        times = np.asarray(times, float)
        v = np.zeros((m, times.size))
        ok = times >= 0
        if ok.any():
            k = int(ok.sum())
            w = np.asarray(u(times[ok]))
            if w.dtype.kind not in "biuf":
                raise TypeError(f"u must return real numbers, got dtype {w.dtype}"
                                + (" (a DelayIOSystem is real: simulate the real and imaginary parts of a complex "
                                   "input separately)" if w.dtype.kind == "c" else ""))
            if m == 1 and w.shape == (k,):
                w = w[None]
            if w.shape != (m, k):
                raise ValueError(f"u(times) must return shape (m, len(times)) = {(m, k)}"
                                 + (" or (len(times),)" if m == 1 else "") + f", got {w.shape}")
            v[:, ok] = w
        return v

    x = np.zeros((n, t.size))
    y = np.zeros((p, t.size))
    err = None
    if n:
        shifts = sorted({a + b for a, _ in ins for b, _ in outs})
        look = _Lookup(t, shifts)
        Ad, tau = _state_part(f, t.max(initial=0.0))
        for g, (di, Bg) in enumerate(ins):
            z0 = x0 if g == 0 else None
            r = timeresp.simulate(f.A, Ad, tau, Bg, np.eye(n), np.zeros((n, m)), uu, look.grid, x0=z0, **kwargs)
            Sg = r.x
            if r.error_estimate is not None:
                err = (err or 0.0) + float(r.error_estimate) * _gain(outs)
            x += _gather(Sg, look, t - di)
            for do, Cm in outs:
                y += Cm @ _gather(Sg, look, t - (di + do))
    for d, Dm in feeds:
        y += Dm @ uu(t - d)
    return TimeResponse(t, y, x, error_estimate=err)


__all__ = ["io_impulse", "io_simulate", "io_step"]
