"""One classification run (DS4D or S4D backbone) on a :class:`~experiments.general.data.Dataset`.

Model: :class:`nn.SequenceModel` (encoder, ``n_layers`` pre-norm GLU blocks, mean pooling, linear
classifier). DS4D settings follow the paper's appendix C.4: on pixel tasks every channel starts at a
delay of one image row (``delay_init="constant"``, ``tau0 = row``: 28 for sMNIST, 8 for sdigits) with
``theta0 = 0`` and ``p0 = 0.015``; token tasks use the default grid of delays. AdamW with weight decay
on the ordinary parameters only, ``dt`` and delay at ``dt_lr``, cosine learning-rate decay. The
training order of epoch ``e`` is a permutation drawn from a generator seeded by ``(seed, e)``: the
step count fixes the data, so checkpoints resume exactly and every torchrun rank sees the same global
batch (see :mod:`experiments._train`).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ddesys import nn as dnn

from .._dist import single
from .._runs import config_key
from .._train import Trainer, fit


def data_info(data):
    """What identifies a data set in a run's key besides its task name (sizes and length)."""
    return {"n_train": int(len(data.train.y)), "n_test": int(len(data.test.y)), "length": int(data.length)}


def run_key(task, config, data):
    """Key of a run in a results file: readable prefix + hash of task, config and data sizes."""
    c = config
    return config_key(f"{task}|{c['family']}|H{c['width']}|lr{c['lr']:g}|seed{c['seed']}|epochs{c['epochs']}",
                      {"task": task, "config": c, "data": data})


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
    amp: str = "none"

    def to_dict(self):
        d = asdict(self)
        if d["amp"] == "none":                       # as in files written before mixed precision
            del d["amp"]
        return d

    def key(self, data):
        """Identity of the run on ``data`` (a :class:`~experiments.general.data.Dataset`)."""
        return run_key(data.name, self.to_dict(), data_info(data))


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


def _ce_sum(logits, labels):
    return F.cross_entropy(logits, labels, reduction="sum")


def train_run(cfg, data, device="cpu", progress=None, ckpt=None, ctx=None):
    """Train; returns a JSON-ready dict: config, ``status``, per-epoch ``curve`` (train loss, test loss /
    accuracy), ``best_acc`` / ``final_acc``, ``n_params``, ``seconds``, and for DS4D the mean delay before
    and after. ``progress``: ``(optimizer step, acc=)`` after each epoch; ``ckpt``, ``ctx``: as in
    :func:`experiments.synthetic.train.train_run` (checkpoints every N optimizer steps, mid-epoch
    included). A non-finite loss raises :class:`~experiments._ckpt.Diverged` with the run so far."""
    ctx = ctx or single(device)
    dev = ctx.device
    torch.manual_seed(cfg.seed)
    model = build(cfg, data).to(dev)
    opt = torch.optim.AdamW(dnn.param_groups(model, cfg.lr, cfg.weight_decay), lr=cfg.lr)
    n = len(data.train.y)
    n_batches = math.ceil(n / cfg.batch)
    total = cfg.epochs * n_batches
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total)
    tr = Trainer(model, opt, ctx, sched=sched, amp=cfg.amp)
    delays0 = _mean_delay(model)
    st = {"step": 0, "curve": [], "best_acc": -1.0, "best_epoch": None, "losses": [], "seconds": 0.0}
    key = cfg.key(data)

    def record(status):
        out = {"key": key, "task": data.name, "config": cfg.to_dict(), "data": data_info(data), "status": status,
               "n_params": sum(p.numel() for p in model.parameters()), "curve": st["curve"],
               "best_acc": st["best_acc"], "best_epoch": st["best_epoch"],
               "final_acc": st["curve"][-1]["test_acc"] if st["curve"] else None, "seconds": st["seconds"]}
        if delays0 is not None:
            out["mean_delay"] = {"init": delays0, "final": _mean_delay(model)}
        return out

    def epoch_of(step):                           # (epoch from 1, batch within it)
        epoch, b = divmod(step - 1, n_batches)
        return epoch + 1, b

    perm = {}

    def batch(step):
        epoch, b = epoch_of(step)
        if epoch not in perm:
            perm.clear()
            perm[epoch] = np.random.default_rng([cfg.seed, epoch]).permutation(n)
        idx = perm[epoch][b * cfg.batch:(b + 1) * cfg.batch]
        return data.train.x[idx], data.train.y[idx], len(idx)

    def evaluate_at(step, loss):
        epoch, b = epoch_of(step)
        if b != n_batches - 1:
            return None
        acc, test_loss = evaluate(model, data.test.x, data.test.y, dev)
        st["curve"].append({"epoch": epoch, "train_loss": loss, "test_loss": test_loss, "test_acc": acc})
        if acc > st["best_acc"]:
            st["best_acc"], st["best_epoch"] = acc, epoch
        return {"acc": acc}

    def where(step):
        epoch = epoch_of(step)[0]
        return f"in epoch {epoch}, step", {"diverged_epoch": epoch}

    return fit(tr, st, total, batch, _ce_sum, evaluate_at, record, key, ckpt, progress, where=where)


@torch.no_grad()
def _mean_delay(model):
    layers = [m for m in model.modules() if isinstance(m, dnn.DS4D)]
    if not layers:
        return None
    return float(torch.cat([m.discrete(torch.float64)[6] for m in layers]).mean())


__all__ = ["RunConfig", "build", "evaluate", "train_run"]
