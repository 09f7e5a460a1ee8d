"""Output folders, argument checks and results files shared by the experiment CLIs.

Light on purpose (standard library only): the CLIs call it before importing torch, so an unusable
``--out``, a bad argument or a damaged ``results.json`` stops them in about a second, before any work.

A results file is ``{"program": "ddesys.experiments.<name>", "schema": 2, "meta": ..., "runs": [run, ...]}``
(:func:`migrate` reads the older layouts and refuses newer ones); every
run carries its ``config`` and a ``key`` made of a readable prefix and a hash of the config, so reruns into
the same folder merge: runs of other configurations are kept, the same configuration is skipped (or
replaced, without resume). A file another program wrote is refused, and so is one with a run that lacks a
field the experiment's report reads (:class:`RunSchema`), before any work. Every write goes to a temporary
file in the same folder and is renamed over the old one (atomic on POSIX), under a lock on the folder and
after reading the file again, so sweeps running at the same time into one folder all keep their runs.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ddesys.io import LOCK, OutError, atomic_write, locked, prepare_out, written_by  # noqa: F401

RESULTS = "results.json"
SCHEMA_VERSION = 2      # of the results files this code writes; see migrate()


class ResultsError(Exception):
    """An existing results file that cannot be merged with (corrupt, foreign or malformed)."""


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


def positive_float(text):
    """argparse type: a finite float > 0 (learning rates, frequencies, steps in seconds)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"must be finite and > 0, got {text}")
    return v


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
    ap.add_argument("--no-resume", action="store_true",
                    help="rerun configurations already in results.json (their results are replaced) and ignore "
                         "their checkpoints")
    ap.add_argument("--checkpoint-every", type=positive_int, default=ckpt_every,
                    help=f"optimizer steps between checkpoints (default {ckpt_every}); one is also written on "
                         "SIGINT / SIGTERM, and an interrupted run resumes from it")
    ap.add_argument("--keep-checkpoints", action="store_true",
                    help="keep each finished run's checkpoint (final weights) in OUT/checkpoints")
    ap.add_argument("--amp", choices=("none", "bf16"), default="none",
                    help="mixed precision: bf16 autocast of the forward pass (meant for CUDA)")
    ap.add_argument("--move-bad-results", action="store_true",
                    help="a corrupt or foreign results.json is renamed aside (results.json.bad-<time>) "
                         "instead of stopping the CLI")


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


def program_of(experiment):
    """The ``program`` a results file of ``experiment`` names: ``ddesys.experiments.<experiment>``."""
    return f"ddesys.experiments.{experiment}"


@dataclass(frozen=True)
class RunSchema:
    """The fields a stored run must have: ``fields`` in every run, ``done`` in finished ones as well,
    ``curve`` in every point of a run's ``curve`` list (the fields its report reads without a default).
    An entry that is a tuple of names needs one of them (e.g. ``("best_acc", "best_rmse")``: a
    classification or a regression run). :meth:`check` raises :class:`ResultsError` naming the file, the
    run and the field."""
    fields: tuple = ("config", "curve")
    done: tuple = ()
    curve: tuple = ()

    def check(self, run, i, path):
        name = f"{path}: run {i}" + (f" ({run['key']})" if isinstance(run.get("key"), str) else "")
        status = run.get("status", "done")
        if status not in ("done", "diverged"):
            raise ResultsError(f"{name}: status {status!r} is neither 'done' nor 'diverged'")
        for field in self.fields + (self.done if status == "done" else ()):
            if not _has(run, field):
                raise ResultsError(f"{name} has no field {_name(field)}")
        if not isinstance(run["config"], dict):
            raise ResultsError(f"{name}: 'config' is a {type(run['config']).__name__}, not a dict")
        curve = run.get("curve", [])
        if not isinstance(curve, list):
            raise ResultsError(f"{name}: 'curve' is a {type(curve).__name__}, not a list")
        for j, point in enumerate(curve):
            missing = [f for f in self.curve if not isinstance(point, dict) or not _has(point, f)]
            if missing:
                raise ResultsError(f"{name}: curve point {j} has no field {_name(missing[0])}")

    def names(self, part):
        """Every field name ``part`` (``"fields"``, ``"done"`` or ``"curve"``) mentions, alternatives included."""
        return {n for f in getattr(self, part) for n in ((f,) if isinstance(f, str) else f)}


def _has(record, field):
    return any(f in record for f in ((field,) if isinstance(field, str) else field))


def _name(field):
    return repr(field) if isinstance(field, str) else " or ".join(map(repr, field))


def read_results(path, experiment):
    """``(meta, runs)`` of a results file (``({}, [])`` when there is none). Raises
    :class:`ResultsError` naming the file and the problem when it is not valid JSON (e.g. truncated),
    not a results file, or one written by another program (another experiment, the verification)."""
    path = Path(path)
    if not path.exists():
        return {}, []
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ResultsError(f"{path}: not a text file ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}; "
                           "truncated?)") from None
    who, mine = written_by(data), program_of(experiment)
    if who is not None and who != mine:
        raise ResultsError(f"{path}: written by {who}: not a results file of {mine}")
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        what = f"keys {sorted(data)[:6]}" if isinstance(data, dict) else type(data).__name__
        raise ResultsError(f"{path}: not a results file of {mine} (no 'runs' list; {what})")
    data = migrate(data, path)
    meta = data.get("meta") if isinstance(data.get("meta"), dict) else {}
    for i, run in enumerate(data["runs"]):
        if not isinstance(run, dict):
            raise ResultsError(f"{path}: run {i} is a {type(run).__name__}, not a run of {mine}")
        if not isinstance(run.get("config"), dict):
            name = f"{path}: run {i}" + (f" ({run['key']})" if isinstance(run.get("key"), str) else "")
            raise ResultsError(f"{name} has no field 'config'" if "config" not in run else
                               f"{name}: 'config' is a {type(run['config']).__name__}, not a dict")
    return meta, data["runs"]


def migrate(data, path="results.json"):
    """A parsed results file in the current layout (:data:`SCHEMA_VERSION`), whatever version wrote it;
    the one place where older layouts are understood.

    * version 0 (no ``program`` field; the owner is told by :func:`written_by`) and version 1
      (``program``, no ``schema``): a run without ``status`` is a finished one (``"done"``);
    * a version newer than this code's is refused (:class:`ResultsError`): fields it may have added
      would be dropped on the next write.

    Keys are not touched: every experiment recomputes them from the configs (its ``rekey``)."""
    version = data.get("schema", 1 if "program" in data else 0)
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise ResultsError(f"{path}: 'schema' is {version!r}, not a version number")
    if version > SCHEMA_VERSION:
        raise ResultsError(f"{path}: written with results schema {version} by a newer ddesys (this one reads "
                           f"up to {SCHEMA_VERSION}); nothing was written: upgrade, or choose another --out")
    if version < 2:
        for run in data["runs"]:
            if isinstance(run, dict):
                run.setdefault("status", "done")
    data["schema"] = SCHEMA_VERSION
    return data


def move_aside(path):
    """Rename ``path`` to ``<name>.bad-<time>`` next to it; returns the new path."""
    path = Path(path)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    new = path.with_name(f"{path.name}.bad-{stamp}")
    os.replace(path, new)
    return new


class Store:
    """The runs of ``out/results.json``, merged across invocations and saved after every change.

    ``rekey(run) -> key`` recomputes a stored run's key from its config (older files get the current
    key scheme); ``schema`` (a :class:`RunSchema`) lists the fields every stored run must have. Every
    run of the file is checked when the store opens, before any work. ``resume=False`` makes
    :meth:`done` false for every key (the runs are replaced when they finish) but keeps the other
    runs. ``move_bad``: a file that cannot be read is renamed aside (with a message) instead of raising
    :class:`ResultsError`.

    :meth:`put` locks the folder, reads the file again and writes it back with the one run replaced or
    added: runs that another process recorded since are kept."""

    def __init__(self, out, experiment, rekey, meta, resume=True, move_bad=False, log=print, schema=None):
        self.path = Path(out) / RESULTS
        self.experiment, self.resume, self.rekey = experiment, resume, rekey
        self.schema = schema if schema is not None else RunSchema()
        try:
            old_meta, self.runs = self._read()
        except ResultsError as exc:
            if not move_bad:
                raise ResultsError(f"{exc}. Nothing was written: move the file away, fix it, or pass "
                                   "--move-bad-results") from None
            new = move_aside(self.path)
            log(f"warning: {exc}; moved it to {new} and starting a new results file")
            old_meta, self.runs = {}, {}
        self.meta = {**old_meta, **meta, "experiment": experiment,
                     "commands": self._commands(old_meta, meta.get("command"))}

    @staticmethod
    def _commands(meta, command):
        commands = list(meta.get("commands") or ([meta["command"]] if "command" in meta else []))
        if command and command not in commands:
            commands.append(command)
        return commands

    def _read(self):
        """``(meta, {key: run})`` of the file, every run checked against the schema and rekeyed."""
        meta, runs = read_results(self.path, self.experiment)
        out = {}
        for i, run in enumerate(runs):
            self.schema.check(run, i, self.path)
            try:
                key = self.rekey(run)
            except (KeyError, TypeError, ValueError) as exc:
                raise ResultsError(f"{self.path}: run {i} is not a run of {program_of(self.experiment)} "
                                   f"(its key needs {exc})") from None
            run["key"] = key
            out[key] = run
        return meta, out

    def done(self, key):
        """Whether ``key`` has a result that this invocation keeps (resume on and a run recorded)."""
        return self.resume and key in self.runs

    def keys(self):
        return [k for k in self.runs if self.done(k)]

    def recorded(self, key):
        """Whether the file holds a run of ``key`` now (read again under the folder's lock: another
        process may have recorded it since this store opened)."""
        with locked(self.path.parent):
            return key in self._read()[1]

    def get(self, key):
        return self.runs[key]

    def put(self, run):
        """Record ``run`` (replacing one with its key in place) and save the file atomically: under the
        folder's lock, merged into the file as it is now (runs other processes wrote are kept). Raises
        :class:`ResultsError` when the file became unreadable or foreign meanwhile (it is left as it
        is)."""
        with locked(self.path.parent):
            try:
                disk_meta, runs = self._read()
            except ResultsError as exc:
                raise ResultsError(f"{exc}. It changed while this sweep ran; the run {run['key']} was not "
                                   "recorded (rerun to train it again)") from None
            runs[run["key"]] = run
            self.runs = runs
            disk = list(disk_meta.get("commands") or [])
            mine = [c for c in self.meta["commands"] if c not in disk]
            self.meta = {**disk_meta, **self.meta, "commands": disk + mine}
            self._write()

    def _write(self):
        atomic_write(self.path, json.dumps({"program": program_of(self.experiment), "schema": SCHEMA_VERSION,
                                            "meta": self.meta, "runs": list(self.runs.values())}, indent=1))

    def all(self):
        return list(self.runs.values())


def open_results(out, experiment, rekey, args, meta, schema, files=()):
    """The :class:`Store` of a sweep into ``out``, after checking every path it will write: the folder,
    ``results.json``, its lock, ``files`` (reports, figures) and the ``checkpoints`` folder. Any problem
    (an unusable path, a foreign or damaged results file, a run missing a field) exits with
    ``error: ...`` naming it, before any work and with the folder as it was. ``args``: the parsed
    :func:`add_run_arguments` flags."""
    try:
        prepare_out(out, files=(RESULTS, LOCK, *files), folders=("checkpoints",))
        return Store(out, experiment, rekey, meta, resume=not args.no_resume, move_bad=args.move_bad_results,
                     schema=schema)
    except (OutError, ResultsError) as exc:
        raise SystemExit(f"error: {exc}") from None


__all__ = ["OutError", "ResultsError", "RunSchema", "SCHEMA_VERSION", "Store", "add_run_arguments", "atomic_write",
           "canonical", "config_key", "done_runs", "device_name", "is_main_process", "learning_rate", "migrate",
           "move_aside", "nonneg_int", "open_results", "positive_float", "positive_int", "prepare_out", "program_of",
           "read_results", "unit_fraction"]
