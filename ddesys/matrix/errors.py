"""The exceptions and warnings of the matrix delay systems, in one public module (re-exported by
:mod:`ddesys`): :class:`AlgebraicLoopError` (an interconnection without dynamics in its loop) and
:class:`UndecidableStability` (a root within rounding of the imaginary axis)."""
from __future__ import annotations


class AlgebraicLoopError(ValueError):
    """An interconnection closes a loop without dynamics: an instantaneous loop (``I - D F``
    singular) or a loop through delay channels only (``D22`` with a cycle: a delay-difference
    equation, whose roots and stability :meth:`ddesys.DelayIOSystem.difference_loop` gives, and which
    time responses, norms and delay margins refuse). The message names the loop."""


class UndecidableStability(RuntimeWarning):
    """:func:`is_stable` cannot decide in float64: a characteristic root lies closer to the imaginary
    axis than the certified error of its position (a root on the axis, or within rounding of it). The
    answer given with this warning is ``False`` (stability not proven)."""


__all__ = ["AlgebraicLoopError", "UndecidableStability"]
