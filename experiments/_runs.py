"""Arguments, output folders and results files shared by the experiment CLIs.

Light on purpose (standard library only): the CLIs call it before importing torch, so an unusable
``--out``, a bad argument or a damaged ``results.json`` stops them in about a second, before any work.
The results store itself (file layout, owner claim, locked merges, per-run claims) is
:mod:`experiments._store`, the record checks :mod:`experiments._schema`; both are re-exported here.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
from pathlib import Path

from ddesys.io import LOCK, OutError, atomic_write, locked, prepare_out, written_by  # noqa: F401

from ._schema import ResultsError, RunSchema, check_meta, program_of  # noqa: F401
from ._store import (RESULTS, SCHEMA_VERSION, Store, claim_run, migrate, move_aside, read_results,  # noqa: F401
                     run_records, safe_name)


# ------------------------------------------------------------------------------------------ arguments
def _int_at_least(lo):
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {lo}, got {text!r}") from None
        if v < lo:
            raise argparse.ArgumentTypeError(f"must be >= {lo}, got {v}")
        return v
    parse.__doc__ = f"argparse type: an integer >= {lo}."
    return parse


positive_int = _int_at_least(1)
nonneg_int = _int_at_least(0)


def _finite_float(low, strict):
    """argparse type: a finite float ``> low`` (``strict``) or ``>= low``."""
    def parse(text):
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(v) or v < low or (strict and v == low):
            raise argparse.ArgumentTypeError(f"must be finite and {'>' if strict else '>='} {low:g}, got {text}")
        return v
    return parse


#: argparse type: a finite float > 0 (learning rates, frequencies, steps in seconds)
positive_float = _finite_float(0.0, strict=True)
#: argparse type: a finite float >= 0 (a rate that may freeze)
nonneg_float = _finite_float(0.0, strict=False)


learning_rate = positive_float


def unit_fraction(text):
    """argparse type: a float in [0, 1) (dropout rates, branch allocations)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0.0 <= v < 1.0:
        raise argparse.ArgumentTypeError(f"must lie in [0, 1), got {text}")
    return v


def device_name(text):
    """argparse type: ``cpu``, ``cuda`` or ``cuda:N`` (``mps`` too), checked without importing torch."""
    if not re.fullmatch(r"cpu|mps|cuda(:\d+)?", text):
        raise argparse.ArgumentTypeError(f"expected cpu, cuda or cuda:N, got {text!r}")
    return text


def add_run_arguments(ap, ckpt_every=200):
    """The flags every training CLI shares: resume, checkpoints, mixed precision, bad results files."""
    add_store_arguments(ap)
    ap.add_argument("--checkpoint-every", type=positive_int, default=ckpt_every,
                    help=f"optimizer steps between checkpoints (default {ckpt_every}); one is also written on "
                         "SIGINT / SIGTERM, and an interrupted run resumes from it")
    ap.add_argument("--keep-checkpoints", action="store_true",
                    help="keep each finished run's checkpoint (final weights) in OUT/checkpoints")
    ap.add_argument("--amp", choices=("none", "bf16"), default="none",
                    help="mixed precision: bf16 autocast of the forward pass (meant for CUDA)")


def is_main_process():
    """Rank 0 under torchrun, or a process outside it (read from the environment, before torch)."""
    return os.environ.get("RANK", "0") == "0"


# ------------------------------------------------------------------------------------------ results files
def config_key(prefix, config):
    """``prefix|<hash>``: the hash covers the whole JSON config, so two runs share a key exactly when
    their configurations are equal (after a JSON round trip)."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return f"{prefix}|{hashlib.sha1(text.encode()).hexdigest()[:10]}"


def done_runs(runs):
    """The finished runs of a results list (diverged ones left out)."""
    return [r for r in runs if r.get("status", "done") == "done"]


def canonical(d, drop=()):
    """A dict as canonical JSON text without the keys ``drop``: equal settings compare equal."""
    return json.dumps({k: v for k, v in d.items() if k not in drop}, sort_keys=True)


def add_store_arguments(ap):
    """The results-file flags of every CLI: ``--no-resume`` and ``--move-bad-results``."""
    ap.add_argument("--no-resume", action="store_true",
                    help="rerun configurations already in the results file (their results are replaced) and "
                         "ignore their checkpoints")
    ap.add_argument("--move-bad-results", action="store_true",
                    help="a corrupt, foreign or malformed results file is renamed aside (<name>.bad-<time>) "
                         "instead of stopping the CLI")


def open_results(out, experiment, rekey, args, meta, schema, files=(), name=RESULTS, legacy=None,
                 folders=("checkpoints",)):
    """The :class:`Store` of a sweep into ``out``, after checking every path it will write: the folder,
    the results file (``name``), its lock, ``files`` (reports, figures) and ``folders`` (checkpoints).
    A report or figure of ``files`` in a folder without the results file was not written by this
    program: refused, like an unusable path, a foreign, damaged or malformed results file or a record of
    the wrong type; each exits with ``error: ...`` naming it, before any work and with the folder as it
    was. A folder that passes is claimed (see :class:`Store`). ``args``: the parsed
    :func:`add_store_arguments` flags (``no_resume``, ``move_bad_results``)."""
    try:
        prepare_out(out, files=(name, LOCK, *files), folders=folders)
        if not (Path(out) / name).exists():
            stray = [f for f in files if (Path(out) / f).exists()]
            if stray:
                raise OutError(f"--out {out}: {Path(out) / stray[0]} exists but {Path(out) / name} does not: it "
                               f"was not written by {program_of(experiment)}; nothing was written: move it away or "
                               "choose another --out")
        return Store(out, experiment, rekey, meta, resume=not args.no_resume, move_bad=args.move_bad_results,
                     schema=schema, name=name, legacy=legacy)
    except (OutError, ResultsError) as exc:
        raise SystemExit(f"error: {exc}") from None


__all__ = ["OutError", "RESULTS", "ResultsError", "RunSchema", "SCHEMA_VERSION", "Store", "add_run_arguments",
           "add_store_arguments", "atomic_write", "canonical", "check_meta", "claim_run", "config_key", "done_runs",
           "device_name", "is_main_process", "learning_rate", "migrate", "move_aside", "nonneg_float", "nonneg_int",
           "open_results", "positive_float", "positive_int", "prepare_out", "program_of", "read_results", "run_records",
           "safe_name", "unit_fraction"]
