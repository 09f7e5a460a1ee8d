"""Output folders of the command-line tools: checked before any work, written atomically.

Shared by ``python -m ddesys.verification`` and the experiment CLIs (:mod:`experiments`).
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["OutError", "atomic_write", "prepare_out"]


class OutError(Exception):
    """``--out`` cannot be used (not a folder, cannot be created, not writable)."""


def prepare_out(path):
    """Create ``path`` if needed and prove it writable (a probe file is created and removed); raises
    :class:`OutError` naming the folder otherwise. Works for root too, where permission bits do not
    stop writes but a read-only file system or a file in the way still does."""
    path = Path(path)
    for parent in [path, *path.parents]:
        if parent.exists() and not parent.is_dir():
            raise OutError(f"--out {path}: {parent} is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutError(f"--out {path}: cannot create the folder ({exc.strerror or exc})") from None
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-test-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise OutError(f"--out {path} is not writable ({exc.strerror or exc})") from None
    return path


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
