"""The command-line driver shared by the experiment CLIs: results file, sweep, report.

An experiment is one :class:`Experiment`: its name (``ddesys.experiments.<name>``, the program that owns
its results files), what its report reads of a run (:class:`~experiments._runs.RunSchema`), how a record's
key is recomputed, its report's files, and two functions: ``plan(args, ctx)``, every job of the sweep
(:class:`~experiments._train.Job`, done ones included) with a phrase for the summary line, and
``markdown(runs, meta)`` / ``figures(runs, out)`` for the report. Its ``main`` parses the arguments (bad
ones exit 2 before any work) and calls :func:`drive`, which

* opens (or creates) the results file on rank 0 before torch is imported: a foreign or damaged file, an
  unusable folder or a record the report could not read stops here, in about a second;
* skips the jobs already recorded, runs the rest with :func:`~experiments._train.run_sweep`
  (checkpoints, resume, divergence records, a clean stop on SIGINT / SIGTERM), rewriting the report
  after every run;
* prints the report at the end.

Adding an experiment is one package ``experiments/<name>/``: its ``train_run`` builds the model and calls
:func:`~experiments._train.fit` with its batches, its evaluation and its record; its report module gives
``markdown`` and the figures; its ``__main__`` parses the arguments (with
:func:`~experiments._runs.add_run_arguments`), lists the jobs in ``plan`` and calls :func:`drive`. Resume,
checkpoints, claims, divergence records, the results file and its schema come with the driver.
``tests/experiments/test_driver.py`` is a complete toy experiment in about fifty lines.
"""
from __future__ import annotations

import datetime
import sys
from dataclasses import dataclass
from typing import Callable

from ddesys.io import provenance

from ._runs import OutError, ResultsError, RunSchema, atomic_write, is_main_process, open_results


@dataclass(frozen=True)
class Experiment:
    """What :func:`drive` needs of an experiment (module docstring). ``done(runs)``: whether the report's
    figures can be drawn (a finished run exists)."""
    name: str
    schema: RunSchema
    rekey: Callable
    files: tuple
    plan: Callable
    markdown: Callable
    figures: Callable
    done: Callable


def save_report(exp, store, out):
    """``report.md`` from every run in ``store``; the figures once a run has finished."""
    runs = store.all()
    atomic_write(out / "report.md", exp.markdown(runs, store.meta))
    if exp.done(runs):
        exp.figures(runs, out)


def drive(exp, args, argv, out):
    """Run ``exp``'s sweep into ``out`` (module docstring); returns the exit code (0, or ``128 + signal``
    when stopped). ``args`` must carry ``scale``, ``device``, ``quiet`` and the run arguments of
    :func:`~experiments._runs.add_run_arguments`."""
    store = None
    if is_main_process():                                # rank 0 alone owns the files (torchrun)
        meta = {"scale": args.scale, "command": f"python -m ddesys.experiments.{exp.name} " + " ".join(
            sys.argv[1:] if argv is None else argv), "date": datetime.date.today().isoformat()}
        store = open_results(out, exp.name, exp.rekey, args, meta, exp.schema, files=exp.files)
    import torch                                         # the heavy part starts here

    from ._ckpt import Checkpoints
    from ._dist import setup
    from ._train import run_sweep
    ctx = setup(args.device)
    try:
        jobs, what = exp.plan(args, ctx)
        done = set(ctx.broadcast(store.keys() if ctx.main else None))
        todo = [job for job in jobs if job.key not in done]
        if ctx.main:
            store.meta.update(device=str(ctx.device), torch=torch.__version__, **ctx.describe(), **provenance())
            print(f"{len(jobs)} runs ({len(jobs) - len(todo)} already in {store.path}; {len(store.runs)} there "
                  f"in all); {what + '; ' if what else ''}device {ctx.device}"
                  + (f"; {ctx.world} processes ({ctx.backend})" if ctx.world > 1 else ""))
        ckpts = Checkpoints(out / "checkpoints", args.checkpoint_every, ctx, keep=args.keep_checkpoints)
        try:
            code = run_sweep(todo, store, ckpts, ctx, resume=not args.no_resume, quiet=args.quiet,
                             on_saved=lambda: save_report(exp, store, out))
        except (OutError, ResultsError) as exc:
            raise SystemExit(f"error: {exc}") from None
        if ctx.main and code == 0:
            if not todo and store.runs and not (out / "report.md").exists():
                save_report(exp, store, out)
            print()
            print(exp.markdown(store.all(), store.meta) if store.runs else "no runs")
        return code
    finally:
        ctx.close()


__all__ = ["Experiment", "drive", "save_report"]
