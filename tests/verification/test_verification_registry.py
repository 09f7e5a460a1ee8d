"""The verification checks are registered once (verification/registry.py): every entry loads, keys are
unique, work is positive, and the CLI's help lists them all."""
from __future__ import annotations

from ddesys.verification import __main__ as cli
from ddesys.verification.registry import CHECKS, summary_line


def test_every_registered_check_loads_and_counts_work():
    assert len({c.key for c in CHECKS}) == len(CHECKS)
    cfg = cli.CONFIGS["quick"]
    for c in CHECKS:
        assert callable(c.load()) and c.work(cfg) >= 1, c.key
    assert cli._work(cfg) == [c.work(cfg) for c in CHECKS] and len(cli._checks()) == len(CHECKS)
    assert summary_line().startswith(f"{len(CHECKS)} checks: ")
