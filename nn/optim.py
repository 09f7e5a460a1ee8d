"""Optimizer parameter groups following S4's ``_optim`` convention."""
from __future__ import annotations


def register_optim(module, name, hp):
    """Attach optimizer hints ``hp`` (e.g. ``{"lr": 1e-4, "weight_decay": 0.0}``) to ``module.<name>``.

    Stored on the module (``_optim_hints``, survives ``copy.deepcopy``) and on the parameter as S4's
    ``_optim`` attribute (for S4-style training scripts)."""
    hints = module.__dict__.setdefault("_optim_hints", {})
    hints[name] = dict(hp)
    getattr(module, name)._optim = dict(hp)


def param_groups(model, lr, weight_decay=0.0):
    """One group for ordinary parameters (``lr``, ``weight_decay``) and one per distinct ``_optim`` dict
    attached by the layers (``dt`` and delay: their own ``dt_lr`` and no weight decay; other SSM
    parameters: no weight decay). Pass the result to any ``torch.optim`` optimizer."""
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
