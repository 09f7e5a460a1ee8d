"""Shared test setup: this folder on ``sys.path`` (its helper modules ``oracle``, ``nn_helpers``,
``discrete_helpers``, ... import by their plain names from every test file, however pytest is started),
and the test tiers: ``slow`` (excluded by default, ``-m slow``) and ``integration`` (runs another
interpreter or a CLI in a subprocess; in the default tier, selectable with ``-m integration``)."""
from __future__ import annotations

import sys
from pathlib import Path

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
