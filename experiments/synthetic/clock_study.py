"""Why the learned clock does not learn to pause on variable-delay copy, and learned clocks that do.

    python -m ddesys.experiments.synthetic.clock_study --quick                 # pipeline check, ~1 min
    python -m ddesys.experiments.synthetic.clock_study --out docs/experiments/learned-clock-cpu

1. **Diagnosis** (``--diag-steps``): the soft clock (``ds4d-gate``, :class:`nn.selective.GateClock` at
   ``c = 0.9``) trained on variable-delay copy; at initialization and at steps along the way, on a fixed
   batch, the loss's gradient with respect to every clock value ``dL/dc_t`` per layer, averaged over the
   lag's padding, the data and the answer segment, and split by path (:func:`ddesys.selective.soft_scan_grad`
   ``parts=True``, recomputed in float64 from the layer's input and output gradient): the step's own input
   write ``c_t bbar x_t``, its other factors (the decay ``lam^{c_t}`` and the delayed write ``c_t mu H``),
   and the internal time (the shift of every later delayed read). ``dL/dc < 0``: descent raises the clock.
2. **Candidates** (:data:`CANDIDATES`), none told which token is padding, all on the study's width.
   Each is trained by the synthetic loop (:class:`experiments._train.Trainer` and ``fit``, the task's own
   sampler, :func:`experiments.synthetic.train.evaluate` on the same validation set). A soft clock is also
   scored *hardened* (``c > 1/2`` as the binary clock, :class:`nn.learned_clock.HardClocked`): the exact
   system with O(1) decoding that it stands for.

Writes ``results.json``, ``table.md`` and ``clocks.png`` (learned clocks against the padding) to ``--out``.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ddesys import nn as dnn
from ddesys.nn.learned_clock import BinaryClock, HardClocked, HardGateClock, TimeCost
from ddesys.nn.selective import SoftClock
from ddesys.selective import soft_scan, soft_scan_grad

from .._dist import single
from .._models import ModelSpec
from .._train import Trainer, fit
from .models import build, n_params
from .tasks import IGNORE, preset
from .train import VAL_SEED, evaluate, loss_with

PROG = "python -m ddesys.experiments.synthetic.clock_study"
SEGMENTS = ("data", "lag", "answer")            # positions [0, T), [T, T + P), [T + P, 2 T + P)
PARTS = ("total", "write", "decay_delay", "time")


@dataclass(frozen=True)
class Candidate:
    """A learned clock and how it is trained. ``gate``: ``soft`` (:class:`GateClock`), ``hard``
    (:class:`HardGateClock`, straight-through) or ``given`` (the reference: pauses at padding, told);
    ``init``: the initial clock; ``cost``: weight of the mean clock added to the loss (time costs);
    ``curriculum``: fraction of the steps over which the lag range grows from its centre to the full range;
    ``cost_steps``: the time cost is on for the first ``cost_steps`` optimizer steps only (0: always), a
    prior that finds the pauses and is then switched off (or down to ``cost_after``) so that it does not
    go on pausing data tokens;
    ``layer``: the clocked layer, ``"ds4d"`` or ``"s4d"``; ``tick_horizon``: DS4D's delays spread over the
    task's content length ``2T`` (a scale hyperparameter, as ``l_max`` is: no position is named) instead of
    its context length."""
    gate: str = "soft"
    init: float = 0.9
    cost: float = 0.0
    curriculum: float = 0.0
    temperature: float = 1.0
    tick_horizon: bool = False
    cost_steps: int = 0
    cost_after: float = 0.0
    layer: str = "ds4d"


CANDIDATES = {
    "given": Candidate(gate="given"),
    "soft": Candidate(),
    "soft-init0.1": Candidate(init=0.1),
    "soft-cost": Candidate(cost=0.3),
    "soft-curriculum": Candidate(curriculum=0.5),
    "hard-cost": Candidate(gate="hard", init=0.9, cost=0.3),
    "hard-cost-ticks": Candidate(gate="hard", init=0.9, cost=0.3, tick_horizon=True),
    "hard-warm": Candidate(gate="hard", init=0.9, cost=0.3, cost_steps=100, tick_horizon=True),
    "hard-warm-s4d": Candidate(gate="hard", init=0.9, cost=0.3, cost_steps=100, layer="s4d"),
    "hard-floor": Candidate(gate="hard", init=0.9, cost=0.3, cost_steps=100, cost_after=0.03, tick_horizon=True),
}


# ---------------------------------------------------------------------------------------------- models
def make_model(cand, task, width, d_state, seed):
    """The study's token model (2 blocks) for ``cand``: its clock a part (:class:`nn.selective.SoftClock` or
    :class:`nn.learned_clock.BinaryClock`) configured by the candidate."""
    torch.manual_seed(seed)
    if cand.gate == "given":
        return build(ModelSpec.from_label("ds4d-clock"), task.vocab, width, 2, task.length, d_state, seed=seed,
                     ticks=task.ticks)
    horizon = task.ticks if cand.tick_horizon else task.length              # DS4D's delay range
    clock = BinaryClock(cand.init, cand.temperature, seed=seed) if cand.gate == "hard" else \
        SoftClock(cand.init, seed=seed)
    return build(ModelSpec(cand.layer), task.vocab, width, 2, horizon, d_state, seed=seed, clock=clock)


def gated(model):
    return [blk.layer for blk in model.blocks if getattr(blk.layer, "gate", None) is not None]


def hardened(model):
    """A copy of a soft-clocked model whose clocks are ``c > 1/2`` (binary, exact, O(1) decoding)."""
    out = copy.deepcopy(model)
    for blk in out.blocks:
        blk.layer = HardClocked(blk.layer.inner, HardGateClock.from_soft(blk.layer.gate))
    return out


def masks(task, lags, L):
    """Bool ``(B, L)`` per segment of :data:`SEGMENTS` for sequences with lags ``lags`` ``(B,)``."""
    t = torch.arange(L)[None]
    p = torch.as_tensor(lags)[:, None]
    T = task.T
    return {"data": (t < T).expand(p.shape[0], L), "lag": (t >= T) & (t < T + p),
            "answer": (t >= T + p) & (t < 2 * T + p)}


@torch.no_grad()
def clock_values(model, tokens):
    """Per gated layer its clock ``(B, L)`` on ``tokens`` (the layer's own input, as in training)."""
    out, h = [], model.encoder(tokens)
    for blk in model.blocks:
        if getattr(blk.layer, "gate", None) is not None:
            out.append(blk.layer.gate(blk.norm(h) if blk.prenorm else h).float())
        h = blk(h)
    return out


def clock_means(model, tokens, lags, task):
    seg = masks(task, lags.cpu(), tokens.shape[1])
    return [{k: float(c[m].mean()) for k, m in seg.items()} for c in clock_values(model, tokens)]


# ---------------------------------------------------------------------------------------------- diagnosis
def clock_gradients(model, tokens, labels, lags, task):
    """``dL/dc_t`` per gated (soft) layer, mean over each segment and split by path (module docstring);
    ``check``: the largest relative gap between the float64 recomputation and autograd's ``dL/dc``."""
    rec = [{} for _ in gated(model)]
    hooks = []
    for i, layer in enumerate(gated(model)):
        def on_layer(mod, inp, out, i=i):
            rec[i]["z"] = inp[0].detach()
            out.register_hook(lambda g, i=i: rec[i].__setitem__("gy", g.detach()))
        def on_gate(mod, inp, out, i=i):
            out.register_hook(lambda g, i=i: rec[i].__setitem__("gc", g.detach()))
        hooks += [layer.register_forward_hook(on_layer), layer.gate.register_forward_hook(on_gate)]
    try:
        model.zero_grad(set_to_none=True)
        logits = model(tokens)
        F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=IGNORE).backward()
    finally:
        for h in hooks:
            h.remove()
        model.zero_grad(set_to_none=True)
    seg = masks(task, lags.cpu(), tokens.shape[1])
    out = []
    for layer, r in zip(gated(model), rec):
        with torch.no_grad():
            lam, mu, bbar, cout, s = layer.inner.delay_form(torch.float64)
            x = r["z"].double().transpose(1, 2).numpy()                         # (B, H, L)
            c = layer.gate(r["z"]).double().numpy()                             # (B, L)
        args = [torch.log(lam).numpy(), mu.numpy(), bbar.numpy(), cout.numpy(), s.double().numpy(), x, c]
        _, fwd = soft_scan(*args)
        *_, g_x, g_c, g_step, g_time = soft_scan_grad(*args, fwd, r["gy"].double().transpose(1, 2).numpy(),
                                                      parts=True)
        write = (g_x * x).sum(1) / c                                            # d/dc_t of c_t bbar x_t
        parts = {"total": g_c, "write": write, "decay_delay": g_step - write, "time": g_time}
        auto = r["gc"].double().numpy()
        row = {p: {k: float(torch.from_numpy(np.ascontiguousarray(v))[m].mean()) for k, m in seg.items()}
               for p, v in parts.items()}
        row["check"] = float(np.abs(auto - g_c).max() / max(np.abs(auto).max(), 1e-30))
        out.append(row)
    return out


# ---------------------------------------------------------------------------------------------- training
class _Reached(Exception):
    """A run reached ``--stop-at``: it ends there (its record says at which step)."""

    def __init__(self, step):
        super().__init__(step)
        self.step = step


def train(cand, task, args, seed, probe_at=(), probe_n=64):
    """Train one candidate; returns its record (curve, best accuracy, clocks, probes)."""
    model = make_model(cand, task, args.width, args.d_state, seed)
    opt = torch.optim.AdamW(dnn.param_groups(model, args.lr, weight_decay=0.0), lr=args.lr, weight_decay=0.0)
    tr = Trainer(model, opt, single("cpu"))
    vt, vl, vp = (torch.from_numpy(a) for a in task.sample(args.val_size, np.random.default_rng(VAL_SEED)))
    soft = cand.gate == "soft"
    st = {"step": 0, "step_now": 0, "curve": [], "best_acc": -1.0, "best_step": 0, "losses": [], "seconds": 0.0,
          "probes": []}

    def stage(step):
        if not cand.curriculum:
            return task
        m, r = (task.P_min + task.P_max) / 2, (task.P_max - task.P_min) / 2
        r *= min(1.0, step / (cand.curriculum * args.steps))
        return dataclasses.replace(task, P_min=int(round(m - r)), P_max=int(round(m + r)))

    def batch(step):
        st["step_now"] = step
        x, y, _ = stage(step).sample(args.batch, np.random.default_rng([seed, step]))
        return x, y, int((y != IGNORE).sum())

    cost = TimeCost(model, cand.cost, cand.cost_steps, cand.cost_after) if cand.cost else None    # time costs
    loss_sum = loss_with(cost, lambda: st["step_now"])

    def probe(step):
        if soft and step in probe_at:
            st["probes"].append({"step": step, "layers": clock_gradients(model, vt[:probe_n], vl[:probe_n],
                                                                         vp[:probe_n], task),
                                 "clock": clock_means(model, vt[:probe_n], vp[:probe_n], task)})

    def evaluate_at(step, loss):
        probe(step)
        if step % args.eval_every and step != args.steps:
            return None
        det = evaluate(model, vt, vl, vp, task)
        point = {"step": step, "loss": loss, "val_acc": det["acc"], "by_lag": det.get("by_lag", {}).get("acc")}
        if soft:
            point["hard_acc"] = evaluate(hardened(model), vt, vl, vp, task)["acc"]
        if gated(model):
            point["clock"] = clock_means(model, vt[:64], vp[:64], task)
        st["curve"].append(point)
        best = max(det["acc"], point.get("hard_acc", 0.0))
        if best > st["best_acc"]:
            st.update(best_acc=best, best_step=step)
        if args.stop_at and best >= args.stop_at:
            raise _Reached(step)
        print(f"  {step:4d} loss {loss:.3f} acc {det['acc']:.3f}" +
              (f" hard {point['hard_acc']:.3f}" if soft else "") +
              "".join(f" | c lag {c['lag']:.3f} data {c['data']:.3f}" for c in point.get("clock", [])), flush=True)
        return {"loss": loss, "acc": det["acc"]}

    def record(status):
        return {"status": status, "seed": seed, "n_params": n_params(model), **{k: st[k] for k in
                ("curve", "best_acc", "best_step", "seconds", "probes")}}

    probe(0)
    try:
        out = fit(tr, st, args.steps, batch, loss_sum, evaluate_at, record, f"{cand}|{seed}")
    except _Reached as done:
        out = {**record("done"), "stopped_step": done.step}
    if gated(model):
        out["final_clocks"] = [c[:2].tolist() for c in clock_values(model, vt[:2])]   # for the plots
        out["final_lags"] = vp[:2].tolist()
    return out


def steps_to(curve, level, key="val_acc"):
    return next((p["step"] for p in curve if max(p[key], p.get("hard_acc", 0.0)) >= level), None)


# ---------------------------------------------------------------------------------------------- outputs
def table(results):
    """The notes-ready table of the candidates (mean +- std over seeds)."""
    rows = ["| candidate | seeds | best accuracy | steps to 90% | final clock lag / data (layer 1; layer 2) "
            "| s per step |", "|---|---|---|---|---|---|"]
    for name, runs in results["candidates"].items():
        done = [r for r in runs if r["status"] == "done"]
        if not done:
            rows.append(f"| {name} | {len(runs)} | diverged | | | |")
            continue
        acc = np.array([r["best_acc"] for r in done])
        hit = [steps_to(r["curve"], 0.9) for r in done]
        hit = "not reached" if None in hit else f"{np.mean(hit):.0f} +- {np.std(hit):.0f}"
        last = done[0]["curve"][-1].get("clock", [])
        clk = "; ".join(f"{c['lag']:.2f} / {c['data']:.2f}" for c in last) or "(given: 0 / 1)"
        sec = np.mean([r["seconds"] / max(r["curve"][-1]["step"], 1) for r in done])
        rows.append(f"| {name} | {len(done)} | {acc.mean():.3f} +- {acc.std():.3f} | {hit} | {clk} | {sec:.2f} |")
    return "\n".join(rows)


def diag_table(diag):
    """dL/dc per layer, segment and path, at each probed step (mean per position, x 1e-4)."""
    rows = ["| step | layer | path | data | lag padding | answer |", "|---|---|---|---|---|---|"]
    for p in diag["probes"]:
        for li, layer in enumerate(p["layers"]):
            for part in PARTS:
                v = layer[part]
                rows.append(f"| {p['step']} | {li + 1} | {part} | " + " | ".join(f"{1e4 * v[k]:+.3f}" for k in SEGMENTS)
                            + " |")
    return "\n".join(rows)


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = [n for n, runs in results["candidates"].items() if runs and "final_clocks" in runs[0]]
    if not names:
        return
    T = results["task"]["T"]
    fig, axes = plt.subplots(len(names), 1, figsize=(9, 1.9 * len(names)), squeeze=False)
    for ax, name in zip(axes[:, 0], names):
        run = results["candidates"][name][0]
        P = run["final_lags"][0]
        ax.axvspan(T, T + P, color="0.88", label="lag padding")
        for li, c in enumerate(run["final_clocks"]):
            ax.plot(c[0], lw=1, label=f"layer {li + 1}")
        ax.set_ylim(-0.05, 1.05)
        ax.set_ylabel("clock")
        ax.set_title(f"{name}: best accuracy {run['best_acc']:.3f} (seed {run['seed']})", fontsize=9)
    axes[0, 0].legend(fontsize=7, loc="lower right")
    axes[-1, 0].set_xlabel("position t (validation sequence 0)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def save(results, out):
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    text = ["# Learned clock study", "", f"Command: `{results['command']}`", "", table(results)]
    if results.get("diagnosis"):
        text += ["", "dL/dc per position (x 1e-4; < 0: descent raises the clock)", "",
                 diag_table(results["diagnosis"])]
    (out / "table.md").write_text("\n".join(text) + "\n")
    plot(results, out / "clocks.png")


def _parse(argv):
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a pipeline check: the smoke task, tiny widths, few steps")
    ap.add_argument("--candidates", nargs="+", choices=tuple(CANDIDATES), help="default: every candidate")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--diag-steps", type=int, default=300, help="training steps of the diagnosis (0: none)")
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--d-state", type=int, default=16)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--stop-at", type=float, default=None,
                    help="end a run once its validation accuracy reaches this level (its record says when)")
    ap.add_argument("--threads", type=int, default=None, help="torch / Numba threads of this process")
    ap.add_argument("--val-size", type=int, default=256)
    ap.add_argument("--out", type=Path, default=Path("clock_study_out"))
    args = ap.parse_args(argv)
    if args.threads is not None and args.threads < 1:
        ap.error(f"--threads must be >= 1, got {args.threads}")
    if args.stop_at is not None and not 0.0 < args.stop_at <= 1.0:
        ap.error(f"--stop-at is an accuracy in (0, 1], got {args.stop_at}")
    if args.quick:
        args.steps, args.diag_steps, args.width, args.d_state = 6, 4, 8, 4
        args.batch, args.eval_every, args.val_size = 4, 3, 16
    return args


def main(argv=None):
    args = _parse(argv)
    if args.threads:
        torch.set_num_threads(args.threads)                   # a program's own choice (Numba follows torch)
    task = preset("copy", "variable", "smoke" if args.quick else "cpu")
    out = args.out
    path = out / "results.json"
    results = json.loads(path.read_text()) if path.exists() else {}      # reruns add candidates and seeds
    results.update(command=" ".join([PROG] + list(argv if argv is not None else sys.argv[1:])),
                   task=task.to_dict(), width=args.width, d_state=args.d_state, batch=args.batch, lr=args.lr,
                   steps=args.steps)
    results.setdefault("candidates", {})
    if args.diag_steps and "diagnosis" not in results:
        print(f"diagnosis: the soft clock, {args.diag_steps} steps", flush=True)
        probe_at = sorted({0, *[s for s in (10, 25, 50, 100, 150, 200, 300, 400) if s <= args.diag_steps],
                           args.diag_steps})
        t0 = time.perf_counter()
        diag = train(CANDIDATES["soft"], task, argparse.Namespace(**{**vars(args), "steps": args.diag_steps}), 0,
                     probe_at=probe_at)
        diag["wall_s"] = time.perf_counter() - t0
        results["diagnosis"] = diag
        save(results, out)
    for name in args.candidates or tuple(CANDIDATES):
        runs = results["candidates"].setdefault(name, [])
        for seed in args.seeds:
            if any(r["seed"] == seed and r.get("steps") == args.steps for r in runs):
                continue
            print(f"{name}, seed {seed}: {CANDIDATES[name]}", flush=True)
            rec = train(CANDIDATES[name], task, args, seed)
            rec.update(steps=args.steps, candidate=dataclasses.asdict(CANDIDATES[name]))
            runs[:] = [r for r in runs if r["seed"] != seed] + [rec]
            save(results, out)
    save(results, out)
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
