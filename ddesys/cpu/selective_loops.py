"""The compiled loops of the soft clock's scan (:func:`ddesys.selective.soft_scan` and its adjoint
:func:`ddesys.selective.soft_scan_grad`, which allocate, check and document them): parallel over (row,
channel) pairs, sums in the written order. Without Numba they run as plain Python loops (slow: the
documented fallback for tiny inputs)."""
from __future__ import annotations

import numpy as np

from .options import loop, prange

__all__ = ["forward", "backward"]


@loop("selective.scan")
def forward(loglam, mu, bbar, cout, s, x, c, tau, h, E, q, w, y):  # pragma: no cover - jitted
    B, H, L = x.shape
    N2 = loglam.shape[1]
    for i in prange(B * H):
        b, ch = i // H, i % H
        p = 0                                        # read pointer: first index with tau >= r
        for t in range(L):
            ct = c[b, t]
            r = tau[b, t] - s[ch]
            pt = -1
            wt = 0.0
            if r > 0.0:
                while p < t - 1 and tau[b, p] < r:     # r <= tau_{t-1} (up to rounding)
                    p += 1
                lo = tau[b, p - 1] if p > 0 else 0.0
                wt = (r - lo) / (tau[b, p] - lo)
                pt = p
            q[b, ch, t] = pt
            w[b, ch, t] = wt
            wr = w[b, ch, t]                         # the weight in the states' precision
            xt = ct * x[b, ch, t]
            acc = 0.0
            for n in range(N2):
                e = np.exp(ct * loglam[ch, n])
                E[b, ch, t, n] = e
                v = bbar[ch, n] * xt
                if t > 0:
                    v += e * h[b, ch, t - 1, n]
                if pt >= 0:
                    hd = wr * h[b, ch, pt, n]
                    if pt > 0:
                        hd += (1 - wr) * h[b, ch, pt - 1, n]
                    v += ct * mu[ch, n] * hd
                h[b, ch, t, n] = v
                acc += (cout[ch, n] * v).real
            y[b, ch, t] = 2.0 * acc


@loop("selective.scan")
def backward(loglam, mu, bbar, cout, x, c, tau, h, E, q, w, gy, g_ll, g_mu, g_bb, g_co, g_s, g_x, g_cd,
              g_tau):  # pragma: no cover - jitted
    B, H, L = x.shape
    N2 = loglam.shape[1]
    for i in prange(B * H):
        b, ch = i // H, i % H
        A = np.empty((L, N2), h.dtype)               # adjoints, completed in reverse time
        for t in range(L):
            for n in range(N2):                      # from the readout y = 2 Re(sum c h)
                A[t, n] = 2 * gy[b, ch, t] * np.conj(cout[ch, n])
                g_co[b, ch, n] += 2 * gy[b, ch, t] * np.conj(h[b, ch, t, n])
        zc = A[0, 0] * 0                             # zero in the states' precision
        for t in range(L - 1, -1, -1):
            ct = c[b, t]
            p = q[b, ch, t]
            wt = w[b, ch, t]
            xt = x[b, ch, t]
            gw = 0.0
            gc = 0.0
            gx = 0.0
            for n in range(N2):
                at = A[t, n]
                e = E[b, ch, t, n]
                prev = h[b, ch, t - 1, n] if t > 0 else zc
                hd = zc
                if p >= 0:
                    left = h[b, ch, p - 1, n] if p > 0 else zc
                    right = h[b, ch, p, n]
                    hd = (1 - wt) * left + wt * right
                    cm = np.conj(ct * mu[ch, n]) * at
                    if p > 0:
                        A[p - 1, n] += (1 - wt) * cm
                    A[p, n] += wt * cm
                    gw += (at * np.conj(ct * mu[ch, n] * (right - left))).real
                    g_mu[b, ch, n] += at * np.conj(ct * hd)
                if t > 0:
                    A[t - 1, n] += np.conj(e) * at
                g_ll[b, ch, n] += at * np.conj(ct * e * prev)
                g_bb[b, ch, n] += at * (ct * xt)
                gx += (at * np.conj(ct * bbar[ch, n])).real
                gc += (at * np.conj(loglam[ch, n] * e * prev + mu[ch, n] * hd + bbar[ch, n] * xt)).real
            g_x[b, ch, t] = gx
            g_cd[b, ch, t] = gc
            if p >= 0:
                lo = tau[b, p - 1] if p > 0 else 0.0
                inv = 1.0 / (tau[b, p] - lo)
                wt = np.float64(w[b, ch, t])
                g_tau[b, ch, t] += gw * inv
                g_s[b, ch] -= gw * inv
                if p > 0:
                    g_tau[b, ch, p - 1] -= gw * (1.0 - wt) * inv
                g_tau[b, ch, p] -= gw * wt * inv
