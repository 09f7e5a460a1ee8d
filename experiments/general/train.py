"""One run (DS4D or S4D backbone) on a :class:`~experiments.general.data.Dataset`: classification,
regression (``target "regression"``: BIDMC) or document-pair classification (``kind "token_pairs"``: LRA
Retrieval).

Model: :class:`nn.SequenceModel` (encoder, ``n_layers`` pre-norm GLU blocks, mean pooling, linear
decoder): class logits and cross-entropy, or one output and squared error (RMSE reported); document
pairs go through one encoder each and :class:`PairClassifier`'s head. Held-out protocol: every epoch is
scored on a validation split and on the test split; the validation split chooses the epoch (the record
keeps ``best_val_epoch`` and the test score there, ``test_at_best_val``), the test split chooses nothing
(no "best test" is kept: the record's test scores are the curve's and the last epoch's, ``final_acc`` /
``final_rmse``). A data set with its own validation split uses it; for one without (sdigits, sMNIST, the
generated ListOps, LRA Text), a config with ``val_fraction`` carves that share of the training examples
out as validation, drawn by ``val_seed`` (:func:`with_validation`; :data:`VAL_FRACTION` and
:data:`VAL_SEED` in every new run of the CLI). Records written before the protocol hold a ``best_acc``
(the best test epoch) that no report reads, and no validation score where the data set has no split.

DS4D settings follow the paper's appendix C.4: on pixel tasks every channel starts at a delay of one
image row (``delay_init="constant"``, ``tau0 = row``: 28 for sMNIST, 8 for sdigits) with ``theta0 = 0``
and ``p0 = 0.015``; token tasks use the default grid of delays. AdamW with weight decay
on the ordinary parameters only, ``dt`` and delay at ``dt_lr``, cosine learning-rate decay. The
training order of epoch ``e`` is a permutation drawn from a generator seeded by ``(seed, e)``: the
step count fixes the data, so checkpoints resume exactly and every torchrun rank sees the same global
batch (see :mod:`experiments._train`).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ddesys import nn as dnn

from .._dist import single
from .._models import ModelSpec
from .._runs import config_key
from .._sizes import n_params
from .._train import Trainer, fit
from .loaders import split_off

VAL_FRACTION = 0.1          # the share of the training examples carved out as validation where a data set has none
VAL_SEED = 12345            # the draw of that split: the same for every model, seed and learning rate


def data_info(data):
    """What identifies a data set in a run's key besides its task name (sizes and length; the validation
    split's size where there is one)."""
    out = {"n_train": int(len(data.train.y)), "n_test": int(len(data.test.y)), "length": int(data.length)}
    if data.val is not None:
        out["n_val"] = int(len(data.val.y))
    return out


def run_key(task, config, data):
    """Key of a run in a results file: readable prefix + hash of task, config and data sizes."""
    c = config
    return config_key(f"{task}|{c['family']}|H{c['width']}|lr{c['lr']:g}|seed{c['seed']}|epochs{c['epochs']}",
                      {"task": task, "config": c, "data": data})


def with_validation(data, cfg):
    """``data`` as the run of ``cfg`` trains on it: unchanged where ``cfg.val_fraction`` is None; else its
    training split with ``val_fraction`` of the examples carved out as the validation split, drawn by
    ``cfg.val_seed`` (:func:`.loaders.split_off`), for a data set without a validation split of its own
    (one with its own keeps it: a :class:`ValueError`)."""
    if cfg.val_fraction is None:
        return data
    if data.val is not None:
        raise ValueError(f"{data.name} has a validation split of its own: val_fraction is for data sets without one")
    train, val = split_off(data.train.x, data.train.y, cfg.val_fraction, cfg.val_seed)
    if val is None or not len(train.y):
        raise ValueError(f"{data.name}: val_fraction {cfg.val_fraction:g} of {len(data.train.y)} training examples "
                         "leaves an empty training or validation split")
    return dataclasses.replace(data, train=train, val=val)


@dataclass
class RunConfig:
    """One run: ``model`` (a :class:`~experiments._models.ModelSpec`, DS4D or S4D; stored as its label,
    ``"family"``) at ``width`` with ``n_layers`` blocks, and its training recipe. ``val_fraction`` /
    ``val_seed``: the validation split carved from the training data of a data set without one
    (:func:`with_validation`); ``None``: the data set's own split, or none (the runs of results files
    written before the held-out protocol)."""
    model: ModelSpec = ModelSpec("ds4d")
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
    val_fraction: float | None = None
    val_seed: int | None = None

    def __post_init__(self):
        if (self.val_fraction is None) != (self.val_seed is None):
            raise ValueError("val_fraction and val_seed go together (both None: no carved validation split)")
        if self.val_fraction is not None and not 0.0 < self.val_fraction < 1.0:
            raise ValueError(f"val_fraction is a share in (0, 1), or None (got {self.val_fraction!r})")

    def to_dict(self):
        d = {("family" if k == "model" else k): self.model.label if k == "model" else v
             for k, v in asdict(self).items()}
        if d["amp"] == "none":                       # as in files written before mixed precision
            del d["amp"]
        for k in ("val_fraction", "val_seed"):
            if d[k] is None:                         # as in files written before the held-out protocol
                del d[k]
        return d

    def key(self, data):
        """Identity of the run on ``data`` (a :class:`~experiments.general.data.Dataset`, before any
        carved validation split: the key holds the sizes the run trains on)."""
        return run_key(data.name, self.to_dict(), data_info(with_validation(data, self)))


class PairClassifier(nn.Module):
    """Two documents -> one label (LRA Retrieval's two-tower head, as in LRA and S4): one ``encoder`` for
    both (``(2B, L) -> (2B, H)``, mean-pooled), the pair's features ``[u, v, u * v, u - v]`` -> linear ->
    GELU -> linear -> ``n_classes``. Input ``(B, 2, L)`` token ids -> ``(B, n_classes)``."""

    def __init__(self, encoder, width, n_classes):
        super().__init__()
        self.encoder = encoder
        self.head = nn.Sequential(nn.Linear(4 * width, width), nn.GELU(), nn.Linear(width, n_classes))

    def forward(self, x):
        B = x.shape[0]
        z = self.encoder(x.reshape(2 * B, *x.shape[2:]))             # (2B, H): rows b0d0, b0d1, b1d0, ...
        u, v = z[0::2], z[1::2]                                      # (B, H) each
        return self.head(torch.cat([u, v, u * v, u - v], -1))       # (B, n_classes)


def build(cfg, data):
    """The model for ``data``: a classifier (``(B, n_classes)`` logits), a regressor (``target
    "regression"``: ``(B, 1)``) or, for document pairs (``kind "token_pairs"``), a :class:`PairClassifier`."""
    kw = {"d_state": cfg.d_state, "dt_lr": cfg.dt_lr, "seed": cfg.seed, "bidirectional": cfg.bidirectional}
    if cfg.model.is_ds4d:
        kw["l_max"] = data.length
        if data.kind == "pixels" and 1 < data.row < data.length - 1:
            kw.update(delay_init="constant", tau0=float(data.row), theta0=0.0, p0=0.015)
    tokens = data.kind in ("tokens", "token_pairs")
    pairs = data.kind == "token_pairs"
    d_out = cfg.width if pairs else 1 if data.target == "regression" else data.n_classes
    model = cfg.model.sequence_model(data.vocab if tokens else data.train.x.shape[-1], d_out, kw, d_model=cfg.width,
                                     n_layers=cfg.n_layers, dropout=cfg.dropout, pool="mean", embedding=tokens)
    return PairClassifier(model, cfg.width, data.n_classes) if pairs else model


def metric(data):
    """``"acc"`` (classification, higher is better) or ``"rmse"`` (regression, lower is better)."""
    return "rmse" if data.target == "regression" else "acc"


@torch.no_grad()
def evaluate(model, x, y, device, batch=256, target="class"):
    """``(accuracy, mean cross-entropy)`` of ``model`` on the arrays ``x``, ``y``; for ``target
    "regression"``: ``(RMSE, mean squared error)``."""
    model.eval()
    hit, loss = 0, 0.0
    for s in range(0, len(y), batch):
        xb = torch.from_numpy(x[s:s + batch]).to(device)
        yb = torch.from_numpy(y[s:s + batch]).to(device)
        out = model(xb).float()                                     # (b, classes) or (b, 1)
        if target == "regression":
            loss += float(_se_sum(out, yb))
        else:
            hit += int((out.argmax(-1) == yb).sum())
            loss += float(F.cross_entropy(out, yb, reduction="sum"))
    model.train()
    if target == "regression":
        return math.sqrt(loss / len(y)), loss / len(y)
    return hit / len(y), loss / len(y)


def _ce_sum(logits, labels):
    return F.cross_entropy(logits, labels, reduction="sum")


def _se_sum(out, targets):
    return ((out[:, 0] - targets) ** 2).sum()


def train_run(cfg, data, device="cpu", progress=None, ckpt=None, ctx=None):
    """Train; returns a JSON-ready dict: config, ``status``, per-epoch ``curve`` (train loss, test loss /
    accuracy, validation accuracy), ``final_acc`` (test, last epoch), ``best_val_epoch`` /
    ``test_at_best_val`` (the epoch chosen on validation and the test score there; ``rmse`` in place of
    ``acc`` for regression), ``n_params``, ``seconds``, and for DS4D the mean delay before and after.
    ``data``: the data set as loaded (:func:`with_validation` carves the split ``cfg`` names). ``progress``:
    ``(optimizer step, acc=)`` after each epoch; ``ckpt``, ``ctx``: as in
    :func:`experiments.synthetic.train.train_run` (checkpoints every N optimizer steps, mid-epoch included). A
    non-finite loss raises :class:`~experiments._ckpt.Diverged` with the run so far."""
    ctx = ctx or single(device)
    dev = ctx.device
    data = with_validation(data, cfg)
    torch.manual_seed(cfg.seed)
    model = build(cfg, data).to(dev)
    opt = torch.optim.AdamW(dnn.param_groups(model, cfg.lr, cfg.weight_decay), lr=cfg.lr)
    n = len(data.train.y)
    n_batches = math.ceil(n / cfg.batch)
    total = cfg.epochs * n_batches
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total)
    tr = Trainer(model, opt, ctx, sched=sched, amp=cfg.amp)
    delays0 = _mean_delay(model)
    m, sign = metric(data), (-1.0 if data.target == "regression" else 1.0)      # sign * score: higher is better
    st = {"step": 0, "curve": [], "losses": [], "seconds": 0.0}
    if data.val is not None:
        st.update(best_val=None, best_val_epoch=None, test_at_best_val=None)

    def better(score, best):
        return best is None or sign * score > sign * best
    key = run_key(data.name, cfg.to_dict(), data_info(data))        # data: as carved, = cfg.key(the data as loaded)

    def record(status):
        out = {"key": key, "task": data.name, "config": cfg.to_dict(), "data": data_info(data), "status": status,
               "n_params": n_params(model, trainable=False), "curve": st["curve"],
               f"final_{m}": st["curve"][-1][f"test_{m}"] if st["curve"] else None, "seconds": st["seconds"]}
        if m != "acc":
            out["metric"] = m
        if data.val is not None:
            out.update(best_val_epoch=st["best_val_epoch"], test_at_best_val=st["test_at_best_val"])
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
        score, test_loss = evaluate(model, data.test.x, data.test.y, dev, target=data.target)
        point = {"epoch": epoch, "train_loss": loss, "test_loss": test_loss, f"test_{m}": score}
        if data.val is not None:                 # model selection on the validation split (the test chooses nothing)
            point[f"val_{m}"] = evaluate(model, data.val.x, data.val.y, dev, target=data.target)[0]
            if better(point[f"val_{m}"], st["best_val"]):
                st.update(best_val=point[f"val_{m}"], best_val_epoch=epoch, test_at_best_val=score)
        st["curve"].append(point)
        return {m: score}

    def where(step):
        epoch = epoch_of(step)[0]
        return f"in epoch {epoch}, step", {"diverged_epoch": epoch}

    loss_sum = _se_sum if data.target == "regression" else _ce_sum
    return fit(tr, st, total, batch, loss_sum, evaluate_at, record, key, ckpt, progress, where=where)


@torch.no_grad()
def _mean_delay(model):
    layers = [m for m in model.modules() if isinstance(m, dnn.DS4D)]
    if not layers:
        return None
    return float(torch.cat([m.discrete(torch.float64)[6] for m in layers]).mean())


__all__ = ["VAL_FRACTION", "VAL_SEED", "RunConfig", "build", "evaluate", "train_run", "with_validation"]
