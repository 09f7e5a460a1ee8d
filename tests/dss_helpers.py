"""Independent float64 references for the ``DiscreteDelayStateSpace`` tests (``test_discrete_ss.py``,
``test_dss_stability.py``): the recurrence written out from its definition and the lifted companion
matrix built from the definition. No ddesys code.
"""
from __future__ import annotations

import math

import numpy as np


def brute_states(Phi, G, delay, B, u):
    """x_t = Phi x_{t-1} + sum_k G_k ((1 - a_k) x_{t-k_k} + a_k x_{t-k_k-1}) + B u_t, zero history."""
    n, L = Phi.shape[0], u.shape[-1]
    x = np.zeros((L, n), np.result_type(Phi, G, B, u))
    past = lambda j: x[j] if j >= 0 else np.zeros(n)  # noqa: E731
    for t in range(L):
        v = B @ u[:, t] + Phi @ past(t - 1)
        for Gk, s in zip(G, delay):
            k = int(math.floor(s))
            a = s - k
            v = v + Gk @ ((1 - a) * past(t - k) + a * past(t - k - 1))
        x[t] = v
    return x


def brute_output(Phi, G, delay, B, C, D, u):
    return (brute_states(Phi, G, delay, B, u) @ C.T).T + D @ u


def brute_kernel(Phi, G, delay, B, C, L):
    """(p, m, L): column j driven by a unit impulse on input j."""
    m = B.shape[1]
    out = []
    for j in range(m):
        u = np.zeros((m, L))
        u[j, 0] = 1
        out.append((brute_states(Phi, G, delay, B, u) @ C.T).T)
    return np.stack(out, axis=1)


def companion(Phi, G, delay):
    """Lifted companion matrix of (x_{t-1}, ..., x_{t-J}), built from the definition."""
    n = Phi.shape[0]
    coeffs = {1: Phi.astype(complex)}
    for Gk, s in zip(G, delay):
        k = int(math.floor(s))
        a = s - k
        coeffs[k] = coeffs.get(k, 0) + (1 - a) * Gk
        if a > 0:
            coeffs[k + 1] = coeffs.get(k + 1, 0) + a * Gk
    J = max(coeffs)
    Cm = np.zeros((n * J, n * J), complex)
    for j, E in coeffs.items():
        Cm[:n, (j - 1) * n:j * n] = E
    Cm[n:, :-n] = np.eye(n * (J - 1))
    return Cm


def radius(Phi, G, delay):
    return float(np.abs(np.linalg.eigvals(companion(Phi, G, delay))).max())
