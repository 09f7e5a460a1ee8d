"""Decode constants of DS4D and S4D and their memo (:class:`StepMemo`): what the engines of
:mod:`nn.decode.engine` read every token."""
from __future__ import annotations

import operator
from typing import NamedTuple

import torch

__all__ = ["DS4DConstants", "S4DConstants", "StepMemo", "host_views"]


class DS4DConstants(NamedTuple):
    """A DS4D layer's decode constants in one real precision ``rdt``."""
    lam: torch.Tensor           #: complex (H, N2)
    m1: torch.Tensor            #: complex (H, N2), mu (1 - alpha)
    m2: torch.Tensor            #: complex (H, N2), mu alpha
    bbar: torch.Tensor          #: complex (H, N2)
    c: torch.Tensor             #: complex (H, N2)
    d: torch.Tensor             #: real (H,), the skip D in rdt
    k: torch.Tensor             #: int64 (H,), integer delays
    k_max: int                  #: max(k)
    channels: torch.Tensor      #: int64 arange(H), for the reference engine's gathers
    host: tuple | None          #: NumPy views (lam, m1, m2, bbar, c, d, k) for the fused engine (CPU), else None
    branches: tuple = ()        #: the optional branches' decode constants, in ``layer.branches()`` order

    @property
    def slots(self):
        """Ring slots the delays need, ``k_max + 1``."""
        return self.k_max + 1

    def recurrence(self):
        """``(lam, m1, m2, bbar, c, d, k)``: the update's terms (:func:`ddesys.recurrence.delay_update`)."""
        return self[:7]


class S4DConstants(NamedTuple):
    """An S4D layer's decode constants."""
    lam: torch.Tensor           #: complex (H, N2)
    bbar: torch.Tensor          #: complex (H, N2)
    c: torch.Tensor             #: complex (H, N2)
    d: torch.Tensor             #: real (H,)

    slots = 1                   #: ring slots: the state alone (no delay)

    def recurrence(self):
        """``(lam, m1, m2, bbar, c, d, k)`` as DS4D's without delay: ``m1 = m2 = 0``, ``k = 1``."""
        zero = torch.zeros_like(self.lam)
        return self.lam, zero, zero, self.bbar, self.c, self.d, torch.ones(self.lam.shape[0], dtype=torch.int64,
                                                                          device=self.lam.device)

    @property
    def host(self):
        """NumPy views of :meth:`recurrence` on the CPU (else None): DS4D's fused step runs S4D on a ring
        of two slots, its delayed terms zero (a clocked S4D layer's fused engine, :mod:`nn.decode.clocked`)."""
        return host_views(self.recurrence())


_VERSION, _DATA_PTR = operator.attrgetter("_version"), torch.Tensor.data_ptr


class StepMemo:
    """Memo of a layer's decode constants, so ``step`` does not rediscretize every token (complex ``exp``
    over ``(H, N/2)`` is most of a token's work).

    Recomputed when any of the layer's own parameters changed since the last call (an optimizer step,
    ``load_state_dict`` or a write under ``torch.no_grad()``), when the dtype, device or a parameter
    object changed, or when the layer's ``memo_key()`` (its ablation, delay range, tap width) changed.
    Writes through ``param.data`` are invisible to torch: call ``layer.setup_step()`` after one.
    (Change detection reads torch's per-tensor version counters and storage addresses: a few
    microseconds per token.)"""

    def __init__(self):
        self._key, self._value, self._ids, self._params = None, None, None, ()

    def clear(self):
        self._key, self._value, self._ids, self._params = None, None, None, ()

    @property
    def value(self):
        return self._value

    def __getstate__(self):
        return {}                                    # derived data: never pickled

    def __setstate__(self, state):
        """Unpickled empty, whatever was pickled (an earlier version's memo pickled its constants)."""
        self.clear()

    def get(self, layer, dtype, compute):
        """``compute(dtype)``'s value, reused while the key of ``(layer, dtype)`` is unchanged."""
        params = layer._parameters                   # the layer's own parameters, in registration order
        ids = tuple(map(id, params.values()))
        if ids != self._ids:                         # a parameter object replaced (or the first call)
            self._ids, self._params = ids, tuple(params.values())
        vers = tuple(map(_VERSION, self._params))
        ptrs = tuple(map(_DATA_PTR, self._params))   # a move or cast: new storage
        key = (dtype, layer.memo_key(), ids, vers, ptrs)
        if key != self._key:
            self._value, self._key = compute(dtype), key
        return self._value


def host_views(consts):
    """NumPy views ``(lam, m1, m2, bbar, c, d, k)`` of CPU constants for the fused engine (None elsewhere)."""
    if consts[0].device.type != "cpu":
        return None
    return tuple(v.detach().resolve_conj().contiguous().numpy() for v in consts)
