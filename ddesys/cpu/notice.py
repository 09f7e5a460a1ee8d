"""A one-line notice on standard error when the package's compiled loops compile for the first time.

The first call of a compiled loop in a fresh installation compiles it (tens of seconds for the decode
step of a model); later processes load it from Numba's on-disk cache in a fraction of a second. So that
a first ``generate`` is not a silent pause, the first real compilation of a loop of this package in a
process writes one line to ``sys.stderr``::

    ddesys: compiling the CPU kernels on first use (tens of seconds, once per installation; ...)

How it knows. Numba broadcasts a ``"numba:compile"`` event (its event API, :mod:`numba.core.event`)
when a dispatcher compiles a signature that it neither has in memory nor could load from its disk cache;
a loop loaded from the cache sends none. :func:`install` registers one listener for that event (once per
process, from :mod:`ddesys.cpu.options`, where every loop is made); the listener reacts only to
dispatchers whose Python function lives in ``ddesys``, writes the line at most once per process and then
does nothing. It costs nothing per call of a compiled loop (no event is sent once a loop is compiled).

Set ``DDESYS_QUIET=1`` to silence it (read when the notice would be written). No warning is raised, so
a program run with ``-W error`` is unaffected.
"""
from __future__ import annotations

import sys

from .._env import flag
from ._numba import nb

__all__ = ["MESSAGE", "install", "shown"]

#: the line written once per process (with a trailing newline)
MESSAGE = ("ddesys: compiling the CPU kernels on first use (tens of seconds, once per installation; later "
           "runs load them from Numba's cache). Set DDESYS_QUIET=1 to hide this notice.")

_state = {"installed": False, "shown": False}


def shown() -> bool:
    """Whether the notice has been written in this process."""
    return _state["shown"]


def _ours(dispatcher) -> bool:
    fn = getattr(dispatcher, "py_func", None)
    module = getattr(fn, "__module__", None) or ""
    return module == "ddesys" or module.startswith("ddesys.")


def _notify(dispatcher):
    if _state["shown"] or not _ours(dispatcher):
        return
    _state["shown"] = True                 # once per process, quiet or not: no check on later compiles
    if flag("DDESYS_QUIET"):
        return
    try:
        sys.stderr.write(MESSAGE + "\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):      # a closed or missing stderr: nothing to tell
        pass


def install() -> bool:
    """Register the listener with Numba's event API (once per process; later calls do nothing).

    Returns
    -------
    bool
        True when the listener is registered (Numba present and its event API available).
    """
    if _state["installed"]:
        return True
    if nb is None:
        return False
    try:
        from numba.core import event
    except ImportError:                    # an older Numba without the event API: no notice
        return False

    class _FirstCompile(event.Listener):
        def on_start(self, ev):
            _notify((ev.data or {}).get("dispatcher"))

        def on_end(self, ev):
            pass

    event.register("numba:compile", _FirstCompile())
    _state["installed"] = True
    return True
