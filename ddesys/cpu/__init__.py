"""The compiled CPU runtime: every Numba loop of the package, its thread budget and compile options.

Numba is optional: without it (or with ``DDESYS_DISABLE_NUMBA=1``) every entry point here has a
NumPy or torch fallback elsewhere, and :func:`ddesys.cpu.available` says so. ``ddesys.cpu.nb`` is the
one import of Numba in the package (the ``numba`` module, or None). The compile options of every loop,
and which may reassociate floating-point sums, are one table: :mod:`ddesys.cpu.options`. The layers of
:mod:`ddesys.nn` reach these loops through their decode engines; users rarely import them.

Modules: :mod:`.options` (the table), :mod:`.threads` (the thread budget), :mod:`.recurrence_loops`,
:mod:`.tap_loops`, :mod:`.selective_loops`, :mod:`.fused` (the transfer function's sampling), the decode
ring (:mod:`.ring`), step (:mod:`.step`, loops in :mod:`.step_loops`) and prefill (:mod:`.prefill`), the
state passing scan (:mod:`.chunk_scan`) and the method of steps of the matrix systems' time responses
(:mod:`.dde_rk4`).
"""
from ._numba import available, nb

__all__ = ["available", "nb"]
