"""``verification.oracle`` (the checks' independent references) and ``verification.errors`` against the
tests' own oracle (``tests/oracle.py``, ``tests/nn_helpers.py``), so the checks' references are
themselves checked by an implementation that shares nothing with them."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ddesys.nn import DS4D
from ddesys.verification import errors as verr
from ddesys.verification import oracle as voracle

from nn_helpers import F64, make_model, reference_model_forward, spec_discrete
from oracle import brute_force, impulse_response, random_system, rel_err, rel_max, rrmse


def _system(L=90):
    s = random_system(np.random.default_rng(4), 4, 5, 0.1, L, init="lin", phase="uniform", p=0.3)
    s["delay"] = np.array([1.0, 7.0, 30.25, L + 5.5])        # k = 1, integer, fractional, never read
    return s


@pytest.mark.parametrize("memory", [None, 4096])
def test_recurrence_matches_brute_force(monkeypatch, memory):
    """Whole and in chunks of channels (a budget of a few kB forces one channel per chunk)."""
    if memory is not None:
        monkeypatch.setattr(voracle, "MEMORY_BYTES", memory)
    s = _system()
    x = np.random.default_rng(5).standard_normal((2, 4, 90))
    y = voracle.recurrence(s["lam"], s["mu"], s["bbar"], s["c"], s["delay"], s["d"], x)
    assert y.shape == (2, 4, 90)
    assert rel_max(y, brute_force(**s, x=x).reshape(2, 4, 90)) <= 1e-13


def test_impulse_response_matches_oracle():
    s = _system()
    K = voracle.impulse_response(s["lam"], s["mu"], s["bbar"], s["c"], s["delay"], 90)
    assert rel_err(K, impulse_response(s["lam"], s["mu"], s["bbar"], s["c"], s["delay"], 90)) <= 1e-13


def test_ds4d_params_match_the_spec_restatement():
    layer = DS4D(3, d_state=8, l_max=50, p0=0.2, seed=1, s_min=2.5)
    with torch.no_grad():                                     # move every parameter off its init value
        for p in layer.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    for got, ref in zip(voracle.ds4d_params(layer), spec_discrete(layer)):
        np.testing.assert_allclose(got, ref, rtol=1e-13, atol=1e-15)


def test_model_forward_matches_reference_model():
    m = make_model(64, 0, n_layers=2, d_state=8).double()
    x = torch.randn(2, 64, 8, dtype=F64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert rrmse(voracle.model_forward(m, x), reference_model_forward(m, x)) <= 1e-13


def test_error_measures_agree():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 40)), rng.standard_normal((3, 40))
    assert verr.rel_err(a, b) == pytest.approx(rel_err(a, b), rel=1e-15)
    assert verr.rel_max(a, b) == pytest.approx(rel_max(a, b), rel=1e-15)
    assert verr.rel_rmse(a, b) == pytest.approx(rrmse(a, b), rel=1e-15)
    assert verr.rel_max(torch.from_numpy(a), b) == verr.rel_max(a, b)
