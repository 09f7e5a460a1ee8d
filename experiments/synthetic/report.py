"""Tables and figures from a synthetic results file: the paper's Figure 2 (learning curves), Table 6
(best validation accuracy, mean +- std over seeds, each family at its best learning rate) and Table 1
(DS4D mechanism: delays, their change from initialization, ablations)."""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np


def load(path):
    """Runs of a ``results.json`` (a list of :func:`train.train_run` dicts)."""
    return json.loads(Path(path).read_text())["runs"]


def _groups(runs):
    """``{(task, family): {lr: [runs over seeds]}}``."""
    g = defaultdict(lambda: defaultdict(list))
    for r in runs:
        c = r["config"]
        g[(c["task"]["name"], c["family"])][c["lr"]].append(r)
    return g


def best_lr_runs(runs):
    """``{(task, family): (lr, runs)}``: the learning rate with the highest mean best accuracy."""
    out = {}
    for key, by_lr in _groups(runs).items():
        lr = max(by_lr, key=lambda v: np.mean([r["best_acc"] for r in by_lr[v]]))
        out[key] = (lr, by_lr[lr])
    return out


def accuracy_table(runs):
    """Rows ``(task, family, width, params, lr, mean, std, n_seeds)``, tasks and families in run order."""
    best = best_lr_runs(runs)
    rows = []
    for (task, fam), (lr, rs) in best.items():
        acc = np.array([r["best_acc"] for r in rs])
        rows.append((task, fam, rs[0]["config"]["width"], rs[0]["n_params"], lr, float(acc.mean()),
                     float(acc.std()), len(rs)))
    return rows


def mechanism_table(runs):
    """DS4D rows ``(task, mean delay, |dtau|, |dmu|, acc, acc tau_min, acc mu=0)``, means over seeds."""
    rows = []
    for (task, fam), (_, rs) in best_lr_runs(runs).items():
        ms = [r["mechanism"] for r in rs if "mechanism" in r]
        if fam != "ds4d" or not ms:
            continue
        f = lambda k: float(np.mean([m[k] for m in ms]))  # noqa: E731
        rows.append((task, f("mean_delay"), f("mean_abs_dtau"), f("mean_abs_dmu"), f("acc"), f("acc_tau_min"),
                     f("acc_mu_zero")))
    return rows


def plot_curves(runs, path):
    """Validation accuracy vs step, one panel per task, each family at its best learning rate (mean over
    seeds, band = min..max)."""
    from ddesys.plot import _plt
    plt = _plt()
    best = best_lr_runs(runs)
    tasks = list(dict.fromkeys(t for t, _ in best))
    cols = min(3, len(tasks))
    rows = -(-len(tasks) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    for ax, task in zip(axes.flat, tasks):
        for (t, fam), (lr, rs) in best.items():
            if t != task:
                continue
            steps = [p["step"] for p in rs[0]["curve"]]
            acc = np.array([[p["val_acc"] for p in r["curve"]] for r in rs if len(r["curve"]) == len(steps)])
            line, = ax.plot(steps, acc.mean(0), label=f"{fam} (lr {lr:g})", lw=2 if fam == "ds4d" else 1.2)
            if len(acc) > 1:
                ax.fill_between(steps, acc.min(0), acc.max(0), color=line.get_color(), alpha=0.15)
        ax.set_title(task)
        ax.set_xlabel("step")
        ax.set_ylabel("validation accuracy")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(tasks):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def markdown(runs, meta):
    """The report: setup, Table 6 analog, Table 1 analog, figure."""
    lines = [f"# Synthetic delay tasks ({meta.get('scale', '?')} scale)", "",
             f"Command: `{meta.get('command', '')}`  ", f"Date: {meta.get('date', '')}; device: "
             f"{meta.get('device', '')}; torch {meta.get('torch', '')}; total {meta.get('seconds', 0):.0f} s.", "",
             "Tasks (ours; the paper's tables of T, P, w, V were lost with its text):", ""]
    for t in meta.get("tasks", []):
        lines.append(f"- {t['name']}: T={t['T']}, P in [{t['P_min']}, {t['P_max']}], V={t['vocab']}, "
                     f"data 1..{t['data_max']}" + (f", window {t['window']}" if t["kind"] != "copy" else "")
                     + (f", sigma {t['sigma']}" if t["kind"] == "wsum" else "") + f", context {t['length']}")
    lines += ["", "## Best validation accuracy (Table 6 protocol: mean +- std over seeds, best learning rate)", "",
              "| task | model | H | params | lr | accuracy | seeds |", "|---|---|---:|---:|---:|---|---:|"]
    for task, fam, w, n, lr, m, s, k in accuracy_table(runs):
        lines.append(f"| {task} | {fam} | {w} | {n:,} | {lr:g} | {m:.3f} +- {s:.3f} | {k} |")
    mech = mechanism_table(runs)
    if mech:
        lines += ["", "## DS4D mechanism at the best checkpoint (Table 1 protocol)", "",
                  "`tau_min`: every delay collapsed to one step; `mu=0`: delayed branch removed (lam kept).", "",
                  "| task | mean delay | mean abs d tau | mean abs d mu | accuracy | acc tau_min | acc mu=0 |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for task, d, dt, dm, a, a1, a2 in mech:
            lines.append(f"| {task} | {d:.1f} | {dt:.3f} | {dm:.4f} | {a:.3f} | {a1:.3f} | {a2:.3f} |")
    lines += ["", "![learning curves](curves.png)", ""]
    return "\n".join(lines)
