"""The S4 repository's ``example.py`` recipe with the one-line swap, on an offline 64-step task.

    python -m ddesys.experiments.s4_recipe --seeds 5 --out DIR [--arms s4d ds4d ...] [--epochs 10]

The model is ``example.py``'s ``S4Model``: ``Linear`` encoder, ``n_layers`` x [LayerNorm (prenorm; ``--postnorm``
after the residual) -> layer -> dropout -> residual], mean pooling, ``Linear`` decoder; each layer built as
``example.py`` does, ``S4D(d_model, dropout=dropout, transposed=True, lr=min(0.001, lr))``. The optimizer is S4's
``setup_optimizer``: one AdamW group (``lr``, ``weight_decay``) for the parameters without ``_optim``, one
group per distinct ``_optim`` dict, and ``CosineAnnealingLR(optimizer, epochs)`` stepped per epoch.
The data: scikit-learn's 8x8 digits as 64-step pixel sequences of one feature
(:func:`experiments.general.data.sdigits`: a fixed stratified split, 1437 train / 360 test). Held-out
protocol: ``--val-fraction`` (default 0.1) of the training examples, drawn by a fixed seed
(:data:`VAL_SEED`), are carved out as a validation split; every epoch is scored on it and on the test
split, the validation split chooses the epoch and the test split chooses nothing. ``--val-fraction 0``
trains on every training example without a validation split (the recipe of the runs recorded before the
protocol: their configurations, so those runs resume).

Arms (``--arms``, by name; :data:`ARMS`): the layer and the keyword arguments added to the layer call (a
:class:`~experiments._models.ModelSpec` and its ``options``), plus an optional change of the ``_optim`` hints
(through :mod:`nn.optim`'s public ``declared_hints`` / ``register_optim``). Each arm differs from ``ds4d`` (the
swap as a user writes it) in one thing, to measure what each difference between the drop-ins costs.

Writes ``DIR/results.json`` (every run: arm, seed, test accuracy per epoch and at the last epoch, validation
accuracy per epoch, the validation-chosen epoch and the test accuracy there, ms per train step), saved
after every run, and ``DIR/results.md`` (test accuracy at the validation-chosen epoch and at the last
epoch, mean +- std per arm and per seed, over the runs of this recipe; never a best test accuracy: runs
recorded before the protocol kept one, which no report reads). A rerun
into the same ``DIR`` adds only the missing (arm, seed) runs; runs of other recipes stay in the file.
Ctrl-C keeps the finished runs and the same command resumes; sweeps started into one ``DIR`` at the
same time keep every run, and a run another sweep is training is skipped. A ``DIR`` holding another
program's results, or a ``results.md`` without its ``results.json``, is refused before any work.
``--postnorm`` gives ``example.py``'s own default (LayerNorm after the residual), the second configuration
the report checks.
"""
from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, NamedTuple

import torch
from torch import nn

from ddesys.io import atomic_write, provenance
from ddesys.nn import s4compat
from ddesys.nn.optim import declared_hints, register_optim

from ._models import ModelSpec
from ._runs import (ResultsError, RunSchema, add_store_arguments, config_key, open_results, positive_int,
                    run_records, unit_fraction)

DELAY_PARAMS = ("r", "theta", "nu_tau")
VAL_FRACTION = 0.1          # default share of the training examples carved out as the validation split
VAL_SEED = 12345            # its draw: the same for every arm and seed
LR = 0.01                   # example.py's learning rate: the one configuration every arm runs (no tuning)


def _hints_main_rate(names):
    """A hint change: ``names`` of every DS4D core lose S4's ``lr`` (main rate, still no weight decay)."""
    def apply(model, **ctx):
        for layer in model.s4_layers:
            for owner, n, hint, ssm in declared_hints(layer.kernel):
                if owner is layer.kernel and n in names:
                    register_optim(owner, n, {k: v for k, v in hint.items() if k != "lr"}, ssm=ssm)
    return apply


def _freeze_B(model, **ctx):
    """S4's own S4D has no trainable ``B`` (it is 1): freeze it."""
    for layer in model.s4_layers:
        layer.kernel.B.requires_grad_(False)


def _s4d_init(model, seed, d_model, n_layers, dropout, lr, prenorm):
    """Every parameter DS4D shares with S4D (encoder, norms, ``log_dt``, ``nu``, ``B``, ``C``, ``D``, GLU,
    decoder) set to the values the ``s4d`` arm draws for the same seed: the arms then differ by the
    delayed branch alone, not by the random stream (DS4D draws ``theta`` and its grid order first)."""
    ref = dict(build("s4d", seed, d_model, n_layers, dropout, lr, prenorm).named_parameters())
    own = dict(model.named_parameters())
    missing = sorted(n for n in ref if n not in own or own[n].shape != ref[n].shape)
    if missing:
        raise RuntimeError(f"the s4d arm has parameters DS4D lacks: {missing}")
    with torch.no_grad():
        for n, v in ref.items():
            own[n].copy_(v)


class Arm(NamedTuple):
    """One arm: ``model`` (the layer, and in its ``options`` the keyword arguments added to the layer
    call), ``change(model, **ctx)`` of the built model or ``None``, and the report's description."""
    model: ModelSpec
    change: Callable | None
    description: str


def _arm(layer, options=None, change=None, description=""):
    return Arm(ModelSpec(layer, options=tuple((options or {}).items())), change, description)


LAYER_CLASSES = {"s4d": s4compat.S4D, "ds4d": s4compat.DS4D}      # the drop-ins of nn.s4compat

ARMS = {
    "s4d": _arm("s4d", {}, None, "nn.s4compat.S4D (the reference)"),
    "s4d-lin": _arm("s4d", {"init": "lin"}, None, "S4D with S4D-Lin poles (as the S4 repository's S4D)"),
    "s4d-fixB": _arm("s4d", {"init": "lin"}, _freeze_B, "S4D-Lin, B fixed at 1: the S4 repository's S4D"),
    "ds4d": _arm("ds4d", {}, None, "nn.s4compat.DS4D, the one-line swap (drop-in defaults: p0 = 0.015)"),
    "ds4d-p0.1": _arm("ds4d", {"p0": 0.1}, None,
                      "DS4D with the paper's p0 = 0.1 (the drop-in's earlier default)"),
    "ds4d-p0.1-mainlr": _arm("ds4d", {"p0": 0.1}, _hints_main_rate(DELAY_PARAMS),
                             "p0 = 0.1, r/theta/nu_tau at the main rate (no weight decay) instead of S4's lr"),
    "ds4d-p0": _arm("ds4d", {"p0": 0.0}, None, "DS4D with p0 = 0 (S4D at initialization)"),
    "ds4d-theta0": _arm("ds4d", {"theta0": 0.0}, None,
                        "DS4D (p0 = 0.015) with theta0 = 0 (the paper's sMNIST phase)"),
    "ds4d-mainlr": _arm("ds4d", {}, _hints_main_rate(DELAY_PARAMS),
                        "DS4D (p0 = 0.015), r/theta/nu_tau at the main rate (no weight decay)"),
    "ds4d-p0-lin": _arm("ds4d", {"p0": 0.0, "init": "lin"}, None, "DS4D p0 = 0 with S4D-Lin poles"),
    "ds4d-lmax": _arm("ds4d", {"l_max": 16}, None, "DS4D (p0 = 0.015) with delays in [1, 15] (l_max = 16)"),
    "ds4d-s4dinit": _arm("ds4d", {}, _s4d_init, "DS4D (p0 = 0.015), shared parameters drawn as the s4d arm's"),
    "ds4d-p0-s4dinit": _arm("ds4d", {"p0": 0.0}, _s4d_init,
                            "DS4D p0 = 0, shared parameters drawn as the s4d arm's"),
}


class S4Model(nn.Module):
    """The S4 repository's ``example.py`` model (prenorm)."""

    def __init__(self, layer_cls, d_input, d_output, d_model, n_layers, dropout, lr, prenorm=True, **layer_kw):
        super().__init__()
        self.prenorm = prenorm
        self.encoder = nn.Linear(d_input, d_model)
        self.s4_layers, self.norms, self.dropouts = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
        for _ in range(n_layers):
            self.s4_layers.append(layer_cls(d_model, dropout=dropout, transposed=True, lr=lr, **layer_kw))
            self.norms.append(nn.LayerNorm(d_model))
            self.dropouts.append(nn.Dropout1d(dropout))
        self.decoder = nn.Linear(d_model, d_output)

    def forward(self, x):
        x = self.encoder(x).transpose(-1, -2)                        # (B, L, 1) -> (B, H, L)
        for layer, norm, dropout in zip(self.s4_layers, self.norms, self.dropouts):
            z = x
            if self.prenorm:
                z = norm(z.transpose(-1, -2)).transpose(-1, -2)
            z, _ = layer(z)
            x = dropout(z) + x
            if not self.prenorm:
                x = norm(x.transpose(-1, -2)).transpose(-1, -2)
        return self.decoder(x.transpose(-1, -2).mean(dim=1))        # (B, H, L) -> (B, classes)


def setup_optimizer(model, lr, weight_decay, epochs):
    """S4's ``setup_optimizer`` (example.py): plain parameters in one AdamW group, one group per distinct
    ``_optim`` dict, cosine schedule over ``epochs``. Parameters that do not require grad are left out."""
    hints = {id(getattr(owner, name)): hp for owner, name, hp, _ in declared_hints(model)}   # S4's _optim dicts
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW([p for p in params if id(p) not in hints], lr=lr, weight_decay=weight_decay)
    hps = [hints[id(p)] for p in params if id(p) in hints]
    for hp in [dict(s) for s in sorted(dict.fromkeys(frozenset(hp.items()) for hp in hps))]:
        optimizer.add_param_group({"params": [p for p in params if hints.get(id(p)) == hp], **hp})
    return optimizer, torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, epochs)


def build(arm, seed, d_model=64, n_layers=4, dropout=0.1, lr=0.01, prenorm=True):
    spec, change, _ = ARMS[arm]
    torch.manual_seed(seed)
    model = S4Model(LAYER_CLASSES[spec.layer], 1, 10, d_model, n_layers, dropout, min(0.001, lr),
                    prenorm=prenorm, **dict(spec.options))
    if change is not None:
        change(model, seed=seed, d_model=d_model, n_layers=n_layers, dropout=dropout, lr=lr, prenorm=prenorm)
    return model


def load_data(n_train=None, val_fraction=None):
    """``(x_train, y_train, x_test, y_test, x_val, y_val)``: sdigits' fixed split, with ``val_fraction`` of
    the training examples carved out as validation by :data:`VAL_SEED` (``None`` or 0: no validation split,
    ``x_val`` and ``y_val`` None); ``n_train``: the first ``n_train`` of the remaining training examples."""
    from ddesys.experiments.general.data import sdigits
    from ddesys.experiments.general.loaders import split_off
    d = sdigits()
    train, val = d.train, None
    if val_fraction:
        train, val = split_off(d.train.x, d.train.y, val_fraction, VAL_SEED)
    xtr, ytr = torch.as_tensor(train.x), torch.as_tensor(train.y)
    if n_train:
        xtr, ytr = xtr[:n_train], ytr[:n_train]
    xva, yva = (None, None) if val is None else (torch.as_tensor(val.x), torch.as_tensor(val.y))
    return xtr, ytr, torch.as_tensor(d.test.x), torch.as_tensor(d.test.y), xva, yva


@torch.no_grad()
def evaluate(model, x, y, batch=256):
    model.eval()
    correct = sum(int((model(x[i:i + batch]).argmax(-1) == y[i:i + batch]).sum()) for i in range(0, len(x), batch))
    model.train()
    return 100.0 * correct / len(x)


def chosen_epoch(val_curve):
    """The epoch (from 1) chosen on validation: the first at the highest validation accuracy; ``None``
    without validation scores."""
    if not val_curve:
        return None
    return max(range(len(val_curve)), key=lambda i: (val_curve[i], -i)) + 1


def run(arm, seed, data, epochs=10, batch=64, lr=LR, weight_decay=0.01, d_model=64, n_layers=4, dropout=0.1,
        prenorm=True):
    """Train one arm; returns ``{"arm", "seed", "final"`` (test accuracy % at the last epoch), ``"curve"``
    (test accuracy per epoch), ``"ms_per_step", "loss"}`` and, with a validation split in ``data``
    (:func:`load_data`), ``"val_curve"``, ``"val_epoch"`` (:func:`chosen_epoch`) and ``"test_at_val"`` (the
    test accuracy there). The test scores choose nothing."""
    xtr, ytr, xte, yte, *val = data
    xva, yva = val if val else (None, None)
    model = build(arm, seed, d_model, n_layers, dropout, lr, prenorm)
    optimizer, scheduler = setup_optimizer(model, lr, weight_decay, epochs)
    crit = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(seed)
    accs, vals, t_steps = [], [], []
    for _ in range(epochs):
        perm = torch.randperm(len(xtr), generator=g)
        for i in range(0, len(xtr), batch):
            idx = perm[i:i + batch]
            t0 = time.perf_counter()
            optimizer.zero_grad()
            loss = crit(model(xtr[idx]), ytr[idx])
            loss.backward()
            optimizer.step()
            t_steps.append(time.perf_counter() - t0)
        scheduler.step()
        accs.append(evaluate(model, xte, yte))
        if xva is not None:
            vals.append(evaluate(model, xva, yva))
    out = {"arm": arm, "seed": seed, "final": accs[-1], "curve": accs,
           "ms_per_step": 1e3 * statistics.median(t_steps), "loss": float(loss.detach())}
    if vals:
        e = chosen_epoch(vals)
        out.update(val_curve=vals, val_epoch=e, test_at_val=accs[e - 1])
    return out


def held_out(r):
    """``{"epoch", "val", "test", "final"}`` of a run record: the validation-chosen epoch, the validation
    and test accuracy there, the test accuracy at the last epoch; the first three None for a run without
    validation scores (recorded before the held-out protocol, or with ``--val-fraction 0``)."""
    vals = r.get("val_curve")
    e = chosen_epoch(vals)
    if e is None:
        return {"epoch": None, "val": None, "test": None, "final": r["final"]}
    return {"epoch": e, "val": vals[e - 1], "test": r["curve"][e - 1], "final": r["final"]}


def _ms(values):
    """``"mean +- std"`` (sample std, 0 for one value) of the values that are not None, to 0.1; ``"not
    measured"`` when none is; with how many of the runs it covers when only some are."""
    v = [x for x in values if x is not None]
    if not v:
        return "not measured"
    sd = statistics.stdev(v) if len(v) > 1 else 0.0
    return f"{statistics.mean(v):.1f} +- {sd:.1f}" + (f" ({len(v)}/{len(values)} runs)" if len(v) < len(values) else "")


def summarize(results, arms):
    """``results.md``: per arm, test accuracy at the validation-chosen epoch and at the last epoch (mean
    +- std over seeds), then per seed. No best test accuracy: the test split chooses nothing."""
    fmt = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
    lines = ["Accuracy (%) on sdigits. The validation split (training examples carved out by a fixed seed) "
             "chooses each run's epoch (the first at its highest validation accuracy); the test split chooses "
             f"nothing. `lrs`: the learning rates an arm was tuned over (one: example.py's {LR:g}). Runs without "
             "validation scores (recorded before the held-out protocol, or `--val-fraction 0`) read \"not "
             "measured\" at the chosen epoch; their final test accuracy involves no choice.", "",
             "| arm | layer call | lrs | validation acc at the chosen epoch | test acc at the chosen epoch | "
             "final test acc | ms/step | seeds |", "|---|---|---:|---|---|---|---|---|"]
    per_seed = ["", "Per seed:", "", "| arm | seed | chosen epoch | validation acc | test acc | final test acc |",
                "|---|---:|---:|---:|---:|---:|"]
    for arm in arms:
        rs = sorted((r for r in results if r["arm"] == arm), key=lambda r: r["seed"])
        if not rs:
            continue
        h = [held_out(r) for r in rs]
        what = ARMS[arm].description if arm in ARMS else "(an arm this version does not define)"
        lines.append(f"| `{arm}` | {what} | 1 | {_ms([x['val'] for x in h])} | {_ms([x['test'] for x in h])} | "
                     f"{_ms([x['final'] for x in h])} | {statistics.median(r['ms_per_step'] for r in rs):.0f} | "
                     f"{', '.join(str(r['seed']) for r in rs)} |")
        per_seed += [f"| `{arm}` | {r['seed']} | {'-' if x['epoch'] is None else x['epoch']} | {fmt(x['val'])} | "
                     f"{fmt(x['test'])} | {fmt(x['final'])} |" for r, x in zip(rs, h)]
    return "\n".join(lines + per_seed) + "\n"


PROGRAM = "ddesys.experiments.s4_recipe"                     # the owner named in its results files
SHAPE_KEYS = ("epochs", "batch", "d_model", "n_layers", "n_train", "postnorm", "dropout")  # the recipe of a run
#   (and, where a validation split is carved, "val_fraction" and "val_seed": absent from runs without one)
RECIPE_DEFAULTS = {"postnorm": False, "dropout": 0.1}       # keys that results files written before them lack
SCHEMA = RunSchema(fields=("config", "arm", "seed"), done=("final", "curve", "ms_per_step"),   # what summarize
                   types={"arm": "str", "seed": "int", "curve": "list", "val_curve": "list"})   # reads


def run_config(arm, seed, recipe):
    """The configuration of one run: ``arm``, ``seed``, the recipe's :data:`SHAPE_KEYS` (``recipe``: a
    dict holding them, e.g. ``vars(args)``) and, where the recipe carves a validation split (its
    ``val_fraction`` > 0), ``val_fraction`` and ``val_seed`` (:data:`VAL_SEED`): a run without one has
    the configuration, hence the key, of the runs recorded before the held-out protocol."""
    val = recipe.get("val_fraction")
    return {"arm": arm, "seed": seed, **{k: recipe[k] for k in SHAPE_KEYS},
            **({"val_fraction": val, "val_seed": VAL_SEED} if val else {})}


def run_key(config):
    """Key of a run in a results file (readable prefix + hash of the whole configuration)."""
    return config_key(f"{config['arm']}|seed{config['seed']}|ep{config['epochs']}", config)


def _rekey(run):
    return run_key(run["config"])


def _legacy(data, path):
    """A results file of the recipe's earlier layout (``config``: the command's arguments, ``results``: the
    runs) in the current one: each run gets its configuration, built from the recipe in ``config``
    (:data:`RECIPE_DEFAULTS` for keys written before they existed). ``None`` for any other layout."""
    old = data.get("config")
    if not isinstance(old, dict) or not isinstance(data.get("results"), list):
        return None
    missing = [k for k in SHAPE_KEYS if k not in old and k not in RECIPE_DEFAULTS]
    if missing:
        raise ResultsError(f"{path}: an earlier results file of {PROGRAM} whose 'config' lacks {missing[0]!r}")
    recipe = {**RECIPE_DEFAULTS, **{k: old[k] for k in SHAPE_KEYS if k in old}}
    runs = [{**r, "config": run_config(r.get("arm"), r.get("seed"), recipe), "status": "done"}
            if isinstance(r, dict) else r for r in data["results"]]
    meta = {k: data[k] for k in ("ddesys", "commit") if isinstance(data.get(k), str)}
    if isinstance(data.get("argv"), list) and all(isinstance(a, str) for a in data["argv"]):
        meta["commands"] = [" ".join([f"python -m {PROGRAM}", *data["argv"]])]
    return {"program": PROGRAM, "meta": meta, "runs": runs}


def _parser():
    ap = argparse.ArgumentParser(prog="python -m ddesys.experiments.s4_recipe",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="folder; a rerun into it adds the missing (arm, seed) runs")
    ap.add_argument("--seeds", type=positive_int, default=5)
    ap.add_argument("--seed0", type=int, default=0)
    ap.add_argument("--arms", nargs="+", default=["s4d", "ds4d", "ds4d-p0"], choices=sorted(ARMS))
    ap.add_argument("--epochs", type=positive_int, default=10)
    ap.add_argument("--batch", type=positive_int, default=64)
    ap.add_argument("--d-model", type=positive_int, default=64)
    ap.add_argument("--n-layers", type=positive_int, default=4)
    ap.add_argument("--postnorm", action="store_true",
                    help="LayerNorm after the residual: example.py's default (this recipe's default is its --prenorm)")
    ap.add_argument("--dropout", type=unit_fraction, default=0.1, help="example.py's --dropout, in [0, 1)")
    ap.add_argument("--threads", type=positive_int, default=None, help="torch.set_num_threads")
    ap.add_argument("--n-train", type=positive_int, default=None, help="first n training samples only (smoke runs)")
    ap.add_argument("--val-fraction", type=unit_fraction, default=VAL_FRACTION,
                    help="share of the training examples carved out (fixed seed) as the validation split that "
                         f"chooses the epoch (default {VAL_FRACTION:g}; 0: none, the recipe before the held-out "
                         "protocol)")
    add_store_arguments(ap)
    return ap


def main(argv=None):
    """The CLI (module docstring); returns the exit code: 0, or 130 when stopped by Ctrl-C (the finished
    runs are kept; the same command resumes)."""
    args = _parser().parse_args(argv)
    meta = {"command": " ".join([f"python -m {PROGRAM}", *(sys.argv[1:] if argv is None else argv)]),
            "date": datetime.date.today().isoformat(), "torch": torch.__version__, **provenance()}
    store = open_results(args.out, "s4_recipe", _rekey, args, meta, SCHEMA, files=("results.md",), legacy=_legacy,
                         folders=())                  # before any work: a foreign or damaged folder fails at once
    recipe = vars(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    data = []

    def job(arm, seed):
        def fn():
            if not data:
                data.append(load_data(args.n_train, args.val_fraction))
            t0 = time.perf_counter()
            r = run(arm, seed, data[0], epochs=args.epochs, batch=args.batch, d_model=args.d_model,
                    n_layers=args.n_layers, dropout=args.dropout, prenorm=not args.postnorm)
            chosen = "" if "val_epoch" not in r else \
                f" test at the validation-chosen epoch {r['val_epoch']} {r['test_at_val']:.1f}"
            print(f"{arm:14s} seed {seed}: final test {r['final']:.1f}{chosen} {r['ms_per_step']:.0f} ms/step",
                  flush=True)
            return {**r, "config": run_config(arm, seed, recipe), "status": "done",
                    "seconds": time.perf_counter() - t0}
        return run_key(run_config(arm, seed, recipe)), f"{arm} seed {seed}", fn

    def report():
        mine = [r for r in store.latest() if r.get("status", "done") == "done"
                and all(r["config"].get(k) == v for k, v in run_config(None, None, recipe).items()
                        if k not in ("arm", "seed"))
                and ("val_fraction" in r["config"]) == bool(recipe["val_fraction"])]
        table = summarize(mine, list(dict.fromkeys(r["arm"] for r in mine)))
        atomic_write(Path(args.out) / "results.md", table)
        return table
    jobs = [job(arm, seed) for arm in args.arms for seed in range(args.seed0, args.seed0 + args.seeds)]
    code = run_records(store, jobs, on_saved=report)
    if code == 0:
        print(report())
    return code


if __name__ == "__main__":
    sys.exit(main())
