"""Why a learned clock does or does not pause at every padding id: the pushes on its clock, measured.

On a task whose padding comes from several ids (:attr:`.tasks.Task.pads`), each learned clock's gate sees
each padding id through that id's own embedding (and, above the first layer, its context). The time cost
pushes every clock value down by the same amount per position; the task loss pushes each where the
prediction needs it. :func:`pad_pushes` measures both, per gated layer and per padding id, on a probe
batch: how often the id's tokens tick, and the push of the task loss and of the time cost on the clock
values at that id's positions (minus the summed derivative: the direction a gradient step moves them;
negative: towards a pause). Summed over the id's positions, a push scales with the id's frequency: the
question is whether a rare id's share of the cost's push is too small to make it pause
before the cost switches off. Beside the pushes, the gate's logit (``w . x + b``: it ticks above 0) at each
padding id and the lowest logit of a data id (per id, the mean over its positions) say how far each padding
id is from a pause and whether one linear gate can pause it without pausing data.
:func:`.train.train_run` records it at every evaluation of a learned-clock
run on such a task (``pads`` in the curve points); :func:`table` reads it for the report.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .tasks import IGNORE

__all__ = ["pad_pushes", "table"]


def _gates(model):
    """The learned clocks: each block's gate, or the model's clock learned per token id (one, shared)."""
    shared = getattr(model, "clock", None)
    if getattr(shared, "learned_clock", False):
        return [shared]
    return [b.layer.gate for b in getattr(model, "blocks", ()) if isinstance(getattr(b.layer, "gate", None),
                                                                           torch.nn.Module)]


def pad_pushes(model, tokens, labels, pad_ids, cost_weight):
    """Per gated layer ``{"ids", "count", "tick", "loss", "cost", "logit", "data_logit"}``, one entry per
    padding id of ``pad_ids`` (``data_logit``: one number per layer):
    its positions in ``tokens`` ``(B, L)``, the fraction of them that tick (clock > 1/2), and the pushes, minus
    the sums over them of ``d loss / d c`` (``loss``: the mean cross-entropy over the supervised ``labels``)
    and of ``d cost / d c`` (``cost``: ``cost_weight`` times the mean clock over every position and gated
    layer, the :class:`nn.learned_clock.TimeCost` of that weight); negative pushes lower the clock;
    ``logit`` the mean gate logit over the id's positions and ``data_logit`` the lowest mean logit of an id
    outside ``pad_ids`` (``None`` for a gate without ``logits``). A clock learned per token id
    (:class:`nn.LearnedTokenClock`) is one entry, its logits the id's own. The
    derivatives are total: a layer's includes the effect of its clock on the gated layers above it; for a
    binary clock they are its surrogate's (the soft system's at the binary point). Gradients by
    :func:`torch.autograd.grad`: the parameters' ``.grad`` are not touched. ``[]`` for a model without
    learned clocks."""
    gates = _gates(model)
    if not gates:
        return []
    outs, zs = {}, {}

    def hook(k):
        def record(m, i, o):
            outs[k] = o
            if callable(getattr(m, "logits", None)):
                zs[k] = m.logits(i[0]).detach()                                     # (B, L)
        return record
    hooks = [g.register_forward_hook(hook(k)) for k, g in enumerate(gates)]
    was = model.training
    try:
        model.train(False)
        with torch.enable_grad():
            logits = model(tokens)                                                      # (B, L, V)
            sup = labels != IGNORE
            loss = F.cross_entropy(logits[sup], labels[sup])
            cs = [outs[k] for k in range(len(gates))]                                   # (B, L) each
            cost = cost_weight * torch.stack([c.mean() for c in cs]).mean()
            g_loss = torch.autograd.grad(loss, cs, retain_graph=True, allow_unused=True)
            g_cost = torch.autograd.grad(cost, cs, allow_unused=True)
    finally:
        for h in hooks:
            h.remove()
        model.train(was)
    out = []
    data = [int(i) for i in torch.unique(tokens) if int(i) not in set(pad_ids)]
    for k, (c, gl, gc) in enumerate(zip(cs, g_loss, g_cost)):
        c, gl = c.detach(), torch.zeros_like(c) if gl is None else gl
        gc = torch.zeros_like(c) if gc is None else gc
        z = zs.get(k)
        row = {"ids": list(pad_ids), "count": [], "tick": [], "loss": [], "cost": [], "logit": [],
               "data_logit": min((float(z[tokens == i].mean()) for i in data), default=None) if z is not None
               else None}
        for i in pad_ids:
            at = tokens == i
            n = int(at.sum())
            row["count"].append(n)
            row["tick"].append(float((c[at] > 0.5).float().mean()) if n else None)
            row["loss"].append(-float(gl[at].sum()))
            row["cost"].append(-float(gc[at].sum()))
            row["logit"].append(float(z[at].mean()) if z is not None and n else None)
        out.append(row)
    return out


def table(run):
    """Rows ``(layer, id, count, tick at the first evaluation, tick at the last, summed loss push, summed
    cost push, logit at the last evaluation, lowest data logit there)`` of a run whose curve records
    ``pads`` (sums over every evaluation; the logits ``None`` where not recorded); ``[]`` otherwise."""
    pts = [p for p in run["curve"] if p.get("pads")]
    if not pts:
        return []
    rows = []
    for layer, first in enumerate(pts[0]["pads"]):
        last = pts[-1]["pads"][layer]
        for j, i in enumerate(first["ids"]):
            rows.append((layer + 1, i, first["count"][j], first["tick"][j], last["tick"][j],
                         sum(p["pads"][layer]["loss"][j] for p in pts), sum(p["pads"][layer]["cost"][j] for p in pts),
                         (last.get("logit") or [None] * len(first["ids"]))[j], last.get("data_logit")))
    return rows
