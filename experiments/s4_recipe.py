"""The S4 repository's ``example.py`` recipe with the one-line swap, on an offline 64-step task.

    python -m ddesys.experiments.s4_recipe --seeds 5 --out DIR [--arms s4d ds4d ...] [--epochs 10]

The model is ``example.py``'s ``S4Model``: ``Linear`` encoder, ``n_layers`` x [LayerNorm (prenorm; ``--postnorm``
after the residual) -> layer -> dropout -> residual], mean pooling, ``Linear`` decoder; each layer built as
``example.py`` does, ``S4D(d_model, dropout=dropout, transposed=True, lr=min(0.001, lr))``. The optimizer is S4's
``setup_optimizer``: one AdamW group (``lr``, ``weight_decay``) for the parameters without ``_optim``, one
group per distinct ``_optim`` dict, and ``CosineAnnealingLR(optimizer, epochs)`` stepped per epoch.
The data: scikit-learn's 8x8 digits as 64-step pixel sequences of one feature
(:func:`experiments.general.data.sdigits`: a fixed stratified split, 1437 train / 360 test).

Arms (``--arms``, by name; :data:`ARMS`): the layer and the keyword arguments added to the layer call (a
:class:`~experiments._models.ModelSpec` and its ``options``), plus an optional change of the ``_optim`` hints
(through :mod:`nn.optim`'s public ``declared_hints`` / ``register_optim``). Each arm differs from ``ds4d`` (the
swap as a user writes it) in one thing, to measure what each difference between the drop-ins costs.

Writes ``DIR/results.json`` (every run: arm, seed, final and best test accuracy, ms per train step),
saved after every run, and ``DIR/results.md`` (mean +- std per arm, over the runs of this recipe). A rerun
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


def load_data(n_train=None):
    from ddesys.experiments.general.data import sdigits
    d = sdigits()
    xtr, ytr = torch.as_tensor(d.train.x), torch.as_tensor(d.train.y)
    if n_train:
        xtr, ytr = xtr[:n_train], ytr[:n_train]
    return xtr, ytr, torch.as_tensor(d.test.x), torch.as_tensor(d.test.y)


@torch.no_grad()
def evaluate(model, x, y, batch=256):
    model.eval()
    correct = sum(int((model(x[i:i + batch]).argmax(-1) == y[i:i + batch]).sum()) for i in range(0, len(x), batch))
    model.train()
    return 100.0 * correct / len(x)


def run(arm, seed, data, epochs=10, batch=64, lr=0.01, weight_decay=0.01, d_model=64, n_layers=4, dropout=0.1,
        prenorm=True):
    xtr, ytr, xte, yte = data
    model = build(arm, seed, d_model, n_layers, dropout, lr, prenorm)
    optimizer, scheduler = setup_optimizer(model, lr, weight_decay, epochs)
    crit = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(seed)
    accs, t_steps = [], []
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
    return {"arm": arm, "seed": seed, "final": accs[-1], "best": max(accs), "curve": accs,
            "ms_per_step": 1e3 * statistics.median(t_steps), "loss": float(loss.detach())}


def summarize(results, arms):
    lines = ["| arm | layer call | final test acc (%) | best | ms/step | seeds |", "|---|---|---|---|---|---|"]
    for arm in arms:
        rs = sorted((r for r in results if r["arm"] == arm), key=lambda r: r["seed"])
        if not rs:
            continue
        f = [r["final"] for r in rs]
        sd = statistics.stdev(f) if len(f) > 1 else 0.0
        what = ARMS[arm].description if arm in ARMS else "(an arm this version does not define)"
        lines.append(f"| `{arm}` | {what} | {statistics.mean(f):.1f} +- {sd:.1f} | "
                     f"{statistics.mean(r['best'] for r in rs):.1f} | "
                     f"{statistics.median(r['ms_per_step'] for r in rs):.0f} | "
                     f"{', '.join(str(r['seed']) for r in rs)} |")
    return "\n".join(lines) + "\n"


PROGRAM = "ddesys.experiments.s4_recipe"                     # the owner named in its results files
SHAPE_KEYS = ("epochs", "batch", "d_model", "n_layers", "n_train", "postnorm", "dropout")  # the recipe of a run
RECIPE_DEFAULTS = {"postnorm": False, "dropout": 0.1}       # keys that results files written before them lack
SCHEMA = RunSchema(fields=("config", "arm", "seed"), done=("final", "best", "ms_per_step"),   # what summarize
                   types={"arm": "str", "seed": "int"})                                     # reads


def run_config(arm, seed, recipe):
    """The configuration of one run: ``arm``, ``seed`` and the recipe's :data:`SHAPE_KEYS` (``recipe``: a
    dict holding them, e.g. ``vars(args)``)."""
    return {"arm": arm, "seed": seed, **{k: recipe[k] for k in SHAPE_KEYS}}


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
                data.append(load_data(args.n_train))
            t0 = time.perf_counter()
            r = run(arm, seed, data[0], epochs=args.epochs, batch=args.batch, d_model=args.d_model,
                    n_layers=args.n_layers, dropout=args.dropout, prenorm=not args.postnorm)
            print(f"{arm:14s} seed {seed}: final {r['final']:.1f} best {r['best']:.1f} "
                  f"{r['ms_per_step']:.0f} ms/step", flush=True)
            return {**r, "config": run_config(arm, seed, recipe), "status": "done",
                    "seconds": time.perf_counter() - t0}
        return run_key(run_config(arm, seed, recipe)), f"{arm} seed {seed}", fn

    def report():
        mine = [r for r in store.latest() if r.get("status", "done") == "done"
                and all(r["config"].get(k) == recipe[k] for k in SHAPE_KEYS)]
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
