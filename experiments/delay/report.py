"""Tables and figures from a delay-task results file: the held-out test error (each run's checkpoint and each
group's learning rate chosen on validation, the test set choosing nothing; at the chosen checkpoint and at the
last step, per seed and mean +- std, with the count of learning rates tuned over), relative RMSE (mean +- std
over seeds) and its ratio to S4D's, relative RMSE within step budgets, where DS4D's channel delays ended
relative to the lag, how each DS4D channel kernel splits its energy (before its delay, at it, at its echoes),
the branch allocation, the ablations, and the end-to-end linearized response of every model; for ``ds4d-tap``
also where its input tap's delays ended and the error without the tap. Runs that diverged are listed, not
averaged. The numbers come from :mod:`experiments.delay.tables`."""
from __future__ import annotations

import numpy as np

from .._models import model_of
from .models import Arch
from .tables import (BUDGETS, _diag, ablation_table, best_lr_runs, budget_table, delay_table, done,  # noqa: F401
                     error_table, groups, held_out, heldout_table, histogram_table, kernel_table, load, measured,
                     response_table, seed_table, within)


# ------------------------------------------------------------------------------------------ figures
def _line(config, lw):
    """Line style of a run's model: DS4D solid at width ``lw``, S4D thin and dashed."""
    return {"lw": lw, "ls": "-"} if model_of(config).is_ds4d else {"lw": 1.2, "ls": "--"}


def plot_curves(runs, path):
    """Validation relative RMSE vs step (log scale), one panel per task: mean over seeds, band min..max."""
    from ddesys.plot import pyplot
    plt = pyplot()
    g = groups(runs)
    tasks = list(dict.fromkeys(t for t, _ in g))
    fig, axes = plt.subplots(1, len(tasks), figsize=(6.0 * len(tasks), 4.2), squeeze=False)
    for ax, task in zip(axes.flat, tasks):
        for (t, label), rs in g.items():
            if t != task:
                continue
            steps = [p["step"] for p in rs[0]["curve"]]
            v = np.array([[p["val_rel_rmse"] for p in r["curve"]] for r in rs if len(r["curve"]) == len(steps)])
            line, = ax.plot(steps, v.mean(0), label=f"{label} ({len(v)} seeds)",
                            **_line(rs[0]["config"], 2))
            if len(v) > 1:
                ax.fill_between(steps, v.min(0), v.max(0), color=line.get_color(), alpha=0.15)
        ax.set_title(task)
        ax.set_xlabel("step")
        ax.set_ylabel("validation relative RMSE")
        ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_delays(runs, path):
    """Final DS4D channel delays minus the first lag (all seeds), one panel per DS4D variant, one colour
    per layer; initial delays as a faint outline; ``ds4d-tap``'s final tap delays as ticks on the axis
    in their layer's colour."""
    from ddesys.plot import pyplot
    plt = pyplot()
    g = {k: rs for k, rs in groups(runs).items() if _diag(rs, "delays")}
    if not g:
        return
    cols = min(3, len(g))
    nrows = -(-len(g) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.6 * cols, 3.2 * nrows), squeeze=False)
    for ax, ((task, label), rs) in zip(axes.flat, g.items()):
        lag, L = rs[0]["config"]["task"]["lags"][0], rs[0]["config"]["task"]["L"]
        n_layers = len(rs[0]["diagnosis"]["delays"])
        taps = all("tap_delays" in r["diagnosis"] for r in rs)
        keys = ("delays", "delay_init") + (("tap_delays",) if taps else ())
        every = np.concatenate([np.concatenate([r["diagnosis"][k][j] for r in rs]) for j in range(n_layers)
                                for k in keys]) - lag
        lim = float(np.abs(every).max())
        zoom = lim < L / 16                                   # all near the lag: one-step bins around it
        bins = np.arange(-np.ceil(lim) - 1, np.ceil(lim) + 2) - 0.5 if zoom else np.linspace(-lag, L - lag, 65)
        for j in range(n_layers):
            fin = np.concatenate([r["diagnosis"]["delays"][j] for r in rs]) - lag
            ini = np.concatenate([r["diagnosis"]["delay_init"][j] for r in rs]) - lag
            h = ax.hist(fin, bins=bins, alpha=0.6, label=f"layer {j + 1}")
            ax.hist(ini, bins=bins, histtype="step", color=h[2][0].get_facecolor(), alpha=0.5, lw=0.8)
            if taps:
                tap = np.concatenate([r["diagnosis"]["tap_delays"][j] for r in rs]) - lag
                ax.plot(tap, np.zeros_like(tap), "|", ms=14, mew=1.5, color=h[2][0].get_facecolor(), alpha=1.0,
                        label=f"layer {j + 1} taps", clip_on=False)
        for m in range(2, L // lag + 1) if not zoom else ():
            ax.axvline((m - 1) * lag, color="gray", lw=0.6, ls=":")            # the delay at 2x, 3x the lag
        ax.axvline(0, color="k", lw=0.8)
        ax.set_title(f"{label}\n{task}", fontsize=8)
        ax.set_xlabel("final delay - lag (steps)")
        ax.set_ylabel("channels (all seeds)")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(g):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ------------------------------------------------------------------------------------------ markdown
def plot_response(runs, path, half=48):
    """The end-to-end linearized response ``g[j]`` around the first lag (``lag +- half``), one line per
    run that stored it (seed in the label), one panel per task; an exact delay is 1 at the lag."""
    from ddesys.plot import pyplot
    plt = pyplot()
    items = [(t, label, r) for (t, label), rs in groups(runs).items() for r in rs
             if r.get("diagnosis", {}).get("response") and "g" in r["diagnosis"]["response"][0]]
    if not items:
        return False
    tasks = list(dict.fromkeys(t for t, _, _ in items))
    fig, axes = plt.subplots(1, len(tasks), figsize=(7.0 * len(tasks), 4.2), squeeze=False)
    for ax, task in zip(axes.flat, tasks):
        for t, label, r in items:
            if t != task:
                continue
            lag = r["config"]["task"]["lags"][0]
            g = np.array(r["diagnosis"]["response"][0]["g"])
            j = np.arange(max(0, lag - half), min(len(g), lag + half + 1))
            ax.plot(j - lag, g[j], label=f"{label} s{r['config']['seed']}",
                    **_line(r["config"], 1.8))
        ax.axhline(0, color="k", lw=0.5)
        ax.set_title(task)
        ax.set_xlabel("j - lag (steps)")
        ax.set_ylabel("g[j] = mean d y[L-1] / d x[L-1-j]")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def _header(runs, meta):
    commands = meta.get("commands") or [meta.get("command", "")]
    lines = [f"# Continuous delay task ({meta.get('scale', '?')} scale)", "",
             "Commands: " + "; ".join(f"`{c}`" for c in commands) + "  ",
             f"Date: {meta.get('date', '')}; device: {meta.get('device', '')}; torch {meta.get('torch', '')}; "
             f"{len(runs)} runs, {sum(r.get('seconds', 0) for r in runs):.0f} s of training.", "", "Tasks:", ""]
    seen = {}
    for r in runs:
        seen.setdefault(r["config"]["task"]["name"], r["config"])
    for name, c in seen.items():
        t = c["task"]
        lines.append(f"- {name}: L = {t['L']} samples at dt = {t['dt']:g} s, band limit {t['freq']:g} Hz "
                     f"({t['bins']} Fourier bins, about {2 * t['freq'] * t['lags'][0] * t['dt']:.0f} degrees of "
                     f"freedom per lag window), RMS 0.5, lags {t['lags']}; AdamW lr {c['lr']:g}, batch {c['batch']}, "
                     f"{c['steps']} steps, validation {c['val_size']} sequences"
                     + (f", test {c['test_size']} sequences" if c.get("test_size") else ""))
    lines += ["", "Relative RMSE = RMSE / RMS(target) (0: exact; 1: predicting zero), on the validation set unless a "
              "column says test."]
    return lines


def _heldout(runs):
    """The held-out section: test error at the validation-chosen checkpoint and at the last step, mean +-
    std and per seed."""
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    lines = ["", "## Held-out test error (relative RMSE, mean +- std over seeds)", "",
             "The validation set chooses the learning rate (the lowest mean validation error at the chosen "
             "checkpoints) and each run's checkpoint (its first evaluation at its lowest validation error); the test "
             "set, other signals of the same task (another generator seed, as many sequences as the validation set), "
             "chooses nothing. `lrs`: the learning rates the model was tuned over with these settings. The sections "
             "after this one read the validation set only (the diagnosis: the final weights)."
             + ("" if measured(runs) else
                " **Test not measured**: these runs predate the held-out protocol, so every error in this report is "
                "measured on the validation set; the error at the chosen checkpoint is the lowest of many evaluations "
                "on the set that chose it, and the variants compared here were all judged on that same set, so both "
                "overstate what new signals would give. Rerun the commands to add runs with a test set (their "
                "configurations differ, so they are new runs beside these)."), "",
             "| task | model | H | lr | lrs | validation at the chosen step | test at the chosen step | "
             "validation at the last step | test at the last step | seeds |",
             "|---|---|---:|---:|---:|---|---|---|---|---:|"]
    for task, label, w, lr, n_lrs, k, cells in heldout_table(runs):
        lines.append(f"| {task} | {label} | {w} | {lr:g} | {n_lrs} | " + " | ".join(cells) + f" | {k} |")
    lines += ["", "Per seed (at the chosen learning rate):", "",
              "| task | model | lr | seed | chosen step | validation | test | validation, last step | "
              "test, last step |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for task, label, lr, seed, h in seed_table(runs):
        lines.append(f"| {task} | {label} | {lr:g} | {seed} | {h['step']} | {fmt(h['val'])} | {fmt(h['test'])} | "
                     f"{fmt(h['val_final'])} | {fmt(h['test_final'])} |")
    return lines


def markdown(runs, meta):
    lines = _header(runs, meta) + _heldout(runs)
    rows = error_table(runs)
    multi = any(r[9] for r in rows)
    lines += ["", "## Relative RMSE at the end of training (mean +- std over seeds)", "",
              "| task | model | H | params | final | best | / S4D | seeds |" + (" per lag |" if multi else ""),
              "|---|---|---:|---:|---|---|---:|---:|" + ("---|" if multi else "")]
    for task, label, w, n, m, s, best, ratio, k, per in rows:
        lines.append(f"| {task} | {label} | {w} | {n:,} | {m:.4f} +- {s:.4f} | {best} | "
                     f"{'-' if ratio is None else f'{ratio:.2f}'} | {k} |"
                     + (f" {' / '.join(per or [])} |" if multi else ""))
    lines += ["", "## Relative RMSE within a step budget (last evaluation at or before it)", "",
              "| task | model | steps | " + " | ".join(f"{f:g} x steps" for f in BUDGETS) + " |",
              "|---|---|---:|" + "---|" * len(BUDGETS)]
    for task, label, steps, cells in budget_table(runs):
        lines.append(f"| {task} | {label} | {steps} | " + " | ".join(cells) + " |")
    dl = delay_table(runs)
    if dl:
        nl = max(len(r[3]) for r in dl)
        lines += ["", "## Where the DS4D delays ended (final weights; mean +- std over seeds)", "",
                  "Nearest: the smallest |s - lag| over a layer's channels. Within 1: the share of all channels "
                  "with |s - lag| <= 1. Chain: the smallest |sum of delays - lag| taking at most one channel per layer "
                  "(layers chain; a layer can be passed through its residual path). "
                  "|d tau|: mean distance moved from initialization."
                  + (" Rows \"..., tap delays\": the same for the delays s_tap of ds4d-tap's input taps "
                     "(one per channel and layer; the output adds tap_e * x(t - s_tap))." if any(
                         r[1].endswith(", tap delays") for r in dl) else ""), "",
                  "| task | model | lag | " + " | ".join(f"nearest, layer {j + 1}" for j in range(nl))
                  + " | within 1 | chain | abs d tau | nearest per seed |",
                  "|---|---|---:|" + "---|" * nl + "---|---|---|---|"]
        for task, label, lag, near, w1, chain, dtau, per in dl:
            lines.append(f"| {task} | {label} | {lag} | " + " | ".join(near) + f" | {w1} | {chain} | {dtau} | {per} |")
        hist = histogram_table(runs)
        if hist:
            edges = hist[0][3]
            lines += ["", "Final delays s / lag, channels of every layer and seed per bin (last bin: >= "
                      f"{edges[-2]:g}):", "",
                      "| model | lag | " + " | ".join(f"{a:g}-{b:g}" for a, b in zip(edges[:-1], edges[1:])) + " |",
                      "|---|---:|" + "---:|" * (len(edges) - 1)]
            for task, label, lag, _, h in hist:
                lines.append(f"| {label} | {lag} | " + " | ".join(map(str, h)) + " |")
    kt = kernel_table(runs)
    if kt:
        lines += ["", "## DS4D channel kernels: branch allocation and where the energy sits (final weights)", "",
                  "Each channel kernel's energy split into: before its delay s (the undelayed S4D-like part), at s "
                  "(floor(s)-1 .. floor(s)+2), at the echoes 2s, 3s, ..., and elsewhere; means over channels and "
                  "seeds, and over the channels within one step of the first lag. p: the branch allocation sigmoid(r) "
                  "= |mu| / (|lam| + |mu|), mean over modes. The kernel excludes the layer's D skip (which adds to "
                  "its first tap).", "",
                  "| task | model | layer | p (all) | before / at s / echoes / elsewhere (all) | p (near lag) | "
                  "before / at s / echoes / elsewhere (near lag) | channels near lag |",
                  "|---|---|---:|---:|---|---:|---|---:|"]
        f = lambda v: " / ".join(f"{x:.3f}" for x in v)  # noqa: E731
        for task, label, j, p, al, nr, pn, nn_ in kt:
            lines.append(f"| {task} | {label} | {j} | {p:.3f} | {f(al)} | {'-' if pn is None else f'{pn:.3f}'} | "
                         f"{'-' if nr is None else f(nr)} | {nn_:.1f} |")
    ab = ablation_table(runs)
    if ab:
        tap = any(r[5] != "-" for r in ab)                 # a tap=0 column only when some run has a tap
        lines += ["", "## DS4D ablations (final weights; relative RMSE)", "",
                  "`tau_min`: every delay collapsed to one step; `mu=0`: delayed branch removed (lam kept)"
                  + ("; `tap=0`: every input tap's gain set to zero (tau_min and mu=0 keep the tap)."
                     if tap else "."), "",
                  "| task | model | as trained | tau_min | mu=0 |" + (" tap=0 |" if tap else ""),
                  "|---|---|---|---|---|" + ("---|" if tap else "")]
        for task, label, a, b, c, d in ab:
            lines.append(f"| {task} | {label} | {a} | {b} | {c} |" + (f" {d} |" if tap else ""))
    rt = response_table(runs)
    if rt:
        lines += ["", "## End-to-end linearized response (final weights)", "",
                  "g[j] = mean over validation sequences of d y[L-1] / d x[L-1-j]; a perfect delay line has g = 1 at "
                  "the lag and 0 elsewhere. Shares of the energy of g: within one step of the lag, at its echoes (2x, "
                  "3x the lag), before the lag, elsewhere; peak: argmax |g| per seed. The input is band-limited, so a "
                  "smeared (sinc-like) g can still be an exact delay of it: in-band error is the relative distance of "
                  "g's frequency response from exp(-i w lag) over the input's Fourier bins, in-band gain the mean |G| "
                  "there. g is the mean Jacobian of a nonlinear model at one position: it describes the model's linear "
                  "part, it does not bound or split the relative RMSE.", "",
                  "| task | model | lag | g(lag) | at lag | echoes | before | elsewhere | peak | in-band error | "
                  "in-band gain |", "|---|---|---:|---|---|---|---|---|---|---|---|"]
        for task, label, lag, g, sh, peaks, band in rt:
            lines.append(f"| {task} | {label} | {lag} | {g} | " + " | ".join(sh) + f" | {peaks} | " + " | ".join(band)
                         + " |")
    bad = [r for r in runs if r.get("status", "done") != "done"]
    if bad:
        lines += ["", "## Diverged runs (non-finite loss; not in the tables above)", "",
                  "| task | model | H | seed | diverged at step |", "|---|---|---:|---:|---:|"]
        for r in bad:
            c = r["config"]
            lines.append(f"| {c['task']['name']} | {Arch.from_dict(c['arch']).label()} | {c['width']} | {c['seed']} | "
                         f"{r.get('diverged_step', '?')} |")
    lines += ["", "![relative RMSE vs step](curves.png)", ""]
    if dl:
        lines += ["![final delays](delays.png)", ""]
    if any("g" in (r.get("diagnosis", {}).get("response") or [{}])[0] for r in done(runs)):
        lines += ["![linearized response around the lag](response.png)", ""]
    return "\n".join(lines)


__all__ = ["ablation_table", "best_lr_runs", "budget_table", "delay_table", "done", "error_table", "groups", "held_out",
           "heldout_table", "histogram_table", "kernel_table", "load", "markdown", "measured", "plot_curves",
           "plot_delays", "plot_response", "response_table", "seed_table", "within"]
