"""The paper's synthetic experiments (section 5.1, appendix C): six delay tasks, DS4D against baselines
at matched parameter counts.

    python -m experiments.synthetic                       # CPU scale, ~20-40 min on 2 cores
    python -m experiments.synthetic --scale smoke         # seconds: checks the pipeline
    python -m experiments.synthetic --scale paper --device cuda      # full scale (GPU)
    python -m experiments.synthetic --tasks copy --protocols variable --models ds4d s4d --seeds 0 1 2

Every model's width is chosen so its parameter count is closest to S4D's at ``--width`` (per task:
copy uses 2 layers and N = 64, sum and weighted sum 3 layers and N = 128, as in the paper). Results go
to ``--out`` (``results.json``, ``report.md``, ``curves.png``), rewritten after every run; an
interrupted sweep resumes where it stopped (runs already in ``results.json`` are skipped).
"""
from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

import torch

from .._runs import load_runs, save_runs
from . import report
from .models import FAMILIES, HF_FAMILIES, build, match_width, n_params
from .tasks import KINDS, preset
from .train import RunConfig, train_run

SCALES = {   # width (S4D reference), steps, batch, eval_every, val_size, N (copy, sums), families, seeds, lrs
    "smoke": dict(width=16, steps=20, batch=8, eval_every=10, val_size=32, d_state=(8, 8),
                  models=("ds4d", "s4d", "lstm"), seeds=(0,), lrs=(1e-3,)),
    "cpu": dict(width=64, steps=600, batch=32, eval_every=50, val_size=256, d_state=(64, 128),
                models=("ds4d", "s4d", "lstm", "gpt2", "llama"), seeds=(0,), lrs=(1e-3,)),
    "paper": dict(width=128, steps=20000, batch=64, eval_every=500, val_size=1024, d_state=(64, 128),
                  models=FAMILIES, seeds=(0, 1, 2), lrs=(2e-4, 1e-3)),
}


def _parse(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", choices=tuple(SCALES), default="cpu")
    ap.add_argument("--tasks", nargs="+", choices=KINDS, default=list(KINDS))
    ap.add_argument("--protocols", nargs="+", choices=("fixed", "variable"), default=["fixed", "variable"])
    ap.add_argument("--models", nargs="+", choices=FAMILIES, help="default: the scale's (Mamba only at paper "
                    "scale: without mamba-ssm its CPU scan is ~20x slower than the others)")
    ap.add_argument("--seeds", nargs="+", type=int)
    ap.add_argument("--lrs", nargs="+", type=float, help="base learning rates swept (best one reported)")
    for name in ("width", "steps", "batch", "eval-every", "val-size"):
        ap.add_argument(f"--{name}", type=int)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", type=Path, help="default: ./synthetic_out/<scale>")
    ap.add_argument("--no-resume", action="store_true", help="rerun runs already in results.json")
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    return ap.parse_args(argv)


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
    try:
        import transformers  # noqa: F401
        return models
    except ImportError:
        skipped = [m for m in models if m in HF_FAMILIES]
        if skipped:
            print(f"note: transformers is not installed, skipping {', '.join(skipped)} "
                  "(pip install -e \".[experiments]\")")
        return tuple(m for m in models if m not in HF_FAMILIES)


def _save(out, meta, runs):
    save_runs(out / "results.json", meta, runs)
    (out / "report.md").write_text(report.markdown(runs, meta))
    report.plot_curves(runs, out / "curves.png")


def main(argv=None):
    args = _parse(argv)
    s = _settings(args)
    out = args.out or Path("synthetic_out") / args.scale
    out.mkdir(parents=True, exist_ok=True)
    models = _available(s["models"])
    tasks = [preset(k, p, args.scale) for k in args.tasks for p in args.protocols]
    old = {} if args.no_resume else load_runs(out / "results.json")
    configs = []
    for task in tasks:
        n_layers, N = (2, s["d_state"][0]) if task.kind == "copy" else (3, s["d_state"][1])
        budget = n_params(build("s4d", task.vocab, s["width"], n_layers, task.length, N))
        for fam in models:
            w = s["width"] if fam == "s4d" else match_width(fam, budget, task.vocab, n_layers, task.length, N)
            for lr in s["lrs"]:
                for seed in s["seeds"]:
                    configs.append(RunConfig(task, fam, w, n_layers, N, lr, seed=seed, steps=s["steps"],
                                             batch=s["batch"], eval_every=s["eval_every"], val_size=s["val_size"]))
    meta = {"scale": args.scale, "command": "python -m experiments.synthetic " + " ".join(argv or sys.argv[1:]),
            "date": datetime.date.today().isoformat(), "device": args.device, "torch": torch.__version__,
            "tasks": [t.to_dict() for t in tasks], "settings": {k: list(v) if isinstance(v, tuple) else v
                                                               for k, v in s.items()}}
    runs = [old[c.key()] for c in configs if c.key() in old]
    todo = [c for c in configs if c.key() not in old]
    print(f"{len(configs)} runs ({len(configs) - len(todo)} already in {out / 'results.json'}); "
          f"models {', '.join(models)}; device {args.device}")
    from tqdm.auto import tqdm
    t0 = time.perf_counter()
    for cfg in tqdm(todo, desc="runs", disable=args.quiet):
        bar = tqdm(total=cfg.steps, desc=f"{cfg.task.name} {cfg.family} lr={cfg.lr:g} s{cfg.seed}", leave=False,
                   disable=args.quiet)

        def progress(step, loss, acc, bar=bar):
            bar.update(step - bar.n)
            bar.set_postfix(loss=f"{loss:.3f}", val_acc=f"{acc:.3f}")
        runs.append(train_run(cfg, device=args.device, progress=progress))
        bar.close()
        meta["seconds"] = time.perf_counter() - t0
        _save(out, meta, runs)
    if not todo and runs:
        _save(out, meta, runs)
    print()
    print(report.markdown(runs, meta) if runs else "no runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
