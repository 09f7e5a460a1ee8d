"""The discrete delayed system as plain loops, float64 (docs/theory.md §2-§5, §8).

Written from the formulas of ``docs/theory.md`` only; this module imports nothing but NumPy, so a test
that compares :mod:`ddesys` with it compares two implementations, not one implementation with itself.

The system, per channel ``b`` and stored complex mode ``n`` (conjugates implied)::

    s = k + alpha,  k = floor(s) >= 1,  alpha in [0, 1)
    h_t = lam h_{t-1} + mu ((1 - alpha) h_{t-k} + alpha h_{t-k-1}) + bbar x_t,    h_{t<0} = 0
    y_t = 2 Re(sum_n c_n h_{n,t}) + d x_t

* :func:`brute_force`: the recurrence as a plain Python loop over channel, mode and time (complex
  Python scalars), the slowest and most obviously correct form.
* :func:`impulse_response`: the kernel ``K_t = 2 Re sum_n c_n g_{n,t}`` (``d`` excluded) with a NumPy
  loop over ``t``, vectorized over channels and modes (fast enough for ``L`` in the thousands).
* :func:`char_poly` / :func:`roots_radius`: the characteristic polynomial
  ``P(z) = z^{k+1} - lam z^k - mu((1 - alpha) z + alpha)`` and its spectral radius by ``np.roots``.
* :func:`tap_brute`: the delayed input tap of docs/theory.md §8 as a Python loop.
"""
from __future__ import annotations

import contextlib
import ctypes
import glob
import math
import os

import numpy as np

__all__ = ["brute_force", "char_poly", "impulse_response", "roots_radius", "single_threaded_blas", "split_delay",
           "tap_brute"]


def _load_openblas():
    """NumPy's bundled OpenBLAS (wheel builds), for thread control; None when not found."""
    libdir = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    for path in sorted(glob.glob(os.path.join(libdir, "libscipy_openblas*.so*"))):
        try:
            lib = ctypes.CDLL(path)
            lib.scipy_openblas_get_num_threads64_.restype = ctypes.c_int
            lib.scipy_openblas_set_num_threads64_.argtypes = [ctypes.c_int]
            return lib
        except (OSError, AttributeError):
            continue
    return None


_OPENBLAS = _load_openblas()


@contextlib.contextmanager
def single_threaded_blas():
    """Run LAPACK single-threaded inside the block (the thread count is restored on exit): ``np.roots`` of
    a degree in the hundreds is fast on one thread but slows down by orders of magnitude when OpenBLAS
    threads contend with other work on a small machine."""
    if _OPENBLAS is None:
        yield
        return
    n = _OPENBLAS.scipy_openblas_get_num_threads64_()
    _OPENBLAS.scipy_openblas_set_num_threads64_(1)
    try:
        yield
    finally:
        _OPENBLAS.scipy_openblas_set_num_threads64_(n)


def split_delay(delay):
    """``(k, alpha)`` with ``k = floor(delay)`` (Python ints) and ``alpha = delay - k``, elementwise."""
    delay = np.asarray(delay, dtype=np.float64)
    k = np.floor(delay).astype(np.int64)
    return k, delay - k


def _flatten(lam, mu, bbar, c, delay, d, x=None):
    """Broadcast everything to a common batch and flatten it: params ``(B, N2)``, ``(B,)``, ``x (B, L)``."""
    lam, mu, bbar, c = (np.asarray(v, dtype=np.complex128) for v in (lam, mu, bbar, c))
    delay = np.asarray(delay, dtype=np.float64)
    d = np.asarray(d, dtype=np.float64)
    modes = np.broadcast_shapes(lam.shape, mu.shape, bbar.shape, c.shape)
    shapes = [modes[:-1], delay.shape, d.shape]
    if x is not None:
        x = np.asarray(x, dtype=np.float64)
        shapes.append(x.shape[:-1])
    batch = np.broadcast_shapes(*shapes)
    N2 = modes[-1]
    B = int(np.prod(batch, dtype=np.int64))
    fm = lambda a: np.broadcast_to(a, batch + (N2,)).reshape(B, N2)  # noqa: E731
    fb = lambda a: np.broadcast_to(a, batch).reshape(B)  # noqa: E731
    out = [fm(lam), fm(mu), fm(bbar), fm(c), fb(delay), fb(d)]
    if x is not None:
        out.append(np.broadcast_to(x, batch + x.shape[-1:]).reshape(B, x.shape[-1]))
    return batch, out


def brute_force(lam, mu, bbar, c, delay, d, x, return_states=False):
    """The recurrence as a plain Python loop (channel, mode, time), complex128 states.

    Args:
        lam, mu, bbar, c: complex ``(..., N2)``; delay, d: real ``(...)`` (delay >= 1 step);
        x: real ``(..., L)``. All batch shapes broadcast together; the batch is flattened to ``B``.
        return_states: also return the states.
    Returns:
        ``y`` float64 ``(B, L)`` and, with ``return_states``, ``h`` complex128 ``(B, N2, L)``.
    """
    _, (lam, mu, bbar, c, delay, d, x) = _flatten(lam, mu, bbar, c, delay, d, x)
    B, N2 = lam.shape
    L = x.shape[-1]
    y = np.zeros((B, L))
    states = np.zeros((B, N2, L), dtype=np.complex128)
    for b in range(B):
        s = float(delay[b])
        k = math.floor(s)
        alpha = s - k
        xb = [float(v) for v in x[b]]
        for n in range(N2):
            ln, mn, bn, cn = (complex(v) for v in (lam[b, n], mu[b, n], bbar[b, n], c[b, n]))
            h = [0j] * L

            def past(j):
                return h[j] if j >= 0 else 0j

            for t in range(L):
                h[t] = (ln * past(t - 1) + mn * ((1 - alpha) * past(t - k) + alpha * past(t - k - 1))
                        + bn * xb[t])
                y[b, t] += 2.0 * (cn * h[t]).real
            states[b, n, :] = h
        for t in range(L):
            y[b, t] += float(d[b]) * xb[t]
    return (y, states) if return_states else y


def impulse_response(lam, mu, bbar, c, delay, L, return_modes=False):
    """Kernel ``K_t = 2 Re sum_n c_n g_{n,t}``, ``t = 0 .. L-1`` (``d`` excluded), float64.

    ``g`` is the response of ``h_t = lam h_{t-1} + mu((1-alpha) h_{t-k} + alpha h_{t-k-1}) + bbar delta_t``;
    NumPy loop over ``t`` vectorized over (channel, mode), channels with different delays gathered by
    index. Returns ``K`` ``(B, L)`` (and ``g`` ``(B, N2, L)`` with ``return_modes``).
    """
    _, (lam, mu, bbar, c, delay, _d) = _flatten(lam, mu, bbar, c, delay, 0.0)
    B, N2 = lam.shape
    k, alpha = split_delay(delay)
    m1 = mu * (1 - alpha)[:, None]
    m2 = mu * alpha[:, None]
    g = np.zeros((B, N2, L), dtype=np.complex128)
    rows = np.arange(B)
    for t in range(L):
        v = bbar.copy() if t == 0 else lam * g[:, :, t - 1]
        j1 = t - k
        j2 = t - k - 1
        ok1 = j1 >= 0
        ok2 = j2 >= 0
        if ok1.any():
            v[ok1] += m1[ok1] * g[rows[ok1], :, j1[ok1]]
        if ok2.any():
            v[ok2] += m2[ok2] * g[rows[ok2], :, j2[ok2]]
        g[:, :, t] = v
    K = 2.0 * np.einsum("bn,bnt->bt", c, g).real
    return (K, g) if return_modes else K


def char_poly(lam, mu, k, alpha):
    """Coefficients (highest power first, ``k + 2`` entries) of
    ``P(z) = z^{k+1} - lam z^k - mu (1 - alpha) z - mu alpha`` for one mode."""
    k = int(k)
    coeffs = np.zeros(k + 2, dtype=np.complex128)
    coeffs[0] = 1.0
    coeffs[1] -= lam
    coeffs[k] -= mu * (1 - alpha)      # z^1 sits at index (k + 1) - 1
    coeffs[k + 1] -= mu * alpha        # z^0
    return coeffs


def roots_radius(lam, mu, k, alpha):
    """Largest root modulus of :func:`char_poly` by ``np.roots`` (companion eigenvalues)."""
    with single_threaded_blas():
        r = np.roots(char_poly(lam, mu, k, alpha))
    return float(np.abs(r).max()) if r.size else 0.0


def tap_brute(e, s, width, x):
    """The delayed input tap ``e sum_{j >= 0} w_j x_{t-j}`` as a Python loop (docs/theory.md §8).

    ``w_j = hat((j - s) / width) / Z`` with ``hat(u) = max(0, 1 - |u|)`` and ``Z`` the sum of the hat
    over every integer ``j`` (here: all ``j`` within ``width + 2`` of ``s``). ``e, s`` real ``(C,)``,
    ``x`` real ``(B, C, L)`` -> float64 ``(B, C, L)``."""
    x = np.asarray(x, dtype=np.float64)
    Bsz, C, L = x.shape
    y = np.zeros((Bsz, C, L))
    for ch in range(C):
        sc, ec = float(s[ch]), float(e[ch])
        near = range(math.floor(sc - width) - 2, math.ceil(sc + width) + 3)
        hat = {j: max(0.0, 1.0 - abs(j - sc) / width) for j in near}
        Z = sum(hat.values())
        for b in range(Bsz):
            for t in range(L):
                y[b, ch, t] = ec * sum(hat[j] / Z * x[b, ch, t - j] for j in near if j >= 0 and t - j >= 0)
    return y
