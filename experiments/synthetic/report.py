"""Tables and figures from a synthetic results file: held-out test accuracy (the learning rate and each run's
checkpoint chosen on validation, the test set choosing nothing; at the chosen checkpoint and at the last step,
per seed and mean +- std), the paper's Figure 2 (learning curves with seed bands), Table 6 (best validation
accuracy, mean +- std over seeds, each family at its best learning rate), the learning-rate sweep behind it
(every rate of each family), sample efficiency (accuracy within fixed step budgets, steps to reach 90% / 95%
accuracy), a method's own settings compared on validation, accuracy by lag bucket and by output position, the
decisions of the clocks learned by flip tests, and Table 1 (DS4D mechanism: delays, their change from
initialization, ablations). Runs that diverged are listed, not averaged."""
from __future__ import annotations

import json
import textwrap
from collections import defaultdict
from pathlib import Path

import numpy as np

from .._models import model_of
from .._runs import canonical as _canon
from .._runs import done_runs as done
from .._tables import chosen_on_validation
from .._tables import mean_std as _ms
from . import diagnosis
from .tasks import COPY_KINDS

BUDGETS = (0.25, 0.5, 1.0)          # step budgets, as fractions of a run's steps
THRESHOLDS = (0.90, 0.95)           # accuracies whose first crossing measures sample efficiency


def load(path):
    """Runs of a ``results.json`` (a list of :func:`train.train_run` dicts)."""
    return json.loads(Path(path).read_text())["runs"]




def _task_labels(runs):
    """``{canonical task dict: label}``: the task's name, with its sizes when one name has several."""
    by_name = defaultdict(dict)
    for r in runs:
        t = r["config"]["task"]
        by_name[t["name"]][_canon(t)] = t
    out = {}
    for name, variants in by_name.items():
        for key, t in variants.items():
            out[key] = name if len(variants) == 1 else f"{name} (T={t['T']}, P={t['P_min']}..{t['P_max']})"
    return out


def _groups(runs):
    """``{(task label, model label): {lr: [runs over seeds]}}``; a model label names the settings that
    tell apart several groups of one family on one task (e.g. two step counts), on every task of that
    family in the file."""
    labels = _task_labels(runs)
    settings = defaultdict(dict)
    for r in done(runs):
        c = r["config"]
        settings[(labels[_canon(c["task"])], c["family"])].setdefault(_canon(c, ("seed", "lr")), c)
    varying = defaultdict(set)              # per family: the settings that tell its groups apart on some task
    for (task, fam), variants in settings.items():
        if len(variants) > 1:
            varying[fam] |= {k for k in set().union(*variants.values()) if k not in ("seed", "lr", "task")
                             and len({json.dumps(v.get(k)) for v in variants.values()}) > 1}
    g = defaultdict(lambda: defaultdict(list))
    for r in done(runs):
        c = r["config"]
        task, fam = labels[_canon(c["task"])], c["family"]
        label = fam                         # named by those settings on every task, so the groups read alike
        if varying[fam]:
            label = f"{fam} ({', '.join(f'{k}={_setting(c.get(k))}' for k in sorted(varying[fam]))})"
        g[(task, label)][c["lr"]].append(r)
    return g


def _setting(v):
    """A setting as a model label shows it: a dict as ``(key value, ...)`` (``time_cost`` ``(weight 0.3,
    steps 100, after 0.03)``), anything else as it is (``None``: the setting's default)."""
    if isinstance(v, dict):
        return "(" + ", ".join(f"{k} {x:g}" if isinstance(x, float) else f"{k} {x}" for k, x in v.items()) + ")"
    return v


def best_lr_runs(runs):
    """``{(task, model): (lr, runs)}``: the learning rate with the highest mean best accuracy; among equal
    ones (e.g. every rate at 1.000), the one that reached it in the fewest steps (mean ``best_step``)."""
    out = {}
    for key, by_lr in _groups(runs).items():
        lr = max(by_lr, key=lambda v: (np.mean([r["best_acc"] for r in by_lr[v]]),
                                       -np.mean([r.get("best_step", 0) for r in by_lr[v]])))
        out[key] = (lr, by_lr[lr])
    return out


def held_out(curve):
    """The held-out reading of a learning curve (points with ``step``, ``val_acc`` and, under the held-out
    protocol, ``test_acc``): ``{"step", "val", "test", "val_final", "test_final"}``, the checkpoint chosen
    on validation alone (the first evaluation at the highest validation accuracy, as :func:`.train.train_run`
    keeps it), the test accuracy there, and both accuracies at the last evaluation. ``test`` and
    ``test_final`` are None for a curve without test scores; ``None`` for an empty curve. The test scores
    choose nothing."""
    return chosen_on_validation(curve, "val_acc", "test_acc")


def accuracy_table(runs):
    """Rows ``(task, model, width, params, lr, mean, std, n_seeds)``, tasks and families in run order."""
    rows = []
    for (task, fam), (lr, rs) in best_lr_runs(runs).items():
        acc = np.array([r["best_acc"] for r in rs])
        rows.append((task, fam, rs[0]["config"]["width"], rs[0]["n_params"], lr, float(acc.mean()),
                     float(acc.std()), len(rs)))
    return rows


def heldout_table(runs):
    """Rows ``(task, model, lr, n_lrs, n_seeds, [val, test, val final, test final] as "mean +- std" cells)``:
    each group at the learning rate chosen on validation (:func:`best_lr_runs`; ``n_lrs`` the rates it
    was tuned over), every run read at the checkpoint chosen on validation (:func:`held_out`). A test cell
    of runs without test scores reads ``not measured``; a group with some runs measured says how many."""
    rows = []
    lrs = {k: len(v) for k, v in _groups(runs).items()}
    for (task, fam), (lr, rs) in best_lr_runs(runs).items():
        h = [held_out(r["curve"]) for r in rs]
        h = [x for x in h if x is not None]

        def cell(name):
            vals = [x[name] for x in h if x[name] is not None]
            if not vals:
                return "not measured"
            return _ms(vals) + (f" ({len(vals)}/{len(h)} runs)" if len(vals) < len(h) else "")
        rows.append((task, fam, lr, lrs[(task, fam)], len(rs), [cell(k) for k in ("val", "test", "val_final",
                                                                                "test_final")]))
    return rows


def seed_table(runs):
    """Per run of each group at its validation-chosen rate: ``(task, model, lr, seed, held_out(curve))``."""
    rows = []
    for (task, fam), (lr, rs) in best_lr_runs(runs).items():
        for r in sorted(rs, key=lambda r: r["config"]["seed"]):
            h = held_out(r["curve"])
            if h is not None:
                rows.append((task, fam, lr, r["config"]["seed"], h))
    return rows


def acc_within(run, budget):
    """Best validation accuracy among the evaluations at steps <= ``budget`` (``None``: none yet)."""
    accs = [p["val_acc"] for p in run["curve"] if p["step"] <= budget]
    return max(accs) if accs else None


def steps_to(run, threshold):
    """First evaluated step with validation accuracy >= ``threshold`` (``None``: not reached)."""
    return next((p["step"] for p in run["curve"] if p["val_acc"] >= threshold), None)


def efficiency_table(runs, budgets=BUDGETS, thresholds=THRESHOLDS):
    """Rows ``(task, model, steps, [acc within each budget], [steps to each threshold])``: cells are
    ``mean +- std`` strings over seeds; a threshold some seeds missed reads ``... (k/n seeds)``, one no
    seed reached ``not reached``."""
    rows = []
    for (task, fam), (_, rs) in best_lr_runs(runs).items():
        steps = rs[0]["config"]["steps"]
        acc = [_ms([acc_within(r, max(1, round(f * steps))) for r in rs]) for f in budgets]
        reach = []
        for th in thresholds:
            hit = [steps_to(r, th) for r in rs]
            got = [h for h in hit if h is not None]
            cell = "not reached" if not got else _ms(got, "{:.0f}")
            reach.append(cell + (f" ({len(got)}/{len(hit)} seeds)" if got and len(got) < len(hit) else ""))
        rows.append((task, fam, steps, acc, reach))
    return rows


def _sweep(runs, cell):
    """The groups swept over several base rates: ``(lrs, rows)``, ``lrs`` every such rate ascending, rows
    ``(task, model, lr chosen on validation, [cell(runs at that rate) or "-" per lr])``; a row whose every
    cell is ``"-"`` is left out."""
    groups = {k: v for k, v in _groups(runs).items() if len(v) > 1}
    lrs = sorted({lr for by_lr in groups.values() for lr in by_lr})
    best = best_lr_runs(runs)
    rows = []
    for (task, fam), by_lr in groups.items():
        cells = [(cell(by_lr[lr]) if by_lr.get(lr) else None) or "-" for lr in lrs]
        if any(c != "-" for c in cells):
            rows.append((task, fam, best[(task, fam)][0], cells))
    return lrs, rows


def lr_table(runs):
    """The learning-rate sweep: ``(lrs, rows)`` (:func:`_sweep`), a cell ``"mean +- std"`` of the best
    accuracy over seeds with the mean steps to 90%, or ``never 90%`` (``"-"``: that rate was not run)."""
    def cell(rs):
        hit = [steps_to(r, THRESHOLDS[0]) for r in rs]
        got = [h for h in hit if h is not None]
        reach = ("never 90%" if not got else f"90% at {np.mean(got):.0f}"
                 + (f" ({len(got)}/{len(hit)} seeds)" if len(got) < len(hit) else ""))
        return f"{_ms([r['best_acc'] for r in rs])} ({reach})"
    return _sweep(runs, cell)


def heldout_lr_table(runs):
    """The learning-rate sweep read on the held-out test set: ``(lrs, rows)`` (:func:`_sweep`), a cell
    ``"mean +- std"`` over seeds of the test accuracy at each run's checkpoint chosen on validation
    (:func:`held_out`), ``"-"`` where the rate was not run or its runs have no test scores. Only groups
    with test scores; the test chooses nothing here either."""
    def cell(rs):
        h = [held_out(r["curve"]) for r in rs]
        vals = [x["test"] for x in h if x is not None and x["test"] is not None]
        return _ms(vals) if vals else None
    return _sweep(runs, cell)


def settings_table(runs):
    """A method's own settings compared on validation: per family run under several settings (its groups'
    labels differ), rows ``(family, tasks, common, [(label, [cell per task], mean)])``: a cell is the validation
    accuracy at each run's checkpoint chosen on validation (:func:`held_out`), mean over seeds, at the rate
    chosen on validation, with the number of seeds (``"-"``: not run); ``mean`` the mean of the cells over
    ``common``, the tasks every setting of the family ran (``None``: no such task). The test set chooses
    nothing here."""
    by_fam = defaultdict(lambda: defaultdict(dict))             # family -> label -> task -> (mean, seeds)
    for (task, label), (_, rs) in best_lr_runs(runs).items():
        vals = [h["val"] for h in (held_out(r["curve"]) for r in rs) if h is not None]
        if vals:
            by_fam[rs[0]["config"]["family"]][label][task] = (float(np.mean(vals)), len(vals))
    out = []
    for fam, by_label in by_fam.items():
        if len(by_label) < 2:
            continue
        tasks = list(dict.fromkeys(t for cells in by_label.values() for t in cells))
        common = [t for t in tasks if all(t in cells for cells in by_label.values())]
        rows = [(label, [f"{cells[t][0]:.3f} ({cells[t][1]})" if t in cells else "-" for t in tasks],
                 float(np.mean([cells[t][0] for t in common])) if common else None)
                for label, cells in by_label.items()]
        out.append((fam, tasks, common, rows))
    return out


def _sweep_lines(lrs, rows, lr_header):
    """A sweep's markdown table (:func:`_sweep` rows), the chosen rate's column named ``lr_header``."""
    return (["| task | model | " + lr_header + " | " + " | ".join(f"lr {lr:g}" for lr in lrs) + " |",
             "|---|---|---:|" + "---|" * len(lrs)]
            + [f"| {task} | {fam} | {lr:g} | " + " | ".join(cells) + " |" for task, fam, lr, cells in rows])


def lag_table(runs):
    """Variable-delay tasks: rows ``(task, model, [short, long] lag bounds, [short, long] mean +- std)``."""
    rows = []
    for (task, fam), (_, rs) in best_lr_runs(runs).items():
        lags = [r["by_lag"] for r in rs if r.get("by_lag")]
        if lags:
            rows.append((task, fam, lags[0]["bounds"], [_ms([b["acc"][i] for b in lags]) for i in (0, 1)]))
    return rows


def position_table(runs, bins=4):
    """Rows ``(task, model, [(first, last) output of each bin], [mean +- std accuracy of each bin])``: the
    T outputs in up to ``bins`` contiguous bins (1-based), per-seed bin means, then over seeds."""
    rows = []
    for (task, fam), (_, rs) in best_lr_runs(runs).items():
        pos = [np.array(r["by_position"]) for r in rs if r.get("by_position")]
        if not pos:
            continue
        edges = np.array_split(np.arange(len(pos[0])), min(bins, len(pos[0])))
        rows.append((task, fam, [(int(e[0]) + 1, int(e[-1]) + 1) for e in edges],
                     [_ms([p[e].mean() for p in pos]) for e in edges]))
    return rows


def mechanism_table(runs):
    """DS4D rows ``(task, model, mean delay, |dtau|, |dmu|, acc, acc tau_min, acc mu=0, tap)``, means over
    seeds; ``tap`` is ``None`` without an input tap, else ``(mean tap delay, |d s_tap|, window
    half-width, acc tap=0)`` (``ds4d-tap``)."""
    rows = []
    for (task, fam), (_, rs) in best_lr_runs(runs).items():
        ms = [r["mechanism"] for r in rs if "mechanism" in r]
        if not model_of(rs[0]["config"]).is_ds4d or not ms:
            continue
        f = lambda k: float(np.mean([m[k] for m in ms]))  # noqa: E731
        tap = None
        if all("acc_tap_zero" in m for m in ms):
            tap = (f("mean_tap_delay"), f("mean_abs_dtap"), f("tap_width"), f("acc_tap_zero"))
        rows.append((task, fam, f("mean_delay"), f("mean_abs_dtau"), f("mean_abs_dmu"), f("acc"), f("acc_tau_min"),
                     f("acc_mu_zero"), tap))
    return rows


def plot_curves(runs, path):  # needs a finished run (see done())
    """Validation accuracy vs step, one panel per task, each family at its best learning rate (mean over
    seeds, band = min..max). A panel whose runs' lengths differ more than 3x has a logarithmic step axis;
    the legend goes beside the panels when it has more than five entries."""
    from ddesys.plot import pyplot
    plt = pyplot()
    best = best_lr_runs(runs)
    tasks = list(dict.fromkeys(t for t, _ in best))
    cols = min(3, len(tasks))
    rows = -(-len(tasks) // cols)
    side = max(sum(t == tasks[0] for t, _ in best), 1) > 5
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols + (3.8 if side else 0), 3.2 * rows), squeeze=False)
    for ax, task in zip(axes.flat, tasks):
        lengths = []
        for (t, fam), (lr, rs) in best.items():
            if t != task:
                continue
            steps = [p["step"] for p in rs[0]["curve"]]
            lengths.extend(steps[-1:])
            acc = np.array([[p["val_acc"] for p in r["curve"]] for r in rs if len(r["curve"]) == len(steps)])
            line, = ax.plot(steps, acc.mean(0), label=f"{fam} (lr {lr:g}, {len(acc)} seed{'s' * (len(acc) > 1)})",
                            lw=2 if model_of(rs[0]["config"]).is_ds4d else 1.2)
            if len(acc) > 1:
                ax.fill_between(steps, acc.min(0), acc.max(0), color=line.get_color(), alpha=0.15)
        if lengths and max(lengths) > 3 * min(lengths):
            ax.set_xscale("log")
        ax.set_title(task)
        ax.set_xlabel("step")
        ax.set_ylabel("validation accuracy")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(tasks):]:
        ax.axis("off")
    if side:
        axes.flat[0].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    else:
        axes.flat[0].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def clocked_runs(runs):
    """The finished runs whose learning curve records learned clocks (``clock`` at each evaluation)."""
    return [r for r in done(runs) if any(p.get("clock") for p in r["curve"])]


def clock_table(runs):
    """Rows ``(task, model, lr, seed, step, validation accuracy, [(at padding, elsewhere) per gated layer])``:
    each learned-clock run's mean clock per layer at the padding and at the other tokens, read at the
    last evaluation (every group and learning rate; the curves' ``clock`` records)."""
    rows = []
    for (task, label), by_lr in _groups(runs).items():
        for lr in sorted(by_lr):
            for r in sorted(by_lr[lr], key=lambda r: r["config"]["seed"]):
                pts = [p for p in r["curve"] if p.get("clock")]
                if pts:
                    last = pts[-1]
                    rows.append((task, label, lr, r["config"]["seed"], last["step"], last["val_acc"],
                                 [(c["pad"], c["tokens"]) for c in last["clock"]]))
    return rows


def _ids(ids):
    """Token ids as ranges: ``[0, 1, 2, 5]`` -> ``"0-2, 5"`` (``"none"`` when empty)."""
    ids, parts = sorted(ids), []
    for i in ids:
        if parts and i == parts[-1][1] + 1:
            parts[-1][1] = i
        else:
            parts.append([i, i])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in parts) or "none"


def flip_table(runs):
    """Rows ``(task, model, lr, seed, tests per step, paused after a tick, paused after a pause, settled,
    least tests, median tests)`` for each finished run of a clock learned by flip tests (``flip`` records
    in its curve): the ids paused at the last evaluation after a tick and inside a run of pauses (``None``:
    a clock without that context); ``settled``: the first evaluation from which both sets stay as they end;
    ``least`` / ``median tests``: over the entries paused at the end, the flip tests each got up to
    ``settled`` (``None``: not recorded). Entries are numbered as :class:`nn.FlipRunClock` numbers them
    (``id`` after a tick, ``vocab + id`` after a pause)."""
    rows = []
    for (task, label), by_lr in _groups(runs).items():
        for lr in sorted(by_lr):
            for r in sorted(by_lr[lr], key=lambda r: r["config"]["seed"]):
                pts = [p for p in r["curve"] if p.get("flip") and "pauses" in p["flip"]]
                if not pts or not done([r]):
                    continue
                c, f = r["config"], [p["flip"] for p in pts]
                state = [(tuple(x["pauses"]), tuple(x.get("pauses_after_pause") or ())) for x in f]
                k = len(state) - 1
                while k > 0 and state[k - 1] == state[-1]:
                    k -= 1
                settled = pts[k]["step"]
                after = f[-1].get("pauses_after_pause")
                entries = [str(i) for i in f[-1]["pauses"]] + [str(c["task"]["vocab"] + i) for i in after or ()]
                least = median = None
                if entries and all("tests" in x for x in f):
                    n = {e: sum(x["tests"].get(e, [0])[0] for p, x in zip(pts, f) if p["step"] <= settled)
                         for e in entries}
                    least, median = min(n.values()), int(np.median(list(n.values())))
                rows.append((task, label, lr, c["seed"], c.get("flip_tests") or 1, _ids(f[-1]["pauses"]),
                             None if after is None else _ids(after), settled, least, median))
    return rows


def plot_clocks(runs, path):
    """The learned clocks against the padding during training: one panel per clocked run (task, model,
    seed), each layer's mean clock at the padding (solid) and at the other tokens (dotted), with the
    validation accuracy (black) on the same 0..1 axis. Nothing is drawn without such a run."""
    runs = clocked_runs(runs)
    if not runs:
        return
    from ddesys.plot import pyplot
    plt = pyplot()
    labels = {id(r): model for (_, model), by_lr in _groups(runs).items() for rs in by_lr.values() for r in rs}
    cols = min(3, len(runs))
    rows = -(-len(runs) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    for ax, r in zip(axes.flat, runs):
        pts = [p for p in r["curve"] if p.get("clock")]
        steps = [p["step"] for p in pts]
        for i in range(len(pts[0]["clock"])):
            line, = ax.plot(steps, [p["clock"][i]["pad"] for p in pts], lw=1.5, label=f"layer {i + 1} at padding")
            ax.plot(steps, [p["clock"][i]["tokens"] for p in pts], ls=":", color=line.get_color(),
                    label=f"layer {i + 1} elsewhere")
        ax.plot([p["step"] for p in r["curve"]], [p["val_acc"] for p in r["curve"]], color="k", lw=1,
                label="validation accuracy")
        c = r["config"]
        ax.set_title(textwrap.fill(f"{c['task']['name']} {labels[id(r)]} lr {c['lr']:g} seed {c['seed']}", 60),
                     fontsize=7)
        ax.set_xlabel("step")
        ax.set_ylim(-0.03, 1.03)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(runs):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=6, loc="lower right", framealpha=0.9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _header(runs, meta):
    commands = meta.get("commands") or [meta.get("command", "")]
    worlds = sorted({r.get("world_size", 1) for r in runs})
    lines = [f"# Synthetic delay tasks ({meta.get('scale', '?')} scale)", "",
             "Commands: " + "; ".join(f"`{c}`" for c in commands) + "  ",
             f"Date: {meta.get('date', '')}; device: {meta.get('device', '')}; torch {meta.get('torch', '')}; "
             f"{len(runs)} runs, {sum(r.get('seconds', 0) for r in runs):.0f} s of training"
             + (f"; processes per run: {', '.join(map(str, worlds))}" if worlds != [1] else "") + ".", "",
             "Tasks (ours; the paper's tables of T, P, w, V were lost with its text):", ""]
    labels = _task_labels(runs)
    seen = {}
    for r in runs:
        seen.setdefault(_canon(r["config"]["task"]), r["config"]["task"])
    for key, t in seen.items():
        lines.append(f"- {labels[key]}: T={t['T']}, P in [{t['P_min']}, {t['P_max']}], V={t['vocab']}, "
                     f"data 1..{t['data_max']}" + (f", window {t['window']}" if t["kind"] not in COPY_KINDS else "")
                     + (f", sigma {t['sigma']}" if t["kind"] == "wsum" else "")
                     + (f", {t['gap']} filler tokens (id {t['vocab'] - 2}) before the padding" if t.get("gap") else "")
                     + f", context {t['length']}")
    return lines


def markdown(runs, meta):
    """The report: setup, Table 6 analog, sample efficiency, lag and position breakdowns, Table 1 analog,
    diverged runs, figure."""
    lines = _header(runs, meta)
    held = heldout_table(runs)
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    measured = any(p.get("test_acc") is not None for r in done(runs) for p in r["curve"])
    lines += ["", "## Held-out test accuracy (mean +- std over seeds)", "",
              "The validation set chooses the learning rate (the highest mean best validation accuracy) and each "
              "run's checkpoint (its first evaluation at its best validation accuracy); the test set, other "
              "sequences of the same task (another generator seed), chooses nothing. `lrs`: the learning rates the "
              "model was tuned over on this task."
              + ("" if measured else " **Test not measured**: these runs predate the held-out protocol, so the "
                 "validation accuracies here are the best of many evaluations on the set that chose them and "
                 "overstate what new sequences would give. Rerun the command to add runs with a test set (their "
                 "configurations differ, so they are new runs beside these)."), "",
              "| task | model | lr | lrs | validation at the chosen checkpoint | test at the chosen checkpoint | "
              "validation at the last step | test at the last step | seeds |",
              "|---|---|---:|---:|---|---|---|---|---:|"]
    for task, fam, lr, n_lrs, k, cells in held:
        lines.append(f"| {task} | {fam} | {lr:g} | {n_lrs} | " + " | ".join(cells) + f" | {k} |")
    lines += ["", "Per seed (at the chosen learning rate):", "",
              "| task | model | lr | seed | chosen step | validation | test | validation, last step | "
              "test, last step |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for task, fam, lr, seed, h in seed_table(runs):
        lines.append(f"| {task} | {fam} | {lr:g} | {seed} | {h['step']} | {fmt(h['val'])} | {fmt(h['test'])} | "
                     f"{fmt(h['val_final'])} | {fmt(h['test_final'])} |")
    lines += ["", "## Best validation accuracy (Table 6 protocol: mean +- std over seeds, best learning rate)", "",
              "| task | model | H | params | lr | accuracy | seeds |", "|---|---|---:|---:|---:|---|---:|"]
    for task, fam, w, n, lr, m, s, k in accuracy_table(runs):
        lines.append(f"| {task} | {fam} | {w} | {n:,} | {lr:g} | {m:.3f} +- {s:.3f} | {k} |")
    eff = efficiency_table(runs)
    if eff:
        lines += ["", "## Sample efficiency (mean +- std over seeds, best learning rate)", "",
                  "Accuracy within a budget: the best validation accuracy evaluated at or before that step. "
                  "Steps to an accuracy: the first evaluated step at or above it.", "",
                  "| task | model | steps | " + " | ".join(f"acc within {f:g} x steps" for f in BUDGETS) + " | "
                  + " | ".join(f"steps to {t:.0%}" for t in THRESHOLDS) + " |",
                  "|---|---|---:|" + "---|" * (len(BUDGETS) + len(THRESHOLDS))]
        for task, fam, steps, acc, reach in eff:
            lines.append(f"| {task} | {fam} | {steps} | " + " | ".join(acc + reach) + " |")
    lrs, sweep = lr_table(runs)
    if sweep:
        lines += ["", "## Learning-rate sweep (best validation accuracy per base learning rate, mean +- std over "
                  "seeds; the tables above take each model at its best rate)", ""] + _sweep_lines(lrs, sweep, "best lr")
        lrs, tested = heldout_lr_table(runs)
        if tested:
            lines += ["", "The same sweep on the test set (test accuracy at each run's checkpoint chosen on "
                      "validation, mean +- std over seeds; the rate is still chosen on validation):", ""]
            lines += _sweep_lines(lrs, tested, "chosen lr")
    for fam, tasks, common, rows in settings_table(runs):
        lines += ["", f"## {fam}: its settings compared on validation", "",
                  "Validation accuracy at each run's checkpoint chosen on validation, mean over seeds (their "
                  "number in parentheses), at the rate chosen on validation; the last column the mean over the "
                  "tasks every setting ran (" + (", ".join(common) or "none") + "). The test set chooses nothing "
                  "here.", "",
                  "| setting | " + " | ".join(tasks) + " | mean over tasks |", "|---|" + "---:|" * (len(tasks) + 1)]
        lines += [f"| {label} | " + " | ".join(cells) + f" | {'-' if m is None else f'{m:.3f}'} |"
                  for label, cells, m in rows]
    lag = lag_table(runs)
    if lag:
        lines += ["", "## Accuracy by lag (variable-delay tasks, best evaluation)", "",
                  "| task | model | short lags | accuracy | long lags | accuracy |", "|---|---|---|---|---|---|"]
        for task, fam, (b0, b1), (a0, a1) in lag:
            lines.append(f"| {task} | {fam} | P in [{b0[0]}, {b0[1]}] | {a0} | P in [{b1[0]}, {b1[1]}] | {a1} |")
    pos = position_table(runs)
    if pos:
        lines += ["", "## Accuracy by output position (best evaluation; outputs numbered from 1)", ""]
        for width in sorted({len(b) for _, _, b, _ in pos}):
            rows = [p for p in pos if len(p[2]) == width]
            lines += ["| task | model | " + " | ".join(f"bin {i + 1}" for i in range(width)) + " |",
                      "|---|---|" + "---|" * width]
            for task, fam, bounds, acc in rows:
                cells = [f"{a} (output{f' {lo}' if lo == hi else f's {lo}-{hi}'})" for (lo, hi), a in zip(bounds, acc)]
                lines.append(f"| {task} | {fam} | " + " | ".join(cells) + " |")
            lines.append("")
    mech = mechanism_table(runs)
    if mech:
        tap = any(r[8] for r in mech)                      # tap columns only when some run has a tap
        lines += ["", "## DS4D mechanism at the best checkpoint (Table 1 protocol)", "",
                  "`tau_min`: every delay collapsed to one step; `mu=0`: delayed branch removed (lam kept)."
                  + (" ds4d-tap: mean input-tap delay s_tap, its mean change from initialization, the tap window's "
                     "half-width at the best checkpoint, and the accuracy with every tap gain set to zero "
                     "(`tap=0`; tau_min and mu=0 keep the tap)." if tap else ""), "",
                  "| task | model | mean delay | mean abs d tau | mean abs d mu | accuracy | acc tau_min | acc mu=0 |"
                  + (" mean tap delay | mean abs d s_tap | tap width | acc tap=0 |" if tap else ""),
                  "|---|---|---:|---:|---:|---:|---:|---:|" + ("---:|" * 4 if tap else "")]
        for task, fam, d, dt, dm, a, a1, a2, tp in mech:
            cells = ("" if not tap else " - | - | - | - |" if tp is None
                     else f" {tp[0]:.1f} | {tp[1]:.3f} | {tp[2]:.2f} | {tp[3]:.3f} |")
            lines.append(f"| {task} | {fam} | {d:.1f} | {dt:.3f} | {dm:.4f} | {a:.3f} | {a1:.3f} | {a2:.3f} |" + cells)
    bad = [r for r in runs if r.get("status", "done") != "done"]
    if bad:
        lines += ["", "## Diverged runs (non-finite loss; not in the tables above)", "",
                  "| task | model | H | lr | seed | diverged at step | best accuracy before |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        for r in bad:
            c = r["config"]
            best = f"{r['best_acc']:.3f}" if r.get("best_acc", -1) >= 0 else "no evaluation yet"
            lines.append(f"| {c['task']['name']} | {c['family']} | {c['width']} | {c['lr']:g} | {c['seed']} | "
                         f"{r.get('diverged_step', '?')} | {best} |")
    lines += ["", "![learning curves](curves.png)", ""]
    pads = [(task, label, r, diagnosis.table(r)) for (task, label), by_lr in _groups(runs).items()
            for lr in sorted(by_lr) for r in sorted(by_lr[lr], key=lambda r: r["config"]["seed"])]
    pads = [p for p in pads if p[3]]
    if pads:
        lines += ["## Padding ids and the learned clocks", "",
                  "Per run, gated layer and padding id: its tokens on the probe batch, the fraction that tick at "
                  "the first and the last evaluation, the push of the task loss and of the time cost on the "
                  "clock at those tokens (minus the derivative, summed over the tokens and over every evaluation; "
                  "negative: towards a pause), and at the last evaluation the gate's logit at the id (it ticks "
                  "above 0) beside the lowest logit of any other id (`-`: not recorded).", "",
                  "| task | model | lr | seed | layer | id | tokens | ticks first | ticks last | loss push | cost push "
                  "| logit last | lowest other logit |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        f = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
        for task, label, r, rows in pads:
            c = r["config"]
            for layer, i, n, t0, t1, gl, gc, z, zd in rows:
                lines.append(f"| {task} | {label} | {c['lr']:g} | {c['seed']} | {layer} | {i} | {n} | {f(t0)} | "
                             f"{f(t1)} | {gl:.3g} | {gc:.3g} | {f(z)} | {f(zd)} |")
        lines.append("")
    flips = flip_table(runs)
    if flips:
        g = lambda v: "-" if v is None else f"{v}"  # noqa: E731
        lines += ["## The clocks learned by flip tests", "",
                  "Each run of a clock learned by flip tests: the ids it pauses at its last evaluation, after a "
                  "tick and (a clock that reads whether the token before paused) inside a run of pauses; the "
                  "evaluation from which both stay as they end; over the entries paused at the end, the fewest "
                  "and the median flip tests an entry got up to that step (`-`: not recorded).", "",
                  "| task | model | lr | seed | tests per step | paused after a tick | paused after a pause | "
                  "settled at step | fewest tests | median tests |",
                  "|---|---|---:|---:|---:|---|---|---:|---:|---:|"]
        for task, label, lr, seed, tests, p0, p1, step, least, med in flips:
            lines.append(f"| {task} | {label} | {lr:g} | {seed} | {tests} | {p0} | {g(p1)} | {step} | {g(least)} "
                         f"| {g(med)} |")
        lines.append("")
    if clocked_runs(runs):
        rows = clock_table(runs)
        n = max(len(r[6]) for r in rows)
        lines += ["## The learned clocks", "",
                  "Each learned-clock run at its last evaluation: per gated layer, the mean clock at the padding "
                  "and at the other tokens (1: every token ticks; a layer that pauses the padding alone reads "
                  "0.00 / 1.00).", "",
                  "| task | model | lr | seed | step | validation | " +
                  " | ".join(f"layer {i + 1} padding / other" for i in range(n)) + " |",
                  "|---|---|---:|---:|---:|---:|" + "---:|" * n]
        for task, label, lr, seed, step, acc, layers in rows:
            cells = [f"{a:.2f} / {b:.2f}" for a, b in layers] + ["-"] * (n - len(layers))
            lines.append(f"| {task} | {label} | {lr:g} | {seed} | {step} | {acc:.3f} | " + " | ".join(cells) + " |")
        lines += ["", "The learned clocks during training (each layer's mean clock at the padding and elsewhere, "
                  "with the validation accuracy):", "", "![learned clocks](clocks.png)", ""]
    return "\n".join(lines)
