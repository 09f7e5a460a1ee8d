"""Output folders, argument checks and results files shared by the experiment CLIs.

Light on purpose (standard library only): the CLIs call it before importing torch, so an unusable
``--out``, a bad argument or a damaged ``results.json`` stops them in about a second, before any work.

A results file is ``{"meta": ..., "runs": [run, ...]}``; every run carries its ``config`` and a ``key``
made of a readable prefix and a hash of the config, so reruns into the same folder merge: runs of other
configurations are kept, the same configuration is skipped (or replaced, without resume). Every write
goes to a temporary file in the same folder and is renamed over the old one (atomic on POSIX).
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import math
import os
import re
from pathlib import Path

from ddesys.verification.outdir import OutError, atomic_write, prepare_out  # noqa: F401 - part of this module's API

RESULTS = "results.json"



class ResultsError(Exception):
    """An existing results file that cannot be merged with (corrupt, foreign or malformed)."""


# ------------------------------------------------------------------------------------------ arguments
def positive_int(text):
    """argparse type: an integer >= 1."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {v}")
    return v


def nonneg_int(text):
    """argparse type: an integer >= 0."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {v}")
    return v


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


def read_results(path, experiment):
    """``(meta, runs)`` of a results file (``({}, [])`` when there is none). Raises
    :class:`ResultsError` naming the file and the problem when it is not valid JSON (e.g. truncated),
    not a results file, or one written by another experiment."""
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
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        what = f"keys {sorted(data)[:6]}" if isinstance(data, dict) else type(data).__name__
        raise ResultsError(f"{path}: not a results file of experiments.{experiment} (no 'runs' list; {what})")
    meta = data.get("meta") if isinstance(data.get("meta"), dict) else {}
    if meta.get("experiment", experiment) != experiment:
        raise ResultsError(f"{path}: holds results of experiments.{meta['experiment']}, not of "
                           f"experiments.{experiment}")
    for i, run in enumerate(data["runs"]):
        if not isinstance(run, dict) or not isinstance(run.get("config"), dict):
            raise ResultsError(f"{path}: run {i} is not a run of experiments.{experiment} (no 'config')")
    return meta, data["runs"]


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
    key scheme). ``resume=False`` makes :meth:`done` false for every key (the runs are replaced when
    they finish) but keeps the other runs. ``move_bad``: a file that cannot be read is renamed aside
    (with a message) instead of raising :class:`ResultsError`."""

    def __init__(self, out, experiment, rekey, meta, resume=True, move_bad=False, log=print):
        self.path = Path(out) / RESULTS
        self.experiment, self.resume = experiment, resume
        try:
            old_meta, runs = read_results(self.path, experiment)
            keys = []
            for i, run in enumerate(runs):
                try:
                    keys.append(rekey(run))
                except (KeyError, TypeError, ValueError) as exc:
                    raise ResultsError(f"{self.path}: run {i} is not a run of experiments.{experiment} "
                                       f"(missing {exc})") from None
        except ResultsError as exc:
            if not move_bad:
                raise ResultsError(f"{exc}. Nothing was written: move the file away, fix it, or pass "
                                   "--move-bad-results") from None
            new = move_aside(self.path)
            log(f"warning: {exc}; moved it to {new} and starting a new results file")
            old_meta, runs, keys = {}, [], []
        self.runs = {}
        for run, key in zip(runs, keys):
            run["key"] = key
            self.runs[key] = run
        commands = list(old_meta.get("commands") or ([old_meta["command"]] if "command" in old_meta else []))
        if meta.get("command") and meta["command"] not in commands:
            commands.append(meta["command"])
        self.meta = {**old_meta, **meta, "experiment": experiment, "commands": commands}

    def done(self, key):
        """Whether ``key`` has a result that this invocation keeps (resume on and a run recorded)."""
        return self.resume and key in self.runs

    def keys(self):
        return [k for k in self.runs if self.done(k)]

    def get(self, key):
        return self.runs[key]

    def put(self, run):
        """Record ``run`` (replacing one with its key in place) and save the file atomically."""
        self.runs[run["key"]] = run
        self.save()

    def save(self):
        atomic_write(self.path, json.dumps({"meta": self.meta, "runs": list(self.runs.values())}, indent=1))

    def all(self):
        return list(self.runs.values())


__all__ = ["OutError", "ResultsError", "Store", "add_run_arguments", "atomic_write", "canonical", "config_key",
           "done_runs", "device_name",
           "is_main_process", "learning_rate", "move_aside", "nonneg_int", "positive_int", "prepare_out",
           "read_results"]
