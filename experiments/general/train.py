"""One classification run (DS4D or S4D backbone) on a :class:`~experiments.general.data.Dataset`.

Model: :class:`nn.SequenceModel` (encoder, ``n_layers`` pre-norm GLU blocks, mean pooling, linear
classifier). DS4D settings follow the paper's appendix C.4: on pixel tasks every channel starts at a
delay of one image row (``delay_init="constant"``, ``tau0 = row``: 28 for sMNIST, 8 for sdigits) with
``theta0 = 0`` and ``p0 = 0.015``; token tasks use the default grid of delays. AdamW with weight decay
on the ordinary parameters only, ``dt`` and delay at ``dt_lr``, cosine learning-rate decay.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F

import nn as dnn


@dataclass
class RunConfig:
    family: str = "ds4d"
    width: int = 64
    n_layers: int = 4
    d_state: int = 64
    dropout: float = 0.1
    lr: float = 1e-3
    dt_lr: float = 1e-4
    weight_decay: float = 0.05
    epochs: int = 10
    batch: int = 64
    seed: int = 0
    bidirectional: bool = False

    def key(self, task):
        return f"{task}|{self.family}|H{self.width}|lr{self.lr:g}|seed{self.seed}|epochs{self.epochs}"


def build(cfg, data):
    """The classifier for ``data``."""
    kw = {"d_state": cfg.d_state, "dt_lr": cfg.dt_lr, "seed": cfg.seed, "bidirectional": cfg.bidirectional}
    if cfg.family == "ds4d":
        kw["l_max"] = data.length
        if data.kind == "pixels" and 1 < data.row < data.length - 1:
            kw.update(delay_init="constant", tau0=float(data.row), theta0=0.0, p0=0.015)
    tokens = data.kind == "tokens"
    return dnn.SequenceModel(data.vocab if tokens else data.train.x.shape[-1], data.n_classes, d_model=cfg.width,
                             n_layers=cfg.n_layers, layer=cfg.family, layer_kw=kw, dropout=cfg.dropout,
                             pool="mean", embedding=tokens)


@torch.no_grad()
def evaluate(model, x, y, device, batch=256):
    """Accuracy and mean cross-entropy of ``model`` on the arrays ``x``, ``y``."""
    model.eval()
    hit, loss = 0, 0.0
    for s in range(0, len(y), batch):
        xb = torch.from_numpy(x[s:s + batch]).to(device)
        yb = torch.from_numpy(y[s:s + batch]).to(device)
        logits = model(xb)                                          # (b, classes)
        hit += int((logits.argmax(-1) == yb).sum())
        loss += float(F.cross_entropy(logits, yb, reduction="sum"))
    model.train()
    return hit / len(y), loss / len(y)


def train_run(cfg, data, device="cpu", progress=None):
    """Train; returns a JSON-ready dict: config, per-epoch ``curve`` (train loss, test loss / accuracy),
    ``best_acc`` / ``final_acc``, ``n_params``, ``seconds``, and for DS4D the mean delay before and after.
    Raises on a non-finite loss."""
    torch.manual_seed(cfg.seed)
    model = build(cfg, data).to(device)
    opt = torch.optim.AdamW(dnn.param_groups(model, cfg.lr, cfg.weight_decay), lr=cfg.lr)
    n_batches = math.ceil(len(data.train.y) / cfg.batch)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg.epochs * n_batches)
    delays0 = _mean_delay(model)
    rng = np.random.default_rng(cfg.seed)
    curve, t0, best = [], time.perf_counter(), (-1.0, None)
    for epoch in range(1, cfg.epochs + 1):
        order = rng.permutation(len(data.train.y))
        losses = []
        for s in range(0, len(order), cfg.batch):
            idx = order[s:s + cfg.batch]
            xb = torch.from_numpy(data.train.x[idx]).to(device)
            yb = torch.from_numpy(data.train.y[idx]).to(device)
            loss = F.cross_entropy(model(xb), yb)
            lv = loss.detach().item()
            if not math.isfinite(lv):
                raise FloatingPointError(f"{cfg.key(data.name)}: loss became {lv} in epoch {epoch}")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            losses.append(lv)
        acc, test_loss = evaluate(model, data.test.x, data.test.y, device)
        curve.append({"epoch": epoch, "train_loss": float(np.mean(losses)), "test_loss": test_loss, "test_acc": acc})
        if acc > best[0]:
            best = (acc, epoch)
        if progress is not None:
            progress(epoch, curve[-1])
    out = {"key": cfg.key(data.name), "task": data.name, "config": asdict(cfg),
           "n_params": sum(p.numel() for p in model.parameters()), "curve": curve, "best_acc": best[0],
           "best_epoch": best[1], "final_acc": curve[-1]["test_acc"], "seconds": time.perf_counter() - t0}
    if delays0 is not None:
        out["mean_delay"] = {"init": delays0, "final": _mean_delay(model)}
    return out


@torch.no_grad()
def _mean_delay(model):
    layers = [m for m in model.modules() if isinstance(m, dnn.DS4D)]
    if not layers:
        return None
    return float(torch.cat([m.discrete(torch.float64)[6] for m in layers]).mean())


__all__ = ["RunConfig", "build", "evaluate", "train_run"]
