"""The paper's synthetic experiments (section 5.1, appendix C): six delay tasks, DS4D against baselines
at matched parameter counts.

    python -m ddesys.experiments.synthetic --scale smoke         # about half a minute: checks the pipeline
    python -m ddesys.experiments.synthetic --tasks copy          # CPU scale: copy, 3 models x 3 seeds, ~2 h on 2 cores
    python -m ddesys.experiments.synthetic --models lstm gpt2 llama          # the other baselines at CPU scale
    python -m ddesys.experiments.synthetic --scale control       # every baseline learns a lag of 16 (~1 h)
    python -m ddesys.experiments.synthetic --scale control --models lstm --lstm-init torch   # PyTorch's LSTM init
    python -m ddesys.experiments.synthetic --scale paper --device cuda      # full scale (GPU)
    python -m ddesys.experiments.synthetic --tasks copy --protocols variable --models ds4d s4d --seeds 0 1 2
    python -m ddesys.experiments.synthetic --tasks copy --models ds4d ds4d-tap s4d     # DS4D with the input tap
    python -m ddesys.experiments.synthetic --tasks copy --tokens 32 --lag-range 128 512    # task size
    python -m ddesys.experiments.synthetic --protocols variable --models ds4d-clock s4d-clock ds4d-gate   # clocks
    python -m ddesys.experiments.synthetic --tasks copy --protocols variable --models s4d-tick   # a learned clock
    python -m ddesys.experiments.synthetic --tasks select --protocols fixed --models mamba s4d-tick  # selective copying
    torchrun --standalone --nproc_per_node=2 -m experiments.synthetic ...          # data parallel

Scales (``--scale``): ``smoke`` checks the pipeline end to end and learns nothing (the three tasks with
the variable lag, DS4D and S4D, one seed, 4 steps each: 6 runs, about half a minute on 2 cores, most of it
start-up); ``cpu``, the default, starts a multi-hour CPU run (every task and protocol, 3 models x 3 seeds:
54 runs, about 8 hours of training on 2 cores; ``--tasks copy`` alone about 2 hours); ``control`` is the
check that every baseline learns before its long-lag results are read: fixed copy at lag 16 (look-back 32,
context 48) with the CPU preset's sizes, S4D, DS4D, LSTM, GPT-2, Llama and Mamba at the base learning rates
2e-4, 1e-3 and 3e-3 (the report takes each at its best), 1000 steps, 3 seeds (54 runs, about an hour on
2 cores); ``paper`` is sized for a GPU (20000 steps per run; days on a CPU). The LSTM starts from the chrono
initialization over the context (``--lstm-init``; PyTorch's default left it at chance on every task).

Every model's width is chosen so its parameter count is closest to S4D's at ``--width`` (per task:
copy uses 2 layers and N = 64, sum and weighted sum 3 layers and N = 128, as in the paper; selective
copying, ``select``, copy's). ``ds4d-tap``
is DS4D with the delayed input tap (its window's half-width falls from 64 steps to 1 over the first 60%
of the steps); the CPU scale runs it by default. ``ds4d-clock`` / ``s4d-clock`` run every layer in its own
time, paused at the padding token (docs/theory.md §10); ``ds4d-gate`` / ``s4d-gate`` learn a soft clock,
``ds4d-tick`` / ``s4d-tick`` a binary one (tick or pause per token) with a time cost (§10.5;
``--time-cost``, ``--gate-lr``), ``ds4d-idclock`` / ``s4d-idclock`` one binary clock per token id, shared
by the layers, under the same cost (``nn.LearnedTokenClock``; ``--clock-gain``, ``--clock-noise``).
Results go to ``--out`` (``results.json``, ``report.md``, ``curves.png``
and, for learned clocks, ``clocks.png``: each layer's clock at the padding during training), rewritten after
every run. Reruns into
the same folder merge: runs of other configurations are kept, runs of the same configuration are
skipped (``--no-resume``: rerun and replaced). Every run checkpoints to ``OUT/checkpoints`` every
``--checkpoint-every`` steps and on SIGINT / SIGTERM; rerunning the same command resumes it exactly.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import math
import sys
from pathlib import Path

from .._driver import Experiment, drive
from .._runs import (RunSchema, add_run_arguments, device_name, is_main_process, learning_rate, nonneg_float,
                     nonneg_int, positive_int, unit_fraction)
from . import FAMILIES, HF_FAMILIES
from .models import LSTM_INIT, LSTM_INITS
from .tasks import COPY_KINDS, KINDS, PAD_DISTS, PAPER_KINDS, preset

CONTROL_MODELS = ("s4d", "ds4d", "lstm", "gpt2", "llama", "mamba")   # every family the long tasks compare
SCALES = {   # width (S4D reference), steps, batch, eval_every, val_size, N (copy, sums), families, seeds, lrs,
             # protocols; smoke: a pipeline check whose time is mostly start-up and per-run overhead, so it
             # runs few runs (6) of a few steps
    "smoke": dict(width=16, steps=4, batch=4, eval_every=2, val_size=16, d_state=(8, 8),
                  models=("ds4d", "s4d"), seeds=(0,), lrs=(1e-3,), protocols=("variable",)),
    "cpu": dict(width=64, steps=800, batch=32, eval_every=50, val_size=256, d_state=(64, 128),
                models=("ds4d", "ds4d-tap", "s4d"), seeds=(0, 1, 2), lrs=(1e-3,), protocols=("fixed", "variable")),
    "control": dict(width=64, steps=1000, batch=32, eval_every=50, val_size=256, d_state=(64, 128),
                    models=CONTROL_MODELS, seeds=(0, 1, 2), lrs=(2e-4, 1e-3, 3e-3), protocols=("fixed",),
                    tasks=("copy",)),
    "paper": dict(width=128, steps=20000, batch=64, eval_every=500, val_size=1024, d_state=(64, 128),
                  models=tuple(f for f in FAMILIES if f != "ds4d-tap"), seeds=(0, 1, 2), lrs=(2e-4, 1e-3),
                  protocols=("fixed", "variable")),
}


def _parse(argv):
    ap = argparse.ArgumentParser(prog="python -m ddesys.experiments.synthetic",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", choices=tuple(SCALES), default="cpu",
                    help="smoke: a pipeline check, about half a minute on 2 cores; cpu (default): a multi-hour "
                    "CPU run (about 8 h on 2 cores for every task; --tasks copy about 2 h); control: fixed copy "
                    "at lag 16, every baseline at three learning rates (about 1 h on 2 cores); paper: GPU-sized, "
                    "days on a CPU")
    ap.add_argument("--tasks", nargs="+", choices=KINDS, help="default: the scale's (the paper's copy, sum and "
                    "wsum; control: copy); select: Mamba's selective copying (data at random positions)")
    ap.add_argument("--protocols", nargs="+", choices=("fixed", "variable"),
                    help="default: the scale's (fixed and variable; smoke: variable)")
    ap.add_argument("--models", nargs="+", choices=FAMILIES, help="default: the scale's (Mamba only at paper "
                    "and control scale: on the CPU its compiled scan still makes a step several times S4D's)")
    ap.add_argument("--seeds", nargs="+", type=nonneg_int)
    ap.add_argument("--lrs", nargs="+", type=learning_rate, help="base learning rates swept (best one reported)")
    for name in ("width", "steps", "eval-every", "val-size"):
        ap.add_argument(f"--{name}", type=positive_int)
    ap.add_argument("--batch", type=positive_int, help="global batch (split across torchrun processes)")
    ap.add_argument("--tokens", type=positive_int, help="data length T of every task (default: the scale's)")
    ap.add_argument("--lag", type=nonneg_int, help="lag P of the fixed protocol (default: the scale's)")
    ap.add_argument("--lag-range", nargs=2, type=nonneg_int, metavar=("P_MIN", "P_MAX"),
                    help="lag range of the variable protocol (default: the scale's)")
    ap.add_argument("--gap", type=nonneg_int, default=0, help="filler tokens (content that carries time) between "
                    "the data and the padding (default 0): a clocked model's look-back is T + gap ticks")
    ap.add_argument("--vocab", type=positive_int, help="vocabulary of every task (default: the kind's, 16 for copy "
                    "and select, 32 for the sums); a larger one leaves data values beside more padding ids "
                    "(--pads); a run's task name then ends in -v<V>")
    ap.add_argument("--pads", type=positive_int, default=1, help="padding ids (default 1, id 0): the padding "
                    "tokens are drawn from this many ids (see --pad-dist), none of them told to a learned clock")
    ap.add_argument("--pad-dist", choices=PAD_DISTS, default="uniform", help="how the padding ids are drawn "
                    "(zipf: frequency 1 / rank)")
    ap.add_argument("--noise", type=unit_fraction, default=0.0, help="probability that a padding token is a random "
                    "data value instead (data-like noise inside the gap; default 0)")
    ap.add_argument("--lstm-init", choices=LSTM_INITS, default=LSTM_INIT, help="the LSTM's initialization "
                    f"(default {LSTM_INIT}: chrono forget biases over the context; torch: PyTorch's default, "
                    "which leaves the LSTM at chance)")
    ap.add_argument("--time-cost", nargs=3, type=float, metavar=("WEIGHT", "STEPS", "AFTER"),
                    help="a learned clock's time cost (-tick and -idclock models; nn.TimeCost): WEIGHT for the first "
                    "STEPS steps, then AFTER (default 0.3 100 0.03, the value the recorded runs used; chosen for "
                    "-tick on selection seeds: 0.3 100 0.1, docs/experiments/tick-cost-select)")
    ap.add_argument("--time-cost-start", type=int, default=None, metavar="STEPS",
                    help="the time cost starts after this many steps of the task loss alone (nn.TimeCost start=; "
                    "default 0: from the first step; -tick and -idclock models)")
    ap.add_argument("--gate-lr", type=nonneg_float, help="the learning rate of a learned binary clock's gates "
                    "after the time cost's first phase (-tick models; 0: frozen there; default: the base rate)")
    ap.add_argument("--gate-detach", action="store_true", help="a learned binary clock's gates read their input "
                    "detached: the time cost and the clock's gradient move the gates alone, not the embedding (-tick "
                    "models)")
    ap.add_argument("--gate-hidden", type=int, default=None, metavar="WIDTH",
                    help="a learned binary clock's gates get a hidden layer of this width (nn.HardGateClock "
                    "hidden=; default: the linear gate; -tick models)")
    ap.add_argument("--clock-gain", type=float, default=None, metavar="GAIN",
                    help="the gain of a clock learned per token id (nn.LearnedTokenClock gain=, > 0; default: its "
                    "own; -idclock models)")
    ap.add_argument("--clock-noise", type=float, default=None, metavar="NOISE",
                    help="logistic noise on a clock learned per token id, drawn per row and id in training "
                    "(nn.LearnedTokenClock noise=, > 0; default: none; -idclock models)")
    ap.add_argument("--flip-cost", type=float, nargs=2, default=None, metavar=("COST", "SOFT"),
                    help="a clock learned by flip tests: the time cost of a tick inside the flip test and a soft "
                    "cost on every id present (nn.FlipTokenClock cost=, soft_cost=, each >= 0; default: its own; "
                    "-flipclock models)")
    ap.add_argument("--flip-tests", type=int, default=None, metavar="G",
                    help="flip tests per training step of a clock learned by flip tests, in the same two passes "
                    "(nn.FlipTokenClock tests=, >= 1; default: its own; -flipclock models)")
    ap.add_argument("--flip-pause-below", type=float, default=None, metavar="Z",
                    help="a clock learned by flip tests: a ticking id pauses once its logit falls below Z "
                    "(nn.FlipTokenClock pause_below=, <= 1, the hysteresis; default: its own; -flipclock models)")
    ap.add_argument("--flip-explore", choices=("each", "rows"), default=None,
                    help="a clock learned by flip tests: which paused ids tick in training, each row and id with "
                    "probability 0.2 (each: nn.ExploreEach) or every paused id in a fifth of the rows (rows: "
                    "nn.ExploreRows); default: its own; -flipclock models")
    ap.add_argument("--flip-init-after-pause", type=float, default=None, metavar="P",
                    help="a clock learned by flip tests in context: sigma(z) at the start of its decisions after a "
                    "pause (nn.FlipRunClock init_after_pause=, in (0, 1); below 0.5 they start paused; default: "
                    "its own; -runclock models)")
    ap.add_argument("--flip-by-entry", type=float, default=None, metavar="F",
                    help="a clock learned by flip tests: of the tests not drawn among its paused ids, the share "
                    "drawn uniformly among the distinct ids present (nn.FlipTokenClock by_entry=, in [0, 1]; "
                    "default: its own, 0; -flipclock models)")
    ap.add_argument("--device", type=device_name, help="cpu or cuda (default: cuda when available; under "
                    "torchrun each process takes cuda:LOCAL_RANK)")
    ap.add_argument("--out", type=Path, help="default: ./synthetic_out/<scale>")
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    add_run_arguments(ap)
    args = ap.parse_args(argv)
    if args.protocols is None:
        args.protocols = list(SCALES[args.scale]["protocols"])
    if args.tasks is None:
        args.tasks = list(SCALES[args.scale].get("tasks", PAPER_KINDS))
    if args.lag_range is not None and args.lag_range[0] >= args.lag_range[1]:
        ap.error(f"--lag-range needs P_MIN < P_MAX, got {args.lag_range[0]} {args.lag_range[1]}")
    if args.time_cost is not None:
        w, n, after = args.time_cost
        if not (w >= 0 and after >= 0 and n >= 0 and n == int(n)):
            ap.error(f"--time-cost needs WEIGHT >= 0, a whole STEPS >= 0 and AFTER >= 0, got {w:g} {n:g} {after:g}")
        args.time_cost = {"weight": w, "steps": int(n), "after": after}
        from .._models import ModelSpec
        if not any(ModelSpec.from_label(m).time_cost for m in args.models or SCALES[args.scale]["models"]):
            ap.error("--time-cost is a learned clock's: give it with a -tick or -idclock model (e.g. --models "
                     "s4d-tick)")
    from .._models import TIME_COST, ModelSpec
    if args.time_cost_start is not None:
        if args.time_cost_start < 0:
            ap.error(f"--time-cost-start needs STEPS >= 0, got {args.time_cost_start}")
        args.time_cost = {**(args.time_cost or TIME_COST), "start": args.time_cost_start}
    if args.gate_hidden is not None and args.gate_hidden < 1:
        ap.error(f"--gate-hidden needs a width >= 1, got {args.gate_hidden}")
    for flag, v in (("--clock-gain", args.clock_gain), ("--clock-noise", args.clock_noise)):
        if v is not None and not v > 0:
            ap.error(f"{flag} needs a value > 0, got {v:g}")
    if args.flip_cost is not None and not min(args.flip_cost) >= 0:
        ap.error(f"--flip-cost needs COST >= 0 and SOFT >= 0, got {args.flip_cost[0]:g} {args.flip_cost[1]:g}")
    if args.flip_tests is not None and args.flip_tests < 1:
        ap.error(f"--flip-tests needs G >= 1, got {args.flip_tests}")
    if args.flip_by_entry is not None and not 0.0 <= args.flip_by_entry <= 1.0:
        ap.error(f"--flip-by-entry needs a number in [0, 1], got {args.flip_by_entry:g}")
    if args.flip_init_after_pause is not None and not 0.0 < args.flip_init_after_pause < 1.0:
        ap.error(f"--flip-init-after-pause needs a number in (0, 1), got {args.flip_init_after_pause:g}")
    if args.flip_pause_below is not None and not (math.isfinite(args.flip_pause_below)
                                                  and args.flip_pause_below <= 1.0):
        ap.error(f"--flip-pause-below needs a finite number <= 1 (the clock's hysteresis), got "
                 f"{args.flip_pause_below:g}")
    specs = [ModelSpec.from_label(m) for m in args.models or SCALES[args.scale]["models"]]
    for flag, given, ok, kind in (
            ("--gate-lr", args.gate_lr is not None, "binary", "-tick"),
            ("--gate-detach", args.gate_detach, "binary", "-tick"),
            ("--gate-hidden", args.gate_hidden is not None, "binary", "-tick"),
            ("--time-cost-start", args.time_cost_start is not None, "cost", "-tick or -idclock"),
            ("--clock-gain", args.clock_gain is not None, "token", "-idclock"),
            ("--clock-noise", args.clock_noise is not None, "token", "-idclock"),
            ("--flip-cost", args.flip_cost is not None, "flip", "-flipclock"),
            ("--flip-tests", args.flip_tests is not None, "flip", "-flipclock"),
            ("--flip-pause-below", args.flip_pause_below is not None, "flip", "-flipclock"),
            ("--flip-explore", args.flip_explore is not None, "flip", "-flipclock"),
            ("--flip-init-after-pause", args.flip_init_after_pause is not None, "run", "-runclock"),
            ("--flip-by-entry", args.flip_by_entry is not None, "flip", "-flipclock")):
        if given and not any(s.time_cost if ok == "cost" else s.flip_tested if ok == "flip" else s.clock == ok
                             for s in specs):
            ap.error(f"{flag} is a learned clock's: give it with a {kind} model (e.g. --models "
                     f"s4d-{kind.split()[0][1:]})")
    try:
        args.task_list = _tasks(args)
    except ValueError as exc:
        ap.error(f"task size: {exc}")
    return args


def _tasks(args):
    """The tasks of the sweep: the scale's presets with ``--tokens`` / ``--lag`` / ``--lag-range``."""
    out = []
    for kind in args.tasks:
        for protocol in args.protocols:
            t = preset(kind, protocol, args.scale)
            if args.tokens is not None:
                t = dataclasses.replace(t, T=args.tokens)
            if protocol == "fixed" and args.lag is not None:
                t = dataclasses.replace(t, P_min=args.lag, P_max=args.lag)
            if protocol == "variable" and args.lag_range is not None:
                t = dataclasses.replace(t, P_min=args.lag_range[0], P_max=args.lag_range[1])
            if args.vocab is not None:
                t = dataclasses.replace(t, vocab=args.vocab)
            if args.gap:
                t = dataclasses.replace(t, gap=args.gap)
            if args.pads > 1 or args.noise:
                t = dataclasses.replace(t, pads=args.pads, pad_dist=args.pad_dist, noise=args.noise)
            out.append(t)
    return out


def _settings(args):
    s = dict(SCALES[args.scale])
    for key in ("width", "steps", "batch", "eval_every", "val_size"):
        if getattr(args, key) is not None:
            s[key] = getattr(args, key)
    s["models"] = tuple(args.models or s["models"])
    s["seeds"] = tuple(args.seeds if args.seeds is not None else s["seeds"])
    s["lrs"] = tuple(args.lrs or s["lrs"])
    return s


def _available(models):
    if importlib.util.find_spec("transformers") is not None:
        return models
    skipped = [m for m in models if m in HF_FAMILIES]
    if skipped and is_main_process():
        print(f"note: transformers is not installed, skipping {', '.join(skipped)} "
              "(pip install 'ddesys[experiments]')")
    return tuple(m for m in models if m not in HF_FAMILIES)


def _rekey(run):
    from .train import run_key
    return run_key(run["config"])


SCHEMA = RunSchema(done=("best_acc", "n_params"), curve=("step", "val_acc"),   # what report.py reads (the
                   types={"n_params": "int", "seconds": "number", "world_size": "int", "mechanism": "dict",  # others
                          "by_position": "list", "best_step": "int"},                                 # when present)
                   point_types={"step": "int", "clock": "list", "test_acc": "number", "pads": "list"})


def _plan(args, ctx):
    """Every run of the sweep (width matched to S4D's parameter count per task), and the models' phrase."""
    from .._models import FLIP_EXPLORE, FLIP_PAUSE_BELOW, FLIP_TESTS, ModelSpec, parse_models
    from .._train import Job
    from .models import build, match_width, n_params
    from .train import RunConfig, train_run
    s = _settings(args)
    models = _available(s["models"])
    configs = []
    for task in args.task_list:
        n_layers, N = (2, s["d_state"][0]) if task.kind in COPY_KINDS else (3, s["d_state"][1])
        budget = n_params(build(ModelSpec("s4d"), task.vocab, s["width"], n_layers, task.length, N))
        for spec in parse_models(models):
            w = s["width"] if spec == ModelSpec("s4d") else match_width(spec, budget, task.vocab, n_layers,
                                                                        task.length, N)
            for lr in s["lrs"]:
                for seed in s["seeds"]:
                    configs.append(RunConfig(task, spec, w, n_layers, N, lr, seed=seed, steps=s["steps"],
                                             batch=s["batch"], eval_every=s["eval_every"],
                                             val_size=s["val_size"], test_size=s["val_size"], amp=args.amp,
                                             init=args.lstm_init if spec.layer == "lstm" else None,
                                             time_cost=args.time_cost if spec.time_cost else None,
                                             clock_gain=args.clock_gain if spec.clock == "token" else None,
                                             clock_noise=args.clock_noise if spec.clock == "token" else None,
                                             flip_cost=args.flip_cost if spec.flip_tested else None,
                                             flip_tests=(args.flip_tests or FLIP_TESTS) if spec.flip_tested
                                             else None,
                                             flip_pause_below=(FLIP_PAUSE_BELOW if args.flip_pause_below is None
                                                               else args.flip_pause_below)
                                             if spec.flip_tested else None,
                                             flip_explore=(args.flip_explore or FLIP_EXPLORE) if spec.flip_tested
                                             else None,
                                             flip_init_after_pause=args.flip_init_after_pause
                                             if spec.clock == "run" else None,
                                             flip_by_entry=args.flip_by_entry if spec.flip_tested else None,
                                             gate_lr=args.gate_lr if spec.clock == "binary" else None,
                                             gate_detach=True if args.gate_detach and spec.clock == "binary"
                                             else None,
                                             gate_hidden=args.gate_hidden if spec.clock == "binary" else None))
    jobs = [Job(c.key(), f"{c.task.name} {c.model.label} lr={c.lr:g} s{c.seed}", c.steps,
                lambda ckpt, progress, ctx, c=c: train_run(c, ckpt=ckpt, ctx=ctx, progress=progress))
            for c in configs]
    return jobs, f"models {', '.join(models)}"


def _experiment():
    from . import report
    def figures(runs, out):
        report.plot_curves(runs, out / "curves.png")
        report.plot_clocks(runs, out / "clocks.png")
    return Experiment("synthetic", SCHEMA, _rekey, ("report.md", "curves.png", "clocks.png"), _plan,
                      report.markdown, figures, report.done)


def main(argv=None):
    args = _parse(argv)                                  # bad arguments: exit 2 here, before any work
    return drive(_experiment(), args, argv, args.out or Path("synthetic_out") / args.scale)


if __name__ == "__main__":
    sys.exit(main())
