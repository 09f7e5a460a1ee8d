"""Which implementation computes: the one place the project decides (docs/theory.md §5-§6).

``choose(x)`` names the path for data ``x``:

* ``"numba"``: NumPy arrays and CPU torch tensors, when Numba is installed (the fused CPU loops of
  :mod:`ddesys.cpu.fused`, the compiled recurrence);
* ``"triton"``: CUDA torch tensors and CuPy arrays, when Triton imports and torch sees a CUDA device
  (the kernels of ``gpu/``; CuPy reaches them through DLPack). Under ``TRITON_INTERPRET=1`` with
  ``DDESYS_GPU_INTERPRET=1`` CPU torch tensors take this path too (how CI runs the GPU kernels);
* ``"reference"``: everything else, and every array when ``DDESYS_REFERENCE=1``: the array-API code,
  the definition the fast paths are tested against.

``DDESYS_REFERENCE`` is read at each call, so it can be toggled at run time.
"""
from __future__ import annotations

from ._array import is_cupy, is_numpy, is_torch
from ._env import flag

NUMBA, TRITON, REFERENCE = "numba", "triton", "reference"
__all__ = ["NUMBA", "TRITON", "REFERENCE", "choose", "force_reference"]


def force_reference() -> bool:
    """``DDESYS_REFERENCE=1``: every fused fast path (Numba CPU loops, Triton GPU kernels) steps aside."""
    return flag("DDESYS_REFERENCE")


def _numba_ok():
    from .cpu import available
    return available()


def _gpu():
    try:
        from ddesys import gpu
    except ImportError:               # the gpu package is optional at run time
        return None
    return gpu


def choose(x, xp=None) -> str:
    """``"numba"``, ``"triton"`` or ``"reference"`` for array ``x`` (namespace ``xp``, found if not given)."""
    if force_reference():
        return REFERENCE
    if xp is None:
        from ._array import get_namespace
        xp = get_namespace(x)
    if is_torch(xp):
        g = _gpu()
        if g is not None and g.usable_for(x):
            return TRITON
        return NUMBA if x.device.type == "cpu" and _numba_ok() else REFERENCE
    if is_numpy(xp):
        return NUMBA if _numba_ok() else REFERENCE
    if is_cupy(xp):
        g = _gpu()
        return TRITON if g is not None and g.cuda_usable() else REFERENCE
    return REFERENCE
