"""Random delay systems shaped like DS4D layers at initialization (docs/theory.md §7), for the checks."""
from __future__ import annotations

import numpy as np

from ddesys import DiscreteDelaySystem, ds4d_discrete
from ddesys.init import s4d_modes


def random_delay_system(rng, H, N2, dt, L, init="inv", p=0.1, theta=None, max_delay_frac=0.5):
    """``H`` channels of ``N2`` modes: ``lam = (1-p) abar``, ``mu = p |abar| e^{i theta}``, ZOH ``bbar``
    with ``B = 1``, complex normal ``c``, delays uniform in ``[1, max_delay_frac L]``.

    ``theta=None`` draws ``pi + 0.1 N(0, 1)`` (the paper's default); ``"uniform"`` any phase.
    """
    a = s4d_modes(N2, init)                                            # (N2,)
    dt = np.broadcast_to(np.asarray(dt, float), (H,))                  # (H,)
    if theta is None:
        th = np.pi + 0.1 * rng.standard_normal((H, N2))
    elif theta == "uniform":
        th = rng.uniform(-np.pi, np.pi, (H, N2))
    else:
        th = np.full((H, N2), float(theta))
    c = (rng.standard_normal((H, N2)) + 1j * rng.standard_normal((H, N2))) / np.sqrt(2)
    delay = rng.uniform(1.0, max(1.0, max_delay_frac * L), H)
    return DiscreteDelaySystem(*ds4d_system(a, dt, p, th, c, delay), rng.standard_normal(H))


def ds4d_system(a, dt, p, theta, c, delay):
    """``(lam, mu, bbar, c, delay)`` of DS4D layers with base poles ``a`` ``(N2,)``, steps ``dt`` ``(H,)``,
    branch allocation ``p``, phases ``theta`` ``(H, N2)``, ``B = 1``, delays ``(H,)`` in steps: the
    parameters are expressed in the layer's coordinates and mapped by :func:`ddesys.ds4d_discrete` (the
    one definition of the parameterization)."""
    H, N2 = theta.shape
    s_min, s_max = 0.5, float(np.max(delay)) + 1.0                      # any range holding the delays
    nu_tau = np.log((delay - s_min) / (s_max - delay))                 # logit of the range fraction
    r = np.full((H, N2), np.log(p / (1 - p)) if p > 0 else -1e4)
    d = ds4d_discrete(np.log(dt), np.broadcast_to(np.log(-a.real), (H, N2)), np.broadcast_to(a.imag, (H, N2)),
                      r, theta, nu_tau, np.ones((H, N2), complex), c, s_min, s_max)
    return d.lam, d.mu, d.bbar, d.c, d.delay
