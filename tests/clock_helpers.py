"""A brute-force oracle for clocked layers: the clocked DS4D recurrence in ticks, one row and channel at a
time (docs/theory.md §10.1), in float64."""
from __future__ import annotations

import numpy as np
import torch

F64 = torch.float64


def discrete_modes(layer):
    """``(lam, mu, bbar, c, k, alpha, D)`` of a DS4D layer as NumPy arrays; an S4D layer's with ``mu = 0``."""
    d = layer.discrete(F64)
    f = lambda z: z.detach().numpy()                                         # noqa: E731
    if not hasattr(d, "mu"):                                                 # S4D: no delayed branch
        one = np.ones(d.lam.shape[0], dtype=np.int64)                       # any delay: mu = 0
        return f(d.lam), np.zeros_like(f(d.lam)), f(d.bbar), f(d.c), one, 0.0 * one, f(layer.D)
    return f(d.lam), f(d.mu), f(d.bbar), f(d.c), f(d.k), f(d.alpha), layer.D.detach().numpy()


def tick_loop(layer, x, ticks):
    """The clocked DS4D (or S4D) recurrence in ticks, one row and channel at a time: ``x`` ``(B, L, H)``, ``ticks``
    ``(B, L)`` bool -> ``(B, L, H)``."""
    lam, mu, bbar, cout, k, alpha, D = discrete_modes(layer)
    x, ticks = x.detach().numpy(), ticks.numpy()
    B, L, H = x.shape
    y = np.zeros_like(x)
    for b in range(B):
        for j in range(H):
            hist = []                                                        # states by tick
            get = lambda n: hist[n] if n >= 0 else np.zeros(lam.shape[1], complex)   # noqa: E731
            for t in range(L):
                if ticks[b, t]:
                    n = len(hist)
                    hd = (1 - alpha[j]) * get(n - k[j]) + alpha[j] * get(n - k[j] - 1)
                    hist.append(lam[j] * get(n - 1) + mu[j] * hd + bbar[j] * x[b, t, j])
                held = get(len(hist) - 1)
                y[b, t, j] = 2 * np.real(np.sum(cout[j] * held)) + D[j] * x[b, t, j]
    return torch.from_numpy(y)
