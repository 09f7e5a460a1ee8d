"""Results files shared by the experiment sweeps: atomic writes, resume by run key."""
from __future__ import annotations

import json
from pathlib import Path


def load_runs(path):
    """``{key: run}`` of a results file written by :func:`save_runs` (empty when there is none)."""
    path = Path(path)
    if not path.exists():
        return {}
    return {r["key"]: r for r in json.loads(path.read_text())["runs"]}


def save_runs(path, meta, runs):
    """Write ``{"meta": meta, "runs": runs}`` atomically: an interrupted sweep never leaves half a file."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps({"meta": meta, "runs": runs}, indent=1))
    tmp.replace(path)
