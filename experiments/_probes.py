"""What the experiments' mechanism probes read of a model: its :class:`nn.DS4D` layers, their ablations
(:func:`ablate`, which nests), and the delayed input tap (``tap=True``): the layers that have one, their
tap delays, the tap's window half-width, and the tap removed (the layers' ``"tap_zero"`` ablation).

Shared by :mod:`experiments.delay` and :mod:`experiments.synthetic` (family ``ds4d-tap``), which train
the tap with :class:`nn.TapWidthSchedule` (:meth:`experiments._models.TapSchedule.schedule`). The width is
also saved in the layer's state dict, so a checkpoint's weights come back with the window they were
trained at.
"""
from __future__ import annotations

import contextlib

import torch

from ddesys import nn as dnn
from ddesys.parameterization import ablation_kinds


def tap_layers(model):
    """The :class:`nn.DS4D` layers of ``model`` that have the delayed input tap, in module order."""
    return [m for m in model.modules() if isinstance(m, dnn.DS4D) and m.has_tap]


@torch.no_grad()
def tap_delays(model):
    """Per DS4D layer with a tap: the channels' tap delays ``(C,)`` in steps (float64, CPU).

    Parameters
    ----------
    model : torch.nn.Module

    Returns
    -------
    list of torch.Tensor
        One ``(C,)`` float64 tensor per layer of :func:`tap_layers` (empty without taps).
    """
    return [layer.tap_delay(torch.float64).detach().cpu() for layer in tap_layers(model)]     # [(C,)]


def tap_widths(model):
    """The current window half-width of every tap layer (list of float)."""
    return [float(layer.tap_width) for layer in tap_layers(model)]


def ds4d_layers(model):
    """The :class:`nn.DS4D` layers of ``model``, in module order."""
    return [m for m in model.modules() if isinstance(m, dnn.DS4D)]


@contextlib.contextmanager
def ablate(model, kind, layers=None):
    """Every DS4D layer of ``model`` (or of ``layers``) with the ablation ``kind`` added to its own inside
    the block: ``"tau_min"`` collapses each delay to one step (``k = 1``, ``alpha = 0``), ``"mu_zero"``
    removes the delayed branch (``mu = 0``, ``lam`` kept), ``"tap_zero"`` the input tap. Nested uses
    apply both and restore the outer setting on leaving."""
    if kind not in ("tau_min", "mu_zero", "tap_zero"):
        raise ValueError(f"kind must be 'tau_min', 'mu_zero' or 'tap_zero', got {kind!r}")
    layers = ds4d_layers(model) if layers is None else layers
    saved = [layer.ablation for layer in layers]
    try:
        for layer, prev in zip(layers, saved):
            layer.ablation = tuple(dict.fromkeys(ablation_kinds(prev) + (kind,)))
        yield model
    finally:
        for layer, prev in zip(layers, saved):
            layer.ablation = prev


def tap_zero(model):
    """Every tap layer of ``model`` with the ``"tap_zero"`` ablation inside the block (the tap's contribution
    removed from forward, recurrent path and decoding; the parameters untouched), the layers' own
    ablations restored after it."""
    return ablate(model, "tap_zero", tap_layers(model))


__all__ = ["ablate", "ds4d_layers", "tap_delays", "tap_layers", "tap_widths", "tap_zero"]
