"""Whole-model checkpoints (``torch.save(model)``) written by earlier versions of ``ddesys.nn``.

Earlier versions installed the layers as the top-level package ``nn`` (``nn.model.SequenceModel``,
``nn.common.StepConstants``, ...) and kept some classes in modules that have moved since. A pickle names
its classes by module, so such a checkpoint needs this module as ``torch.load``'s ``pickle_module``::

    import torch
    from ddesys.nn import legacy
    model = torch.load("model.pt", weights_only=False, pickle_module=legacy)

:class:`Unpickler` maps the old names to today's (the top-level ``nn`` to ``ddesys.nn``, moved modules to
their new place; ``nn.common.StepConstants``, the decode memo, resolves through
``ddesys.nn.common.StepConstants``), and each class brings its pickled attributes up to date when it is
unpickled (:func:`upgrade_layer_state`: a layer's tap before it was a branch, attributes added since).
A checkpoint written by this version loads with plain ``torch.load``. Unpickling runs code named by the
file: load only checkpoints you trust (``weights_only=True`` refuses them; save ``model.state_dict()``
for files that load safely).
"""
from __future__ import annotations

import importlib
import io
import pickle

import torch

__all__ = ["Unpickler", "load", "loads", "upgrade_layer_state", "MOVED_MODULES"]

#: modules of the top-level ``nn`` package that live elsewhere now (the others kept their names)
MOVED_MODULES = {"nn.cache": "ddesys.nn.decode.cache", "nn.engine": "ddesys.nn.decode.engine",
                 "nn.generate": "ddesys.nn.generate", "nn.history": "ddesys.nn.decode.history",
                 "nn.prefill": "ddesys.nn.decode.prefill", "nn.model_step": "ddesys.nn.model_step",
                 "nn.clock_step": "ddesys.nn.decode.clocked"}


def new_module_name(module):
    """Today's module for a pickled module name: ``nn.x`` -> ``ddesys.nn.x`` (or its new place); others as given."""
    if module != "nn" and not module.startswith("nn."):
        return module
    if module in MOVED_MODULES:
        return MOVED_MODULES[module]
    return "ddesys." + module


class Unpickler(pickle.Unpickler):
    """A :class:`pickle.Unpickler` that reads the names of earlier versions (see the module docstring)."""

    def find_class(self, module, name):
        new = new_module_name(module)
        if new != module:
            importlib.import_module(new)
        return super().find_class(new, name)


def load(file, **kwargs):
    """``pickle.load`` with :class:`Unpickler` (what ``torch.load(..., pickle_module=legacy)`` calls)."""
    return Unpickler(file, **kwargs).load()


def loads(data, **kwargs):
    """``pickle.loads`` with :class:`Unpickler`."""
    return Unpickler(io.BytesIO(data), **kwargs).load()


def upgrade_layer_state(state):
    """A DS4D / S4D layer's pickled ``__dict__`` brought to today's attributes, in place.

    * the tap before it was a branch (parameters ``tap_e``, ``nu_tap``, buffer ``tap_width_bits``,
      attributes ``_tap``, ``_tap_width``, ``_tap_order``) becomes ``layer.tap``, a
      :class:`nn.tap.TapBranch` holding the same tensors (``None`` without a tap);
    * attributes added since get the values an old layer had: no added branches, every hinted
      parameter in the SSM set (:func:`nn.optim.declared_hints`).
    """
    if "_tap" in state:                                          # the tap as a mixin of DS4D
        on, lr = state.pop("_tap")
        width = float(state.pop("_tap_width", 1.0))
        order = state.pop("_tap_order", None)
        params, buffers, mods = state["_parameters"], state["_buffers"], state["_modules"]
        buffers.pop("tap_width_bits", None)
        hints = state.get("_optim_hints", {})
        for name in ("tap_e", "nu_tap"):
            hints.pop(name, None)
        state["_tap_args"] = (bool(on), width, lr)
        if on:
            mods["tap"] = _tap_branch(params.pop("tap_e"), params.pop("nu_tap"), width, lr, order, state)
        else:
            state["tap"] = None
    if "added_branches" not in state and "added_branches" not in state.get("_modules", {}):
        state["added_branches"] = None
    state.setdefault("_optim_ssm", {name: True for name in state.get("_optim_hints", {})})
    return state


def _tap_branch(e, nu, width, lr, order, state):
    """A :class:`nn.tap.TapBranch` holding an old layer's tap gain ``e`` and delay parameter ``nu`` ``(C,)``."""
    from .tap import TapBranch
    tap = TapBranch(e.shape[0], width, lr=lr, delay_init=state.get("delay_init", "grid"), tau0=state.get("tau0"),
                    generator=torch.Generator().manual_seed(0)).to(device=e.device, dtype=e.dtype)
    with torch.no_grad():
        tap.e.copy_(e)
        tap.nu.copy_(nu)
    if order is not None:
        tap.order = order
    if state.get("s_max") is not None:                          # the range was fixed: the branch shares it
        tap.adopt_range(state["s_min"], state["s_max"], state["l_max"], check=False)
    return tap
