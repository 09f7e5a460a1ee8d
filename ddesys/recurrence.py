"""The exact delayed recurrence (SPEC section 2), compiled on the CPU and vectorized elsewhere.

    h_t = lam h_{t-1} + mu ((1 - alpha) h_{t-k} + alpha h_{t-k-1}) + bbar x_t,   h_{t<0} = 0
    y_t = 2 Re(sum_n c_n h_{n,t}) + d x_t

Three paths, one formula:

* NumPy input with Numba available: a compiled loop, parallel over channels (``numba.prange``),
  complex128 states. Set ``DDESYS_DISABLE_NUMBA=1`` (or lack Numba) to take the next path instead.
* Anything else (CuPy, torch, NumPy without Numba): the array module's vector path, one vectorized
  update over all channels and modes per time step, ``O(L)`` steps.

Both are checked against a plain Python loop in the tests.
"""
from __future__ import annotations

import os
import warnings

import numpy as np

from ._array import get_namespace, is_numpy

_NUMBA_DISABLED = os.environ.get("DDESYS_DISABLE_NUMBA", "0") not in ("", "0")

try:
    if _NUMBA_DISABLED:
        raise ImportError("disabled by DDESYS_DISABLE_NUMBA")
    import numba as _nb
except ImportError:  # Numba is optional: the vector path below is the documented fallback
    _nb = None


def numba_available() -> bool:
    """True when the compiled CPU recurrence is in use."""
    return _nb is not None


if _nb is not None:

    @_nb.njit(parallel=True, cache=True, fastmath=False)
    def _recurrence_nb(lam, mu, bbar, c, k, alpha, d, x, y, states, keep):  # pragma: no cover - jitted
        B, N2 = lam.shape
        L = x.shape[1]
        for b in _nb.prange(B):
            h = np.empty(L, dtype=np.complex128)
            kb = k[b]
            a1 = 1.0 - alpha[b]
            a2 = alpha[b]
            for n in range(N2):
                ln = lam[b, n]
                m1 = mu[b, n] * a1
                m2 = mu[b, n] * a2
                bn = bbar[b, n]
                cr = c[b, n].real
                ci = c[b, n].imag
                for t in range(L):
                    v = bn * x[b, t]
                    if t >= 1:
                        v += ln * h[t - 1]
                    if t >= kb:
                        v += m1 * h[t - kb]
                    if t >= kb + 1:
                        v += m2 * h[t - kb - 1]
                    h[t] = v
                    y[b, t] += 2.0 * (cr * v.real - ci * v.imag)
                if keep:
                    states[b, n, :] = h
            for t in range(L):
                y[b, t] += d[b] * x[b, t]


def run_recurrence(lam, mu, bbar, c, k, alpha, d, x, return_states=False):
    """Run the recurrence for a batch of channels.

    Args:
        lam, mu, bbar, c: complex ``(B, N2)``; k: int ``(B,)``; alpha, d: real ``(B,)``.
        x: real ``(B, L)``.
        return_states: also return the states ``(B, N2, L)`` (complex).
    Returns:
        ``y`` real ``(B, L)`` (float64 on the NumPy paths), and the states if asked.
    """
    xp = get_namespace(lam, x)
    if is_numpy(xp) and _nb is not None:
        B, L = x.shape
        y = np.zeros((B, L), dtype=np.float64)
        states = np.zeros((B, lam.shape[1], L) if return_states else (1, 1, 1), dtype=np.complex128)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # numba's cache/parallel notes are not the user's business
            _recurrence_nb(np.ascontiguousarray(lam, np.complex128), np.ascontiguousarray(mu, np.complex128),
                           np.ascontiguousarray(bbar, np.complex128), np.ascontiguousarray(c, np.complex128),
                           np.ascontiguousarray(k, np.int64), np.ascontiguousarray(alpha, np.float64),
                           np.ascontiguousarray(d, np.float64), np.ascontiguousarray(x, np.float64),
                           y, states, bool(return_states))
        return (y, states) if return_states else y
    return _recurrence_vector(xp, lam, mu, bbar, c, k, alpha, d, x, return_states)


def _recurrence_vector(xp, lam, mu, bbar, c, k, alpha, d, x, return_states):
    """Vector path: states kept as a list of ``(B, N2)`` slices; delayed reads gathered per channel."""
    B, L = x.shape
    k_np = np.asarray([int(v) for v in (k.tolist() if hasattr(k, "tolist") else k)], dtype=np.int64)
    al = xp.astype(alpha, lam.real.dtype if hasattr(lam, "real") else xp.float64)[:, None]   # (B, 1)
    m1, m2 = mu * (1 - al), mu * al                                 # (B, N2)
    hist = []                                                       # hist[t]: (B, N2)
    zero = xp.zeros_like(lam)
    ys = []
    uniq = np.unique(k_np)
    for t in range(L):
        v = bbar * x[:, t:t + 1]                                    # (B, N2)
        if t >= 1:
            v = v + lam * hist[t - 1]
        if t >= int(uniq[0]):
            if uniq.size == 1:
                kk = int(uniq[0])
                d1 = hist[t - kk]
                d2 = hist[t - kk - 1] if t - kk - 1 >= 0 else zero
            else:  # channels with different delays: stack the needed rows per channel
                rows1 = [hist[t - int(kb)][b] if t - kb >= 0 else zero[b] for b, kb in enumerate(k_np)]
                rows2 = [hist[t - int(kb) - 1][b] if t - kb - 1 >= 0 else zero[b] for b, kb in enumerate(k_np)]
                d1, d2 = xp.stack(rows1), xp.stack(rows2)
            v = v + m1 * d1 + m2 * d2
        hist.append(v)
        ys.append(2 * xp.sum(xp.real(c * v), axis=-1))             # (B,)
    y = xp.stack(ys, axis=-1) + d[:, None] * x                      # (B, L)
    if return_states:
        return y, xp.stack(hist, axis=-1)                           # (B, N2, L)
    return y
