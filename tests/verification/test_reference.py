"""The shared references (:mod:`ddesys.verification.reference`) checked against each other: the vectorized
layer references of its ``layer`` module against the plain loops of its ``loops`` module and the tests' own
restatements (``tests/nn_helpers.py``), so the checks' references are themselves checked by an
implementation that shares nothing with them; and the error measures against their formulas."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ddesys.nn import DS4D
from ddesys.verification import reference
from ddesys.verification.reference import layer as reference_layer
from ddesys.verification.reference import brute_force, impulse_response, rel_err, rel_max, rel_rmse

from nn_helpers import F64, make_model, reference_model_forward, spec_discrete
from random_systems import random_system


def _system(L=90):
    s = random_system(np.random.default_rng(4), 4, 5, 0.1, L, init="lin", phase="uniform", p=0.3)
    s["delay"] = np.array([1.0, 7.0, 30.25, L + 5.5])        # k = 1, integer, fractional, never read
    return s


@pytest.mark.parametrize("memory", [None, 4096])
def test_recurrence_matches_brute_force(monkeypatch, memory):
    """Whole and in chunks of channels (a budget of a few kB forces one channel per chunk)."""
    if memory is not None:
        monkeypatch.setattr(reference_layer, "MEMORY_BYTES", memory)
    s = _system()
    x = np.random.default_rng(5).standard_normal((2, 4, 90))
    y = reference.recurrence(s["lam"], s["mu"], s["bbar"], s["c"], s["delay"], s["d"], x)
    assert y.shape == (2, 4, 90)
    assert rel_max(y, brute_force(**s, x=x).reshape(2, 4, 90)) <= 1e-13


def test_recurrence_kernel_matches_impulse_response_loop():
    s = _system()
    K = reference.recurrence_kernel(s["lam"], s["mu"], s["bbar"], s["c"], s["delay"], 90)
    assert rel_err(K, impulse_response(s["lam"], s["mu"], s["bbar"], s["c"], s["delay"], 90)) <= 1e-13


def test_ds4d_params_match_the_spec_restatement():
    layer = DS4D(3, d_state=8, l_max=50, p0=0.2, seed=1, s_min=2.5)
    with torch.no_grad():                                     # move every parameter off its init value
        for p in layer.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    for got, ref in zip(reference.ds4d_params(layer), spec_discrete(layer)):
        np.testing.assert_allclose(got, ref, rtol=1e-13, atol=1e-15)


def test_model_forward_matches_reference_model():
    m = make_model(64, 0, n_layers=2, d_state=8).double()
    x = torch.randn(2, 64, 8, dtype=F64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert rel_rmse(reference.model_forward(m, x), reference_model_forward(m, x)) <= 1e-13


def test_error_measures_follow_their_formulas():
    """Each measure against its formula written out here with Python loops; torch tensors read like arrays,
    and kernels in another batch layout like the reference's."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 40)), rng.standard_normal((3, 40))
    per_channel = [max(abs(a[i, t] - b[i, t]) for t in range(40)) / max(abs(b[i, t]) for t in range(40))
                   for i in range(3)]
    flat_a, flat_b = a.ravel().tolist(), b.ravel().tolist()
    diff = [u - v for u, v in zip(flat_a, flat_b)]
    assert rel_err(a, b) == pytest.approx(max(per_channel), rel=1e-15)
    assert rel_max(a, b) == pytest.approx(max(map(abs, diff)) / max(map(abs, flat_b)), rel=1e-15)
    assert rel_rmse(a, b) == pytest.approx((sum(v * v for v in diff) / sum(v * v for v in flat_b)) ** 0.5, rel=1e-14)
    assert rel_max(torch.from_numpy(a), b) == rel_max(a, b)
    assert rel_err(a[None], b) == rel_err(a, b)
