"""The optional Numba import, in one leaf module (imports nothing of the package but :mod:`ddesys._env`).

``nb`` is the ``numba`` module, or None when it is missing or ``DDESYS_DISABLE_NUMBA`` is set: every
compiled loop of the package then has a documented fallback. Public as ``ddesys.cpu.nb`` and
:func:`ddesys.cpu.available` (``ddesys.recurrence.numba_available`` is an alias).
"""
from __future__ import annotations

from .._env import flag

__all__ = ["nb", "available"]

try:
    if flag("DDESYS_DISABLE_NUMBA"):
        raise ImportError("disabled by DDESYS_DISABLE_NUMBA")
    import numba as nb
except ImportError:  # Numba is optional
    nb = None


def available() -> bool:
    """True when the compiled loops can run."""
    return nb is not None
