"""Helpers of the fused decode step's tests (tests/nn/test_fused_step*.py): an independent float64 oracle
(a plain loop over time and channels on a full history array: no ring buffer, no fast path), stable
DS4D-like parameters, a stepping driver and the rounding-analysis error scale."""
from __future__ import annotations

import numpy as np

from ddesys.cpu.step import decode_step, new_ring


def oracle(lam, m1, m2, bbar, c, d, k, x):
    """Float64 recurrence. ``x`` ``(B, L, H)``; returns ``y`` ``(B, L, H)`` and ``h`` ``(B, L, H, N2)``."""
    lam, m1, m2, bbar, c = (np.asarray(a, np.complex128) for a in (lam, m1, m2, bbar, c))
    d = np.asarray(d, np.float64)
    x = np.asarray(x, np.float64)
    B, L, H = x.shape
    N2 = lam.shape[1]
    h = np.zeros((B, L, H, N2), np.complex128)
    y = np.zeros((B, L, H))
    for t in range(L):
        for ch in range(H):
            kk = int(k[ch])
            v = bbar[ch] * x[:, t, ch, None]
            if t >= 1:
                v = v + lam[ch] * h[:, t - 1, ch]
            if t - kk >= 0:
                v = v + m1[ch] * h[:, t - kk, ch]
            if t - kk - 1 >= 0:
                v = v + m2[ch] * h[:, t - kk - 1, ch]
            h[:, t, ch] = v
            y[:, t, ch] = 2 * np.real(np.sum(c[ch] * v, axis=-1)) + d[ch] * x[:, t, ch]
    return y, h


def system(H, N2, k_max, seed, cdt=np.complex64):
    """Stable DS4D-like parameters: ``lam = (1-p) abar``, ``mu = p |abar| e^{i theta}`` (so ``|lam| + |mu|
    = |abar| < 1``), delays ``1 .. k_max`` with both ends present, fractions in ``[0, 1)``."""
    rng = np.random.default_rng(seed)
    abar = np.exp(-rng.uniform(0.02, 0.5, (H, N2)) + 1j * rng.uniform(-np.pi, np.pi, (H, N2)))
    p = rng.uniform(0.05, 0.95, (H, N2))
    lam = (1 - p) * abar
    mu = p * np.abs(abar) * np.exp(1j * rng.uniform(-np.pi, np.pi, (H, N2)))
    k = rng.integers(1, k_max + 1, H).astype(np.int64)
    k[0], k[-1] = 1, k_max
    alpha = rng.uniform(0, 1, H)
    alpha[1 % H] = 0.0
    m1 = mu * (1 - alpha)[:, None]
    m2 = mu * alpha[:, None]
    bbar = rng.standard_normal((H, N2)) + 1j * rng.standard_normal((H, N2))
    c = rng.standard_normal((H, N2)) + 1j * rng.standard_normal((H, N2))
    d = rng.standard_normal(H)
    rdt = np.float64 if cdt == np.complex128 else np.float32
    cast = lambda a: np.ascontiguousarray(a, cdt)   # noqa: E731
    return dict(lam=cast(lam), m1=cast(m1), m2=cast(m2), bbar=cast(bbar), c=cast(c), d=d.astype(rdt), k=k)


def run_fused(P, x, R, buf_dtype, fmt16=None, fill=0, parallel=False, buf=None):
    """Step through ``x`` ``(B, L, H)`` with the fused step; returns ``y`` ``(B, L, H)`` and the buffer."""
    B, L, H = x.shape
    N2 = P["lam"].shape[1]
    rdt = np.float64 if buf_dtype == np.complex128 else np.float32
    if buf is None:
        shape = (B, R, H, N2, 2) if fmt16 else (B, R, H, N2)
        buf = new_ring(shape, buf_dtype)                 # channel-major, as the step needs
        buf[...] = fill
    xs = np.ascontiguousarray(x, rdt)
    y = np.zeros((B, L, H))
    y_t = np.zeros((B, H), rdt)
    for t in range(L):
        out = decode_step(buf, xs[:, t], P["lam"], P["m1"], P["m2"], P["bbar"], P["c"], P["d"], P["k"], t, y_t,
                          fmt16=fmt16, parallel=parallel)
        assert out is y_t
        y[:, t] = y_t
    return y, buf


def _scale(P, h_ref):
    """Per-channel error scale ``S = sum_n 2 |c_n| max_t |h_n,t| / (1 - rho_n)``, ``rho = |lam|+|m1|+|m2|``.

    Rounding analysis: an error ``e`` injected into a state each step (relative ``eps`` of its size) obeys
    ``e_t = lam e_{t-1} + m1 e_{t-k} + m2 e_{t-k-1} + delta_t``; since ``|lam|+|m1|+|m2| = rho < 1``,
    ``max|e| <= max|delta| / (1 - rho)``, and the readout multiplies by ``2 |c|``: ``|dy| <= eps S``. The
    update's own float arithmetic makes ``eps`` a small multiple of the unit roundoff (four complex
    products and four sums: ``eps <= ~12 u``), and a 16-bit history adds its storage rounding."""
    rho = np.abs(P["lam"]).astype(np.float64) + np.abs(P["m1"]) + np.abs(P["m2"])
    hmax = np.abs(h_ref).max(axis=(0, 1))                 # (H, N2)
    return 2 * np.sum(np.abs(P["c"]) * hmax / (1 - rho), axis=-1)   # (H,)
