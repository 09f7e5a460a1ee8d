"""How a clock learned by flip tests explores its paused entries in training.

A clock that pauses an id stops the layers from ever seeing that id's ticks; exploration ticks some
paused entries in training (as dropout: training mode under autograd, the global RNG) so that the layers
still see them written, and a later flip test can find an id the task reads after it paused. Two rules,
each a part passed as ``explore=`` to :class:`nn.FlipTokenClock` or :class:`nn.FlipRunClock`:

- :class:`ExploreEach` ``(p)``: each row ticks each paused entry with probability ``p``, independently.
  With ``k`` paused ids a row is clean (no paused id ticking) with probability ``(1 - p)^k``: 80% of the
  rows with one padding id at ``p = 0.2``, 3% with sixteen.
- :class:`ExploreRows` ``(p)``: each row, with probability ``p``, ticks every paused entry; the other rows
  run the clock as it is. A fraction ``1 - p`` of the rows is clean whatever the number of paused ids.

With one paused id the two rules are the same. :class:`ExploreRows` is the clocks' default: measured on
variable-delay copy (docs/experiments/clock-explore-select, clock-ids-cpu), with padding from 16 ids the
clock paused exactly the padding under either rule, and the layers learned to copy within the budget only
under :class:`ExploreRows`; with data-like noise in the gap, :class:`nn.FlipRunClock` got further under it.
"""
from __future__ import annotations

import math

import torch

__all__ = ["Explore", "ExploreEach", "ExploreRows"]


class Explore:
    """A rule for the paused entries that tick in a training batch (the base of the rules below).

    Parameters
    ----------
    p : float in ``[0, 1)``
        The rule's probability (0: no exploration).
    """

    def __init__(self, p=0.2):
        if isinstance(p, bool) or not (isinstance(p, (int, float)) and math.isfinite(p) and 0.0 <= p < 1.0):
            raise ValueError(f"{type(self).__name__}: p must lie in [0, 1), got {p!r}")
        self.p = float(p)

    def __bool__(self):
        return self.p > 0.0

    def __eq__(self, other):
        return type(self) is type(other) and self.p == other.p

    def __hash__(self):
        return hash((type(self).__name__, self.p))

    def __repr__(self):
        return f"{type(self).__name__}({self.p:g})"

    def ticks(self, paused, rows):
        """The paused entries that tick in each row.

        Parameters
        ----------
        paused : Tensor ``(E,)`` bool
            The entries paused now.
        rows : int
            The batch's rows ``B``.

        Returns
        -------
        Tensor ``(B, E)`` bool, a subset of ``paused`` in every row.
        """
        raise NotImplementedError


class ExploreEach(Explore):
    """Each row ticks each paused entry with probability ``p`` (one draw per row and entry)."""

    def ticks(self, paused, rows):
        return (torch.rand(rows, paused.shape[0], device=paused.device) < self.p) & paused      # (B, E)


class ExploreRows(Explore):
    """Each row, with probability ``p``, ticks every paused entry (one draw per row)."""

    def ticks(self, paused, rows):
        return (torch.rand(rows, 1, device=paused.device) < self.p) & paused                    # (B, E)


def as_explore(explore):
    """``explore`` as a rule: a number ``p`` is :class:`ExploreEach` ``(p)``, the meaning it always had."""
    if isinstance(explore, Explore):
        return explore
    if isinstance(explore, bool) or not isinstance(explore, (int, float)):
        raise ValueError(f"explore must be a number in [0, 1) or an exploration rule (nn.ExploreEach, "
                         f"nn.ExploreRows), got {explore!r}")
    if not 0.0 <= explore < 1.0:
        raise ValueError(f"explore must lie in [0, 1), got {explore!r}")
    return ExploreEach(explore)
