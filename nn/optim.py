"""Optimizer parameter groups following S4's ``_optim`` convention, and the ``register`` helper that
declares a parameter with its hints."""
from __future__ import annotations

from torch import nn


def register(module, name, tensor, lr=None, wd=0.0, ssm=True):
    """Create the parameter ``module.<name>`` with its optimizer hints, S4's ``register`` pattern: the
    hints are declared once, where the parameter is made.

    Parameters
    ----------
    module : torch.nn.Module
    name : str
    tensor : torch.Tensor
        Initial value (wrapped in a new ``nn.Parameter``).
    lr : float or None
        Learning rate hint (``None``: the optimizer's); ``0.0`` freezes the parameter (S4 makes it a
        buffer; here it stops requiring grad, so checkpoints keep their keys).
    wd : float or None, default 0.0
        Weight decay hint (``None``: the optimizer's).
    ssm : bool, default True
        Whether the parameter belongs to the layer's SSM set, the parameters that S4's per-layer ``lr``
        (:mod:`nn.s4compat`) governs. ``False`` keeps the hint as declared in an S4-style module (the
        input tap's gain and delay: docs/theory.md §8.4).

    Returns
    -------
    torch.nn.Parameter
        The new parameter.
    """
    module.register_parameter(name, nn.Parameter(tensor, requires_grad=lr != 0.0))
    hp = {}
    if lr is not None:
        hp["lr"] = lr
    if wd is not None:
        hp["weight_decay"] = wd
    register_optim(module, name, hp, ssm=ssm)
    return getattr(module, name)


def register_optim(module, name, hp, ssm=True):
    """Attach optimizer hints to the parameter ``module.<name>``.

    Stored on the module (``_optim_hints``, survives ``copy.deepcopy``) and on the parameter as S4's
    ``_optim`` attribute (for S4-style training scripts).

    Parameters
    ----------
    module : torch.nn.Module
    name : str
        Name of one of ``module``'s parameters.
    hp : dict
        Optimizer hints, e.g. ``{"lr": 1e-4, "weight_decay": 0.0}`` (copied).
    ssm : bool, default True
        As :func:`register`.

    See Also
    --------
    register : creates the parameter and its hints at once.
    param_groups : turns the hints into optimizer parameter groups.
    """
    hints = module.__dict__.setdefault("_optim_hints", {})
    hints[name] = dict(hp)
    module.__dict__.setdefault("_optim_ssm", {})[name] = bool(ssm)
    getattr(module, name)._optim = dict(hp)


def declared_hints(module):
    """The hints declared on ``module`` and its submodules: ``(owner, name, hint, ssm)`` per hinted
    parameter, in module order (``owner.<name>`` is the parameter; ``hint`` a copy of its dict)."""
    out = []
    for mod in module.modules():
        ssm = mod.__dict__.get("_optim_ssm", {})
        for name, hp in mod.__dict__.get("_optim_hints", {}).items():
            out.append((mod, name, dict(hp), ssm.get(name, True)))
    return out


def param_groups(model, lr, weight_decay=0.0):
    """Optimizer parameter groups following S4's ``_optim`` convention.

    One group for ordinary parameters (``lr``, ``weight_decay``) and one per distinct ``_optim`` dict
    attached by the layers (``dt`` and delay: their own ``dt_lr`` and no weight decay; other SSM
    parameters: no weight decay). Parameters that do not require grad are left out.

    Parameters
    ----------
    model : torch.nn.Module
    lr : float
        Learning rate of the ordinary parameters (and of hinted ones whose hint sets none).
    weight_decay : float, default 0.0
        Weight decay of the ordinary parameters (and of hinted ones whose hint sets none).

    Returns
    -------
    list of dict
        For any ``torch.optim`` optimizer; the ordinary group first.

    See Also
    --------
    register_optim

    Examples
    --------
    >>> import torch
    >>> from ddesys.nn import SequenceModel, param_groups
    >>> model = SequenceModel(d_input=1, d_output=10, d_model=16, n_layers=2, layer_kw={"dt_lr": 1e-4})
    >>> groups = param_groups(model, lr=1e-3, weight_decay=0.05)
    >>> [(g["lr"], g["weight_decay"]) for g in groups]     # plain; dt and delay; other SSM parameters
    [(0.001, 0.05), (0.0001, 0.0), (0.001, 0.0)]
    >>> opt = torch.optim.AdamW(groups)
    """
    hints = {id(getattr(mod, name)): hp for mod, name, hp, _ in declared_hints(model)}
    plain, special = [], {}
    for p in model.parameters():
        if not p.requires_grad:
            continue
        hp = hints.get(id(p), getattr(p, "_optim", None))
        if hp is None:
            plain.append(p)
        else:
            special.setdefault(tuple(sorted(hp.items())), []).append(p)
    groups = [{"params": plain, "lr": lr, "weight_decay": weight_decay}]
    for key, ps in special.items():
        groups.append({"params": ps, "lr": lr, "weight_decay": weight_decay, **dict(key)})
    return groups
