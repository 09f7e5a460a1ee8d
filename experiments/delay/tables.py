"""The numbers of the delay-task report (:mod:`experiments.delay.report`) from a results file's runs: runs
grouped over seeds, the held-out reading (each run's checkpoint and each group's learning rate chosen on
validation, the test error there and at the last step), the error tables, where the DS4D delays (and the input
tap's delays of ``ds4d-tap``) ended, the channel kernels, the ablations and the linearized response. Every
table is a list of rows (tuples); cells that average over seeds are ``"mean +- std"`` strings."""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from .._models import model_of
from .._runs import canonical as _canon
from .._runs import done_runs as done
from .._tables import chosen_on_validation
from .._tables import mean_std as _ms

from .models import Arch

BUDGETS = (0.25, 0.5, 1.0)
BLOCK = ("n_layers", "d_state", "init", "dt_lr", "glu", "prenorm", "norm")


def load(path):
    return json.loads(Path(path).read_text())["runs"]


def _labels(runs, drop):
    """``[(task name, model label, run)]`` of the finished runs: the model label is the arch's label, plus
    the settings (outside ``drop``) that tell apart several groups sharing it (e.g. two step counts)."""
    variants = defaultdict(dict)
    for r in done(runs):
        c = r["config"]
        variants[(c["task"]["name"], Arch.from_dict(c["arch"]).label())].setdefault(_canon(c, drop), c)
    out = []
    for r in done(runs):
        c = r["config"]
        key = (c["task"]["name"], Arch.from_dict(c["arch"]).label())
        label = key[1]
        vs = variants[key]
        if len(vs) > 1:
            diff = sorted(k for k in set().union(*vs.values()) if k not in (*drop, "task", "arch")
                          and len({json.dumps(v.get(k)) for v in vs.values()}) > 1)
            label += " [" + ", ".join(f"{k}={c.get(k)}" for k in diff) + "]"
        out.append((key[0], label, r))
    return out


def groups(runs):
    """``{(task name, model label): [runs over seeds]}`` in run order; the model label is the arch's
    label, plus the settings that tell apart several groups sharing it (e.g. two step counts)."""
    g = defaultdict(list)
    for task, label, r in _labels(runs, ("seed",)):
        g[(task, label)].append(r)
    return g


# ------------------------------------------------------------------------------------------ held out
def held_out(curve):
    """The held-out reading of a learning curve (points with ``step``, ``val_rel_rmse`` and, under the
    held-out protocol, ``test_rel_rmse``): ``{"step", "val", "test", "val_final", "test_final"}``, the
    checkpoint chosen on validation alone (the first evaluation at the lowest validation error, as
    :func:`.train.train_run` keeps ``best_step``), the test error there, and both errors at the last
    evaluation. ``test`` and ``test_final`` are None for a curve without test scores; ``None`` for an
    empty curve. The test scores choose nothing."""
    return chosen_on_validation(curve, "val_rel_rmse", "test_rel_rmse", lower=True)


def lr_groups(runs):
    """``{(task name, model label): {lr: [runs over seeds]}}``: the groups of :func:`groups` with the
    learning rate taken out of the settings (the rates one model was tuned over, side by side)."""
    g = defaultdict(lambda: defaultdict(list))
    for task, label, r in _labels(runs, ("seed", "lr")):
        g[(task, label)][r["config"]["lr"]].append(r)
    return g


def best_lr_runs(runs):
    """``{(task, model): (lr, runs, n_lrs)}``: the learning rate with the lowest mean validation error at
    each run's validation-chosen checkpoint (:func:`held_out`; the first such rate on a tie), its runs, and
    how many rates the model was tuned over. The test error takes no part."""
    out = {}
    for key, by_lr in lr_groups(runs).items():
        def score(lr):
            h = [held_out(r["curve"]) for r in by_lr[lr]]
            v = [x["val"] for x in h if x is not None]
            return np.mean(v) if v else np.inf
        lr = min(by_lr, key=score)
        out[key] = (lr, by_lr[lr], len(by_lr))
    return out


def _cell(values, n, fmt="{:.3f}"):
    """``"mean +- std"`` of the values that are not None; ``"not measured"`` when none is; with how many of
    the ``n`` runs it covers when only some are."""
    vals = [v for v in values if v is not None]
    if not vals:
        return "not measured"
    return _ms(vals, fmt) + (f" ({len(vals)}/{n} runs)" if len(vals) < n else "")


def heldout_table(runs):
    """Rows ``(task, model, H, lr, n_lrs, n_seeds, [val, test, val last, test last] as "mean +- std"
    cells)`` of relative RMSE: each group at the learning rate chosen on validation
    (:func:`best_lr_runs`), every run read at its validation-chosen checkpoint (:func:`held_out`). A test
    cell of runs without test scores reads ``not measured``; a group with some runs measured says how
    many."""
    rows = []
    for (task, label), (lr, rs, n_lrs) in best_lr_runs(runs).items():
        h = [x for x in (held_out(r["curve"]) for r in rs) if x is not None]
        rows.append((task, label, rs[0]["config"]["width"], lr, n_lrs, len(rs),
                     [_cell([x[k] for x in h], len(h)) for k in ("val", "test", "val_final", "test_final")]))
    return rows


def seed_table(runs):
    """Per run of each group at its validation-chosen rate: ``(task, model, lr, seed, held_out(curve))``,
    seeds in order."""
    rows = []
    for (task, label), (lr, rs, _) in best_lr_runs(runs).items():
        for r in sorted(rs, key=lambda r: r["config"]["seed"]):
            h = held_out(r["curve"])
            if h is not None:
                rows.append((task, label, lr, r["config"]["seed"], h))
    return rows


def measured(runs):
    """Whether any finished run scored the held-out test set."""
    return any(p.get("test_rel_rmse") is not None for r in done(runs) for p in r["curve"])


def _s4d_reference(g, task, run):
    """The S4D group on ``task`` with the same block options, steps and lr as ``run`` (or None)."""
    c = run["config"]
    for (t, _), rs in g.items():
        d = rs[0]["config"]
        if t == task and not model_of(d).is_ds4d and all(d["arch"].get(k) == c["arch"].get(k) for k in BLOCK) \
                and all(d.get(k) == c.get(k) for k in ("steps", "lr", "batch")):
            return rs
    return None


def error_table(runs):
    """Rows ``(task, model, H, params, final mean, final std, best "m +- s", ratio to S4D, n_seeds, per-lag)``."""
    g = groups(runs)
    rows = []
    for (task, label), rs in g.items():
        fin = np.array([r["rel_rmse"] for r in rs])
        ref = _s4d_reference(g, task, rs[0])
        ratio = float(fin.mean() / np.mean([r["rel_rmse"] for r in ref])) if ref else None
        lags = rs[0]["config"]["task"]["lags"]
        per_lag = [_ms([r["by_lag"][i] for r in rs]) for i in range(len(lags))] if len(lags) > 1 else None
        rows.append((task, label, rs[0]["config"]["width"], rs[0]["n_params"], float(fin.mean()), float(fin.std()),
                     _ms([r["best_rel_rmse"] for r in rs]), ratio, len(rs), per_lag))
    return rows


def within(run, budget):
    v = [p["val_rel_rmse"] for p in run["curve"] if p["step"] <= budget]
    return v[-1] if v else None


def budget_table(runs):
    rows = []
    for (task, label), rs in groups(runs).items():
        steps = rs[0]["config"]["steps"]
        rows.append((task, label, steps, [_ms([within(r, max(1, round(f * steps))) for r in rs]) for f in BUDGETS]))
    return rows


def _diag(rs, key):
    return [r["diagnosis"][key] for r in rs if key in r.get("diagnosis", {})]


TAP_LABEL = "{}, tap delays"      # the label of a group's rows about its input tap's delays
SUMMARIES = (("delay_summary", "mean_abs_dtau", "{}"), ("tap_summary", "tap_mean_abs_dtau", TAP_LABEL))


def delay_table(runs):
    """DS4D rows per lag ``(task, model, lag, [nearest per layer "m +- s"], within-1 share, nearest chain,
    mean |dtau|, per-seed nearest (min over layers))``: the feedback delays of every DS4D group, each
    followed by the same for its input tap's delays (``ds4d-tap``; model ``"<label>, tap delays"``)."""
    rows = []
    for (task, label), rs in groups(runs).items():
        for key, dkey, name in SUMMARIES:
            sums = _diag(rs, key)
            if not sums:
                continue
            dtau = _ms(_diag(rs, dkey), "{:.1f}")
            for i, lag in enumerate(rs[0]["config"]["task"]["lags"]):
                per = [s[i] for s in sums]
                nl = len(per[0]["layers"])
                rows.append((task, name.format(label), lag,
                             [_ms([p["layers"][j]["nearest"] for p in per], "{:.1f}") for j in range(nl)],
                             _ms([p["within_1"] for p in per]), _ms([p["nearest_chain"] for p in per], "{:.1f}"),
                             dtau, [round(p["nearest"], 1) for p in per]))
    return rows


def histogram_table(runs):
    """DS4D rows ``(task, model, lag, edges, counts summed over seeds and layers)`` of ``s / lag``; tap
    delays in their own rows as in :func:`delay_table`."""
    rows = []
    for (task, label), rs in groups(runs).items():
        for key, _, name in SUMMARIES:
            sums = _diag(rs, key)
            if not sums:
                continue
            for i, lag in enumerate(rs[0]["config"]["task"]["lags"]):
                h = np.sum([s[i]["hist_over_lag"] for s in sums], axis=0)
                rows.append((task, name.format(label), lag, sums[0][i]["hist_edges"], h.astype(int).tolist()))
    return rows


def kernel_table(runs):
    """DS4D rows per layer ``(task, model, layer, p, shares all channels, shares near-lag channels, n near)``;
    shares are ``(before, at delay, echoes, elsewhere)`` means over seeds."""
    rows = []
    for (task, label), rs in groups(runs).items():
        ks = _diag(rs, "kernels")
        if not ks:
            continue
        for j in range(len(ks[0])):
            al = [k[j]["all"] for k in ks]
            nr = [k[j]["near_lag"] for k in ks if k[j]["near_lag"]]
            cols = ("before", "at_delay", "echoes", "elsewhere")
            rows.append((task, label, j + 1, float(np.mean([a["p"] for a in al])),
                         [float(np.mean([a[c] for a in al])) for c in cols],
                         [float(np.mean([a[c] for a in nr])) for c in cols] if nr else None,
                         float(np.mean([a["p"] for a in nr])) if nr else None,
                         float(np.mean([k[j]["n_near"] for k in ks]))))
    return rows


def ablation_table(runs):
    """DS4D rows ``(task, model, as trained, tau_min, mu=0, tap=0)`` of relative RMSE (``tap=0``: ``"-"``
    without a tap)."""
    rows = []
    for (task, label), rs in groups(runs).items():
        if not _diag(rs, "rel_rmse_tau_min"):
            continue
        rows.append((task, label, _ms([r["rel_rmse"] for r in rs]), _ms(_diag(rs, "rel_rmse_tau_min")),
                     _ms(_diag(rs, "rel_rmse_mu_zero")), _ms(_diag(rs, "rel_rmse_tap_zero"))))
    return rows


def response_table(runs):
    """Rows per lag ``(task, model, lag, g at lag, shares at lag / echoes / before / elsewhere, peaks)``."""
    rows = []
    for (task, label), rs in groups(runs).items():
        resp = _diag(rs, "response")
        if not resp:
            continue
        for i, lag in enumerate(rs[0]["config"]["task"]["lags"]):
            rr = [r[i] for r in resp]
            rows.append((task, label, lag, _ms([r["g_at_lag"] for r in rr]),
                         [_ms([r[c] for r in rr]) for c in ("at_lag", "echoes", "before", "elsewhere")],
                         [r["peak"] for r in rr],
                         [_ms([r.get(c) for r in rr]) + (f" ({sum(c in r for r in rr)} seeds)" if 0 < sum(
                             c in r for r in rr) < len(rr) else "") for c in ("in_band_error", "in_band_gain")]))
    return rows


__all__ = ["BLOCK", "BUDGETS", "ablation_table", "best_lr_runs", "budget_table", "delay_table", "done", "error_table",
           "groups", "held_out", "heldout_table", "histogram_table", "kernel_table", "load", "lr_groups", "measured",
           "response_table", "seed_table", "within"]
