"""One channel of a diagonal conjugate-pair system as full state-space matrices (``to_statespace``).

A diagonal channel stores ``N2`` complex modes whose conjugate partners are implied (docs/theory.md
§1.1). Written out, it has ``n = 2 N2`` states ``[h; conj h]``::

    A  = diag(a, conj a)              Ad = [diag(ad, conj ad)]          (K = 1 delay)
    B  = [b; conj b]   (n, 1)         C  = [c, conj c]   (1, n)         D = [[d]]

so ``C x = sum_n c_n h_n + conj(c_n h_n) = 2 Re(sum_n c_n h_n)``: the same real output. The same
layout serves the discrete system (``Phi = diag(lam, conj lam)``, ``G = [diag(mu, conj mu)]``,
``Bd = [bbar; conj bbar]``).
"""
from __future__ import annotations

import numpy as np


def channel_index(batch_shape, index):
    """Normalize ``index`` (int or tuple of ints, or None for a batch shape ``()``) to a tuple that
    selects exactly one channel of ``batch_shape``; every bad index raises naming ``index``."""
    batch_shape = tuple(batch_shape)
    if index is None:
        if batch_shape != ():
            raise ValueError(f"index is required: the system holds a batch {batch_shape} of channels and "
                             "to_statespace() converts one; pass index=i (or a tuple, one int per batch axis)")
        return ()
    idx = tuple(index) if isinstance(index, (tuple, list)) else (index,)
    for i in idx:
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"index must be an int or a tuple of ints, got {index!r}")
    if len(idx) != len(batch_shape):
        raise ValueError(f"index {index!r} must have one int per batch axis: the batch shape is {batch_shape}")
    for i, n in zip(idx, batch_shape):
        if not -n <= i < n:
            raise ValueError(f"index {index!r} is out of range for the batch shape {batch_shape}")
    return tuple(int(i) for i in idx)


def pair_matrices(a, ad, b, c, d):
    """``(A, Ad (1, n, n), B (n, 1), C (1, n), D (1, 1))`` of one channel (module docstring).

    ``a, ad, b, c`` are complex ``(N2,)`` host arrays, ``d`` a real scalar; the matrices are float64.
    """
    a, ad, b, c = (np.asarray(v, np.complex128).reshape(-1) for v in (a, ad, b, c))
    n = 2 * a.size

    def blocks(v):                                   # block-diagonal real form of diag(v, conj v)
        M = np.zeros((n, n))
        M[0::2, 0::2] = np.diag(v.real)
        M[0::2, 1::2] = np.diag(-v.imag)
        M[1::2, 0::2] = np.diag(v.imag)
        M[1::2, 1::2] = np.diag(v.real)
        return M

    B = np.empty((n, 1))
    B[0::2, 0], B[1::2, 0] = b.real, b.imag
    C = np.empty((1, n))
    C[0, 0::2], C[0, 1::2] = 2 * c.real, -2 * c.imag
    return blocks(a), blocks(ad)[None], B, C, np.array([[float(d)]])


def refuse_tap(tap):
    """The FIR input tap has no state-space term yet: refuse the conversion clearly."""
    if tap is not None:
        raise ValueError("to_statespace(): this system has a delayed input tap (the FIR term y_t += e sum_j "
                         "w_j x_{t-j}), which is not a state-space term yet; convert the delay system "
                         "without it (a part of SumSystem.parts)")
