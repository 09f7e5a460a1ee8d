"""Thread budget of the compiled CPU loops: Numba's threads live inside the caller's, never beside them.

Numba's ``parallel=True`` loops run on a pool of their own. With its OpenMP threading layer that pool
may be torch's ``libgomp`` (then launching it sets the OpenMP thread count: a caller that ran
``torch.set_num_threads(1)`` would find 2 threads again after one DS4D forward) or, with pip's torch
wheels, a second OpenMP runtime (torch bundles its own ``libgomp``; Numba's ``omppool`` loads the
system's). Every compiled parallel call of this project therefore runs inside :func:`numba_threads`,
which

* gives Numba at most the caller's budget (:func:`thread_budget`): ``DDESYS_NUM_THREADS`` when set,
  else torch's current thread count when torch is loaded, else Numba's default;
* restores Numba's and torch's thread counts afterwards, exactly as they were;
* starts Numba's pool, the first time, with its idle threads waiting passively: a second runtime's
  threads otherwise spin after each parallel region (libgomp spins by default before it sleeps)
  on the cores torch's next operations need, so a prefill or a batch-8 decode step followed
  by torch's norms and linears ran them on contended cores. ``OMP_WAIT_POLICY=PASSIVE`` is set for
  that launch only and removed at once (torch's runtime, initialized at its import, does not read it
  again); a caller's own ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` is left as it is and decides.

The same budget sizes SciPy's FFT workers on the CPU kernel path. Nothing else is changed.
"""
from __future__ import annotations

import contextlib
import os
import sys

from .._env import value

__all__ = ["thread_budget", "numba_threads"]


def _numba():
    from ._numba import nb as _nb          # None when Numba is missing or disabled
    return _nb


def _torch_threads():
    torch = sys.modules.get("torch")     # never import torch for this: only respect it when loaded
    return torch.get_num_threads() if torch is not None else None


def thread_budget() -> int:
    """Threads the compiled loops may use now: ``DDESYS_NUM_THREADS`` if set (an integer >= 1), else
    ``torch.get_num_threads()`` if torch is imported, else Numba's ``NUMBA_NUM_THREADS`` (or the CPU
    count without Numba); never more than Numba's pool size."""
    nb = _numba()
    cap = nb.config.NUMBA_NUM_THREADS if nb is not None else (os.cpu_count() or 1)
    env = value("DDESYS_NUM_THREADS")
    if env:
        try:
            n = int(env)
        except ValueError:
            raise ValueError(f"DDESYS_NUM_THREADS must be a positive integer, got {env!r}") from None
        if n < 1:
            raise ValueError(f"DDESYS_NUM_THREADS must be a positive integer, got {env!r}")
    else:
        n = _torch_threads() or cap
    return max(1, min(n, cap))


_POOL_STARTED = False


def _start_pool(nb):
    """Launch Numba's thread pool once, its idle threads passive (module docstring)."""
    global _POOL_STARTED
    if _POOL_STARTED:
        return
    _POOL_STARTED = True
    if any(v in os.environ for v in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")):
        return                                    # the caller's choice
    from numba.np.ufunc import parallel as _parallel
    if getattr(_parallel, "_is_initialized", False):
        return                                    # started by someone else already
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    try:
        _parallel._launch_threads()
    finally:
        del os.environ["OMP_WAIT_POLICY"]


@contextlib.contextmanager
def numba_threads():
    """Run the enclosed Numba parallel calls with :func:`thread_budget` threads; afterwards torch's and
    Numba's thread counts are what they were before. Yields the budget."""
    nb = _numba()
    torch_before = _torch_threads()                # read before Numba's pool starts (it resets OpenMP)
    n = thread_budget()
    if nb is None:
        yield n
        return
    _start_pool(nb)
    numba_before = nb.get_num_threads()
    nb.set_num_threads(n)
    try:
        yield n
    finally:
        nb.set_num_threads(numba_before)
        if torch_before is not None and _torch_threads() != torch_before:
            sys.modules["torch"].set_num_threads(torch_before)
