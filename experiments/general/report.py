"""The general benchmarks' report: ``report.md`` (best / final test accuracy) and ``curves.png``."""
from __future__ import annotations

import json

import numpy as np


def groups(runs):
    """``{(task, model label): [finished runs over seeds]}``; the label shows H / lr / epochs / data
    size only where one task and family has several settings."""
    def canon(r):
        return json.dumps({"c": {k: v for k, v in r["config"].items() if k != "seed"}, "d": r.get("data")},
                          sort_keys=True)
    settings = {}
    for r in runs:
        if r.get("status", "done") == "done":
            settings.setdefault((r["task"], r["config"]["family"]), {}).setdefault(canon(r), r)
    groups = {}
    for r in runs:
        if r.get("status", "done") != "done":
            continue
        c, fam = r["config"], r["config"]["family"]
        label = fam
        if len(settings[(r["task"], fam)]) > 1:
            n_train = (r.get("data") or {}).get("n_train", "?")
            label += f" (H={c['width']}, lr={c['lr']:g}, epochs={c['epochs']}, n_train={n_train})"
        groups.setdefault((r["task"], label), []).append(r)
    return groups


def done(runs):
    """Whether a run has finished (the figure needs one)."""
    return bool(groups(runs))


def _metric(r):
    return r.get("metric", "acc")


def _table(grouped, m):
    """Rows of one table: the runs whose metric is ``m`` (``acc`` or ``rmse``)."""
    label = {"acc": "acc", "rmse": "RMSE"}[m]
    rows = {k: rs for k, rs in grouped.items() if _metric(rs[0]) == m}
    val = any(r.get("test_at_best_val") is not None for rs in rows.values() for r in rs)
    lines = [f"| task | model | H | params | bidirectional | best test {label} | final test {label} |"
             + (f" test {label} at best val |" if val else "") + " seeds | s/run |",
             "|---|---|---:|---:|---|---|---|" + ("---|" if val else "") + "---:|---:|"]
    for (task, fam), rs in rows.items():
        b, f = np.array([r[f"best_{m}"] for r in rs]), np.array([r[f"final_{m}"] for r in rs])
        c = rs[0]["config"]
        cell = ""
        if val:
            v = np.array([r.get("test_at_best_val", np.nan) for r in rs], dtype=float)
            cell = f" {v.mean():.4f} +- {v.std():.4f} |"
        lines.append(f"| {task} | {fam} | {c['width']} | {rs[0]['n_params']:,} | {c.get('bidirectional', False)} | "
                     f"{b.mean():.4f} +- {b.std():.4f} | {f.mean():.4f} +- {f.std():.4f} |{cell} {len(rs)} | "
                     f"{np.mean([r['seconds'] for r in rs]):.0f} |")
    return lines


def markdown(runs, meta):
    """``report.md``: best / final test accuracy (classification) or RMSE (regression), mean +- std over
    seeds, per task and model; with a validation split also the test score at the best validation epoch."""
    grouped = groups(runs)
    commands = meta.get("commands") or [meta.get("command", "")]
    lines = [f"# General sequence benchmarks ({meta.get('scale', '?')} scale)", "",
             "Commands: " + "; ".join(f"`{c}`" for c in commands) + "  ",
             f"Date: {meta.get('date', '')}; device {meta.get('device', '')}; torch {meta.get('torch', '')}.", ""]
    cls, reg = _table(grouped, "acc"), _table(grouped, "rmse")        # header (2 lines) + rows
    if len(cls) > 2 or len(reg) == 2:
        lines += cls
    if len(reg) > 2:
        lines += ([""] if len(cls) > 2 else []) + ["Regression (lower is better):", ""] + reg
    bad = [r for r in runs if r.get("status", "done") != "done"]
    if bad:
        lines += ["", "Diverged runs (non-finite loss; not in the table): " + "; ".join(
            f"{r['task']} {r['config']['family']} H={r['config']['width']} lr={r['config']['lr']:g} "
            f"seed {r['config']['seed']} at epoch {r.get('diverged_epoch', '?')}" for r in bad) + "."]
    figure = "test score" if len(reg) > 2 else "test accuracy"
    lines += ["", f"![{figure} per epoch](curves.png)", ""]
    return "\n".join(lines)


def plot_curves(runs, path):
    """Test accuracy per epoch, mean +- std over seeds, one panel per task."""
    from ddesys.plot import pyplot
    grouped = groups(runs)
    plt = pyplot()
    tasks = list(dict.fromkeys(t for t, _ in grouped))
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.5 * len(tasks), 3.3), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for (t, fam), rs in grouped.items():
            if t == task:
                n = min(len(r["curve"]) for r in rs)
                m = _metric(rs[0])
                acc = np.array([[c[f"test_{m}"] for c in r["curve"][:n]] for r in rs])
                line, = ax.plot(np.arange(1, n + 1), acc.mean(0), "o-", ms=3, label=fam)
                if len(rs) > 1:
                    ax.fill_between(np.arange(1, n + 1), acc.mean(0) - acc.std(0), acc.mean(0) + acc.std(0),
                                    color=line.get_color(), alpha=0.15)
        ax.set_title(task)
        ax.set_xlabel("epoch")
        ax.set_ylabel("test RMSE" if any(_metric(rs[0]) == "rmse" for (t, _), rs in grouped.items() if t == task)
                      else "test accuracy")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


__all__ = ["done", "groups", "markdown", "plot_curves"]
