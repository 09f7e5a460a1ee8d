"""The memory budget of the analyses: bytes are counted before they are allocated (docs/theory.md §9.1).

Every analysis whose working memory grows with an argument (a grid of parameters, a delay in steps, a
tap window's width, a number of frequencies or samples) computes the bytes it is about to ask for and
either works in batches that fit the budget or refuses at once, naming what asked for how much, the
budget, and how to proceed (:func:`check_bytes`, :class:`BudgetError`).

The budget, in bytes:

* ``DDESYS_MEMORY_BUDGET`` when set (read at each call through :mod:`ddesys._env`): a number of bytes,
  or a number with a ``K``, ``M``, ``G`` or ``T`` suffix (powers of 1024; ``"512M"``, ``"1.5G"``);
* otherwise :data:`FRACTION` (a quarter) of the memory the machine has available (``MemAvailable`` in
  ``/proc/meminfo``, else the physical memory from ``os.sysconf``);
* otherwise :data:`FALLBACK_BYTES` (2 GiB).

An analysis that takes ``max_bytes=`` uses that argument when it is given. Where an analysis has a
default of its own (the exact stability tests' ``EXACT_MAX_BYTES``, the simulations'
``SIMULATE_MAX_BYTES``, 1 GiB), the smaller of that default and the budget applies.

Examples
--------
>>> from ddesys.budget import parse_bytes
>>> parse_bytes("512M"), parse_bytes("1.5G"), parse_bytes("4096")
(536870912, 1610612736, 4096)
"""
from __future__ import annotations

import math
import os
import re

from ._env import value

__all__ = ["BudgetError", "ENV", "FALLBACK_BYTES", "FRACTION", "available_memory", "check_bytes", "memory_budget",
           "parse_bytes", "resolve"]

ENV = "DDESYS_MEMORY_BUDGET"
FRACTION = 0.25                 # of the available memory, when the variable is not set
FALLBACK_BYTES = 2 * 2**30      # when the available memory cannot be read
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


class BudgetError(MemoryError, ValueError):
    """A working set over the memory budget, refused before allocating (a ``MemoryError`` and, like the
    other refusals of bad arguments, a ``ValueError``)."""


def parse_bytes(text):
    """``"123"``, ``"64K"``, ``"512M"``, ``"1.5G"``, ``"2T"`` (optionally ending in ``B``/``iB``; powers of
    1024) as a positive int, else ``ValueError``."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([KMGT]?)(?:I?B)?\s*", str(text).upper())
    n = float(m.group(1)) * _UNITS[m.group(2)] if m else math.nan
    if not (math.isfinite(n) and n >= 1):
        raise ValueError(f"a memory budget must be a positive number of bytes, optionally with a K, M, G or T "
                         f"suffix (e.g. 512M, 2G), got {text!r}")
    return int(n)


def available_memory():
    """Bytes of memory available to new allocations (``MemAvailable``), else the physical memory, else
    None when neither can be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def memory_budget():
    """The budget in bytes (module docstring): ``DDESYS_MEMORY_BUDGET``, else a quarter of the available
    memory, else 2 GiB."""
    text = value(ENV)
    if text:
        try:
            return parse_bytes(text)
        except ValueError as exc:
            raise ValueError(f"{ENV}: {exc}") from None
    avail = available_memory()
    return int(avail * FRACTION) if avail else FALLBACK_BYTES


def _resolve(max_bytes, cap):
    """``(budget, where it comes from)``."""
    if max_bytes is not None:
        try:
            b = float(max_bytes)
        except (TypeError, ValueError):
            b = math.nan
        if isinstance(max_bytes, (bool, str, bytes)) or not (b > 0 and math.isfinite(b)):
            raise ValueError(f"max_bytes must be a positive number of bytes, got {max_bytes!r}")
        return int(b), f"max_bytes={max_bytes!r}"
    budget = memory_budget()
    source = f"{ENV}={value(ENV)}" if value(ENV) else "a quarter of the available memory"
    if cap is not None and int(cap) < budget:
        return int(cap), "this analysis's default"
    return budget, source


def resolve(max_bytes=None, cap=None):
    """The budget of one call: ``max_bytes`` when given (a positive number, else ``ValueError``), else
    :func:`memory_budget`, no more than ``cap`` when the analysis has a default of its own."""
    return _resolve(max_bytes, cap)[0]


def check_bytes(nbytes, what, hint, max_bytes=None, cap=None):
    """Refuse a working set of ``nbytes`` over the budget, before allocating it.

    Parameters
    ----------
    nbytes : int or float
        The bytes the call is about to ask for.
    what : str
        What asks for them (the analysis and the sizes that drive them).
    hint : str
        How to proceed (a smaller grid, fewer points, another method, a larger ``max_bytes``).
    max_bytes, cap : see :func:`resolve`

    Returns
    -------
    int
        The budget that applied.

    Raises
    ------
    BudgetError
        ``nbytes`` over the budget; the message names ``what``, both sizes, where the budget comes from,
        ``hint`` and the variable ``DDESYS_MEMORY_BUDGET``.
    """
    budget, source = _resolve(max_bytes, cap)
    if nbytes > budget:
        raise BudgetError(f"{what} needs about {nbytes / 2**30:.3g} GiB of working memory, over the budget of "
                          f"{budget / 2**30:.3g} GiB ({source}); {hint}. The budget: max_bytes= where the call "
                          f"takes it, else {ENV} (bytes, or with a K/M/G suffix), else a quarter of the "
                          "available memory")
    return budget
