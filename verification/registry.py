"""The verification checks, registered once: name, function, work (progress units) and what it checks.

``python -m ddesys.verification`` runs :data:`CHECKS` in order; its docstring, progress bar, summary and
report are generated from this list (count, order, titles). Adding a check is one :class:`Check` line
here and its function in a ``checks_*.py`` module; nothing else counts the checks.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

__all__ = ["Check", "CHECKS", "summary_line"]


@dataclass(frozen=True)
class Check:
    """One check: ``function`` is ``"module:name"`` in :mod:`ddesys.verification` (imported when run),
    called as ``function(cfg, out_dir, progress)``; ``work(cfg)`` its progress units; ``about`` what it
    checks, for the CLI's help."""
    key: str
    function: str
    work: Callable[[dict], int]
    about: str

    def load(self):
        mod, name = self.function.split(":")
        return getattr(importlib.import_module(f"ddesys.verification.{mod}"), name)


CHECKS = (
    Check("fft", "checks_model:check_fft_vs_recurrent", lambda c: len(c["Ls"]) * (3 * c["seeds"] + 1),
          "FFT vs recurrent on a DS4D model"),
    Check("contour", "checks_system:check_contour", lambda c: 8, "the contour-shift trade-off"),
    Check("stability", "checks_system:check_stability", lambda c: 3, "stability: sufficient criterion vs exact test"),
    Check("discretization", "checks_system:check_discretization", lambda c: 10, "the discretization's convergence"),
    Check("reductions", "checks_model:check_reductions", lambda c: 3, "reductions and round trips"),
    Check("decode", "checks_model:check_decode", lambda c: 1 + len(c["decode_positions"]), "decoding"),
    Check("tap", "checks_tap:check_tap", lambda c: 6, "DS4D with the delayed tap"),
    Check("dss", "checks_dss:check_dss", lambda c: len(importlib.import_module("ddesys.verification.checks_dss").PARTS),
          "matrix delay systems"),
    Check("clock", "checks_clock:check_clock", lambda c: 3, "DS4D with the selective clock"),
    Check("soft-clock", "checks_clock:check_soft_clock", lambda c: 3, "DS4D with a learned (soft) clock"),
)


def summary_line():
    """``"8 checks: FFT vs recurrent on a DS4D model, ..."`` for help texts."""
    return f"{len(CHECKS)} checks: " + ", ".join(c.about for c in CHECKS)
