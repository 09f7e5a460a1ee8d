"""One training run on the delay task, and the measurements the diagnosis needs.

AdamW at a constant learning rate without weight decay (``dt`` and the delay on ``dt_lr`` through
:func:`nn.param_groups`; by default the same rate), MSE over every position and output. Validation: relative
RMSE ``||y_hat - y|| / ||y||`` (= RMSE / RMS(target)) on a fixed validation set (the same for every model and
seed), overall and per lag. Held-out protocol (a config with ``test_size``): every evaluation also scores a
test set drawn from another generator seed (:data:`TEST_SEED`), recorded beside the validation error
(``test_rel_rmse``) and never read by any choice made here or by the report (the checkpoint and the learning
rate are chosen on validation: :func:`.tables.held_out`). Training batch ``s`` is drawn from a generator
seeded by ``(seed, s)``, so checkpoints resume exactly (see :mod:`experiments._train`).

At the end of a run (final weights):

* every run: the end-to-end linearized response ``g[j] = mean over sequences of d y[t0] / d x[t0 - j]``
  at the last position ``t0 = L - 1`` (a perfect delay line has ``g = 1`` at the lag and 0 elsewhere):
  its value at the lag, the share of its energy within one step of the lag, at the echoes (2x, 3x the
  lag), before the lag and elsewhere, where it peaks, and how far its frequency response is from an
  exact delay over the input's band (``in_band_error``: the linear part of the error, apart from
  what the nonlinear block adds);
* DS4D: every channel's final delay (``layer.discrete(torch.float64).delay``) and branch allocation
  ``p = sigmoid(r)``, summarized against each lag (nearest channel, share of channels within one step,
  nearest sum of at most one delay per layer), how far the delays moved from initialization, the share of
  each channel kernel's energy before its delay, at it, at its echoes (2s, 3s, ...) and elsewhere, and
  the validation error with every delay collapsed to one step (``tau_min``) and with the delayed branch
  removed (``mu_zero``);
* DS4D with the input tap (``ds4d-tap``): every channel's final tap delay, summarized against the lags
  like the feedback delays, how far the tap delays moved, the tap's final window half-width, and the
  validation error with every tap gain set to zero (``tap_zero``).

``ds4d-tap`` runs step their tap's window schedule (:func:`.models.tap_schedule`) after every optimizer
step; it is saved in the checkpoints with the optimizer, so a resumed run continues it exactly.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch

from ddesys import nn as dnn

from .._dist import single
from .._runs import config_key
from .._probes import ablate, ds4d_layers, tap_delays, tap_widths, tap_zero
from .._train import Trainer, fit
from .data import Task, n_band
from .models import Arch, build, n_params, tap_schedule

VAL_SEED = 12345                # the validation set is the same for every model and seed
TEST_SEED = 54321               # the held-out test set: other signals, the same for every run; chooses nothing
NEAR = 1.0                      # "at the lag": within one step


def run_key(config):
    """Key of a run in a results file from its config dict (readable prefix + hash of the config)."""
    c = config
    a = Arch.from_dict(c["arch"])
    return config_key(f"{c['task']['name']}|{a.label()}|H{c['width']}|lr{c['lr']:g}|seed{c['seed']}|"
                      f"steps{c['steps']}", c)


@dataclass
class RunConfig:
    """One run: ``task`` x ``arch`` at ``width``. ``test_size``: sequences of the held-out test set
    (:data:`TEST_SEED`) scored at every evaluation; ``None``: none (the runs of results files written
    before the held-out protocol)."""
    task: Task
    arch: Arch
    width: int
    lr: float = 3e-3
    seed: int = 0
    steps: int = 400
    batch: int = 16
    eval_every: int = 25
    val_size: int = 64
    amp: str = "none"
    test_size: int | None = None

    def __post_init__(self):
        if self.test_size is not None and not (isinstance(self.test_size, int) and not isinstance(self.test_size, bool)
                                               and self.test_size > 0):
            raise ValueError(f"test_size is a count of test sequences > 0, or None (got {self.test_size!r})")

    def key(self):
        return run_key(self.to_dict())

    def to_dict(self):
        d = asdict(self)
        d["task"], d["arch"] = self.task.to_dict(), self.arch.to_dict()
        if d["amp"] == "none":
            del d["amp"]
        if d["test_size"] is None:                   # as in files written before the held-out test set
            del d["test_size"]
        return d

    @classmethod
    def from_dict(cls, d):
        t = {k: v for k, v in d["task"].items() if k in ("L", "lags", "freq", "dt")}
        return cls(**{**d, "task": Task(**t), "arch": Arch.from_dict(d["arch"])})


# ------------------------------------------------------------------------------------------ metrics
@torch.no_grad()
def evaluate(model, x, y, chunk=64):
    """``{"rel_rmse", "by_lag"}``: ``||y_hat - y|| / ||y||`` over the whole set, and per output."""
    was = model.training
    model.eval()
    err = torch.zeros(y.shape[-1], dtype=torch.float64)
    ref = torch.zeros(y.shape[-1], dtype=torch.float64)
    for s in range(0, x.shape[0], chunk):
        xb, yb = x[s:s + chunk], y[s:s + chunk]
        d = (model(xb).double() - yb.double())
        err += (d ** 2).sum((0, 1)).cpu()
        ref += (yb.double() ** 2).sum((0, 1)).cpu()
    model.train(was)
    return {"rel_rmse": float((err.sum() / ref.sum()).sqrt()), "by_lag": (err / ref).sqrt().tolist()}


def _window_energy(e, centre, half=1):
    """Energy of ``e`` (squared values, 1-D) in ``[centre - half, centre + half + 1]`` (the delay ``s``
    splits between ``floor(s)`` and ``floor(s) + 1``), clipped to the array."""
    a, b = max(0, int(np.floor(centre)) - half), min(len(e), int(np.floor(centre)) + half + 2)
    return float(e[a:b].sum()) if a < b else 0.0, (a, b)


def response(model, x, lags, freq=None, dt=None):
    """End-to-end linearized response at the last position (module docstring), per lag: ``{"g_at_lag",
    "at_lag", "echoes", "before", "elsewhere", "peak", "g"}`` (energy shares of ``g``, and ``g`` itself to
    6 significant digits). With the task's ``freq`` and ``dt``, also ``in_band_error``: the relative
    distance of ``g``'s frequency response from an exact delay, ``sqrt(mean |G_k - exp(-2 pi i k lag /
    L)|^2)`` over the input's Fourier bins ``k = 1..m`` (only the band matters: the input has nothing
    above it, so a smeared, sinc-like ``g`` can be an exact band-limited delay), and ``in_band_gain``,
    the mean ``|G_k|`` over those bins (1 for a delay)."""
    was = model.training
    model.eval()
    xi = x.detach().clone().requires_grad_(True)
    L = x.shape[1]
    out = []
    y = model(xi)                                            # (B, L, n_lags)
    for i, lag in enumerate(lags):
        (gx,) = torch.autograd.grad(y[:, -1, i].sum(), xi, retain_graph=i + 1 < len(lags))
        g = gx[..., 0].double().mean(0).flip(0).cpu().numpy()      # g[j] = d y[L-1] / d x[L-1-j], (L,)
        e = g ** 2
        tot = float(e.sum()) or 1.0
        at, (a, b) = _window_energy(e, lag)
        mask = np.ones(L, bool)
        mask[a:b] = False
        echo = 0.0
        for m in range(2, L // lag + 1):
            ee, (c, d) = _window_energy(e, m * lag)
            echo += ee
            mask[c:d] = False
        before = float(e[:a].sum())
        mask[:a] = False
        r = {"g_at_lag": float(g[lag]), "at_lag": at / tot, "echoes": echo / tot, "before": before / tot,
             "elsewhere": float(e[mask].sum()) / tot, "peak": int(np.argmax(np.abs(g)))}
        if freq is not None:
            m = n_band(L, dt, freq)
            G = np.fft.rfft(g)[1:m + 1]                                      # (m,) in-band bins
            H = np.exp(-2j * np.pi * np.arange(1, m + 1) * lag / L)
            r.update(in_band_error=float(np.sqrt(np.mean(np.abs(G - H) ** 2))),
                     in_band_gain=float(np.mean(np.abs(G))))
        r["g"] = [float(f"{v:.6g}") for v in g]
        out.append(r)
    model.train(was)
    return out


@torch.no_grad()
def delays(model):
    """Per DS4D layer: channel delays ``(H,)`` in steps (float64, CPU)."""
    return [layer.discrete(torch.float64).delay.cpu() for layer in ds4d_layers(model)]


def delay_summary(s_layers, lags):
    """Final delays against the lags: per lag, per layer the nearest channel's distance and the share
    of channels within :data:`NEAR` steps; the nearest sum of at most one delay per layer (a chain of
    layers can split the lag; a layer can be passed through its residual path); over all layers the share
    within one step and a histogram of ``s / lag``."""
    out = []
    for lag in lags:
        per = []
        for s in s_layers:
            d = (s - lag).abs()
            per.append({"nearest": float(d.min()), "within_1": float((d <= NEAR).double().mean())})
        tot = torch.zeros(1, dtype=torch.float64)           # sums reachable with <= 1 delay per layer
        for s in s_layers:
            tot = torch.cat([tot, (tot[:, None] + s[None, :]).reshape(-1)])
            tot = torch.unique(torch.round(tot[tot <= lag + NEAR + 1] * 1e3) / 1e3)   # sums only grow
        allc = torch.cat(s_layers)
        edges = np.linspace(0.0, 4.0, 17)                                    # s / lag in [0, 4]
        hist, _ = np.histogram(np.clip((allc / lag).numpy(), 0, 4 - 1e-9), bins=edges)
        out.append({"lag": lag, "layers": per, "nearest": min(p["nearest"] for p in per),
                    "within_1": float(((allc - lag).abs() <= NEAR).double().mean()),
                    "nearest_chain": float((tot - lag).abs().min()), "hist_over_lag": hist.tolist(),
                    "hist_edges": edges.tolist()})
    return out


@torch.no_grad()
def kernel_shares(model, L, lags):
    """Per DS4D layer: the mean over channels, and over the channels within :data:`NEAR` of the first
    lag, of each channel kernel's energy share before its delay ``s``, at it (``floor(s) - 1 ..
    floor(s) + 2``), at its echoes ``2s, 3s, ...`` and elsewhere; with the branch allocation ``p``
    (mean over modes) and the kernel value at the delay relative to the kernel's largest. A layer with
    the input tap (``ds4d-tap``) is measured without it: the shares describe the feedback kernel."""
    out = []
    for layer in ds4d_layers(model):
        with tap_zero(layer):                   # the feedback kernel alone (layer.kernel adds the input tap)
            K = layer.kernel(L).double().cpu().numpy()                      # (H, L)
        d = layer.discrete(torch.float64)
        s = d.delay.cpu().numpy()
        # p = |mu| / (|lam| + |mu|): the branch allocation read off the discrete system (|lam| + |mu| = |abar|)
        p = (d.mu.abs() / (d.lam.abs() + d.mu.abs())).mean(-1).cpu().numpy()   # (H,)
        rows = []
        for h in range(K.shape[0]):
            e = K[h] ** 2
            tot = float(e.sum()) or 1.0
            at, (a, b) = _window_energy(e, s[h])
            mask = np.ones(L, bool)
            mask[:b] = False
            echo = 0.0
            for m in range(2, int(L // s[h]) + 1):
                ee, (c, d) = _window_energy(e, m * s[h])
                echo += ee
                mask[c:d] = False
            rows.append([float(e[:a].sum()) / tot, at / tot, echo / tot, float(e[mask].sum()) / tot, p[h]])
        rows = np.array(rows)
        near = np.abs(s - lags[0]) <= NEAR
        cols = ("before", "at_delay", "echoes", "elsewhere", "p")
        out.append({"all": dict(zip(cols, rows.mean(0).tolist())),
                    "near_lag": dict(zip(cols, rows[near].mean(0).tolist())) if near.any() else None,
                    "n_near": int(near.sum()), "p_all": p.tolist()})
    return out


def diagnose(model, vx, vy, task, init_delays, init_taps=()):
    """The end-of-run measurements of the module docstring (``init_delays``: :func:`delays` at init,
    ``init_taps``: :func:`tap_delays` at init)."""
    out = {"response": response(model, vx, task.lags, task.freq, task.dt)}
    if init_delays:
        now = delays(model)
        out["delays"] = [s.tolist() for s in now]
        out["delay_init"] = [s.tolist() for s in init_delays]
        out["mean_abs_dtau"] = float(torch.cat([(a - b).abs() for a, b in zip(now, init_delays)]).mean())
        out["delay_summary"] = delay_summary(now, task.lags)
        out["kernels"] = kernel_shares(model, task.L, task.lags)
        for kind in ("tau_min", "mu_zero"):
            with ablate(model, kind):
                out[f"rel_rmse_{kind}"] = evaluate(model, vx, vy)["rel_rmse"]
    if init_taps:
        now = tap_delays(model)
        out["tap_delays"] = [s.tolist() for s in now]
        out["tap_delay_init"] = [s.tolist() for s in init_taps]
        out["tap_mean_abs_dtau"] = float(torch.cat([(a - b).abs() for a, b in zip(now, init_taps)]).mean())
        out["tap_summary"] = delay_summary(now, task.lags)
        out["tap_width"] = tap_widths(model)
        with tap_zero(model):
            out["rel_rmse_tap_zero"] = evaluate(model, vx, vy)["rel_rmse"]
    return out


def _loss_sum(out, y):
    return ((out - y) ** 2).sum()


def validation_set(task, n, device="cpu"):
    x, y = task.sample(n, np.random.default_rng(VAL_SEED))
    return torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)


def held_out_set(task, n, device="cpu"):
    """The held-out test set: ``n`` sequences drawn with :data:`TEST_SEED` (other signals than the
    validation set's and the training batches'); scored, never used for a choice."""
    x, y = task.sample(n, np.random.default_rng(TEST_SEED))
    return torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)


def train_run(cfg: RunConfig, device="cpu", progress=None, ckpt=None, ctx=None):
    """Train one model; returns a JSON-ready dict: config, ``status``, ``curve`` (step, train MSE, validation
    relative RMSE; ``test_rel_rmse`` under the held-out protocol), ``rel_rmse`` / ``by_lag`` at the end,
    ``best_rel_rmse`` / ``best_step``, ``n_params``, ``seconds`` and ``diagnosis`` (:func:`diagnose`, final
    weights). ``ckpt`` / ``ctx`` / ``progress`` as in :func:`experiments.synthetic.train.train_run`; a
    non-finite loss raises :class:`~experiments._ckpt.Diverged` with the run so far as its ``record``."""
    ctx = ctx or single(device)
    dev, task = ctx.device, cfg.task
    torch.manual_seed(cfg.seed)
    model = build(cfg.arch, cfg.width, task, seed=cfg.seed).to(dev)
    init_delays, init_taps = delays(model), tap_delays(model)
    opt = torch.optim.AdamW(dnn.param_groups(model, cfg.lr, weight_decay=0.0), lr=cfg.lr, weight_decay=0.0)
    tr = Trainer(model, opt, ctx, sched=tap_schedule(cfg.arch, model, cfg.steps), amp=cfg.amp)
    vx, vy = validation_set(task, cfg.val_size, dev)
    test = None if cfg.test_size is None else held_out_set(task, cfg.test_size, dev)
    st = {"step": 0, "curve": [], "best_rel_rmse": float("inf"), "best_step": 0, "losses": [], "seconds": 0.0}

    def batch(step):
        x, y = task.sample(cfg.batch, np.random.default_rng([cfg.seed, step]))
        return x, y, cfg.batch * task.L * task.n_out

    def evaluate_at(step, loss):
        if step % cfg.eval_every and step != cfg.steps:
            return None
        ev = evaluate(model, vx, vy)
        st["curve"].append({"step": step, "loss": loss, "val_rel_rmse": ev["rel_rmse"], "by_lag": ev["by_lag"]})
        if test is not None:                           # recorded, never read by a choice (tables.held_out)
            st["curve"][-1]["test_rel_rmse"] = evaluate(model, *test)["rel_rmse"]
        if ev["rel_rmse"] < st["best_rel_rmse"]:
            st["best_rel_rmse"], st["best_step"] = ev["rel_rmse"], step
        return {"loss": loss, "rel_rmse": ev["rel_rmse"]}

    def record(status):
        last = st["curve"][-1] if st["curve"] else {}
        return {"key": cfg.key(), "config": cfg.to_dict(), "status": status, "n_params": n_params(model),
                "curve": st["curve"], "rel_rmse": last.get("val_rel_rmse"), "by_lag": last.get("by_lag"),
                "best_rel_rmse": st["best_rel_rmse"] if st["curve"] else None, "best_step": st["best_step"],
                "seconds": st["seconds"]}

    out = fit(tr, st, cfg.steps, batch, _loss_sum, evaluate_at, record, cfg.key(), ckpt, progress)
    out["diagnosis"] = diagnose(model, vx, vy, task, init_delays, init_taps)
    return out


__all__ = ["TEST_SEED", "VAL_SEED", "RunConfig", "ablate", "delay_summary", "delays", "diagnose", "evaluate",
           "held_out_set", "kernel_shares", "response", "run_key", "train_run", "validation_set"]
