"""The one table of decode engines and the one function that chooses a cache's engine.

=========  =================================================  ==============================================
family     engines, in order of preference                    the layer
=========  =================================================  ==============================================
``ds4d``   ``"triton"``, ``"fused"``, ``"reference"``         :class:`nn.DS4D`
``s4d``    ``"fused"``, ``"reference"``                       :class:`nn.S4D`
``clock``  ``"fused"``, ``"reference"``                       :class:`nn.clock.Clocked` (given / binary clock)
``soft``   ``"reference"``                                    :class:`nn.selective.SoftClocked`
=========  =================================================  ==============================================

By default a cache gets the first engine of its family that runs on its device (each engine's
``usable(device)``: Triton on CUDA, the fused Numba engines on the CPU, the reference anywhere);
``DDESYS_REFERENCE=1`` at allocation forces the reference. An engine named by ``engine=`` must be in the
family's row and able to run there (``ValueError`` naming what it needs). Every engine implements
:class:`nn.decode.engine.DecodeEngine`: ``allocate``, ``bind``, ``step(cache, x_t, consts, clock=None)``
and ``prefill(layer, cache, x, clock=None)``.
"""
from __future__ import annotations

import torch

from ddesys.backend import force_reference

from .clocked import ClockedFused, ClockedReference, SoftEngine
from .engine import PARALLEL, FusedEngine, ReferenceEngine, S4DEngine, S4DFusedEngine, TritonEngine

__all__ = ["ENGINES", "select_engine"]

#: family -> {engine name: engine class}, in order of preference (the reference last)
ENGINES = {
    "ds4d": {"triton": TritonEngine, "fused": FusedEngine, "reference": ReferenceEngine},
    "s4d": {"fused": S4DFusedEngine, "reference": S4DEngine},
    "clock": {"fused": ClockedFused, "reference": ClockedReference},
    "soft": {"reference": SoftEngine},
}


def select_engine(family, device, engine=None, parallel=None):
    """The decode engine of a new cache of ``family`` (a key of :data:`ENGINES`) on ``device``.

    Parameters
    ----------
    family : {"ds4d", "s4d", "clock", "soft"}
    device : torch.device or str
    engine : str, optional
        A name of the family's row; None: the first that runs on ``device`` (the reference under
        ``DDESYS_REFERENCE=1``).
    parallel : None, False, True or "auto"
        The fused DS4D engine's loop rule (None for every other engine).

    Returns
    -------
    DecodeEngine
        A new engine object (one per cache).

    Raises
    ------
    ValueError
        An engine name outside the row, an engine that cannot run on ``device``, or ``parallel`` for an
        engine that does not take it.
    """
    row, device = ENGINES[family], torch.device(device)
    if engine is not None and engine not in row:
        raise ValueError(f"engine must be None or one of {tuple(row)}, got {engine!r}")
    if parallel not in PARALLEL:
        raise ValueError(f"parallel must be None, False, True or 'auto', got {parallel!r}")
    if engine is None:
        names = ("reference",) if force_reference() else tuple(row)
        cls = next(row[n] for n in names if row[n].usable(device))
    else:
        cls = row[engine]
        if not cls.usable(device):
            raise ValueError(f"engine={engine!r} needs {cls.needs} (cache on {device})")
    if parallel is not None and not cls.takes_parallel:
        raise ValueError(f"parallel={parallel!r} configures the fused CPU engine; this cache's engine is "
                         f"{cls.name!r}")
    return cls(parallel) if cls.takes_parallel else cls()
