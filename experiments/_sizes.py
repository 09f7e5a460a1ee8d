"""Model sizes for the experiments' parameter-matched comparisons (one home for the count and the search)."""
from __future__ import annotations

__all__ = ["closest_width", "n_params"]


def n_params(model, trainable=True):
    """Parameters of ``model`` (the trainable ones by default)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable)


def closest_width(count, budget, lo, hi, step=1):
    """The width ``h`` (a multiple of ``step`` in ``[lo, hi]``) whose ``count(h)`` is closest to ``budget``,
    by bisection (``count`` grows with the width); ties go to the smaller width."""
    a, b = max(step, lo // step * step), hi // step * step
    while b - a > step:
        mid = (a + b) // 2 // step * step
        if count(mid) < budget:
            a = mid
        else:
            b = mid
    return min((a, b), key=lambda h: abs(count(h) - budget))
