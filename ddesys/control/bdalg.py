"""Block-diagram algebra of delay systems with python-control's names: :func:`~ddesys.series`,
:func:`~ddesys.parallel`, :func:`~ddesys.feedback`, :func:`~ddesys.append` (docs/theory.md §9.7).

Each builds the exact interconnection as a :class:`~ddesys.DelayIOSystem` (the algebra works on
its matrices): systems side by side, inputs tied to outputs by a static map; solving for
the outputs needs ``I - D F`` invertible, and a singular one (a loop with no dynamics and no delay) is
refused by name. Delays are never approximated. Operands may be :class:`~ddesys.DelayIOSystem`,
:class:`~ddesys.DelayStateSpace`, :class:`~ddesys.DelaySystem`, python-control continuous systems,
numbers (``k I``) and gain matrices.
"""
from __future__ import annotations

from . import _lft
from .iosys import DelayIOSystem


def series(*systems):
    """``systems[0]`` first, then ``systems[1]``, ...: the product ``sys_n ... sys_1`` (python-control's
    convention).

    Parameters
    ----------
    *systems : systems or gains
        Each one's outputs feed the next one's inputs.

    Returns
    -------
    DelayIOSystem

    Examples
    --------
    >>> import ddesys
    >>> G = ddesys.series(ddesys.tf([1.0], [1.0, 1.0], delay=0.5), ddesys.tf([2.0], [1.0, 3.0], delay=0.25))
    >>> round(complex(G([0.0])[0, 0, 0]).real, 12)                      # DC gain 1 * 2/3
    0.666666666667
    """
    if not systems:
        raise ValueError("series needs at least one system")
    return DelayIOSystem.from_data(_lft.series(*_lft.coerce_chain(systems)))


def parallel(*systems):
    """The sum ``sys_1 + sys_2 + ...``: one input fed to all, outputs added (python-control's name).

    Returns
    -------
    DelayIOSystem
    """
    if not systems:
        raise ValueError("parallel needs at least one system")
    return DelayIOSystem.from_data(_lft.parallel(*_lft.coerce_sum(systems)))


def append(*systems):
    """Systems side by side, inputs and outputs stacked (python-control's name).

    Returns
    -------
    DelayIOSystem
    """
    if not systems:
        raise ValueError("append needs at least one system")
    return DelayIOSystem.from_data(_lft.append(*(_lft.coerce(x) for x in systems)))


def feedback(sys1, sys2=1, sign=-1):
    """The closed loop ``y = sys1 u1``, ``u1 = r + sign * sys2 y`` (negative feedback by default).

    Parameters
    ----------
    sys1 : system or gain
        The forward path.
    sys2 : system or gain, default 1
        The feedback path (a number is ``k I``).
    sign : {-1, 1}

    Returns
    -------
    DelayIOSystem
        From ``r`` to ``y``. A strictly proper loop gives a retarded system. A loop that feeds
        through delays only (a pure delay under unit feedback) keeps its exact frequency response, and
        its roots and time responses are refused naming the loop (:class:`~ddesys.AlgebraicLoopError`);
        a loop with neither a delay nor dynamics is refused here.

    Examples
    --------
    Proportional control of ``e^{-s} / (s + 1)``; the loop stays stable up to a total loop delay of
    ``(pi - atan(sqrt 3)) / sqrt 3``:

    >>> import ddesys
    >>> loop = ddesys.feedback(ddesys.tf([1.0], [1.0, 1.0], delay=1.0), 2.0)
    >>> bool(loop.is_stable()), round(loop.delay_margin(), 6)
    (True, 1.2092)
    """
    if sign not in (-1, 1):
        raise ValueError(f"sign must be -1 or 1, got {sign!r}")
    g1 = _lft.coerce(sys1)
    g2 = _lft.coerce(sys2, size=g1.C1.shape[0])
    return DelayIOSystem.from_data(_lft.feedback(g1, g2, sign))


__all__ = ["append", "feedback", "parallel", "series"]
