"""The general benchmarks' report: ``report.md`` (test accuracy or RMSE at the epoch and learning rate
chosen on validation and at the last epoch, per seed and mean +- std; never a best test score) and
``curves.png``."""
from __future__ import annotations

import json

import numpy as np

from .._tables import chosen_on_validation


def _labelled(runs, drop, detail):
    """``(task, model label, run)`` of every finished run: the family, with ``detail(run)`` added where one
    task and family has several settings (the config without the keys ``drop``, and the data sizes)."""
    def canon(r):
        return json.dumps({"c": {k: v for k, v in r["config"].items() if k not in drop}, "d": r.get("data")},
                          sort_keys=True)
    finished = [r for r in runs if r.get("status", "done") == "done"]
    settings = {}
    for r in finished:
        settings.setdefault((r["task"], r["config"]["family"]), {}).setdefault(canon(r), r)
    return [(r["task"], r["config"]["family"] + (detail(r) if len(settings[(r["task"], r["config"]["family"])]) > 1
                                                 else ""), r) for r in finished]


def groups(runs):
    """``{(task, model label): [finished runs over seeds]}``; the label shows H / lr / epochs / data
    size only where one task and family has several settings."""
    def detail(r):
        c, n_train = r["config"], (r.get("data") or {}).get("n_train", "?")
        return f" (H={c['width']}, lr={c['lr']:g}, epochs={c['epochs']}, n_train={n_train})"
    out = {}
    for task, label, r in _labelled(runs, ("seed",), detail):
        out.setdefault((task, label), []).append(r)
    return out


def done(runs):
    """Whether a run has finished (the figure needs one)."""
    return bool(groups(runs))


def _metric(r):
    return r.get("metric", "acc")


def held_out(curve, m="acc"):
    """The held-out reading of a run's per-epoch curve (points with ``epoch``, ``test_<m>`` and, where the
    run had a validation split, ``val_<m>``; ``m``: ``"acc"``, higher is better, or ``"rmse"``, lower is
    better): ``{"epoch", "val", "test", "val_final", "test_final"}``, the epoch chosen on validation alone
    (the first at the best validation score, as :func:`.train.train_run` keeps ``best_val_epoch``), the
    test score there, and both scores at the last epoch. ``epoch``, ``val``, ``test`` and ``val_final`` are
    None for a curve without validation scores (nothing can be chosen honestly); ``None`` for an empty
    curve. The test scores choose nothing."""
    return chosen_on_validation(curve, f"val_{m}", f"test_{m}", at="epoch", lower=m == "rmse")


def lr_groups(runs):
    """``{(task, model label): {lr: [finished runs over seeds]}}``: the runs of one task, family and setting
    (all but seed and learning rate) side by side over the rates it was tuned over; the label shows H /
    epochs / data size only where one task and family has several settings."""
    def detail(r):
        c, d = r["config"], r.get("data") or {}
        return (f" (H={c['width']}, epochs={c['epochs']}, n_train={d.get('n_train', '?')}"
                + (f", n_val={d['n_val']}" if "n_val" in d else "") + ")")
    out = {}
    for task, label, r in _labelled(runs, ("seed", "lr"), detail):
        out.setdefault((task, label), {}).setdefault(r["config"]["lr"], []).append(r)
    return out


def best_lr_runs(runs):
    """Rows ``(task, model label, lr, runs, n_lrs)``: each group of :func:`lr_groups` at the learning rate
    with the best mean validation score at the runs' validation-chosen epochs (:func:`held_out`; the first
    such rate on a tie), ``n_lrs`` the rates it was tuned over. The test scores take no part: a group of
    several rates none of which has validation scores (runs before the held-out protocol) is not chosen
    from, each rate is a row of its own."""
    rows = []
    for (task, label), by_lr in lr_groups(runs).items():
        m = _metric(next(iter(by_lr.values()))[0])
        sign = -1.0 if m == "rmse" else 1.0

        def score(lr):
            v = [h["val"] for h in (held_out(r["curve"], m) for r in by_lr[lr]) if h and h["val"] is not None]
            return sign * float(np.mean(v)) if v else None
        scored = {lr: score(lr) for lr in by_lr}
        chosen = [lr for lr in by_lr if scored[lr] is not None]
        if chosen:
            lr = max(chosen, key=lambda v: scored[v])
            rows.append((task, label, lr, by_lr[lr], len(by_lr)))
        elif len(by_lr) == 1:
            (lr, rs), = by_lr.items()
            rows.append((task, label, lr, rs, 1))
        else:
            rows += [(task, f"{label} [lr={lr:g}, not chosen: no validation]", lr, rs, len(by_lr))
                     for lr, rs in by_lr.items()]
    return rows


def _cell(values, n):
    vals = [v for v in values if v is not None]
    if not vals:
        return "not measured"
    v = np.array(vals, dtype=float)
    return f"{v.mean():.4f} +- {v.std():.4f}" + (f" ({len(vals)}/{n} runs)" if len(vals) < n else "")


def heldout_table(runs, m="acc"):
    """Rows ``(task, model, H, params, bidirectional, lr, n_lrs, n_seeds, seconds per run, [val, test, val
    last, test last] as "mean +- std" cells)`` of the runs whose metric is ``m``: each group at its
    validation-chosen learning rate (:func:`best_lr_runs`), every run read at its validation-chosen epoch
    (:func:`held_out`). A cell of runs without validation scores reads ``not measured``."""
    rows = []
    for task, label, lr, rs, n_lrs in best_lr_runs(runs):
        if _metric(rs[0]) != m:
            continue
        h = [x for x in (held_out(r["curve"], m) for r in rs) if x is not None]
        c = rs[0]["config"]
        rows.append((task, label, c["width"], rs[0]["n_params"], c.get("bidirectional", False), lr, n_lrs, len(rs),
                     float(np.mean([r["seconds"] for r in rs])),
                     [_cell([x[k] for x in h], len(h)) for k in ("val", "test", "val_final", "test_final")]))
    return rows


def seed_table(runs, m="acc"):
    """Per run of each group at its validation-chosen rate: ``(task, model, lr, seed, held_out(curve))``."""
    rows = []
    for task, label, lr, rs, _ in best_lr_runs(runs):
        if _metric(rs[0]) != m:
            continue
        for r in sorted(rs, key=lambda r: r["config"]["seed"]):
            h = held_out(r["curve"], m)
            if h is not None:
                rows.append((task, label, lr, r["config"]["seed"], h))
    return rows


def _table(runs, m):
    """The lines of one metric's tables (``acc`` or ``rmse``): mean +- std, then per seed; ``[]`` without
    runs of that metric."""
    rows = heldout_table(runs, m)
    if not rows:
        return []
    name = {"acc": "acc", "rmse": "RMSE"}[m]
    fmt = lambda v: "-" if v is None else f"{v:.4f}"  # noqa: E731
    lines = [f"| task | model | H | params | bidirectional | lr | lrs | validation {name} at the chosen epoch | "
             f"test {name} at the chosen epoch | validation {name} at the last epoch | test {name} at the last epoch "
             "| seeds | s/run |", "|---|---|---:|---:|---|---:|---:|---|---|---|---|---:|---:|"]
    for task, label, w, n, bidir, lr, n_lrs, k, sec, cells in rows:
        lines.append(f"| {task} | {label} | {w} | {n:,} | {bidir} | {lr:g} | {n_lrs} | " + " | ".join(cells)
                     + f" | {k} | {sec:.0f} |")
    lines += ["", "Per seed (at the chosen learning rate):", "",
              f"| task | model | lr | seed | chosen epoch | validation {name} | test {name} | validation {name}, "
              f"last epoch | test {name}, last epoch |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for task, label, lr, seed, h in seed_table(runs, m):
        lines.append(f"| {task} | {label} | {lr:g} | {seed} | {'-' if h['epoch'] is None else h['epoch']} | "
                     f"{fmt(h['val'])} | {fmt(h['test'])} | {fmt(h['val_final'])} | {fmt(h['test_final'])} |")
    return lines


def markdown(runs, meta):
    """``report.md``: test accuracy (classification) or RMSE (regression) at the epoch chosen on validation
    and at the last epoch, mean +- std over seeds and per seed, per task and model at the learning rate
    chosen on validation, with the count of rates tuned over. No "best test" score: the test split chooses
    nothing."""
    commands = meta.get("commands") or [meta.get("command", "")]
    lines = [f"# General sequence benchmarks ({meta.get('scale', '?')} scale)", "",
             "Commands: " + "; ".join(f"`{c}`" for c in commands) + "  ",
             f"Date: {meta.get('date', '')}; device {meta.get('device', '')}; torch {meta.get('torch', '')}.", ""]
    finished = [r for r in runs if r.get("status", "done") == "done"]
    missing = [r for r in finished if not any(p.get(f"val_{_metric(r)}") is not None for p in r["curve"])]
    carved = sorted({r["config"]["val_fraction"] for r in finished if r["config"].get("val_fraction") is not None})
    lines += ["The validation split chooses the learning rate (the best mean validation score at the chosen "
              "epochs) and each run's epoch (its first epoch at its best validation score); the test split chooses "
              "nothing. Validation: the data set's own split, or, for one without, "
              + (f"a share ({', '.join(f'{f:g}' for f in carved)}) of the training examples drawn by a fixed seed "
                 "(`n_val` in the run's data)" if carved else "a share of the training examples drawn by a fixed seed")
              + ". `lrs`: the learning rates the model was tuned over on this task."
              + ("" if not missing else
                 f" **Test at the chosen epoch not measured** for {len(missing)} of {len(finished)} runs: they "
                 "predate the held-out protocol on a data set without a validation split, so no epoch (and no "
                 "learning rate) could be chosen without the test split; their test score at the last epoch "
                 "involves no choice of epoch. Rerun the command to add runs with a validation split carved from "
                 "the training data (their configurations differ, so they are new runs beside these)."), ""]
    cls, reg = _table(runs, "acc"), _table(runs, "rmse")
    if cls or not reg:
        lines += cls or ["No finished runs."]
    if reg:
        lines += ([""] if cls else []) + ["Regression (lower is better):", ""] + reg
    bad = [r for r in runs if r.get("status", "done") != "done"]
    if bad:
        lines += ["", "Diverged runs (non-finite loss; not in the table): " + "; ".join(
            f"{r['task']} {r['config']['family']} H={r['config']['width']} lr={r['config']['lr']:g} "
            f"seed {r['config']['seed']} at epoch {r.get('diverged_epoch', '?')}" for r in bad) + "."]
    figure = "test score" if reg else "test accuracy"
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


__all__ = ["best_lr_runs", "done", "groups", "held_out", "heldout_table", "lr_groups", "markdown", "plot_curves",
           "seed_table"]
