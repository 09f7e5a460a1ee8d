"""A delay recurrence continued from a history: chunked prefill and training from a carried state.

The recurrence of docs/theory.md §2, per mode (conjugates implied)::

    h_t = lam h_{t-1} + m1 h_{t-k} + m2 h_{t-k-1} + bbar x_t,      m1 = mu (1 - alpha),  m2 = mu alpha
    y_t = 2 Re(sum_n c_n h_{n,t}) + d x_t

is linear, so its future from position ``t0`` on, given the history ``h_{t0-k-1} .. h_{t0-1}``, is the sum
of the *zero-history* response to the chunk's inputs (the FFT forward of the chunk alone) and the
*zero-input* response to the history. In chunk time ``tau = t - t0`` the reads that fall before ``t0``
move to the right-hand side as a forcing, the history's *injection* ``u``, nonzero on ``tau <= k`` only::

    u_tau = lam h_{t0-1} [tau = 0] + m1 h_{t0+tau-k} [tau < k] + m2 h_{t0+tau-k-1} [tau <= k]

and the zero-input response is the mode's unit-input impulse response ``G`` (the recurrence's
response to a unit forcing, ``bbar = 1``) convolved with it::

    h^zi_tau = sum_{s <= tau} G_{tau-s} u_s,          y^zi_tau = 2 Re(sum_n c_n h^zi_{n,tau})

a causal convolution of length ``L`` with a forcing of length ``k + 1``: FFT-parallel, ``O(N2 M log M)``
per channel with ``M >= L + k``. A diagonal SSM without delay (S4D) has ``m1 = m2 = 0``: the injection
is ``lam h_{t0-1}`` alone, ``h^zi_tau = lam^(tau+1) h_{t0-1}``. The states inside the chunk are the same
convolution with the full forcing ``bbar x_tau + u_tau`` (:func:`forced_response`).

The functions are written against the array API (NumPy, CuPy, torch with autograd), like
:mod:`ddesys.transfer`; ``tests/ddesys/test_history.py`` checks them against a brute-force float64 loop.
"""
from __future__ import annotations

from ._array import get_namespace, is_numpy, next_pow2

__all__ = ["history_injection", "forced_response"]


def _reshape_index(xp, idx, ndim):
    """``idx`` ``(..., T)`` (the channel dims of the parameters) as ``(1, .., 1, ..., 1, T)`` of ``ndim`` dims:
    leading batch dims and the mode axis broadcast."""
    lead = ndim - idx.ndim - 1
    return xp.reshape(idx, (1,) * lead + tuple(idx.shape[:-1]) + (1, idx.shape[-1]))


def history_injection(past, lam, m1=None, m2=None, k=None, length=None):
    """The forcing ``u`` a history makes on the chunk after it (module docstring).

    Parameters
    ----------
    past : complex ``(..., N2, P)``
        The history in time order: ``past[..., P - 1] = h_{t0-1}``, ``past[..., P - 1 - j] = h_{t0-1-j}``;
        states before the sequence's start must be zero. ``P >= k + 1`` (a DS4D decode ring's ``R``
        slots, unrolled, qualify).
    lam, m1, m2 : complex ``(C..., N2)``
        The recurrence's coefficients (``m1 = mu (1 - alpha)``, ``m2 = mu alpha``); leading dims of
        ``past`` beyond the channel dims ``C...`` are batch dims. ``m1 = m2 = k = None``: no delay (S4D).
    k : integer ``(C...)``
        Integer delays, ``1 <= k <= P - 1``.
    length : int or None
        The chunk length ``L``: ``u`` is returned for ``tau < min(L, max k + 1)`` only (later entries
        are zero or beyond the chunk).

    Returns
    -------
    complex ``(..., N2, T)``
        ``u``: ``T = 1`` without delay, else ``min(length, max(k) + 1)`` (``max(k) + 1`` without a length).
    """
    xp = get_namespace(past, lam)
    P = past.shape[-1]
    if k is None:                                                  # no delay: lam h_{t0-1} at tau = 0
        return lam[..., None] * past[..., P - 1:P]
    kmax = int(xp.max(k))
    if not (1 <= int(xp.min(k)) and kmax <= P - 1):
        raise ValueError(f"history_injection: delays must lie in [1, P - 1] = [1, {P - 1}] for a history of "
                         f"{P} states, got [{int(xp.min(k))}, {kmax}]")
    T = kmax + 1 if length is None else max(1, min(int(length), kmax + 1))
    dev = None if is_numpy(xp) else past.device
    tau = xp.arange(T, dtype=xp.int64, device=dev)                 # (T,)
    j1 = tau - xp.astype(k, xp.int64)[..., None]                   # (C..., T): h_{t0 + j1} read by m1
    live1, live2 = j1 < 0, j1 <= 0                                 # reads that fall before t0
    i1 = xp.where(live1, j1 + P, 0)
    i2 = xp.where(live2, j1 - 1 + P, 0)
    g1 = xp.take_along_axis(past, _reshape_index(xp, i1, past.ndim), axis=-1)   # (..., N2, T)
    g2 = xp.take_along_axis(past, _reshape_index(xp, i2, past.ndim), axis=-1)
    zero = xp.zeros((), dtype=past.dtype, device=dev)
    m = _reshape_index(xp, live1, past.ndim)
    u = xp.where(m, m1[..., None] * g1, zero) + xp.where(_reshape_index(xp, live2, past.ndim), m2[..., None] * g2, zero)
    first = lam[..., None] * past[..., P - 1:P]                    # (..., N2, 1): lam h_{t0-1} at tau = 0
    if T == 1:
        return u + first
    return xp.concat([u[..., :1] + first, u[..., 1:]], axis=-1)


def forced_response(G, f, L, c=None, keep=None):
    """Per-mode response ``h = G * f`` (causal linear convolution, first ``L`` samples) of unit-input
    impulse responses ``G`` to forcings ``f``; with ``c``, the output ``2 Re sum_n c_n h_n`` instead.

    Parameters
    ----------
    G : complex ``(C..., N2, L)``
        Each mode's response to a unit forcing at ``tau = 0`` (``synthesize_kernel(..., cb=1,
        per_mode=True)``, or ``lam^tau`` without delay).
    f : complex ``(..., N2, T)``, ``T <= L``
        Forcings (a history's injection :func:`history_injection`, plus ``bbar x`` for the chunk's
        states); leading dims beyond ``C...`` are batch dims.
    L : int
    c : complex ``(C..., N2)`` or None
        Output coefficients: return ``2 Re(sum_n c_n h_n)`` ``(..., L)``.
    keep : int or None
        Return only the last ``keep`` samples of ``h`` ``(..., N2, keep)``.

    Returns
    -------
    complex ``(..., N2, L)`` (or ``keep``), or real ``(..., L)`` with ``c``.
    """
    xp = get_namespace(G, f)
    T = f.shape[-1]
    if T > L:
        raise ValueError(f"forced_response: the forcing has {T} samples, more than L = {L}")
    if T == 1:                                                     # one impulse: a product, no FFT
        h = G[..., :L] * f
        return 2 * xp.real(xp.sum(c[..., None] * h, axis=-2)) if c is not None else (
            h if keep is None else h[..., L - keep:])
    n = next_pow2(L + T - 1)
    S = xp.fft.fft(G[..., :L], n=n, axis=-1) * xp.fft.fft(f, n=n, axis=-1)      # (..., N2, n)
    if c is not None:                                              # sum the modes before the inverse FFT
        return 2 * xp.real(xp.fft.ifft(xp.sum(c[..., None] * S, axis=-2), axis=-1)[..., :L])
    h = xp.fft.ifft(S, axis=-1)[..., :L]
    return h if keep is None else h[..., L - keep:]
