"""The compiled loop of the exact delayed recurrence (:func:`ddesys.recurrence.run_recurrence`, which
checks the inputs and holds the vector fallback): parallel over channels, complex128 states.

    h_t = lam h_{t-1} + mu ((1 - alpha) h_{t-k} + alpha h_{t-k-1}) + bbar x_t,   h_{t<0} = 0
    y_t = 2 Re(sum_n c_n h_{n,t}) + d x_t
"""
from __future__ import annotations

import numpy as np

from ._numba import nb as _nb
from .options import loop
from .threads import numba_threads

__all__ = ["run"]


if _nb is not None:

    @loop("recurrence.channel")
    def _channel(lr, li, m1r, m1i, m2r, m2i, br, bi, cr, ci, kb, d, x, y, hr, hi, P, live):  # pragma: no cover
        """One channel, all modes: time outer, modes inner (contiguous, SIMD), real arithmetic in the
        dtype of ``hr`` (float64 or float32).

        ``hr``/``hi`` ``(P + L, N2)``: rows ``0 .. P-1`` hold the states before the run (zero for
        positions before 0), row ``P + t`` receives ``h_t``. ``live``: the delayed terms reach a position
        of the run (then ``P >= kb + 1``: every read is in bounds, no test in the loop); else they are
        zero throughout and ``P >= 1``."""
        N2 = lr.shape[0]
        L = x.shape[0]
        for t in range(L):
            r = P + t
            xt = x[t]
            acc = xt - xt                          # zero in the working precision
            if live:
                for n in range(N2):
                    pr = hr[r - 1, n]
                    pi = hi[r - 1, n]
                    qr = hr[r - kb, n]
                    qi = hi[r - kb, n]
                    sr = hr[r - kb - 1, n]
                    si = hi[r - kb - 1, n]
                    vr = br[n] * xt + (lr[n] * pr - li[n] * pi) + (m1r[n] * qr - m1i[n] * qi) \
                        + (m2r[n] * sr - m2i[n] * si)
                    vi = bi[n] * xt + (lr[n] * pi + li[n] * pr) + (m1r[n] * qi + m1i[n] * qr) \
                        + (m2r[n] * si + m2i[n] * sr)
                    hr[r, n] = vr
                    hi[r, n] = vi
                    acc += cr[n] * vr - ci[n] * vi
            else:
                for n in range(N2):
                    pr = hr[r - 1, n]
                    pi = hi[r - 1, n]
                    vr = br[n] * xt + (lr[n] * pr - li[n] * pi)
                    vi = bi[n] * xt + (lr[n] * pi + li[n] * pr)
                    hr[r, n] = vr
                    hi[r, n] = vi
                    acc += cr[n] * vr - ci[n] * vi
            y[t] = (acc + acc) + d * xt

    @loop("recurrence.batch")                 # the channel loop inlined: compiled with these flags
    def _batch(lam, mu, bbar, c, k, alpha, d, x, y, states, keep):  # pragma: no cover - jitted
        B, N2 = lam.shape
        L = x.shape[1]
        for b in _nb.prange(B):
            kb = k[b]
            live = kb <= L - 1
            P = kb + 1 if live else 1
            hr = np.zeros((P + L, N2))
            hi = np.zeros((P + L, N2))
            m1 = mu[b] * (1.0 - alpha[b])
            m2 = mu[b] * alpha[b]
            _channel(lam[b].real.copy(), lam[b].imag.copy(), m1.real.copy(), m1.imag.copy(),
                     m2.real.copy(), m2.imag.copy(), bbar[b].real.copy(), bbar[b].imag.copy(),
                     c[b].real.copy(), c[b].imag.copy(), kb, d[b], x[b], y[b], hr, hi, P, live)
            if keep:
                for n in range(N2):
                    for t in range(L):
                        states[b, n, t] = hr[P + t, n] + 1j * hi[P + t, n]


def run(lam, mu, bbar, c, k, alpha, d, x, return_states=False):
    """The recurrence over ``x`` ``(B, L)`` for channels ``(B, N2)`` (arguments as
    :func:`ddesys.recurrence.run_recurrence`, already checked there): ``y`` float64 ``(B, L)`` and, with
    ``return_states``, the states complex128 ``(B, N2, L)``. Needs Numba (:func:`ddesys.cpu.available`)."""
    B, L = x.shape
    y = np.zeros((B, L), dtype=np.float64)
    states = np.zeros((B, lam.shape[1], L) if return_states else (1, 1, 1), dtype=np.complex128)
    with numba_threads():
        _batch(np.ascontiguousarray(lam, np.complex128), np.ascontiguousarray(mu, np.complex128),
               np.ascontiguousarray(bbar, np.complex128), np.ascontiguousarray(c, np.complex128),
               np.ascontiguousarray(k, np.int64), np.ascontiguousarray(alpha, np.float64),
               np.ascontiguousarray(d, np.float64), np.ascontiguousarray(x, np.float64),
               y, states, bool(return_states))
    return (y, states) if return_states else y
