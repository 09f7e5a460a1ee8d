"""Random systems for the tests (test data, not references): the diagonal delayed system after the DS4D
initialization (docs/theory.md §7), a fixed small system for the tap tests, and well-conditioned random
matrices for the matrix-system tests. NumPy only, nothing from ``ddesys``."""
from __future__ import annotations

import numpy as np


def random_system(rng, H, N2, dt, L, init="inv", p=0.1, max_delay_frac=0.5, phase="pi"):
    """Random stable parameters following the DS4D initialization (docs/theory.md §7).

    Args:
        rng: ``np.random.Generator``.
        H: channels; N2: stored complex modes per channel (state size ``N = 2 N2``).
        dt: step, scalar or ``(H,)``.
        L: sequence length (delays are drawn uniformly in ``[1, max_delay_frac * L]`` steps).
        init: ``"inv"`` (``a_n = -1/2 + i (N/pi)(N/(2n+1) - 1)``) or ``"lin"`` (``a_n = -1/2 + i pi n``).
        p: delayed-branch share: ``lam = (1-p) abar``, ``mu = p |abar| e^{i theta}``.
        phase: ``"pi"`` (``theta = pi + 0.1 randn``) or ``"uniform"`` (``theta`` uniform in ``[0, 2 pi)``).
    Returns:
        ``dict(lam, mu, bbar, c, delay, d)`` with complex ``(H, N2)`` mode parameters and real ``(H,)``
        delay / feedthrough, ready for ``DiscreteDelaySystem(**sys)`` and :mod:`ddesys.verification.reference`.
    """
    n = np.arange(N2)
    N = 2 * N2
    if init == "inv":
        a = -0.5 + 1j * (N / np.pi) * (N / (2 * n + 1) - 1)
    elif init == "lin":
        a = -0.5 + 1j * np.pi * n
    else:
        raise ValueError(f"init must be 'inv' or 'lin', got {init!r}")
    dt = np.broadcast_to(np.asarray(dt, dtype=np.float64), (H,))[:, None]
    a = np.broadcast_to(a, (H, N2))
    abar = np.exp(a * dt)
    lam = (1 - p) * abar
    if phase == "pi":
        theta = np.pi + 0.1 * rng.standard_normal((H, N2))
    elif phase == "uniform":
        theta = rng.uniform(0.0, 2 * np.pi, (H, N2))
    else:
        raise ValueError(f"phase must be 'pi' or 'uniform', got {phase!r}")
    mu = p * np.abs(abar) * np.exp(1j * theta)
    bbar = (abar - 1) / a * 1.0
    c = (rng.standard_normal((H, N2)) + 1j * rng.standard_normal((H, N2))) / np.sqrt(2)
    delay = rng.uniform(1.0, max(1.0, max_delay_frac * L), H)
    d = rng.standard_normal(H)
    return dict(lam=lam, mu=mu, bbar=bbar, c=c, delay=delay, d=d)


def tap_test_system(rng, C=3, N2=4):
    """A stable delay system of ``C`` channels for the tap tests: ``lam, mu, bbar, c`` ``(C, N2)``, the
    delays ``[3.5, 7.2, 1.0]`` and ``d`` ``[0.3, -0.2, 0.0]`` (``C = 3``)."""
    lam = 0.85 * np.exp(1j * rng.uniform(0, np.pi, (C, N2)))
    mu = 0.1 * np.exp(1j * rng.uniform(0, np.pi, (C, N2)))
    bbar = rng.standard_normal((C, N2)) + 1j * rng.standard_normal((C, N2))
    c = rng.standard_normal((C, N2)) + 1j * rng.standard_normal((C, N2))
    return lam, mu, bbar, c, np.array([3.5, 7.2, 1.0]), np.array([0.3, -0.2, 0.0])


def random_similarity(rng, n, complex_=False):
    """A well-conditioned random ``T`` (``cond(T) < 10``) for similarity transforms."""
    while True:
        T = rng.standard_normal((n, n)) + (1j * rng.standard_normal((n, n)) if complex_ else 0)
        if np.linalg.cond(T) < 10:
            return T


def random_unitary(rng, n):
    """A random real orthogonal ``(n, n)`` matrix (QR of a Gaussian matrix, signs fixed by ``R``'s diagonal)."""
    Q, R = np.linalg.qr(rng.standard_normal((n, n)))
    return Q * np.sign(np.diag(R))
