"""``nn`` gradients and property tests: gradcheck of every DS4D / S4D parameter and the input, the
delay gradient vs a finite difference of the oracle impulse response, and Hypothesis checks that any
finite unconstrained parameters give a stable layer and a finite kernel.

The references (``verification/reference/loops.py``'s ``impulse_response``, ``spec_discrete`` in
``tests/nn_helpers.py``) never run the layer's own code path; see ``nn_helpers``' docstring.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from ddesys.nn import DS4D, S4D

from ddesys.verification.reference import impulse_response, rel_err
from nn_helpers import D_IN, DS4D_PARAMS, F64, S4D_KEYS, _np, make_model, spec_discrete


# ---------------------------------------------------------------------------------------------------
# 5. Gradients
# ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_layer():
    layer = DS4D(2, d_state=4, l_max=16, seed=0).double()
    s = spec_discrete(layer)[4]
    assert np.all(np.abs(s - np.round(s)) > 1e-3)      # finite differences must not cross an integer delay
    return layer


@pytest.mark.parametrize("name", DS4D_PARAMS)
def test_gradcheck_every_parameter(tiny_layer, name):
    layer = tiny_layer
    L = 16
    x = torch.randn(2, L, 2, dtype=F64, generator=torch.Generator().manual_seed(0))
    params = {n: p.detach().clone() for n, p in layer.named_parameters()}
    assert set(params) == set(DS4D_PARAMS)

    def f(p):
        return torch.func.functional_call(layer, {**params, name: p}, (x,))

    assert torch.autograd.gradcheck(f, (params[name].clone().requires_grad_(),))


def test_gradcheck_input(tiny_layer):
    x = torch.randn(1, 16, 2, dtype=F64, generator=torch.Generator().manual_seed(1), requires_grad=True)
    assert torch.autograd.gradcheck(tiny_layer, (x,))


def test_delay_gradient_nonzero_and_matches_oracle(tiny_layer):
    """dK/dnu_tau by autograd (through alpha) vs a central difference of the oracle impulse response
    in the delay (chain rule ds/dnu_tau = (s_max - s_min) sigmoid'(nu_tau))."""
    layer = tiny_layer
    L = 16
    nu = layer.nu_tau.detach().clone()
    params = {n: p.detach() for n, p in layer.named_parameters()}
    delta = torch.zeros(1, L, 2, dtype=F64)
    delta[:, 0] = 1.0                                             # impulse: y = K + D delta

    def kern(v):
        return torch.func.functional_call(layer, {**params, "nu_tau": v}, (delta,))[0].T   # (H, L)

    J = torch.autograd.functional.jacobian(kern, nu)            # (H, L, H)
    J = J.diagonal(dim1=0, dim2=2).T.numpy()                     # (H, L): dK[h]/dnu_tau[h]
    lam, mu, bbar, c, delay, _ = spec_discrete(layer)
    h = 1e-6
    dK_ds = (impulse_response(lam, mu, bbar, c, delay + h, L)
             - impulse_response(lam, mu, bbar, c, delay - h, L)) / (2 * h)
    sig = 1 / (1 + np.exp(-_np(layer.nu_tau)))
    dK_dnu = dK_ds * ((layer.s_max - layer.s_min) * sig * (1 - sig))[:, None]
    assert np.abs(J).max(-1).min() > 1e-6                       # nonzero for every channel
    assert rel_err(J, dK_dnu) <= 1e-6

    x = torch.randn(2, L, 2, dtype=F64, generator=torch.Generator().manual_seed(2))
    layer.zero_grad()
    layer(x).pow(2).sum().backward()
    g = layer.nu_tau.grad
    assert g is not None and torch.isfinite(g).all() and bool((g.abs() > 0).all())
    layer.zero_grad()


@pytest.mark.parametrize("path", ["fused", "reference"])
@pytest.mark.parametrize("name", S4D_KEYS)
def test_s4d_gradcheck_every_parameter(monkeypatch, path, name):
    if path != "fused":
        monkeypatch.setenv("DDESYS_REFERENCE", "1")
    layer = S4D(2, d_state=4, seed=0).double()
    x = torch.randn(2, 16, 2, dtype=F64, generator=torch.Generator().manual_seed(0))
    params = {n: p.detach().clone() for n, p in layer.named_parameters()}
    assert set(params) == set(S4D_KEYS)

    def f(p):
        return torch.func.functional_call(layer, {**params, name: p}, (x,))

    assert torch.autograd.gradcheck(f, (params[name].clone().requires_grad_(),))


def test_gradients_finite_and_present_model():
    m = make_model(64, 0, n_layers=2, d_state=8)
    x = torch.randn(2, 64, D_IN, generator=torch.Generator().manual_seed(0))
    m(x).pow(2).mean().backward()
    for n, p in m.named_parameters():
        assert p.grad is not None, n
        assert torch.isfinite(p.grad).all(), n


# ---------------------------------------------------------------------------------------------------
# 6. Hypothesis: any finite unconstrained parameters give a stable layer and a finite kernel
# ---------------------------------------------------------------------------------------------------
PROP_H, PROP_N2, PROP_LMAX, PROP_L = 2, 3, 48, 32
_PROP_LAYER = {}


def _prop_layer():
    if not _PROP_LAYER:
        _PROP_LAYER["l"] = DS4D(PROP_H, d_state=2 * PROP_N2, l_max=PROP_LMAX, s_min=2.5, s_max=40.0, seed=0).double()
    return _PROP_LAYER["l"]


def _vec(n, lo, hi):
    return st.lists(st.floats(lo, hi, allow_nan=False, allow_infinity=False), min_size=n, max_size=n)


def _param_strategy(nu_re_range, big=1e3):
    M = PROP_H * PROP_N2
    return st.fixed_dictionaries(dict(
        log_dt=_vec(PROP_H, -10.0, 5.0), nu_re=_vec(M, *nu_re_range), nu_im=_vec(M, -big, big),
        r=_vec(M, -big, big), theta=_vec(M, -big, big), nu_tau=_vec(PROP_H, -big, big)))


def _check_stable_finite(vals):
    layer = _prop_layer()
    with torch.no_grad():
        for name, v in vals.items():
            p = getattr(layer, name)
            p.copy_(torch.tensor(v, dtype=F64).reshape(p.shape))
        lam, mu, bbar, c, k, alpha, s = layer.discrete(F64)
        for t in (lam, mu, bbar, c, s, alpha):
            assert torch.isfinite(t).all()
        assert float((lam.abs() + mu.abs()).max()) < 1.0
        assert float(s.min()) >= layer.s_min and float(s.max()) <= layer.s_max
        assert bool(((alpha >= 0) & (alpha < 1)).all()) and int(k.min()) >= 1
        K = layer.kernel(PROP_L)
        assert torch.isfinite(K).all()


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(_param_strategy((-20.0, 20.0)))
def test_property_stable_finite(vals):
    """Every other parameter with scales up to 1e3, log_dt in [-10, 5], nu_re in [-20, 20]."""
    _check_stable_finite(vals)


@settings(max_examples=100, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow])
@given(_param_strategy((-1e3, 1e3)))
def test_property_stable_finite_full_range(vals):
    """The brief's full range: nu_re too with scale 1e3."""
    _check_stable_finite(vals)


@pytest.mark.parametrize("nu_re", [-40.0, 800.0], ids=["underflow-unit-modulus", "overflow-nan"])
def test_extreme_nu_re_reproducer(nu_re):
    layer = DS4D(2, d_state=4, l_max=32, seed=0).double()
    with torch.no_grad():
        layer.nu_re.fill_(nu_re)
        lam, mu, bbar = layer.discrete(F64)[:3]
        assert torch.isfinite(bbar).all()
        assert float((lam.abs() + mu.abs()).max()) < 1.0
        assert torch.isfinite(layer.kernel(32)).all()
