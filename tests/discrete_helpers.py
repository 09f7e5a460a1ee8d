"""Shared helpers for the ``DiscreteDelaySystem`` tests (``test_kernel.py``,
``test_simulate_and_inputs.py``, ``test_stability.py``).

The reference values all come from the independent oracle ``verification/reference/loops.py`` (float64, written from
docs/theory.md §2-§5 without importing ddesys); this module only wraps it, it never runs ddesys
code. The error measures are ``verification/reference/errors.py``'s.
"""
from __future__ import annotations

from pathlib import Path

from ddesys.verification.reference import impulse_response

TESTS_DIR = Path(__file__).resolve().parent
REPO = TESTS_DIR.parent


def oracle_kernel(s, L):
    return impulse_response(s["lam"], s["mu"], s["bbar"], s["c"], s["delay"], L)
