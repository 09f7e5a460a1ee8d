"""Shared setup of the results-safety tests (tests/experiments/test_results_*.py): the three experiment
CLIs at smoke size, the committed folders, and small record helpers."""
from __future__ import annotations

import json
import os
from pathlib import Path

from ddesys.experiments.delay.__main__ import main as delay_main
from ddesys.experiments.general.__main__ import main as general_main
from ddesys.experiments.synthetic.__main__ import main as synthetic_main

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs" / "experiments"
ENV = dict(os.environ, MPLBACKEND="Agg")
SYN = ["--scale", "smoke", "--tasks", "copy", "--protocols", "fixed", "--models", "lstm", "--steps", "2",
       "--eval-every", "1", "--quiet"]
GEN = ["--scale", "smoke", "--tasks", "listops", "--models", "s4d", "--epochs", "1", "--quiet"]
DLY = ["--scale", "smoke", "--models", "s4d", "--quiet"]
CLIS = {"synthetic": (synthetic_main, SYN), "general": (general_main, GEN), "delay": (delay_main, DLY)}
COMMITTED = {"synthetic": "synthetic-cpu", "general": "general-cpu", "delay": "delay"}


def _runs_of(out):
    return json.loads((Path(out) / "results.json").read_text())["runs"]


def _snapshot(folder):
    """``{relative path: bytes}`` of every file under ``folder`` (folders as ``None``)."""
    folder = Path(folder)
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))}


def _key(run):
    return run["config"]["name"]


def _run(name):
    return {"config": {"name": name}, "curve": [], "status": "done"}
