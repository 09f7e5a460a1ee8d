"""ddesys.history: a delay recurrence continued from a history equals the zero-history response plus the
zero-input response (the unit-input state kernels convolved with the history's injection), against the
brute-force float64 loop of ``verification/reference/loops.py`` run over the whole sequence (no project code in the
reference: its states give the history, its unit-input impulse responses the kernels)."""
from __future__ import annotations

import numpy as np
import pytest

from ddesys.history import forced_response, history_injection

from ddesys.verification.reference import brute_force, impulse_response, rel_max, split_delay
from random_systems import random_system


def _setup(seed, H=3, N2=4, L_sys=40, p=0.4):
    rng = np.random.default_rng(seed)
    sysd = random_system(rng, H, N2, 0.05, L_sys, p=p, phase="uniform")
    k, alpha = split_delay(sysd["delay"])
    sysd["delay"][0] = float(k.max()) + 0.25                  # one channel at the longest delay
    k, alpha = split_delay(sysd["delay"])
    m1 = sysd["mu"] * (1 - alpha)[:, None]
    m2 = sysd["mu"] * alpha[:, None]
    return rng, sysd, k, m1, m2


def _past(h_full, t0, P):
    """``(H, N2, P)`` states before ``t0`` in time order, zero before the sequence's start."""
    H, N2, _ = h_full.shape
    past = np.zeros((H, N2, P), complex)
    n = min(P, t0)
    if n:
        past[..., P - n:] = h_full[..., t0 - n:t0]
    return past


@pytest.mark.parametrize("t0, L", [(30, 17), (3, 25), (12, 2), (1, 40), (25, 1)])
def test_continuation_equals_zero_history_plus_zero_input_response(t0, L):
    """Outputs and states from position ``t0`` on: brute force over the whole sequence == brute force over
    the chunk alone (zero history) + ``forced_response`` of the injection; chunks shorter and longer than
    the delays, starts before and after the longest delay."""
    rng, s, k, m1, m2 = _setup(t0 * 100 + L)
    H, N2 = s["lam"].shape
    x = rng.standard_normal((H, t0 + L))
    y_full, h_full = brute_force(s["lam"], s["mu"], s["bbar"], s["c"], s["delay"], s["d"], x, return_states=True)
    y_zero, h_zero = brute_force(s["lam"], s["mu"], s["bbar"], s["c"], s["delay"], s["d"], x[:, t0:],
                                 return_states=True)
    P = int(k.max()) + 1
    u = history_injection(_past(h_full, t0, P), s["lam"], m1, m2, k, length=L)    # (H, N2, T)
    assert u.shape == (H, N2, min(L, P))
    _, G = impulse_response(s["lam"], s["mu"], np.ones_like(s["bbar"]), s["c"], s["delay"], L, return_modes=True)
    y = y_zero + forced_response(G, u, L, c=s["c"])
    assert rel_max(y, y_full[:, t0:]) <= 1e-12
    f = s["bbar"][..., None] * x[:, None, t0:]                 # the chunk's forcing: bbar x + injection
    f[..., :u.shape[-1]] += u
    h = forced_response(G, f, L)
    assert rel_max(h, h_full[..., t0:]) <= 1e-12
    assert rel_max(h - h_zero, forced_response(G, u, L)) <= 1e-10
    keep = min(L, 4)
    assert np.allclose(forced_response(G, f, L, keep=keep), h[..., L - keep:], rtol=0, atol=1e-14)


def test_batch_dims_and_no_delay():
    """A leading batch dim on the history (the layers' ``(B, H, N2, R)``), and the S4D case (no delay:
    ``u = lam h_{t0-1}``, ``h^zi_tau = lam^(tau+1) h_{t0-1}``)."""
    rng, s, k, m1, m2 = _setup(7)
    H, N2 = s["lam"].shape
    pasts = rng.standard_normal((2, H, N2, int(k.max()) + 1)) + 1j * rng.standard_normal((2, H, N2, int(k.max()) + 1))
    u = history_injection(pasts, s["lam"], m1, m2, k, length=9)
    for b in range(2):
        assert np.array_equal(u[b], history_injection(pasts[b], s["lam"], m1, m2, k, length=9))
    lam = s["lam"]
    u0 = history_injection(pasts[..., -3:], lam)                # (2, H, N2, 1)
    assert u0.shape == (2, H, N2, 1) and np.allclose(u0[..., 0], lam * pasts[..., -1])
    L = 12
    G = lam[..., None] ** np.arange(L)                          # no delay: unit-input response lam^tau
    h = forced_response(G, u0, L)
    assert np.allclose(h, lam[..., None] ** np.arange(1, L + 1) * pasts[..., -1:], rtol=1e-13, atol=0)


def test_injection_by_hand():
    """One mode, k = 2: ``u = (lam h_{-1} + m1 h_{-2} + m2 h_{-3}, m1 h_{-1} + m2 h_{-2}, m2 h_{-1})``."""
    lam, m1, m2 = np.array([[0.5 + 0.1j]]), np.array([[0.2]]), np.array([[0.3j]])
    past = np.array([[[7.0, 3.0, 2.0, 1.0]]], complex)          # h_{-4} .. h_{-1}
    u = history_injection(past, lam, m1, m2, np.array([2]))
    want = [lam * 1 + m1 * 2 + m2 * 3, m1 * 1 + m2 * 2, m2 * 1]
    assert np.allclose(u[0, 0], np.array(want).ravel())
    with pytest.raises(ValueError, match="delays must lie"):
        history_injection(past, lam, m1, m2, np.array([4]))     # reads h_{-5}: not in a 4-state history


def test_torch_autograd_flows():
    torch = pytest.importorskip("torch")
    lam = torch.tensor([[0.5 + 0.1j]], dtype=torch.complex128, requires_grad=True)
    past = torch.randn(1, 1, 4, dtype=torch.complex128)
    u = history_injection(past, lam, lam * 0.1, lam * 0.2, torch.tensor([2]), length=3)
    G = torch.ones(1, 1, 5, dtype=torch.complex128)
    forced_response(G, u, 5, c=torch.ones(1, 1, dtype=torch.complex128)).sum().backward()
    assert lam.grad is not None and torch.isfinite(lam.grad).all()
