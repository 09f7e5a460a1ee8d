"""One training run on a synthetic task, plus the DS4D mechanism probes of the paper's Table 1.

AdamW at a constant learning rate without weight decay; DS4D's and S4D's ``dt`` and delay on their own
rate (``dt_lr``, 1e-4 as in the paper) through :func:`nn.param_groups`. Validation is teacher-forced
token accuracy on the target segment of a fixed validation set (the same for every model and seed).
"""
from __future__ import annotations

import contextlib
import copy
import math
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F

import nn as dnn
from ddesys.parameterization import ablation_kinds

from .models import build, n_params
from .tasks import IGNORE, Task

VAL_SEED = 12345                # the validation set is the same for every model, seed and learning rate


@dataclass
class RunConfig:
    """One run: ``task`` x ``family`` at ``width`` (hidden size ``H``) with ``n_layers`` blocks."""
    task: Task
    family: str
    width: int
    n_layers: int = 2
    d_state: int = 64
    lr: float = 1e-3
    dt_lr: float = 1e-4
    seed: int = 0
    steps: int = 1000
    batch: int = 32
    eval_every: int = 50
    val_size: int = 256

    def key(self):
        """Identity of the run in a results file (resume skips runs already there)."""
        return f"{self.task.name}|{self.family}|H{self.width}|lr{self.lr:g}|seed{self.seed}|steps{self.steps}"

    def to_dict(self):
        d = asdict(self)
        d["task"] = self.task.to_dict()
        return d


@torch.no_grad()
def accuracy(model, tokens, labels, chunk=128):
    """Teacher-forced token accuracy on the supervised positions (labels != IGNORE)."""
    was = model.training
    model.eval()
    hit = tot = 0
    for s in range(0, tokens.shape[0], chunk):
        x, y = tokens[s:s + chunk], labels[s:s + chunk]
        pred = model(x).argmax(-1)                  # (b, L)
        sup = y != IGNORE
        hit += int((pred[sup] == y[sup]).sum())
        tot += int(sup.sum())
    model.train(was)
    return hit / tot


def ds4d_layers(model):
    return [m for m in model.modules() if isinstance(m, dnn.DS4D)]


@torch.no_grad()
def delay_state(model):
    """Per DS4D layer: channel delays ``s`` ``(H,)`` (steps) and delayed-branch coefficients ``mu``
    ``(H, N2)``, float64 on the CPU."""
    out = []
    for layer in ds4d_layers(model):
        lam, mu, bbar, c, k, alpha, s = layer.discrete(torch.float64)
        out.append((s.cpu(), mu.cpu()))
    return out


@contextlib.contextmanager
def ablate(model, kind):
    """Temporarily ablate every DS4D layer of ``model`` through the layers' ``ablation`` option:
    ``"tau_min"`` collapses each delay to one step (``k = 1``, ``alpha = 0``), ``"mu_zero"`` removes the
    delayed branch (``mu = 0``, ``lam`` kept). Nested uses restore the outer setting."""
    if kind not in ("tau_min", "mu_zero"):
        raise ValueError(f"kind must be 'tau_min' or 'mu_zero', got {kind!r}")
    layers = ds4d_layers(model)
    saved = [layer.ablation for layer in layers]
    for layer, prev in zip(layers, saved):
        layer.ablation = ablation_kinds(prev) + (kind,)             # nested: both apply
    try:
        yield model
    finally:
        for layer, prev in zip(layers, saved):
            layer.ablation = prev


def mechanism(model, init_state, tokens, labels):
    """The paper's Table 1 for one DS4D checkpoint: mean channel delay, mean ``|delta tau|`` and
    ``|delta mu|`` from initialization, and validation accuracy under each ablation."""
    now = delay_state(model)
    s = torch.cat([a for a, _ in now])
    dtau = torch.cat([(a - b).abs() for (a, _), (b, _) in zip(now, init_state)])
    dmu = torch.cat([(a - b).abs().flatten() for (_, a), (_, b) in zip(now, init_state)])
    out = {"mean_delay": float(s.mean()), "mean_abs_dtau": float(dtau.mean()), "mean_abs_dmu": float(dmu.mean()),
           "acc": accuracy(model, tokens, labels)}
    for kind in ("tau_min", "mu_zero"):
        with ablate(model, kind):
            out[f"acc_{kind}"] = accuracy(model, tokens, labels)
    return out


def train_run(cfg: RunConfig, device="cpu", progress=None):
    """Train one model; returns a JSON-ready dict: config, ``curve`` (step, train loss, val accuracy),
    ``best_acc`` / ``best_step``, ``n_params``, ``seconds`` and, for DS4D, ``mechanism`` at the best
    checkpoint. ``progress``: a callable ``(step, loss, acc)`` (e.g. a tqdm update). Raises on a
    non-finite loss (with the step), never returns a silently diverged run."""
    task = cfg.task
    torch.manual_seed(cfg.seed)
    model = build(cfg.family, task.vocab, cfg.width, cfg.n_layers, task.length, cfg.d_state, cfg.dt_lr,
                  seed=cfg.seed).to(device)
    init_state = delay_state(model)
    opt = torch.optim.AdamW(dnn.param_groups(model, cfg.lr, weight_decay=0.0), lr=cfg.lr, weight_decay=0.0)
    rng = np.random.default_rng(cfg.seed)
    vt, vl, _ = task.sample(cfg.val_size, np.random.default_rng(VAL_SEED))
    vt, vl = torch.from_numpy(vt).to(device), torch.from_numpy(vl).to(device)
    curve, best, best_state, t0, losses = [], (-1.0, 0), None, time.perf_counter(), []
    for step in range(1, cfg.steps + 1):
        x, y, _ = task.sample(cfg.batch, rng)
        x, y = torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)
        logits = model(x)                       # (B, L, V)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=IGNORE)
        lv = loss.detach().item()
        if not math.isfinite(lv):
            raise FloatingPointError(f"{cfg.key()}: loss became {lv} at step {step}")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(lv)
        if step % cfg.eval_every == 0 or step == cfg.steps:
            acc = accuracy(model, vt, vl)
            curve.append({"step": step, "loss": float(np.mean(losses)), "val_acc": acc})
            losses = []
            if acc > best[0]:
                best = (acc, step)
                if init_state:
                    best_state = copy.deepcopy(model.state_dict())
            if progress is not None:
                progress(step, curve[-1]["loss"], acc)
    out = {"key": cfg.key(), "config": cfg.to_dict(), "n_params": n_params(model), "curve": curve,
           "best_acc": best[0], "best_step": best[1], "seconds": time.perf_counter() - t0}
    if init_state:
        model.load_state_dict(best_state)
        out["mechanism"] = mechanism(model, init_state, vt, vl)
    return out


__all__ = ["RunConfig", "ablate", "accuracy", "mechanism", "train_run"]
