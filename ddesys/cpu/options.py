"""The one table of compile options: every compiled loop of the package is registered here by name.

Each row names a loop family and gives its Numba options and whether its floating-point sums may be
reassociated. Every loop of :mod:`ddesys.cpu` is compiled through :func:`loop` (or :func:`compile_loop`
for entry points compiled on first use for exact signatures) with the options of its row; nothing else
calls ``numba.njit`` (``tests/ddesys/test_cpu_options.py`` checks it). The first real compilation of one
of them in a process writes a one-line notice to standard error (:mod:`ddesys.cpu.notice`;
``DDESYS_QUIET=1`` silences it); a loop loaded from Numba's disk cache writes nothing.

Reassociation and determinism. A row with ``reassoc=True`` lets LLVM reorder the loop's sums (to
vectorize them): its results differ from the written order by rounding. Either way a compiled loop gives
bitwise-equal results at every thread count and on every call: each parallel loop splits a fixed
partition of independent items (channels, channel blocks, batch rows) whose arithmetic does not depend
on the thread that runs it. (Two compilations of one reassociating loop may round differently: Numba's
passes visit hashed sets, so a recompile under another ``PYTHONHASHSEED`` can order a sum otherwise;
Numba's disk cache keeps one compilation.) A row with ``reassoc=False`` sums in the written order.
Which is which:

=======================  ========  ========  =====  ===========  =====  ======  ==============================
row                      fastmath  parallel  cache  error_model  nogil  inline  reassoc (module)
=======================  ========  ========  =====  ===========  =====  ======  ==============================
``recurrence.channel``   fast      -         yes    -            -      always  yes (:mod:`.recurrence_loops`)
``recurrence.batch``     CRN       prange    yes    -            -      -       yes
``transfer.points``      -         -         yes    -            -      -       no (:mod:`.fused`)
``transfer.inv_den``     fast      -         yes    -            -      always  yes
``transfer.sample``      fast      prange    yes    -            -      -       yes
``step.inline``          -         -         -      -            -      always  no (:mod:`.step_loops`)
``step.modes``           CRN       -         -      -            -      always  yes
``step.modes_start``     CRN       -         -      -            -      -       yes
``step.entry``           CRN       -         yes    numpy        yes    -       yes
``step.entry_parallel``  CRN       prange    yes    numpy        yes    -       yes
``step.encode16``        -         -         yes    -            -      -       no
``prefill.inline``       -         -         -      -            -      always  no (:mod:`.prefill`)
``prefill.rows``         CRN       -         -      -            -      always  yes
``prefill.ring``         CRN       prange    yes    -            -      -       yes
``tap.fir``              CN        -         yes    numpy        -      -       no (:mod:`.tap_loops`)
``selective.scan``       -         prange    yes    -            -      -       no (:mod:`.selective_loops`)
``chunk.inline``         CRN       -         -      -            -      always  yes (:mod:`.chunk_scan`)
``chunk.scan``           CRN       prange    yes    numpy        -      -       yes
``block.fused``          CRN       -         yes    numpy        yes    -       yes (:mod:`.block_loops`)
``dde.inline``           CN        -         -      -            -      always  no (:mod:`.dde_rk4`)
``dde.rk4``              CN        -         yes    numpy        yes    -       no
=======================  ========  ========  =====  ===========  =====  ======  ==============================

``fast``: ``fastmath=True`` (every LLVM fast-math flag, reassociation included); ``CRN``:
``{"contract", "reassoc", "nsz"}`` (fused multiply-add and reordered sums; NaN and infinity keep their
meaning); ``CN``: ``{"contract", "nsz"}`` (fused multiply-add, sums in the written order). A row with
``inline="always"`` is inlined into its caller before typing and compiled with the caller's flags; its
own fastmath setting is kept as it was written. The serial and parallel step entry points are compiled
separately: they agree to rounding, not bitwise (:mod:`ddesys.cpu.step`).
"""
from __future__ import annotations

from dataclasses import dataclass

from ._numba import nb
from .notice import install as _install_notice

__all__ = ["LoopOptions", "LOOPS", "loop", "entry", "compile_loop", "prange", "reassociates", "registered"]

FAST = True                                         #: every fast-math flag
CRN = frozenset({"contract", "reassoc", "nsz"})     #: FMA and reordered sums; NaN and inf keep their meaning
CN = frozenset({"contract", "nsz"})                 #: FMA, sums in the written order


@dataclass(frozen=True)
class LoopOptions:
    """One row of :data:`LOOPS`: a loop family's Numba options and whether it may reassociate sums.

    ``fastmath``: False, True, or a set of LLVM fast-math flags; ``reassoc``: the stated column, checked
    against ``fastmath`` when the row is made (True exactly when the flags allow reordering sums)."""

    fastmath: object = False
    reassoc: bool = False
    parallel: bool = False
    cache: bool = False
    error_model: str | None = None                  # None: Numba's default ("python")
    nogil: bool = False
    inline: bool = False

    def __post_init__(self):
        if self.reassoc != reassociates(self.fastmath):
            raise ValueError(f"reassoc={self.reassoc} contradicts fastmath={self.fastmath!r}")

    def njit_kwargs(self) -> dict:
        """The keyword arguments of ``numba.njit``: only those that differ from Numba's defaults."""
        kw = {}
        if self.parallel:
            kw["parallel"] = True
        if self.cache:
            kw["cache"] = True
        if self.fastmath is True:
            kw["fastmath"] = True
        elif self.fastmath:
            kw["fastmath"] = set(self.fastmath)
        if self.error_model is not None:
            kw["error_model"] = self.error_model
        if self.nogil:
            kw["nogil"] = True
        if self.inline:
            kw["inline"] = "always"
        return kw


def reassociates(fastmath) -> bool:
    """Whether Numba's ``fastmath`` option lets LLVM reorder floating-point sums."""
    if fastmath is True:
        return True
    if not fastmath:
        return False
    return bool({"reassoc", "fast"} & set(fastmath))


#: name -> options: the table of the module docstring (keep the two in step)
LOOPS = {
    "recurrence.channel": LoopOptions(FAST, reassoc=True, cache=True, inline=True),
    "recurrence.batch": LoopOptions(CRN, reassoc=True, parallel=True, cache=True),
    "transfer.points": LoopOptions(False, reassoc=False, cache=True),
    "transfer.inv_den": LoopOptions(FAST, reassoc=True, cache=True, inline=True),
    "transfer.sample": LoopOptions(FAST, reassoc=True, parallel=True, cache=True),
    "step.inline": LoopOptions(False, reassoc=False, inline=True),
    "step.modes": LoopOptions(CRN, reassoc=True, inline=True),
    "step.modes_start": LoopOptions(CRN, reassoc=True),
    "step.entry": LoopOptions(CRN, reassoc=True, cache=True, error_model="numpy", nogil=True),
    "step.entry_parallel": LoopOptions(CRN, reassoc=True, parallel=True, cache=True, error_model="numpy", nogil=True),
    "step.encode16": LoopOptions(False, reassoc=False, cache=True),
    "prefill.inline": LoopOptions(False, reassoc=False, inline=True),
    "prefill.rows": LoopOptions(CRN, reassoc=True, inline=True),
    "prefill.ring": LoopOptions(CRN, reassoc=True, parallel=True, cache=True),
    "tap.fir": LoopOptions(CN, reassoc=False, cache=True, error_model="numpy"),
    "selective.scan": LoopOptions(False, reassoc=False, parallel=True, cache=True),
    "chunk.inline": LoopOptions(CRN, reassoc=True, inline=True),
    "chunk.scan": LoopOptions(CRN, reassoc=True, parallel=True, cache=True, error_model="numpy"),
    "block.fused": LoopOptions(CRN, reassoc=True, cache=True, error_model="numpy", nogil=True),
    "dde.inline": LoopOptions(CN, reassoc=False, inline=True),
    "dde.rk4": LoopOptions(CN, reassoc=False, cache=True, error_model="numpy", nogil=True),
}

#: the registered loops: ``(row name, module, function name)``, in the order they were defined
_REGISTERED: list = []

_install_notice()        # a one-line notice when a loop of the package first compiles (:mod:`.notice`)

#: ``numba.prange`` with Numba, ``range`` without (the plain-Python fallback of a parallel loop)
prange = nb.prange if nb is not None else range


def registered() -> tuple:
    """Every loop compiled through this table so far: ``(row name, module, function name)`` triples."""
    return tuple(_REGISTERED)


def _row(name):
    try:
        return LOOPS[name]
    except KeyError:
        raise KeyError(f"no compile options named {name!r}; the rows are {sorted(LOOPS)}") from None


def loop(name):
    """Decorator: compile the function with the options of row ``name`` (lazily, on its first call, as
    ``numba.njit`` does). Without Numba the function is returned as it is (its plain-Python fallback)."""
    opts = _row(name)

    def deco(fn):
        _REGISTERED.append((name, fn.__module__, fn.__qualname__))
        return nb.njit(**opts.njit_kwargs())(fn) if nb is not None else fn
    return deco


def entry(name):
    """Decorator: register an entry point of row ``name`` that :func:`compile_loop` compiles on first use for
    exact signatures; returns the Python function (``fn.loop_row`` names its row)."""
    _row(name)

    def deco(fn):
        _REGISTERED.append((name, fn.__module__, fn.__qualname__))
        fn.loop_row = name
        return fn
    return deco


def compile_loop(fn, signatures):
    """The entry point ``fn`` (registered by :func:`entry`) compiled now for exactly ``signatures``
    (nothing else compiles) with the options of its row, or loaded from Numba's disk cache. Needs Numba."""
    return nb.njit(signatures, **_row(fn.loop_row).njit_kwargs())(fn)
