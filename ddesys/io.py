"""Output folders of the command-line tools: checked before any work, written atomically, owned by one
program, locked while a results file is merged.

Shared by ``python -m ddesys.verification`` and the experiment CLIs (:mod:`ddesys.experiments`). It lives
here, in the analysis package, because both depend on ``ddesys`` and neither may lend it to the other
(verification never imports experiments); it is standard library only, so the CLIs check ``--out``
before importing torch, and ``import ddesys`` stays free of torch. A results file
names the program that wrote it (``"program": "ddesys.experiments.synthetic"``, ...); files from before
that field are recognised by their layout (:func:`written_by`), and a program refuses a folder whose
results another program wrote (:func:`check_owner`) before it does any work. A program claims a new
folder before its work (:func:`claim_owner` writes an empty results file naming it, under the folder's
lock), so a second program started into the same folder stops at once instead of after its work, and it
writes its results under the lock after checking the owner again (:func:`write_owned`).

Every results file also says what wrote it (:func:`provenance`: the ddesys version and the git commit of
the source), and a CLI whose optional dependencies are missing stops with one line naming the extra to
install (:func:`require_extra`) instead of a traceback.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

try:                                             # POSIX; elsewhere merges are not locked
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

__all__ = ["LOCK", "OutError", "atomic_write", "check_owner", "claim_owner", "extra_message", "locked",
           "missing_modules", "prepare_out", "provenance", "require_extra", "write_owned", "written_by"]

LOCK = ".results.lock"                           # the lock file of a folder's results (left in place)


class OutError(Exception):
    """``--out`` cannot be used (not a folder, cannot be created, not writable)."""


def prepare_out(path, files=(), folders=()):
    """Create ``path`` if needed and prove it writable (a probe file is created and removed); raises
    :class:`OutError` naming the folder otherwise. Works for root too, where permission bits do not
    stop writes but a read-only file system or a file in the way still does.

    ``files``: names (relative to ``path``) the program will write: each must not be a folder.
    ``folders``: subfolders it will write into (e.g. ``checkpoints``): each must be a folder or absent
    (then it is created when first needed, inside the writable ``path``); an existing one is probed
    like ``path``. Nothing is created for them, so a refused folder is left as it was."""
    path = Path(path)
    for parent in [path, *path.parents]:
        if parent.exists() and not parent.is_dir():
            raise OutError(f"--out {path}: {parent} is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutError(f"--out {path}: cannot create the folder ({exc.strerror or exc})") from None
    _probe_write(path, f"--out {path} is not writable")
    for name in files:
        if (path / name).is_dir():
            raise OutError(f"--out {path}: {path / name} is a folder, but this program writes a file there")
    for name in folders:
        sub = path / name
        for rel in [Path(name), *Path(name).parents[:-1]]:      # the folder and those between it and path
            p = path / rel
            if p.exists() and not p.is_dir():
                raise OutError(f"--out {path}: {p} is a file, but this program writes a folder there")
        if sub.is_dir():
            _probe_write(sub, f"--out {path}: {sub} is not writable")
    return path


def _probe_write(folder, message):
    """Create and remove a temporary file in ``folder``; :class:`OutError` ``message (reason)`` if it fails."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-test-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise OutError(f"{message} ({exc.strerror or exc})") from None


def written_by(data):
    """The program that wrote a parsed results file, or ``None`` when it cannot be told: its
    ``program`` field; for files from before that field, ``ddesys.experiments.<meta.experiment>``
    (experiment CLIs), ``ddesys.verification`` (a ``checks`` list beside ``mode``) or
    ``ddesys.experiments.efficiency`` (``rows`` beside ``settings``)."""
    if not isinstance(data, dict):
        return None
    if isinstance(data.get("program"), str):
        return data["program"]
    meta = data.get("meta")
    if isinstance(meta, dict) and isinstance(meta.get("experiment"), str):
        return f"ddesys.experiments.{meta['experiment']}"
    if isinstance(data.get("checks"), list) and "mode" in data:
        return "ddesys.verification"
    if isinstance(data.get("rows"), list) and isinstance(data.get("settings"), dict):
        return "ddesys.experiments.efficiency"          # efficiency.json from before its program field
    if isinstance(data.get("results"), list) and isinstance(data.get("config"), dict):
        return "ddesys.experiments.s4_recipe"           # the S4 recipe's results.json from before its program field
    return None


#: the results files the project's programs write; a folder holding one of another program is refused
RESULT_FILES = ("results.json", "efficiency.json")


def _check_writer(folder, path, program):
    try:
        who = written_by(json.loads(path.read_bytes().decode("utf-8")))
    except (UnicodeDecodeError, json.JSONDecodeError):
        who, why = None, "not valid JSON"
    else:
        why = "its writer cannot be told"
    if who != program:
        what = f"written by {who}" if who else why
        raise OutError(f"--out {folder}: {path} is not a results file of {program} ({what}); nothing was "
                       "written: choose another --out or move the file away")


def check_owner(folder, program, results="results.json", report=None, heading=None):
    """Raise :class:`OutError` unless the results in ``folder`` are ``program``'s or absent: a
    ``results`` file that another program wrote, that cannot be read or whose writer cannot be told is
    refused; without a results file, a ``report`` file (e.g. ``report.md``) must start with
    ``heading``. Reads only: the folder is left as it was."""
    folder = Path(folder)
    path = folder / results
    for other in RESULT_FILES:                   # another program's results file: the folder is its
        if other != results and (folder / other).is_file():
            _check_writer(folder, folder / other, program)
    if path.is_file():
        _check_writer(folder, path, program)
    elif report is not None and (folder / report).is_file():
        with open(folder / report, "rb") as f:
            first = f.readline().decode("utf-8", "replace")
        if heading is not None and not first.startswith(heading):
            raise OutError(f"--out {folder}: {folder / report} was not written by {program} (it starts with "
                           f"{first.strip()[:60]!r}); nothing was written: choose another --out or move it away")


def claim_owner(folder, program, empty, results="results.json", report=None, heading=None):
    """Make ``folder`` ``program``'s before any work: under the folder's lock, :func:`check_owner` (raises
    :class:`OutError`), then, when there is no ``results`` file yet, write ``empty`` (a JSON-ready dict
    naming ``program`` in its ``program`` field) there atomically. Another program started into the folder
    afterwards is refused at once by its own owner check. Returns whether the file was created."""
    if written_by(empty) != program:
        raise ValueError(f"the empty results file must name {program!r} in its 'program' field")
    folder = Path(folder)
    check_owner(folder, program, results, report, heading)     # a refused folder is left as it was (no lock file)
    if (folder / results).exists():
        return False
    with locked(folder):
        check_owner(folder, program, results, report, heading)  # another program may have claimed it meanwhile
        if (folder / results).exists():
            return False
        atomic_write(folder / results, json.dumps(empty, indent=1))
        return True


def write_owned(folder, program, files, results="results.json", report=None, heading=None):
    """Write ``files`` (``{name: str or bytes}``, relative to ``folder``) atomically, under the folder's lock,
    after checking the owner again (:func:`check_owner`): results that another program put in the folder
    since the run began are left alone (:class:`OutError`, nothing written)."""
    folder = Path(folder)
    with locked(folder):
        check_owner(folder, program, results, report, heading)
        for name, data in files.items():
            atomic_write(folder / name, data)


@contextlib.contextmanager
def locked(folder):
    """Hold an exclusive lock on ``folder``'s results (``folder/.results.lock``, ``fcntl.flock``) for
    the ``with`` block: processes that read, merge and rewrite a results file inside it take turns.
    The lock goes with the process (a killed writer never leaves it held)."""
    if fcntl is None:  # pragma: no cover - Windows
        yield
        return
    fd = os.open(Path(folder) / LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)                             # closing releases the lock


def atomic_write(path, data):
    """Write ``data`` (str or bytes) to ``path`` through a temporary file in the same folder, flushed to
    disk, then renamed over ``path``: readers see the old file or the new one, never half of one."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)            # mkstemp makes 0600: give the file a normal file's mode
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# ------------------------------------------------------------------------------------------- provenance
GIT_TIMEOUT_S = 2.0                              # per git call: provenance never holds a CLI up for long


def provenance():
    """What wrote a results file: ``{"ddesys": version, "commit": commit}``.

    ``commit`` is the short hash of the git checkout the package runs from, with ``"+dirty"`` when its
    tracked files have changes, or ``"unknown"`` when that cannot be told: an installed copy (not a
    file git tracks), no git, a git error or a call past ``GIT_TIMEOUT_S``. It never raises. Git runs in
    this package's source folder, takes no optional lock (``GIT_OPTIONAL_LOCKS=0``) and writes nothing.

    Returns
    -------
    dict
        ``{"ddesys": str, "commit": str}``.
    """
    from ._version import __version__
    return {"ddesys": __version__, "commit": _git_commit(Path(__file__).resolve().parent)}


def _git_commit(folder):
    """Short commit (``+dirty``) of the checkout holding ``folder`` (which must track this file), or
    ``"unknown"``."""
    env = dict(os.environ, GIT_OPTIONAL_LOCKS="0", LC_ALL="C")

    def git(*args):
        return subprocess.run(["git", *args], cwd=folder, env=env, capture_output=True, text=True,
                              timeout=GIT_TIMEOUT_S, check=True, stdin=subprocess.DEVNULL).stdout.strip()
    try:
        git("ls-files", "--error-unmatch", "--", Path(__file__).name)   # a copy inside another repo: not ours
        commit = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, ValueError, subprocess.SubprocessError):
        return "unknown"
    if not commit:
        return "unknown"
    return commit + ("+dirty" if dirty else "")


# ------------------------------------------------------------------------------------ optional extras
#: how a missing module is named to the reader, and the note added to its install line
_NAMES = {"torch": "PyTorch", "sklearn": "scikit-learn", "transformers": "Hugging Face transformers"}
_NOTES = {"torch": "a CPU-only build: pip install torch --index-url https://download.pytorch.org/whl/cpu"}


def missing_modules(*modules):
    """The top-level ``modules`` that cannot be found (``importlib.util.find_spec``: nothing is imported,
    so the check is cheap), in order. A module blocked in ``sys.modules`` (``None``) or whose finder
    raises counts as missing."""
    out = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(name)
    return out


def extra_message(who, extra, missing):
    """One line: ``who`` needs the ``missing`` modules, installed by ``pip install 'ddesys[extra]'``.

    >>> extra_message("ddesys.nn", "torch", ["torch"]).split(" (")[0]
    "ddesys.nn needs PyTorch: pip install 'ddesys[torch]'"
    """
    names = ", ".join(_NAMES.get(m, m) for m in missing)
    notes = "; ".join(_NOTES[m] for m in missing if m in _NOTES)
    return f"{who} needs {names}: pip install 'ddesys[{extra}]'" + (f" ({notes})" if notes else "")


def require_extra(program, extra, *modules):
    """For a CLI's entry, before it imports ``modules``: when one cannot be found, print one line naming
    ``pip install 'ddesys[extra]'`` to stderr and exit with status 2 (no traceback)."""
    missing = missing_modules(*modules)
    if missing:
        print(f"error: {extra_message(program, extra, missing)}", file=sys.stderr)
        raise SystemExit(2)
