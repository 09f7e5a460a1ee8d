"""The exact delayed recurrence (docs/theory.md §2), compiled on the CPU and vectorized elsewhere.

    h_t = lam h_{t-1} + mu ((1 - alpha) h_{t-k} + alpha h_{t-k-1}) + bbar x_t,   h_{t<0} = 0
    y_t = 2 Re(sum_n c_n h_{n,t}) + d x_t

Two paths, one formula:

* NumPy input with Numba available: a compiled loop (:mod:`ddesys.cpu.recurrence_loops`), parallel
  over channels, complex128 states. Set ``DDESYS_DISABLE_NUMBA=1`` (or lack Numba) to take the next
  path instead.
* Anything else (CuPy, torch, NumPy without Numba): the array module's vector path, one vectorized
  update over all channels and modes per time step, ``O(L)`` steps.

Both are checked against a plain Python loop in the tests.
"""
from __future__ import annotations

import numpy as np

from . import cpu
from ._array import get_namespace, is_numpy
from ._validate import MAX_DELAY_STEPS


def numba_available() -> bool:
    """Whether the compiled (Numba) CPU loops are in use (an alias of :func:`ddesys.cpu.available`).

    Returns
    -------
    bool
        False when Numba is absent or ``DDESYS_DISABLE_NUMBA=1``.
    """
    return cpu.available()


def run_recurrence(lam, mu, bbar, c, k, alpha, d, x, return_states=False):
    """Run the recurrence for a batch of channels.

    Parameters
    ----------
    lam, mu, bbar, c : array, complex ``(B, N2)``
    k : array of int ``(B,)``
        Integer part of the delay.
    alpha, d : array, real ``(B,)``
        Fractional part of the delay; feedthrough.
    x : array, real ``(B, L)``
    return_states : bool, default False
        Also return the states.

    Returns
    -------
    y : array, real ``(B, L)``
        float64 on the NumPy paths.
    h : array, complex ``(B, N2, L)``
        Only with ``return_states``.

    Raises
    ------
    ValueError
        Shapes that disagree, ``k`` outside ``[1, MAX_DELAY_STEPS]``, ``alpha`` outside ``[0, 1]``:
        checked here so that no input reaches an out-of-bounds read in the compiled loop (which reads
        ``h[t - k]`` and ``h[t - k - 1]`` only when they are ``>= 0``, hence in bounds for ``k >= 1``).
    TypeError
        A non-integer ``k``.

    Notes
    -----
    Memory is ``O(B L)`` plus ``O(threads (L + k) N2)`` history; a delay longer than the sequence is
    never read and costs no history.

    Examples
    --------
    >>> import numpy as np
    >>> one = lambda v: np.array([[v]], complex)
    >>> run_recurrence(one(0.5), one(0.25), one(1.0), one(0.5), np.array([2]), np.array([0.0]),
    ...                np.array([0.0]), np.eye(1, 6))
    array([[1.    , 0.5   , 0.5   , 0.375 , 0.3125, 0.25  ]])
    """
    xp = get_namespace(lam, x)
    _check_inputs(xp, lam, mu, bbar, c, k, alpha, d, x)
    if is_numpy(xp) and cpu.available():
        from .cpu import recurrence_loops
        return recurrence_loops.run(lam, mu, bbar, c, k, alpha, d, x, return_states)
    with np.errstate(over="ignore", invalid="ignore"):   # NumPy without Numba: an unstable system
        return _recurrence_vector(xp, lam, mu, bbar, c, k, alpha, d, x, return_states)  # overflows quietly


def _check_inputs(xp, lam, mu, bbar, c, k, alpha, d, x):
    """Shapes, index range and interpolation weight of :func:`run_recurrence`'s arguments."""
    if getattr(x, "ndim", None) != 2 or getattr(lam, "ndim", None) != 2:
        raise ValueError(f"x must be (B, L) and lam (B, N2), got shapes {getattr(x, 'shape', None)}, "
                         f"{getattr(lam, 'shape', None)}")
    B, L = x.shape
    want = {"lam": (B, lam.shape[1]), "mu": (B, lam.shape[1]), "bbar": (B, lam.shape[1]),
            "c": (B, lam.shape[1]), "k": (B,), "alpha": (B,), "d": (B,)}
    for name, arr in dict(lam=lam, mu=mu, bbar=bbar, c=c, k=k, alpha=alpha, d=d).items():
        if tuple(arr.shape) != want[name]:
            raise ValueError(f"{name} must have shape {want[name]} to match x {tuple(x.shape)} and lam "
                             f"{tuple(lam.shape)}, got {tuple(arr.shape)}")
    if B == 0:
        return
    if "int" not in str(k.dtype):
        raise TypeError(f"k must be an integer array (the delay's integer part), got dtype {k.dtype}")
    kmin, kmax = int(xp.min(k)), int(xp.max(k))
    if kmin < 1 or kmax > MAX_DELAY_STEPS:
        raise ValueError(f"k (integer part of the delay) must lie in [1, MAX_DELAY_STEPS = {MAX_DELAY_STEPS}], "
                         f"got [{kmin}, {kmax}]")
    amin, amax = float(xp.min(alpha)), float(xp.max(alpha))
    if not (0.0 <= amin and amax <= 1.0):          # also False for NaN
        raise ValueError(f"alpha (fractional part of the delay) must lie in [0, 1], got [{amin}, {amax}]")


def delay_update(h_prev, h_k, h_k1, x_t, lam, m1, m2, bbar):
    """One step of the recurrence: ``lam h_{t-1} + m1 h_{t-k} + m2 h_{t-k-1} + bbar x_t``.

    The single definition used by the vector path here and by the decode step in ``nn``.

    Parameters
    ----------
    h_prev, h_k, h_k1 : array, complex ``(..., N2)``
        States ``h_{t-1}``, ``h_{t-k}``, ``h_{t-k-1}``.
    x_t : array, real ``(..., 1)``
        Input at ``t``.
    lam, m1, m2, bbar : array, complex ``(..., N2)``
        ``m1 = mu (1 - alpha)``, ``m2 = mu alpha``. All arguments broadcast.

    Returns
    -------
    array, complex ``(..., N2)``
        ``h_t``.
    """
    return lam * h_prev + m1 * h_k + m2 * h_k1 + bbar * x_t


def readout(h, c, d, x_t):
    """The output ``y_t = 2 Re(sum_n c_n h_n) + d x_t``.

    Parameters
    ----------
    h, c : array, complex ``(..., N2)``
        States and output coefficients.
    d, x_t : array or float, real ``(...)``
        Feedthrough and input.

    Returns
    -------
    array, real ``(...)``
    """
    xp = get_namespace(h)
    return 2 * xp.sum(xp.real(c * h), axis=-1) + d * x_t


def _recurrence_vector(xp, lam, mu, bbar, c, k, alpha, d, x, return_states):
    """Vector path: a ``(B, N2, L + 1)`` history (slot ``L`` stays zero and stands for ``t < 0``); the
    delayed states are gathered per channel with ``take_along_axis``. Not differentiable (in-place
    writes): it is the verification path for torch."""
    B, L = x.shape
    N2 = lam.shape[1]
    al = xp.astype(alpha, x.dtype)[:, None]                         # (B, 1)
    m1, m2 = mu * xp.astype(1 - al, lam.dtype), mu * xp.astype(al, lam.dtype)   # (B, N2)
    hist = xp.zeros((B, N2, L + 1), dtype=lam.dtype, device=None if is_numpy(xp) else lam.device)
    y = []
    kk = k[:, None, None]                                           # (B, 1, 1)
    for t in range(L):
        i1 = xp.where(t - kk >= 0, t - kk, L)                       # (B, 1, 1) slot of t-k, or zero slot
        i2 = xp.where(t - kk - 1 >= 0, t - kk - 1, L)
        i1 = xp.broadcast_to(i1, (B, N2, 1))
        i2 = xp.broadcast_to(i2, (B, N2, 1))
        hk = xp.take_along_axis(hist, i1, axis=-1)[..., 0]          # (B, N2)
        hk1 = xp.take_along_axis(hist, i2, axis=-1)[..., 0]         # (B, N2)
        h = delay_update(hist[..., t - 1] if t else hist[..., L], hk, hk1, x[:, t:t + 1], lam, m1, m2, bbar)
        hist[..., t] = h
        y.append(readout(h, c, d, x[:, t]))                         # (B,)
    y = xp.stack(y, axis=-1) if L else xp.zeros_like(x)             # (B, L)
    return (y, hist[..., :L]) if return_states else y
