"""The continuous delay task (the S4 repository's ``delay`` dataset, from How to Train Your HiPPO):
band-limited white noise in, the same signal delayed by fixed lags out (one output per lag), MSE.
DS4D against S4D at matched parameter counts, with DS4D's options exposed for the diagnosis.

    python -m ddesys.experiments.delay                                  # CPU scale (minutes per run on 2 cores)
    python -m ddesys.experiments.delay --scale smoke                    # seconds: checks the pipeline
    python -m ddesys.experiments.delay --delay-init grid lag --p0 0.1 0.9 --seeds 0 1 2
    python -m ddesys.experiments.delay --lags 256 512 --freq 50         # several lags, another bandwidth
    python -m ddesys.experiments.delay --models ds4d --no-glu --norm none    # the surrounding block
    python -m ddesys.experiments.delay --models s4d ds4d ds4d-tap       # DS4D with the delayed input tap too
    python -m ddesys.experiments.delay --scale paper --device cuda

Every DS4D variant's width is chosen so its parameter count is closest to S4D's at ``--width`` with
the same block options. ``--p0`` and ``--delay-init`` take several values (every combination runs);
``--delay-init lag`` puts every channel's delay at the first lag. ``ds4d-tap`` (not run by default)
is DS4D plus a trainable delayed input tap per channel, read through a window whose half-width falls
from ``--tap-w0`` to 1 over the first ``--tap-frac`` of the steps; it takes the same ``--p0`` x
``--delay-init`` combinations (the tap's delay starts like the feedback delays). Results go to ``--out``
(``results.json``, ``report.md``, ``curves.png``, ``delays.png``, ``response.png``), rewritten after every run. Reruns
into the same folder merge: other configurations are kept, the same configuration is skipped
(``--no-resume``: rerun and replaced). Every run is scored at every evaluation on the validation set
(``--val-size`` sequences) and on a held-out test set of as many sequences from another generator seed;
the report chooses each run's checkpoint and the learning rate on validation and shows the test error
there and at the last step (runs recorded before the test set existed say "not measured"). Every run
checkpoints to ``OUT/checkpoints`` every ``--checkpoint-every`` steps and on SIGINT / SIGTERM; rerunning
the same command resumes it exactly.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .._driver import Experiment, drive
from .._runs import (RunSchema, add_run_arguments, device_name, learning_rate, nonneg_int, positive_float, positive_int,
                     unit_fraction)
from . import DEFAULT_FAMILIES, FAMILIES

SCALES = {   # sequence, lags, band (Hz), S4D width, layers, N, steps, batch, eval_every, val_size, seeds
    "smoke": dict(L=64, lags=(16,), freq=100.0, width=8, n_layers=2, d_state=8, steps=6, batch=4, eval_every=3,
                  val_size=8, seeds=(0,)),
    "cpu": dict(L=1024, lags=(256,), freq=100.0, width=32, n_layers=2, d_state=64, steps=300, batch=8,
                eval_every=25, val_size=32, seeds=(0,)),
    "paper": dict(L=4096, lags=(1024,), freq=100.0, width=128, n_layers=4, d_state=64, steps=5000, batch=32,
                  eval_every=250, val_size=256, seeds=(0, 1, 2)),
}


def _width0(text):
    v = positive_float(text)
    if v < 1.0:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return v


def _frac(text):
    v = positive_float(text)
    if v > 1.0:
        raise argparse.ArgumentTypeError(f"must lie in (0, 1], got {text}")
    return v


def _parse(argv):
    ap = argparse.ArgumentParser(prog="python -m ddesys.experiments.delay",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", choices=tuple(SCALES), default="cpu")
    ap.add_argument("--models", nargs="+", choices=FAMILIES, default=list(DEFAULT_FAMILIES),
                    help=f"default: {' '.join(DEFAULT_FAMILIES)}")
    ap.add_argument("--seeds", nargs="+", type=nonneg_int)
    ap.add_argument("--lr", type=learning_rate, default=3e-3, help="AdamW learning rate (default 3e-3)")
    ap.add_argument("--dt-lr", type=learning_rate, help="learning rate of dt and of the delays (default: --lr)")
    for name in ("width", "steps", "eval-every", "val-size", "layers", "d-state"):
        ap.add_argument(f"--{name}", type=positive_int)
    ap.add_argument("--batch", type=positive_int, help="global batch (split across torchrun processes)")
    ap.add_argument("--length", type=positive_int, help="sequence length L (default: the scale's)")
    ap.add_argument("--lags", nargs="+", type=positive_int, help="lags in steps, one output each (default: "
                    "the scale's)")
    ap.add_argument("--freq", type=positive_float, help="band limit in Hz (dt = 1 ms: Nyquist 500 Hz; default: "
                    "the scale's)")
    ap.add_argument("--dt", type=positive_float, default=1e-3, help="sample step of the signal in seconds")
    ap.add_argument("--init", choices=("lin", "inv"), default="lin", help="S4D-Lin or S4D-Inv poles")
    ap.add_argument("--p0", nargs="+", type=unit_fraction, default=[0.1], help="DS4D's initial branch allocation(s)")
    ap.add_argument("--delay-init", nargs="+", choices=("grid", "lag", "constant"), default=["grid"],
                    help="DS4D's initial delays: grid over [1, L-1], every channel at the first lag, or every "
                    "channel at --tau0")
    ap.add_argument("--tau0", type=positive_float, help="initial delay of --delay-init constant (steps)")
    ap.add_argument("--tap-w0", type=_width0, default=64.0, help="ds4d-tap: initial half-width of the tap's "
                    "window in steps (>= 1; default 64)")
    ap.add_argument("--tap-frac", type=_frac, default=0.6, help="ds4d-tap: share of the steps after which the "
                    "window is linear interpolation (width 1; default 0.6)")
    ap.add_argument("--glu", action=argparse.BooleanOptionalAction, default=True, help="output GLU of the blocks")
    ap.add_argument("--prenorm", action=argparse.BooleanOptionalAction, default=True,
                    help="pre-norm blocks (else post-norm)")
    ap.add_argument("--norm", choices=("layer", "none"), default="layer",
                    help="none: every LayerNorm (blocks and final) replaced by the identity")
    ap.add_argument("--device", type=device_name, help="cpu or cuda (default: cuda when available)")
    ap.add_argument("--out", type=Path, help="default: ./delay_out/<scale>")
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    add_run_arguments(ap)
    args = ap.parse_args(argv)
    if "constant" in args.delay_init and args.tau0 is None:
        ap.error("--delay-init constant needs --tau0")
    from .data import Task
    s = SCALES[args.scale]
    try:
        args.task = Task(args.length or s["L"], tuple(args.lags or s["lags"]), args.freq or s["freq"], args.dt)
    except ValueError as exc:
        ap.error(f"task: {exc}")
    if args.task.L < 3:
        ap.error("task: DS4D needs L >= 3")
    if "constant" in args.delay_init and not 1 < args.tau0 < args.task.L - 1:
        ap.error(f"--tau0 must lie strictly inside (1, L-1) = (1, {args.task.L - 1}), got {args.tau0:g}")
    if "lag" in args.delay_init and not 1 < args.task.lags[0] < args.task.L - 1:
        ap.error(f"--delay-init lag needs the first lag strictly inside (1, L-1), got {args.task.lags[0]}")
    return args


def _settings(args):
    s = dict(SCALES[args.scale])
    for key, arg in (("width", "width"), ("steps", "steps"), ("batch", "batch"), ("eval_every", "eval_every"),
                     ("val_size", "val_size"), ("n_layers", "layers"), ("d_state", "d_state")):
        if getattr(args, arg) is not None:
            s[key] = getattr(args, arg)
    s["seeds"] = tuple(args.seeds if args.seeds is not None else s["seeds"])
    return s


def _archs(args, s):
    """The architectures of the sweep: S4D, then every DS4D combination of ``--p0`` x ``--delay-init``,
    then the same for ``ds4d-tap``."""
    from .models import Arch, ModelSpec, TapSchedule
    common = dict(n_layers=s["n_layers"], d_state=s["d_state"], init=args.init, dt_lr=args.dt_lr, glu=args.glu,
                  prenorm=args.prenorm, norm=args.norm)
    out = []
    if "s4d" in args.models:
        out.append(Arch(ModelSpec("s4d"), **common))
    for spec in (ModelSpec("ds4d"), ModelSpec("ds4d", tap=TapSchedule(args.tap_w0, args.tap_frac))):
        if spec.label not in args.models:                    # the labels given on the command line
            continue
        for di in dict.fromkeys(args.delay_init):
            for p0 in dict.fromkeys(args.p0):
                out.append(Arch(spec, p0=p0, delay_init=di, tau0=args.tau0 if di == "constant" else None, **common))
    return out


def _rekey(run):
    from .train import run_key
    return run_key(run["config"])


SCHEMA = RunSchema(done=("n_params", "rel_rmse", "best_rel_rmse", "diagnosis"),   # what report.py and
                   curve=("step", "val_rel_rmse"),                                 # tables.py read
                   types={"n_params": "int", "diagnosis": "dict", "seconds": "number"},
                   point_types={"step": "int", "test_rel_rmse": "number"})


def _plan(args, ctx):
    """Every run of the sweep (widths matched to S4D's parameter count), and the task's phrase."""
    from .._train import Job
    from .models import Arch, ModelSpec, build, match_width, n_params
    from .train import RunConfig, train_run
    s = _settings(args)
    task = args.task
    archs = _archs(args, s)
    ref = Arch(ModelSpec("s4d"), **{k: v for k, v in archs[0].to_dict().items() if k in (
        "n_layers", "d_state", "init", "dt_lr", "glu", "prenorm", "norm")})
    budget = n_params(build(ref, s["width"], task))
    configs = []
    for arch in archs:
        w = s["width"] if not arch.model.is_ds4d else match_width(arch, budget, task)
        for seed in s["seeds"]:
            configs.append(RunConfig(task, arch, w, lr=args.lr, seed=seed, steps=s["steps"], batch=s["batch"],
                                     eval_every=s["eval_every"], val_size=s["val_size"], test_size=s["val_size"],
                                     amp=args.amp))
    jobs = [Job(c.key(), f"{c.arch.label()} H{c.width} s{c.seed}", c.steps,
                lambda ckpt, progress, ctx, c=c: train_run(c, ckpt=ckpt, ctx=ctx, progress=progress))
            for c in configs]
    return jobs, f"task {task.name} ({task.bins} Fourier bins)"


def _figures(runs, out):
    from . import report
    report.plot_curves(runs, out / "curves.png")
    report.plot_delays(runs, out / "delays.png")
    report.plot_response(runs, out / "response.png")


def _experiment():
    from . import report
    return Experiment("delay", SCHEMA, _rekey, ("report.md", "curves.png", "delays.png", "response.png"), _plan,
                      report.markdown, _figures, report.done)


def main(argv=None):
    args = _parse(argv)                                  # bad arguments: exit 2 here, before any work
    return drive(_experiment(), args, argv, args.out or Path("delay_out") / args.scale)


if __name__ == "__main__":
    sys.exit(main())
