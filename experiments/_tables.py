"""Helpers the experiments' reports share (NumPy; not imported before a CLI's argument checks)."""
from __future__ import annotations

import numpy as np

__all__ = ["chosen_on_validation", "mean_std"]


def chosen_on_validation(curve, val, test, at="step", lower=False):
    """A learning curve read under the held-out protocol: ``{at, "val", "test", "val_final", "test_final"}``,
    the point chosen on validation alone (the first at the best score ``point[val]``, the lowest with
    ``lower``), the test score ``point[test]`` there, and both scores at the last point. The test scores
    choose nothing. Points without a validation score cannot be chosen: ``at``, ``val`` and ``test`` are
    None when none has one; a missing test score reads None; ``None`` for an empty curve. The one rule
    every experiment's report reads its runs by."""
    if not curve:
        return None
    last = curve[-1]
    out = {at: None, "val": None, "test": None, "val_final": last.get(val), "test_final": last.get(test)}
    idx = [i for i, p in enumerate(curve) if p.get(val) is not None]
    if idx:
        sign = -1.0 if lower else 1.0
        best = max(idx, key=lambda i: (sign * curve[i][val], -i))             # the first at the best
        out.update({at: curve[best][at], "val": curve[best][val], "test": curve[best].get(test)})
    return out


def mean_std(values, fmt="{:.3f}"):
    """``"mean +- std"`` (population std) of the values that are not None, each through ``fmt``; ``"-"``
    when there are none."""
    v = np.array([x for x in values if x is not None], dtype=float)
    if not len(v):
        return "-"
    return f"{fmt.format(v.mean())} +- {fmt.format(v.std())}"
