"""General sequence benchmarks (paper section 5.3, appendix C.4): DS4D against S4D at matched parameters.

    python -m experiments.general                                   # sdigits + generated ListOps, CPU scale
    python -m experiments.general --tasks smnist --data-dir ~/mnist  # sequential MNIST from local IDX files
    python -m experiments.general --tasks listops --data-dir ~/lra/listops   # LRA's TSV files
    python -m experiments.general --scale smoke                     # seconds

Tasks: ``sdigits`` (scikit-learn's 8x8 digits, 64 steps, unidirectional, delays start at one row),
``smnist`` / ``psmnist`` (784 steps, unidirectional, delays at one row = 28), ``listops`` (bidirectional,
default delay grid). Only data that ships with a package or is generated is reachable here; other sets
are read from local files in their original formats. S4D keeps ``--width``; DS4D takes the width whose
parameter count is closest to it (the paper: within 1%). Writes ``results.json``, ``report.md`` and
``curves.png`` to ``--out`` after every run; an interrupted sweep resumes.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import sys
import time
from pathlib import Path

import numpy as np
import torch

from .._runs import load_runs, save_runs
from .data import sdigits, smnist
from .listops import listops
from .train import RunConfig, build, train_run

TASKS = ("sdigits", "listops", "smnist", "psmnist")
# ours: the paper's Table 8 of hyperparameters was lost with its text (S4D-style recipes assumed at "paper")
SCALES = {"smoke": dict(width=16, n_layers=1, d_state=8, epochs=1, batch=64, lr=1e-3, listops=(256, 64, 48)),
          "cpu": dict(width=64, n_layers=2, d_state=32, epochs=15, batch=32, lr=3e-3, listops=(4000, 500, 128)),
          "paper": dict(width=128, n_layers=4, d_state=64, epochs=50, batch=50, lr=1e-2,
                        listops=(96000, 2000, 2000))}


def load(task, scale, data_dir=None, seed=0):
    """The :class:`Dataset` of ``task`` at ``scale`` (``smnist`` needs ``data_dir``)."""
    if task == "sdigits":
        return sdigits(seed=seed)
    if task in ("smnist", "psmnist"):
        if data_dir is None:
            raise SystemExit(f"{task} reads MNIST's IDX files from a local folder: pass --data-dir")
        return smnist(data_dir, permute=task == "psmnist")
    n_train, n_test, length = SCALES[scale]["listops"]
    return listops(n_train, n_test, length, seed=seed, folder=data_dir)


def matched_width(cfg, data):
    """The DS4D width whose classifier's parameter count is closest to S4D's at ``cfg.width``."""
    n = lambda c: sum(p.numel() for p in build(c, data).parameters())   # noqa: E731
    budget = n(dataclasses.replace(cfg, family="s4d"))
    return min(range(max(2, cfg.width // 2), cfg.width + 1),
               key=lambda w: abs(n(dataclasses.replace(cfg, family="ds4d", width=w)) - budget))


def report(runs, meta, out):
    """``report.md`` (best / final test accuracy, mean +- std over seeds) and ``curves.png``."""
    from ddesys.plot import _plt
    groups = {}
    for r in runs:
        groups.setdefault((r["task"], r["config"]["family"]), []).append(r)
    lines = [f"# General sequence benchmarks ({meta['scale']} scale)", "", f"Command: `{meta['command']}`  ",
             f"Date: {meta['date']}; device {meta['device']}; torch {meta['torch']}.", "",
             "| task | model | H | params | bidirectional | best test acc | final test acc | seeds | s/run |",
             "|---|---|---:|---:|---|---|---|---:|---:|"]
    for (task, fam), rs in groups.items():
        b, f = np.array([r["best_acc"] for r in rs]), np.array([r["final_acc"] for r in rs])
        c = rs[0]["config"]
        lines.append(f"| {task} | {fam} | {c['width']} | {rs[0]['n_params']:,} | {c.get('bidirectional', False)} | "
                     f"{b.mean():.4f} +- {b.std():.4f} | {f.mean():.4f} +- {f.std():.4f} | {len(rs)} | "
                     f"{np.mean([r['seconds'] for r in rs]):.0f} |")
    lines += ["", "![test accuracy per epoch](curves.png)", ""]
    (out / "report.md").write_text("\n".join(lines))
    plt = _plt()
    tasks = list(dict.fromkeys(t for t, _ in groups))
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.5 * len(tasks), 3.3), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for (t, fam), rs in groups.items():
            if t == task:
                acc = np.array([[c["test_acc"] for c in r["curve"]] for r in rs])
                ax.plot(np.arange(1, acc.shape[1] + 1), acc.mean(0), "o-", ms=3, label=fam)
        ax.set_title(task)
        ax.set_xlabel("epoch")
        ax.set_ylabel("test accuracy")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=120)
    plt.close(fig)
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", choices=tuple(SCALES), default="cpu")
    ap.add_argument("--tasks", nargs="+", choices=TASKS, default=["sdigits", "listops"])
    ap.add_argument("--models", nargs="+", choices=("ds4d", "s4d"), default=["ds4d", "s4d"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--data-dir", type=Path, help="local folder with the task's files (smnist: IDX; listops: TSV)")
    for name in ("width", "epochs", "batch", "n-layers", "d-state"):
        ap.add_argument(f"--{name}", type=int)
    ap.add_argument("--lr", type=float, help="base learning rate (default: the scale's)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", type=Path, help="default: ./general_out/<scale>")
    ap.add_argument("--no-resume", action="store_true")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    s = dict(SCALES[args.scale])
    for key in ("width", "epochs", "batch", "n_layers", "d_state", "lr"):
        if getattr(args, key) is not None:
            s[key] = getattr(args, key)
    out = args.out or Path("general_out") / args.scale
    out.mkdir(parents=True, exist_ok=True)
    meta = {"scale": args.scale, "command": "python -m experiments.general " + " ".join(argv or sys.argv[1:]),
            "date": datetime.date.today().isoformat(), "device": args.device, "torch": torch.__version__}
    old = {} if args.no_resume else load_runs(out / "results.json")
    runs, t0 = [], time.perf_counter()
    from tqdm.auto import tqdm
    for task in args.tasks:
        data = load(task, args.scale, args.data_dir)
        bidir = task == "listops"                     # the paper: bidirectional except sMNIST / SC (AR)
        base = RunConfig(width=s["width"], n_layers=s["n_layers"], d_state=s["d_state"], epochs=s["epochs"],
                         batch=s["batch"], lr=s["lr"], bidirectional=bidir)
        for fam in args.models:
            cfg = dataclasses.replace(base, family=fam)
            if fam == "ds4d" and "s4d" in args.models:
                cfg = dataclasses.replace(cfg, width=matched_width(cfg, data))
            for seed in args.seeds:
                c = dataclasses.replace(cfg, seed=seed)
                if c.key(task) in old:
                    runs.append(old[c.key(task)])
                    continue
                bar = tqdm(total=c.epochs, desc=f"{task} {fam} H={c.width} seed {seed}", disable=args.quiet)
                runs.append(train_run(c, data, args.device,
                                      progress=lambda e, row, bar=bar: (bar.update(1), bar.set_postfix(
                                          acc=f"{row['test_acc']:.3f}"))))
                bar.close()
                meta["seconds"] = time.perf_counter() - t0
                save_runs(out / "results.json", meta, runs)
                report(runs, meta, out)
    if runs:
        print(report(runs, meta, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
