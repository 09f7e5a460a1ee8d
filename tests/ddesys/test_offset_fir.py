"""ddesys.tap.offset_fir (the tap's FIR over a chunk with P inputs before it) against a plain loop, compiled
and NumPy paths."""
import numpy as np
import pytest

from ddesys import tap


def _loop(x, j, we, P):
    B, C, T = x.shape
    y = np.zeros((B, C, T - P))
    for b in range(B):
        for c in range(C):
            for t in range(T - P):
                for i in range(j.shape[1]):
                    s = P + t - j[c, i]
                    if 0 <= s < T:
                        y[b, c, t] += we[c, i] * x[b, c, s]
    return y


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("P", [0, 5])
def test_offset_fir_matches_a_loop(compiled, P, monkeypatch):
    rng = np.random.default_rng(P)
    x = rng.standard_normal((2, 4, P + 17))
    j = np.array([[0, 1, 2], [3, 4, 5], [-1, 0, 1], [20, 21, 22]])     # a non-causal and a too-long offset
    we = rng.standard_normal((4, 3))
    if not compiled:
        monkeypatch.setattr(tap.cpu, "available", lambda: False)       # the NumPy fallback
    y = tap.offset_fir(x, j, we, P)
    assert y.shape == (2, 4, 17)
    assert np.abs(y - _loop(x, j, we, P)).max() <= 1e-13


def test_offset_fir_refuses_mismatched_shapes():
    with pytest.raises(ValueError, match="offset_fir"):
        tap.offset_fir(np.zeros((1, 3, 8)), np.zeros((2, 2), int), np.zeros((2, 2)), 0)
