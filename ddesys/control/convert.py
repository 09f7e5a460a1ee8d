"""Conversion to and from python-control (optional: ``pip install control``).

:func:`~ddesys.from_control` takes a continuous ``StateSpace`` or ``TransferFunction`` with input and output
dead times; :func:`~ddesys.to_control` gives a ``StateSpace`` with every delay replaced by its Pade
approximation, for tools that need a rational model (in ddesys the delays stay exact).
"""
from __future__ import annotations

from . import _lft


def from_control(sys, delay=0.0, output_delay=0.0):
    """A python-control continuous system as a :class:`~ddesys.DelayIOSystem`, with dead time.

    Parameters
    ----------
    sys : control.StateSpace or control.TransferFunction
        Continuous time (``dt = 0``).
    delay : float or array_like ``(m,)``, default 0
        Input dead time (per input).
    output_delay : float or array_like ``(p,)``, default 0
        Output dead time (per output).

    Returns
    -------
    DelayIOSystem

    Raises
    ------
    TypeError
        A discrete-time system, or not a python-control LTI system.

    Examples
    --------
    >>> import control, ddesys
    >>> G = ddesys.from_control(control.tf([1.0], [1.0, 1.0]), delay=1.0)
    >>> round(G.stability_margins()[0], 6)                  # the critical gain of e^{-s} / (s + 1)
    2.261826
    """
    from .xferfcn import ss

    if type(sys).__module__.split(".")[0] != "control" or not hasattr(sys, "isctime"):
        raise TypeError(f"from_control takes a python-control LTI system, got {type(sys).__name__}")
    g = _lft.from_control(sys)
    return ss(g.A, g.B1, g.C1, g.D11, input_delay=delay, output_delay=output_delay)


def to_control(sys, pade_order=None):
    """A python-control ``StateSpace`` of ``sys``, each delay ``e^{-s tau}`` replaced by its Pade
    approximation of degree ``pade_order`` (``control.pade``).

    Parameters
    ----------
    sys : DelayIOSystem, DelayStateSpace or another continuous ddesys system
    pade_order : int
        Degree of each approximation, ``>= 1`` (required when the system has delays).

    Returns
    -------
    control.StateSpace

    Raises
    ------
    ValueError
        Delays and no ``pade_order``.
    ImportError
        python-control is not installed.

    Examples
    --------
    >>> import ddesys
    >>> ddesys.to_control(ddesys.tf([1.0], [1.0, 1.0], delay=1.0), pade_order=6).nstates
    7
    """
    return _lft.to_control(_lft.coerce(sys), pade_order)


__all__ = ["from_control", "to_control"]
