"""The results store of every experiment CLI: one file per folder, its owner claimed before any work,
records checked by type, merged under a lock, one claim per run.

Standard library only: the CLIs open their store before importing torch, so a damaged, foreign or
malformed results file stops them in about a second, before any work.

A results file is ``{"program": "ddesys.experiments.<name>", "schema": 2, "meta": ..., "runs": [run, ...]}``
(:func:`migrate` reads the older layouts and refuses newer ones; an experiment whose files once had
another layout converts them with its ``legacy`` function, once: the next write is in the current
layout). Every run carries its ``config`` and a ``key`` made of a readable prefix and a hash of the
config, so reruns into the same folder merge: runs of other configurations are kept, the same
configuration is skipped (or replaced, without resume). Opening a store

* refuses a file another program wrote, a malformed ``meta`` block and any run that lacks a field its
  experiment's report reads or holds a value of the wrong type (:class:`~experiments._schema.RunSchema`);
* claims a folder without a results file for its program at once (an empty results file naming it), so a
  second program started into the folder is refused before its work, not after.

Every write goes to a temporary file in the same folder and is renamed over the old one (atomic on
POSIX), under a lock on the folder and after reading the file again, so sweeps running at the same time
into one folder all keep their runs. :func:`claim_run` holds one run for one process (a second sweep
asked for it skips it), and :func:`run_records` is the loop of the CLIs that record one configuration at
a time without checkpoints (resume, claims, a clean stop on Ctrl-C).
"""
from __future__ import annotations

import contextlib
import datetime
import json
import os
import re
from pathlib import Path

from ddesys.io import RESULT_FILES, OutError, atomic_write, check_owner, locked, written_by

from ._schema import ResultsError, RunSchema, check_meta, program_of

try:                                             # POSIX; elsewhere two sweeps may run the same configuration
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

RESULTS = "results.json"
SCHEMA_VERSION = 2      # of the results files this code writes; see migrate()


class ForeignResults(ResultsError):
    """A results file another program wrote (or claimed: it may be running now)."""


def read_results(path, experiment, legacy=None):
    """``(meta, runs)`` of a results file (``({}, [])`` when there is none). Raises
    :class:`ResultsError` naming the file and the problem when it is not valid JSON (e.g. truncated),
    not a results file, one written by another program (another experiment, the verification), or one
    whose ``meta`` is malformed. ``legacy(data, path)``: the current layout of a parsed file without a
    ``runs`` list (an experiment's earlier layout), or ``None`` when it is not one."""
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
        raise ForeignResults(f"{path}: written by {who}: not a results file of {mine}")
    if legacy is not None and isinstance(data, dict) and not isinstance(data.get("runs"), list):
        data = legacy(data, path) or data
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        what = f"keys {sorted(data)[:6]}" if isinstance(data, dict) else type(data).__name__
        raise ResultsError(f"{path}: not a results file of {mine} (no 'runs' list; {what})")
    data = migrate(data, path)
    meta = data.get("meta", {})
    check_meta(meta, path)
    for i, run in enumerate(data["runs"]):
        if not isinstance(run, dict):
            raise ResultsError(f"{path}: run {i} is a {type(run).__name__}, not a run of {mine}")
        if not isinstance(run.get("config"), dict):
            name = f"{path}: run {i}" + (f" ({run['key']})" if isinstance(run.get("key"), str) else "")
            raise ResultsError(f"{name} has no field 'config'" if "config" not in run else
                               f"{name}: 'config' is a {type(run['config']).__name__}, not a dict")
    return meta, data["runs"]


def migrate(data, path=RESULTS):
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
    """The runs of ``out/<name>`` (``results.json``), merged across invocations and saved after every change.

    ``rekey(run) -> key`` recomputes a stored run's key from its config (older files get the current
    key scheme); ``schema`` (a :class:`~experiments._schema.RunSchema`) lists the fields every stored run
    must have and their types. Every run of the file is checked when the store opens, before any work;
    a folder without the file is claimed at once (an empty results file naming this program is written
    under the folder's lock). ``resume=False`` makes :meth:`done` false for every key (the runs are
    replaced when they finish) but keeps the other runs. ``move_bad``: a file that cannot be read is
    renamed aside (with a message) instead of raising :class:`ResultsError`. ``legacy``: see
    :func:`read_results`.

    :meth:`put` locks the folder, reads the file again and writes it back with the one run replaced or
    added: runs that another process recorded since are kept."""

    def __init__(self, out, experiment, rekey, meta, resume=True, move_bad=False, log=print, schema=None,
                 name=RESULTS, legacy=None):
        self.path = Path(out) / name
        self.experiment, self.resume, self.rekey, self.legacy = experiment, resume, rekey, legacy
        self.schema = schema if schema is not None else RunSchema()
        self.meta = meta
        self._check_folder()
        try:
            old_meta, self.runs = self._open()
        except ResultsError as exc:
            if not move_bad:
                how = ("choose another --out (that program may be running now), or, once it has finished, move "
                       "the file away or pass --move-bad-results" if isinstance(exc, ForeignResults) else
                       "move the file away, fix it, or pass --move-bad-results")
                raise ResultsError(f"{exc}. Nothing was written: {how}") from None
            new = move_aside(self.path)
            log(f"warning: {exc}; moved it to {new} and starting a new results file")
            old_meta, self.runs = self._open()
        self.meta = {**old_meta, **meta, "experiment": experiment,
                     "commands": self._commands(old_meta, meta.get("command"))}

    def _open(self):
        """:meth:`_read`; a missing file is created empty under the lock (the folder's claim). A folder that
        holds another program's results file is refused (:meth:`_check_folder`)."""
        if self.path.exists():
            return self._read()
        with locked(self.path.parent):
            meta, runs = self._read()                    # another process may have claimed it meanwhile
            if not self.path.exists():
                self.meta = {**self.meta, "experiment": self.experiment,
                             "commands": self._commands({}, self.meta.get("command"))}
                self.runs = {}
                self._write()
        return meta, runs

    def _check_folder(self):
        """Refuse a folder holding another program's results file under another name
        (``ddesys.io.RESULT_FILES``: a folder is one program's), before any work."""
        folder, program = self.path.parent, program_of(self.experiment)
        for other in RESULT_FILES:
            if other != self.path.name and (folder / other).is_file():
                try:
                    check_owner(folder, program, results=other)
                except OutError as exc:
                    raise ForeignResults(str(exc)) from None

    @staticmethod
    def _commands(meta, command):
        commands = list(meta.get("commands") or ([meta["command"]] if "command" in meta else []))
        if command and command not in commands:
            commands.append(command)
        return commands

    def _read(self):
        """``(meta, {key: run})`` of the file, every run checked against the schema and rekeyed."""
        meta, runs = read_results(self.path, self.experiment, self.legacy)
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

    def latest(self):
        """Every run of the file as it is now (read again under the folder's lock: runs other processes
        recorded since this store opened included), for a report of the whole folder."""
        with locked(self.path.parent):
            return list(self._read()[1].values())

    def put(self, run):
        """Record ``run`` (replacing one with its key in place) and save the file atomically: under the
        folder's lock, merged into the file as it is now (runs other processes wrote are kept). Raises
        :class:`ResultsError` when the file became unreadable or foreign meanwhile (it is left as it
        is), or when ``run`` itself does not pass the schema (a record the next run would refuse)."""
        self.schema.check(run, len(self.runs), f"{self.path} (the record to add)")   # a record it would refuse
        with locked(self.path.parent):                                                # later is not written
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


# ------------------------------------------------------------------------------------------ runs
def safe_name(key):
    """A file name made of ``key`` (characters outside ``[A-Za-z0-9.=+-]`` become ``_``), no extension."""
    return re.sub(r"[^A-Za-z0-9.=+-]+", "_", key)


@contextlib.contextmanager
def claim_run(folder, key):
    """Hold the claim on ``key``'s run for the ``with`` block: yields True when this process holds it,
    False when another one does (it is running that configuration now). An exclusive, non-blocking
    ``flock`` on ``folder/.<key as a file name>.pt.claim``; it goes with the process (a killed sweep never
    leaves it held), and its file is removed on leaving."""
    fd, mine = None, True
    path = Path(folder) / f".{safe_name(key)}.pt.claim"
    if fcntl is not None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            fd, mine = None, False
    try:
        yield mine
    finally:
        if fd is not None:
            path.unlink(missing_ok=True)          # a later claimant re-checks the results (recorded())
            os.close(fd)


def run_records(store, jobs, verb="training", log=print, on_saved=None):
    """Run ``jobs`` (``(key, label, fn)``; ``fn()`` returns the configuration's record) one at a time and
    record each in ``store`` as it finishes. A configuration already recorded is skipped (resume), so is
    one another process holds (:func:`claim_run`) or recorded meanwhile. Ctrl-C (``KeyboardInterrupt``)
    keeps what was recorded and returns 130; otherwise 0. ``on_saved()`` runs after every record."""
    done = [label for key, label, _ in jobs if store.done(key)]
    log(f"{len(jobs)} runs ({len(done)} already in {store.path}; {len(store.runs)} there in all)")
    for key, label, fn in jobs:
        if store.done(key):
            continue
        with claim_run(store.path.parent, key) as mine:
            if not mine:
                log(f"skipping {label}: another process is {verb} it now (its result goes to {store.path})")
                continue
            if store.resume and store.recorded(key):
                log(f"skipping {label}: another process recorded it while this sweep ran")
                continue
            try:
                record = fn()
            except KeyboardInterrupt:
                log(f"\nstopped during {label}: the finished runs are in {store.path}. Rerun the same command "
                    "to resume.")
                return 130
            store.put({**record, "key": key})
            if on_saved is not None:
                on_saved()
    return 0


__all__ = ["ForeignResults", "RESULTS", "SCHEMA_VERSION", "ResultsError", "RunSchema", "Store", "claim_run",
           "migrate", "move_aside", "read_results", "run_records", "safe_name"]
