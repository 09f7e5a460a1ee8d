"""Helpers the experiments' reports share (NumPy; not imported before a CLI's argument checks)."""
from __future__ import annotations

import numpy as np

__all__ = ["mean_std"]


def mean_std(values, fmt="{:.3f}"):
    """``"mean +- std"`` (population std) of the values that are not None, each through ``fmt``; ``"-"``
    when there are none."""
    v = np.array([x for x in values if x is not None], dtype=float)
    if not len(v):
        return "-"
    return f"{fmt.format(v.mean())} +- {fmt.format(v.std())}"
