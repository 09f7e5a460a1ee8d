"""The soft clock: a delay system whose time advances by a learnable amount ``c_t`` in ``[0, 1]`` per step.

The binary clock of :mod:`ddesys.clock` (docs/theory.md §10) is exact and LTI in ticks but has no
gradient with respect to the clock. The soft clock relaxes it (docs/theory.md §10.4): internal time
``tau_t = sum_{j <= t} c_j``, and per mode::

    h_t = lam^{c_t} h_{t-1} + c_t mu H(tau_t - s) + c_t bbar x_t,       lam^c = exp(c log lam)        (1)

where ``H`` is the history as a function of internal time: the states ``h_j`` placed at ``tau_j``,
joined by straight lines, with ``H(tau) = 0`` for ``tau <= 0`` (the state "before the first step" sits
at ``tau = 0``). The read ``r = tau_t - s`` never passes ``tau_{t-1}`` (``c_t <= 1 <= s``), so it only
needs stored states. The segment of a read is right-closed, ``tau_{q-1} < r <= tau_q``; zero-length
segments (steps with ``c = 0``) are never read inside.

* ``c_t = 1`` everywhere: (1) is the delay recurrence of §2 (``s = k + alpha``, linear interpolation).
* ``c_t`` in ``{0, 1}``: (1) is the binary clocked system of :mod:`ddesys.clock` exactly (a step with
  ``c = 0`` is the identity; the history's duplicates are never read inside).
* Stability, every clock: ``|lam|^c <= 1 - c (1 - |lam|)`` (convexity), so with ``rho = |lam| + |mu| < 1``
  a step maps ``sup |h| <= M`` to ``<= (1 - c (1 - rho)) M + c |bbar| |x|``: the states never exceed
  ``max(M_0, |bbar| sup |x| / (1 - rho))``.

:func:`soft_scan` runs (1) and its readout for a batch of rows and channels; :func:`soft_scan_grad` is
its adjoint (reverse-time scan), with gradients for ``log lam``, ``mu``, ``bbar``, ``c``, the delays ``s``,
the inputs and the clock. Both are compiled with Numba (:mod:`ddesys.cpu.selective_loops`: parallel over
(row, channel) pairs) and run as plain Python loops without it (slow: a documented fallback for tiny inputs).

Gradient convention for complex arrays: ``G = dL/d Re z + i dL/d Im z`` (torch's).
"""
from __future__ import annotations

import numpy as np

from .cpu import selective_loops

__all__ = ["soft_scan", "soft_scan_grad"]


def _check(loglam, mu, bbar, s, x, c):
    B, H, L = x.shape
    for name, a in (("loglam", loglam), ("mu", mu), ("bbar", bbar)):
        if a.shape != loglam.shape or a.shape[0] != H:
            raise ValueError(f"{name} must have shape (H, N2) = ({H}, {loglam.shape[1]}), got {a.shape}")
    if s.shape != (H,) or c.shape != (B, L):
        raise ValueError(f"s must be (H,) = ({H},) and c (B, L) = ({B}, {L}), got {s.shape} and {c.shape}")
    if H and not np.all(s >= 1.0):
        raise ValueError(f"delays s must be >= 1 step (min {float(np.min(s))})")
    if c.size and not (np.all(c >= 0.0) and np.all(c <= 1.0)):
        raise ValueError(f"the clock c must lie in [0, 1], got [{float(np.min(c))}, {float(np.max(c))}]")


def soft_scan(loglam, mu, bbar, cout, s, x, c, dtype=np.float64):
    """Run (1) and its readout ``y_t = 2 Re(sum_n cout_n h_{n,t})`` (without the feedthrough).

    ``loglam``, ``mu``, ``bbar``, ``cout`` complex ``(H, N2)``; ``s`` ``(H,)`` delays (ticks, ``>= 1``); ``x``
    real ``(B, H, L)``; ``c`` ``(B, L)`` in ``[0, 1]``. ``dtype``: the real precision of the states
    (``np.float32``: complex64 states and arithmetic, half the memory; internal times and read positions
    stay float64).

    Returns ``(y, (h, tau, q, w, E))``: outputs ``(B, H, L)``, and what the adjoint needs: states ``(B, H,
    L, N2)`` (modes last), internal times ``(B, L)``, each read's segment (``q`` int64 ``(B, H, L)``, its
    right point, -1 for no read; ``w`` its weight) and the step factors ``E = lam^c`` ``(B, H, L, N2)``."""
    cdt, rdt = (np.complex64, np.float32) if dtype == np.float32 else (np.complex128, np.float64)
    loglam, mu, bbar, cout = (np.ascontiguousarray(a, cdt) for a in (loglam, mu, bbar, cout))
    s, c = (np.ascontiguousarray(a, np.float64) for a in (s, c))
    x = np.ascontiguousarray(x, rdt)
    _check(loglam, mu, bbar, s, x, c)
    if cout.shape != loglam.shape:
        raise ValueError(f"cout must have shape {loglam.shape}, got {cout.shape}")
    B, H, L = x.shape
    tau = np.cumsum(c, axis=1)
    h = np.zeros((B, H, L, loglam.shape[1]), cdt)
    E = np.zeros_like(h)
    q = np.zeros((B, H, L), np.int64)
    w = np.zeros((B, H, L), rdt)
    y = np.zeros((B, H, L), rdt)
    if h.size:
        from .cpu.threads import numba_threads
        with numba_threads():
            selective_loops.forward(loglam, mu, bbar, cout, s, x, c.astype(rdt), tau, h, E, q, w, y)
    return y, (h, tau, q, w, E)


def soft_scan_grad(loglam, mu, bbar, cout, s, x, c, fwd, gy, parts=False):
    """Adjoint of :func:`soft_scan` for ``gy`` = dL/dy ``(B, H, L)``, in the forward's precision
    (accumulated per (row, channel) in that precision, summed in float64). ``fwd``: the second value
    :func:`soft_scan` returned.

    Returns ``(g_loglam, g_mu, g_bbar, g_cout)`` complex ``(H, N2)`` (convention above), ``g_s`` ``(H,)``,
    ``g_x`` ``(B, H, L)``, ``g_c`` ``(B, L)``. ``parts=True`` appends the two paths by which the clock acts,
    ``(g_c_step, g_c_time)`` ``(B, L)``, summing to ``g_c``: ``g_c_step`` through step ``t``'s own factors
    (``lam^{c_t}``, ``c_t mu H``, ``c_t bbar x_t``), ``g_c_time`` through the internal times (every read
    position and polyline node at or after ``t``)."""
    h, tau, q, w, E = fwd
    cdt = h.dtype
    rdt = np.float32 if cdt == np.complex64 else np.float64
    loglam, mu, bbar, cout = (np.ascontiguousarray(a, cdt) for a in (loglam, mu, bbar, cout))
    x, c = np.ascontiguousarray(x, rdt), np.ascontiguousarray(c, rdt)
    gy = np.ascontiguousarray(gy, rdt)
    B, H, L = x.shape
    N2 = loglam.shape[1]
    g_ll, g_mu, g_bb, g_co = (np.zeros((B, H, N2), cdt) for _ in range(4))
    g_s = np.zeros((B, H))
    g_x, g_cd, g_tau = (np.zeros((B, H, L)) for _ in range(3))
    if h.size:
        from .cpu.threads import numba_threads
        with numba_threads():
            selective_loops.backward(loglam, mu, bbar, cout, x, c, tau, h, E, q, w, gy, g_ll, g_mu, g_bb, g_co,
                                     g_s, g_x, g_cd, g_tau)
    gt = g_tau.sum(axis=1)                                                  # (B, L): dL/dtau_t
    g_step, g_time = g_cd.sum(axis=1), np.cumsum(gt[:, ::-1], axis=1)[:, ::-1]   # tau_t = sum_{j <= t} c_j
    c128 = np.complex128
    out = (g_ll.sum(0, dtype=c128), g_mu.sum(0, dtype=c128), g_bb.sum(0, dtype=c128), g_co.sum(0, dtype=c128),
           g_s.sum(0), g_x, g_step + g_time)
    return out + (g_step, g_time) if parts else out
