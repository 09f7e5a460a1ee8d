"""Optimizer parameter groups following S4's ``_optim`` convention."""
from __future__ import annotations


def register_optim(module, name, hp):
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

    See Also
    --------
    param_groups : turns the hints into optimizer parameter groups.
    """
    hints = module.__dict__.setdefault("_optim_hints", {})
    hints[name] = dict(hp)
    getattr(module, name)._optim = dict(hp)


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
    >>> from nn import SequenceModel, param_groups
    >>> model = SequenceModel(d_input=1, d_output=10, d_model=16, n_layers=2, layer_kw={"dt_lr": 1e-4})
    >>> groups = param_groups(model, lr=1e-3, weight_decay=0.05)
    >>> [(g["lr"], g["weight_decay"]) for g in groups]     # plain; dt and delay; other SSM parameters
    [(0.001, 0.05), (0.0001, 0.0), (0.001, 0.0)]
    >>> opt = torch.optim.AdamW(groups)
    """
    hints = {}
    for mod in model.modules():
        for name, hp in getattr(mod, "_optim_hints", {}).items():
            hints[id(getattr(mod, name))] = hp
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
