"""The one place the package reads its environment switches (tests and users set them; the code asks here).

==========================  =======================  ==============================================================
variable                    read                     effect
==========================  =======================  ==============================================================
``DDESYS_DISABLE_NUMBA``    once, at import          no compiled CPU loops: the documented NumPy/torch fallbacks
``DDESYS_REFERENCE``        at each call             every fused fast path steps aside (:mod:`ddesys.backend`)
``DDESYS_NUM_THREADS``      at each call             the compiled loops' thread budget (:mod:`ddesys.cpu.threads`)
``DDESYS_QUIET``            when the notice is due   no first-compile notice on stderr (:mod:`ddesys.cpu.notice`)
``DDESYS_MEMORY_BUDGET``    at each call             the memory an analysis may ask for: ``2G`` (:mod:`ddesys.budget`)
==========================  =======================  ==============================================================

A switch is on when set to anything but ``""`` or ``"0"``. The ``gpu`` package, a leaf that imports
nothing of ``ddesys``, reads its own two (``TRITON_INTERPRET``, ``DDESYS_GPU_INTERPRET``) in
``gpu/__init__.py``.
"""
from __future__ import annotations

import os

__all__ = ["flag", "value"]


def flag(name: str) -> bool:
    """Whether switch ``name`` is on (set, and not ``""`` or ``"0"``)."""
    return os.environ.get(name, "0") not in ("", "0")


def value(name: str) -> str:
    """The raw value of ``name`` stripped (``""`` when unset)."""
    return os.environ.get(name, "").strip()
