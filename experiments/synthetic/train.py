"""One training run on a synthetic task, plus the DS4D mechanism probes of the paper's Table 1.

AdamW at a constant learning rate without weight decay or gradient clipping; DS4D's and S4D's ``dt`` and
delay on their own rate (``dt_lr``, 1e-4 as in the paper) through :func:`nn.param_groups`; every other
parameter (all of a baseline's) on the base rate, which a sweep picks per model. An LSTM run's config
names its initialization (``"init"``, :class:`.models.TokenLSTM`; absent: PyTorch's default). Validation is
teacher-forced token accuracy on the target segment of a fixed validation set (the same for every model and seed),
also split by output position and, on variable-delay tasks, by lag bucket. Held-out protocol (a config with
``test_size``): every evaluation also scores a test set drawn from another generator seed
(:data:`TEST_SEED`), recorded beside the validation accuracy and never read by any choice made here or by
the report (the checkpoint and the learning rate are chosen on validation: :func:`.report.held_out`).
Training batch ``s`` is
drawn from a generator seeded by ``(seed, s)``: the step fixes the data, so checkpoints resume exactly
and every torchrun rank draws the same global batch (see :mod:`experiments._train`).

``ds4d-tap`` (DS4D with the delayed input tap) steps its :class:`experiments._models.TapSchedule` after
every optimizer step (by default half-width 64 down to 1 at 60% of the steps; saved in the checkpoints); its
mechanism probe runs at the best checkpoint's weights and tap width and adds the tap delays and the accuracy
without the tap.
"""
from __future__ import annotations

import copy
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ddesys import nn as dnn
from ddesys.nn.learned_clock import BinaryClock, HardGateClock, TimeCost
from ddesys.nn.optim import register_optim

from .._dist import single
from .._runs import config_key
from .._models import EXPLORE_RULES, FLIP_EXPLORE_P, TIME_COST, ModelSpec
from .._probes import ablate, ds4d_layers, tap_delays, tap_widths, tap_zero
from .._train import Trainer, fit
from .diagnosis import pad_pushes
from .models import LSTM_INITS, build, n_params
from .tasks import IGNORE, Task

VAL_SEED = 12345                # the validation set is the same for every model, seed and learning rate
TEST_SEED = 54321               # the held-out test set: other sequences, the same for every run; chooses nothing
CLOCK_PROBE = 32               # validation sequences whose learned clocks are recorded at each evaluation


def run_key(config):
    """Key of a run in a results file from its config dict (readable prefix + hash of the config)."""
    c = config
    return config_key(f"{c['task']['name']}|{c['family']}|H{c['width']}|lr{c['lr']:g}|seed{c['seed']}|"
                      f"steps{c['steps']}", c)


@dataclass
class RunConfig:
    """One run: ``task`` x ``model`` (a :class:`~experiments._models.ModelSpec`, stored as its label,
    ``"family"``) at ``width`` (hidden size ``H``) with ``n_layers`` blocks; ``amp`` in ``none | bf16``
    (autocast of the forward pass); ``init``: an LSTM's initialization (:class:`.models.TokenLSTM`; the
    command line gives every LSTM run its ``--lstm-init``, chrono by default); ``None``, the only value for
    other models, is PyTorch's default for an LSTM: the runs of results files written before the choice.
    ``time_cost``: the training prior of a clock learned under a time cost (``-tick``: binary gates per layer;
    ``-idclock``: one clock per token id), the keywords of :class:`nn.learned_clock.TimeCost` (``weight``,
    ``steps``, ``after``, and ``start`` when the cost starts late); default for those models
    :data:`~experiments._models.TIME_COST`, ``None`` (the only value) for other models. ``gate_lr``: the
    learning rate of a binary clock's gates once the time cost's first phase is over (after
    ``time_cost["steps"]`` steps; ``0``: frozen there; ``None``: the base ``lr`` throughout; binary clocks
    only). ``gate_detach``: ``True`` makes the binary clocks' gates read their input detached
    (:class:`nn.learned_clock.HardGateClock` ``input_grad=False``); ``None``: not (binary clocks only).
    ``gate_hidden``: the width of the binary clocks' gates' hidden layer (``HardGateClock(hidden=)``, a
    whole number > 0); ``None``: the linear gate (binary clocks only). ``clock_gain``: the ``gain`` of an
    ``-idclock`` model's :class:`nn.LearnedTokenClock` (> 0); ``None``: its default. ``clock_noise``: its
    ``noise`` (> 0); ``None``: none. ``flip_cost``: ``(cost, soft_cost)`` of a ``-flipclock`` model's
    :class:`nn.FlipTokenClock` (each >= 0); ``None``: its defaults. ``flip_tests``: its ``tests`` (flip
    tests per step, a whole number >= 1); ``None`` (and ``1``, stored as ``None``): one, the runs of results
    files written before the choice (the command line gives every ``-flipclock`` run the clock's default).
    ``flip_pause_below``: its ``pause_below`` (a ticking id pauses below it; a number <= 1, its hysteresis);
    ``None`` (and ``-1``, stored as ``None``): ``-1``, the runs of results files written before the choice
    (the command line gives every ``-flipclock`` run :data:`~experiments._models.FLIP_PAUSE_BELOW`).
    ``flip_explore``: its exploration rule by name (:data:`~experiments._models.EXPLORE_RULES`: ``"each"``,
    :class:`nn.ExploreEach`, or ``"rows"``, :class:`nn.ExploreRows`, at :data:`~experiments._models.FLIP_EXPLORE_P`);
    ``None`` (and ``"each"``, stored as ``None``): each row and id, the runs of results files written before
    the choice (the command line gives every ``-flipclock`` run :data:`~experiments._models.FLIP_EXPLORE`).
    ``flip_init_after_pause``: a ``-runclock`` model's ``init_after_pause`` (in ``(0, 1)``); ``None`` (and
    0.55, stored as ``None``): 0.55, the runs of results files written before the choice.
    ``flip_by_entry``: a ``-flipclock`` / ``-runclock`` model's ``by_entry`` (in ``(0, 1]``); ``None`` (and 0,
    stored as ``None``): 0, the runs of results files written before the choice.
    ``test_size``: sequences of the held-out test set (:data:`TEST_SEED`) scored at every evaluation;
    ``None``: none (the runs of results files written before the held-out protocol)."""
    task: Task
    model: ModelSpec
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
    amp: str = "none"
    init: str | None = None
    time_cost: dict | None = None
    gate_lr: float | None = None
    gate_detach: bool | None = None
    gate_hidden: int | None = None
    test_size: int | None = None
    clock_gain: float | None = None
    clock_noise: float | None = None
    flip_cost: tuple | None = None
    flip_tests: int | None = None
    flip_pause_below: float | None = None
    flip_explore: str | None = None
    flip_init_after_pause: float | None = None
    flip_by_entry: float | None = None

    def __post_init__(self):
        if self.init is not None and (self.model.layer != "lstm" or self.init not in LSTM_INITS):
            raise ValueError(f"init is an LSTM's, one of {LSTM_INITS} (got {self.init!r} on {self.model.label})")
        binary = self.model.clock == "binary"
        if self.time_cost is None and self.model.time_cost:
            self.time_cost = dict(TIME_COST)
        if self.time_cost is not None and (not self.model.time_cost or
                                           set(self.time_cost) - {"start"} != set(TIME_COST)):
            raise ValueError(f"time_cost is a learned clock's (-tick, -idclock), with the keys {sorted(TIME_COST)} "
                             f"and optionally 'start' (got {self.time_cost!r} on {self.model.label})")
        if self.gate_lr is not None and (not binary or not self.gate_lr >= 0):
            raise ValueError(f"gate_lr is a binary clock's gates' learning rate, >= 0 (got {self.gate_lr!r} on "
                             f"{self.model.label})")
        if self.gate_detach not in (None, True) or (self.gate_detach and not binary):
            raise ValueError(f"gate_detach is a binary clock's, True or None (got {self.gate_detach!r} on "
                             f"{self.model.label})")
        if self.gate_hidden is not None and (not binary or not (isinstance(self.gate_hidden, int)
                                                                and self.gate_hidden > 0)):
            raise ValueError(f"gate_hidden is a binary clock's gates' hidden width, a whole number > 0 (got "
                             f"{self.gate_hidden!r} on {self.model.label})")
        if self.clock_gain is not None and (self.model.clock != "token" or not self.clock_gain > 0):
            raise ValueError(f"clock_gain is an -idclock model's clock gain, > 0 (got {self.clock_gain!r} on "
                             f"{self.model.label})")
        if self.clock_noise is not None and (self.model.clock != "token" or not self.clock_noise > 0):
            raise ValueError(f"clock_noise is an -idclock model's clock noise, > 0 (got {self.clock_noise!r} on "
                             f"{self.model.label})")
        if self.flip_cost is not None:
            fc = tuple(self.flip_cost)
            if not self.model.flip_tested or len(fc) != 2 or not all(isinstance(c, (int, float)) and c >= 0
                                                                     for c in fc):
                raise ValueError(f"flip_cost is a -flipclock model's (cost, soft_cost), each >= 0 (got "
                                 f"{self.flip_cost!r} on {self.model.label})")
            self.flip_cost = tuple(float(c) for c in fc)
        if self.flip_tests is not None and (not self.model.flip_tested or isinstance(self.flip_tests, bool)
                                            or not (isinstance(self.flip_tests, int) and self.flip_tests >= 1)):
            raise ValueError(f"flip_tests is a -flipclock model's flip tests per step, a whole number >= 1 (got "
                             f"{self.flip_tests!r} on {self.model.label})")
        if self.flip_tests == 1:                     # one test: the runs of files written before the choice
            self.flip_tests = None
        pb = self.flip_pause_below
        if pb is not None and (not self.model.flip_tested or isinstance(pb, bool) or not isinstance(pb, (int, float))
                               or not (np.isfinite(pb) and pb <= 1.0)):
            raise ValueError(f"flip_pause_below is a -flipclock model's pause threshold, a finite number <= 1 (the "
                             f"hysteresis; got {pb!r} on {self.model.label})")
        if pb is not None:
            self.flip_pause_below = None if pb == -1.0 else float(pb)     # -1: the files written before
        if self.flip_explore is not None and (not self.model.flip_tested or self.flip_explore not in EXPLORE_RULES):
            raise ValueError(f"flip_explore is a -flipclock model's exploration rule, one of {sorted(EXPLORE_RULES)} "
                             f"(got {self.flip_explore!r} on {self.model.label})")
        if self.flip_explore == "each":              # each row and id: the runs of files written before
            self.flip_explore = None
        ia = self.flip_init_after_pause
        if ia is not None and (self.model.clock != "run" or isinstance(ia, bool) or not isinstance(ia, (int, float))
                               or not 0.0 < ia < 1.0):
            raise ValueError(f"flip_init_after_pause is a -runclock model's init_after_pause, in (0, 1) (got {ia!r} "
                             f"on {self.model.label})")
        if ia is not None:
            self.flip_init_after_pause = None if ia == 0.55 else float(ia)   # 0.55: the files written before
        be = self.flip_by_entry
        if be is not None and (not self.model.flip_tested or isinstance(be, bool) or not isinstance(be, (int, float))
                               or not 0.0 <= be <= 1.0):
            raise ValueError(f"flip_by_entry is a -flipclock model's by_entry, in [0, 1] (got {be!r} on "
                             f"{self.model.label})")
        if be is not None:
            self.flip_by_entry = None if be == 0 else float(be)            # 0: the files written before
        if self.test_size is not None and not (isinstance(self.test_size, int) and self.test_size > 0):
            raise ValueError(f"test_size is a count of test sequences > 0, or None (got {self.test_size!r})")

    def key(self):
        """Identity of the run in a results file: equal keys exactly for equal configurations."""
        return run_key(self.to_dict())

    def to_dict(self):
        d = asdict(self)
        d["task"] = self.task.to_dict()
        d = {("family" if k == "model" else k): self.model.label if k == "model" else v for k, v in d.items()}
        if d["amp"] == "none":                       # as in files written before mixed precision
            del d["amp"]
        if d["init"] is None:                        # as in files written before the LSTM's init was chosen
            del d["init"]
        if d["time_cost"] is None:                   # only a binary clock has one
            del d["time_cost"]
        if d["gate_lr"] is None:                     # as in files written before the gates had their own rate
            del d["gate_lr"]
        if d["gate_detach"] is None:                 # as in files written before the choice
            del d["gate_detach"]
        if d["gate_hidden"] is None:                 # the linear gate, as in files written before the choice
            del d["gate_hidden"]
        if d["test_size"] is None:                   # as in files written before the held-out test set
            del d["test_size"]
        for k in ("clock_gain", "clock_noise", "flip_cost", "flip_tests", "flip_pause_below", "flip_explore",
                  "flip_init_after_pause", "flip_by_entry"):
            if d[k] is None:
                del d[k]
        if "flip_cost" in d:
            d["flip_cost"] = list(d["flip_cost"])
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


@torch.no_grad()
def evaluate(model, tokens, labels, lags, task, chunk=128):
    """Validation accuracy with its breakdown: ``{"acc", "by_position", "by_lag"}``. ``by_position[i]``:
    accuracy of output ``i`` (0..T-1); ``by_lag`` (variable protocol only): accuracy of the sequences
    with a short lag (``P <= (P_min + P_max) / 2``) and a long one, with their lag bounds and counts.
    ``acc`` equals :func:`accuracy`."""
    was = model.training
    model.eval()
    T = task.T
    hits = []
    for s in range(0, tokens.shape[0], chunk):
        x, y, p = tokens[s:s + chunk], labels[s:s + chunk], lags[s:s + chunk]
        pos = (T + task.gap + p)[:, None] + torch.arange(T, device=x.device)   # (b, T) supervised positions
        pred = model(x).argmax(-1)                                          # (b, L)
        hits.append((pred.gather(1, pos) == y.gather(1, pos)).cpu())       # (b, T)
    model.train(was)
    hits = torch.cat(hits)                                                  # (n, T)
    n = hits.shape[0]
    out = {"acc": int(hits.sum()) / hits.numel(),
           "by_position": [int(v) / n for v in hits.sum(0).tolist()]}
    if task.protocol == "variable":
        mid = (task.P_min + task.P_max) // 2
        short = lags.cpu() <= mid
        parts = [hits[short], hits[~short]]
        out["by_lag"] = {"bounds": [[task.P_min, mid], [mid + 1, task.P_max]], "n": [len(h) for h in parts],
                         "acc": [int(h.sum()) / h.numel() if h.numel() else None for h in parts]}
    return out


@torch.no_grad()
def delay_state(model):
    """Per DS4D layer: channel delays ``s`` ``(H,)`` (steps) and delayed-branch coefficients ``mu``
    ``(H, N2)``, float64 on the CPU."""
    out = []
    for layer in ds4d_layers(model):
        lam, mu, bbar, c, k, alpha, s = layer.discrete(torch.float64)
        out.append((s.cpu(), mu.cpu()))
    return out


def mechanism(model, init_state, tokens, labels, init_taps=()):
    """The paper's Table 1 for one DS4D checkpoint: mean channel delay, mean ``|delta tau|`` and
    ``|delta mu|`` from initialization, and validation accuracy under each ablation. With ``init_taps``
    (:func:`experiments._probes.tap_delays` at initialization; ``ds4d-tap``): also the mean tap delay, its
    mean change ``|delta s_tap|``, the tap's window half-width (mean over layers) and the accuracy with
    every tap gain set to zero (``acc_tap_zero``)."""
    now = delay_state(model)
    s = torch.cat([a for a, _ in now])
    dtau = torch.cat([(a - b).abs() for (a, _), (b, _) in zip(now, init_state)])
    dmu = torch.cat([(a - b).abs().flatten() for (_, a), (_, b) in zip(now, init_state)])
    out = {"mean_delay": float(s.mean()), "mean_abs_dtau": float(dtau.mean()), "mean_abs_dmu": float(dmu.mean()),
           "acc": accuracy(model, tokens, labels)}
    for kind in ("tau_min", "mu_zero"):
        with ablate(model, kind):
            out[f"acc_{kind}"] = accuracy(model, tokens, labels)
    if init_taps:
        taps = tap_delays(model)
        out.update(mean_tap_delay=float(torch.cat(taps).mean()),
                   mean_abs_dtap=float(torch.cat([(a - b).abs() for a, b in zip(taps, init_taps)]).mean()),
                   tap_width=float(np.mean(tap_widths(model))))
        with tap_zero(model):
            out["acc_tap_zero"] = accuracy(model, tokens, labels)
    return out


@torch.no_grad()
def clock_stats(model, tokens, pads=(0,)):
    """Per gated layer of a clocked model (``-gate``, ``-tick``): the mean learned clock at the padding tokens
    (ids ``pads``) and at the other tokens of ``tokens`` ``(B, L)``; for a clock learned per token id
    (``-idclock``) its ticks, one entry per layer (every layer runs in them); ``[]`` for other models."""
    pad = torch.isin(tokens, torch.as_tensor(pads, device=tokens.device))
    shared = getattr(model, "clock", None)
    if callable(getattr(shared, "pauses", None)):                # learned per token id (-idclock, -flipclock)
        c = shared.ticks(tokens).double()                                            # (B, L)
        return [{"pad": float(c[pad].mean()), "tokens": float(c[~pad].mean())} for _ in model.blocks]
    blocks = [b for b in getattr(model, "blocks", ()) if getattr(b.layer, "gate", None) is not None]
    if not blocks:
        return []
    out, h = [], model.encoder(tokens)
    for blk in model.blocks:
        if getattr(blk.layer, "gate", None) is not None:
            c = blk.layer.gate(blk.norm(h) if blk.prenorm else h)                   # (B, L)
            out.append({"pad": float(c[pad].mean()), "tokens": float(c[~pad].mean())})
        h = blk(h)
    return out


def _loss_sum(logits, labels):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=IGNORE,
                           reduction="sum")


def loss_with(cost, now, flip=None, tally=None):
    """The summed loss, plus a binary clock's time cost (``cost``: :class:`nn.learned_clock.TimeCost` or
    ``None``) per supervised token at the step ``now()``; or plus a :class:`nn.FlipTokenClock`'s loss,
    ``flip = (model, clock, tokens)`` with ``tokens()`` the step's batch (one process: the slice is the
    batch). ``tally`` (a dict, optional) gathers the flip tests: per tested entry ``[tests, summed delta,
    tests with delta < 0]``."""
    if flip is not None:
        model, clock, tokens = flip

        def rows(logits, labels):                      # per row: the summed loss and the supervised count
            ce = F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=IGNORE, reduction="none")
            return ce.sum(1), (labels != IGNORE).sum(1)

        def flip_sum(logits, labels):
            n = int((labels != IGNORE).sum())
            x = tokens()
            out = _loss_sum(logits, labels) + n * clock.loss(x, lambda: rows(model(x), labels))
            if tally is not None:
                for t in clock.last_tests:
                    c = tally.setdefault(t["id"], [0, 0.0, 0])
                    c[0], c[1], c[2] = c[0] + 1, c[1] + t["delta"], c[2] + (t["delta"] < 0)
            return out
        return flip_sum
    if cost is None:
        return _loss_sum

    def loss_sum(logits, labels):
        return _loss_sum(logits, labels) + cost(now()) * int((labels != IGNORE).sum())
    return loss_sum


def _group_of(opt, params):
    """The parameter group of ``opt`` that holds exactly ``params``."""
    ids = {id(p) for p in params}
    for g in opt.param_groups:
        if {id(p) for p in g["params"]} == ids:
            return g
    raise RuntimeError("the gates share a parameter group with other parameters")


def train_run(cfg: RunConfig, device="cpu", progress=None, ckpt=None, ctx=None):
    """Train one model; returns a JSON-ready dict: config, ``status`` (``done``), ``curve`` (step, train
    loss, val accuracy; ``clock``, a learned clock's :func:`clock_stats` on the first ``CLOCK_PROBE`` validation
    sequences; ``test_acc`` under the held-out protocol; ``pads``, :func:`.diagnosis.pad_pushes`, on a task
    whose padding has several ids or noise; ``flip``, a flip-tested clock's logits, pauses and per entry
    its flip tests since the previous evaluation), ``best_acc`` / ``best_step`` (validation),
    ``by_position`` / ``by_lag`` at the best evaluation,
    ``n_params``, ``seconds`` and, for DS4D, ``mechanism`` at the best checkpoint.

    ``progress``: a callable ``(step, loss=, acc=)``. ``ckpt``: a
    :class:`~experiments._ckpt.RunCheckpoint` (resume from it, save to it every ``every`` steps and on a
    stop request: :class:`~experiments._ckpt.Interrupted`). ``ctx``: a :class:`~experiments._dist.Ctx`
    (torchrun), else one process on ``device``. A non-finite loss raises
    :class:`~experiments._ckpt.Diverged` (a ``FloatingPointError`` naming the step) whose ``record`` is
    the run so far with ``"status": "diverged"``."""
    ctx = ctx or single(device)
    dev, task = ctx.device, cfg.task
    torch.manual_seed(cfg.seed)
    clock = None if cfg.gate_hidden is None else BinaryClock(seed=cfg.seed, hidden=cfg.gate_hidden)
    own = {k: v for k, v in (("gain", cfg.clock_gain), ("noise", cfg.clock_noise)) if v is not None}
    if own:
        clock = dnn.LearnedTokenClock(task.vocab, **own)
    if cfg.model.flip_tested:                                     # one test per step: files written before
        cost_kw = {} if cfg.flip_cost is None else {"cost": cfg.flip_cost[0], "soft_cost": cfg.flip_cost[1]}
        if cfg.flip_init_after_pause is not None:
            cost_kw["init_after_pause"] = cfg.flip_init_after_pause
        if cfg.flip_by_entry is not None:
            cost_kw["by_entry"] = cfg.flip_by_entry
        pause = -1.0 if cfg.flip_pause_below is None else cfg.flip_pause_below
        rule = getattr(dnn, EXPLORE_RULES[cfg.flip_explore or "each"])
        clock = cfg.model.flip_clock(task.vocab, tests=cfg.flip_tests or 1, hysteresis=1.0, pause_below=pause,
                                     explore=rule(FLIP_EXPLORE_P), **cost_kw)
    model = build(cfg.model, task.vocab, cfg.width, cfg.n_layers, task.length, cfg.d_state, cfg.dt_lr,
                  seed=cfg.seed, ticks=task.ticks, lstm_init=cfg.init or "torch", pad=task.pad_ids,
                  clock=clock).to(dev)
    init_state, init_taps = delay_state(model), tap_delays(model)
    for gate in (m for m in model.modules() if isinstance(m, HardGateClock)):
        gate.input_grad = not cfg.gate_detach
    gates = [m for m in model.modules() if isinstance(m, HardGateClock)] if cfg.gate_lr is not None else []
    for gate in gates:                                            # the gates' own group (nn.param_groups)
        for name, _ in gate.named_parameters():
            register_optim(gate, name, {"lr": cfg.lr, "weight_decay": 0.0})
    opt = torch.optim.AdamW(dnn.param_groups(model, cfg.lr, weight_decay=0.0), lr=cfg.lr, weight_decay=0.0)
    gate_group = _group_of(opt, [p for g in gates for p in g.parameters()]) if gates else None
    tap = cfg.model.tap
    sched = tap.schedule(model, cfg.steps) if tap is not None else None   # the tap's window, w0 -> 1 at frac
    tr = Trainer(model, opt, ctx, sched=sched, amp=cfg.amp)
    vt, vl, vp = (torch.from_numpy(a).to(dev) for a in task.sample(cfg.val_size, np.random.default_rng(VAL_SEED)))
    test = None if cfg.test_size is None else \
        tuple(torch.from_numpy(a).to(dev) for a in task.sample(cfg.test_size, np.random.default_rng(TEST_SEED)))
    st = {"step": 0, "curve": [], "best_acc": -1.0, "best_step": 0, "best_detail": {}, "losses": [], "seconds": 0.0}
    keep = {"best_state": None, "now": 0}
    cost = TimeCost(model, **cfg.time_cost) if cfg.time_cost else None      # a binary clock's prior
    clocked = bool(clock_stats(model, vt[:1]))
    flip = None
    if cfg.model.flip_tested:                                     # its flip tests run on the step's batch
        if ctx.world > 1:
            raise ValueError(f"{cfg.model.label} trains its clock in one process (its flip tests draw ids per "
                             "process); run it without torchrun")
        flip = (model, model.clock, lambda: torch.from_numpy(keep["x"]).to(dev))
    tally = {}                                                    # the flip tests since the last evaluation
    loss_sum = loss_with(cost, lambda: keep["now"], flip, tally)

    def batch(step):
        keep["now"] = step
        if gate_group is not None:                                # the gates settle after the cost's phase
            gate_group["lr"] = cfg.lr if step <= cfg.time_cost.get("start", 0) + cfg.time_cost["steps"] else cfg.gate_lr
        x, y, _ = task.sample(cfg.batch, np.random.default_rng([cfg.seed, step]))
        keep["x"] = x
        return x, y, int((y != IGNORE).sum())

    def evaluate_at(step, loss):
        if step % cfg.eval_every and step != cfg.steps:
            return None
        det = evaluate(model, vt, vl, vp, task)
        st["curve"].append({"step": step, "loss": loss, "val_acc": det["acc"]})
        if test is not None:                           # recorded, never read by a choice (report.held_out)
            st["curve"][-1]["test_acc"] = accuracy(model, test[0], test[1])
        if clocked:                                    # the learned clocks at every evaluation (a gate flip)
            st["curve"][-1]["clock"] = clock_stats(model, vt[:CLOCK_PROBE], task.pad_ids)
            if flip is not None:                       # each padding id's logit, the lowest data logit
                z = model.clock.logits().tolist()[:task.vocab]          # after a tick (a run clock: also after a pause)
                st["curve"][-1]["flip"] = {"pad_logits": [round(z[i], 3) for i in task.pad_ids],
                                           "data_logit": round(min(v for i, v in enumerate(z)
                                                                   if i not in task.pad_ids), 3),
                                           "pauses": model.clock.pauses()}
                if cfg.model.clock == "run":
                    st["curve"][-1]["flip"]["pauses_after_pause"] = model.clock.pauses(after_pause=True)
                # every entry's logit, and per entry tested since the last evaluation (in this process):
                # [tests, mean delta, tests that pushed it towards a pause]
                st["curve"][-1]["flip"]["logits"] = [round(v, 3) for v in model.clock.logits().tolist()]
                st["curve"][-1]["flip"]["tests"] = {str(e): [c[0], round(c[1] / c[0], 6), c[2]]
                                                    for e, c in sorted(tally.items())}
                tally.clear()
            elif task.pads > 1 or task.noise:          # each padding id's pushes (.diagnosis)
                st["curve"][-1]["pads"] = pad_pushes(model, vt[:CLOCK_PROBE], vl[:CLOCK_PROBE], task.pad_ids,
                                                     cost.weight_at(step) if cost is not None else 0.0)
        if det["acc"] > st["best_acc"]:
            st.update(best_acc=det.pop("acc"), best_step=step, best_detail=det)
            if init_state:
                keep["best_state"] = copy.deepcopy(model.state_dict())   # with the tap's window width
        return {"loss": loss, "acc": st["curve"][-1]["val_acc"]}

    def record(status):
        return {"key": cfg.key(), "config": cfg.to_dict(), "status": status, "n_params": n_params(model),
                "curve": st["curve"], "best_acc": st["best_acc"], "best_step": st["best_step"],
                "seconds": st["seconds"], **st["best_detail"]}

    out = fit(tr, st, cfg.steps, batch, loss_sum, evaluate_at, record, cfg.key(), ckpt, progress,
              extra=(lambda: {"best_state": keep["best_state"]},
                     lambda saved: keep.update(best_state=saved["best_state"])))
    if clock_stats(model, vt[:8]):
        out["clock"] = clock_stats(model, vt, task.pad_ids)        # the learned clocks at the end
    if init_taps:
        out["tap_schedule"] = {"w0": tap.w0, "frac": tap.frac, "final_width": tap_widths(model)}
    if init_state:
        model.load_state_dict(keep["best_state"])                  # the tap's width comes back with it
        out["mechanism"] = mechanism(model, init_state, vt, vl, init_taps)
    return out


__all__ = ["RunConfig", "ablate", "accuracy", "clock_stats", "evaluate", "mechanism", "run_key", "train_run"]
