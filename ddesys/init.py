"""Standard diagonal base dynamics (S4D), shared by the DS4D/S4D layers and the checks."""
from __future__ import annotations

import numpy as np

INITS = ("inv", "lin")


def s4d_modes(N2, init="inv"):
    """Continuous poles ``a_n``, ``n = 0 .. N2-1`` (complex ``(N2,)``).

    ``"lin"``: S4D-Lin ``-1/2 + i pi n``; ``"inv"``: S4D-Inv ``-1/2 + i (N/pi)(N/(2n+1) - 1)`` with
    ``N = 2 N2`` the full state size.
    """
    n = np.arange(N2)
    if init == "lin":
        return -0.5 + 1j * np.pi * n
    if init == "inv":
        N = 2 * N2
        return -0.5 + 1j * (N / np.pi) * (N / (2 * n + 1) - 1)
    raise ValueError(f"init must be one of {INITS}, got {init!r}")
