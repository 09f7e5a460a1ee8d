"""Random delay systems shaped like DS4D layers at initialization (SPEC section 7), for the checks."""
from __future__ import annotations

import numpy as np

from ddesys import DiscreteDelaySystem
from ddesys.init import s4d_modes


def random_delay_system(rng, H, N2, dt, L, init="inv", p=0.1, theta=None, max_delay_frac=0.5):
    """``H`` channels of ``N2`` modes: ``lam = (1-p) abar``, ``mu = p |abar| e^{i theta}``, ZOH ``bbar``
    with ``B = 1``, complex normal ``c``, delays uniform in ``[1, max_delay_frac L]``.

    ``theta=None`` draws ``pi + 0.1 N(0, 1)`` (the paper's default); ``"uniform"`` any phase.
    """
    a = s4d_modes(N2, init)                                            # (N2,)
    dt = np.broadcast_to(np.asarray(dt, float), (H,))[:, None]         # (H, 1)
    abar = np.exp(a * dt)                                              # (H, N2)
    if theta is None:
        th = np.pi + 0.1 * rng.standard_normal((H, N2))
    elif theta == "uniform":
        th = rng.uniform(-np.pi, np.pi, (H, N2))
    else:
        th = np.full((H, N2), float(theta))
    lam = (1 - p) * abar
    mu = p * np.abs(abar) * np.exp(1j * th)
    bbar = (abar - 1) / a
    c = (rng.standard_normal((H, N2)) + 1j * rng.standard_normal((H, N2))) / np.sqrt(2)
    delay = rng.uniform(1.0, max(1.0, max_delay_frac * L), H)
    return DiscreteDelaySystem(lam, mu, bbar, c, delay, rng.standard_normal(H))
