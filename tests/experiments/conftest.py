"""Fixtures of the experiments' tests."""
from __future__ import annotations

import pytest

from ddesys.experiments import _train


@pytest.fixture
def no_training(monkeypatch):
    """Fail the test if any optimizer step is taken."""
    def refuse(*a, **k):
        raise AssertionError("a training step ran")
    monkeypatch.setattr(_train.Trainer, "step", refuse)
