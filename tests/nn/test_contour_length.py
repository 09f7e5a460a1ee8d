"""The layer's FFT length (ddesys.fft_length, docs/theory.md 5.4): a float32 forward synthesizes at
M = nextpow2(L) and stays within float32 rounding of an independent float64 recurrence
(verification/reference/loops.py); float64 callers keep nextpow2(2L); the guard is M >= L."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ddesys import choose_contour, fft_length
from ddesys.contour import unit_roundoff
from ddesys.nn import DS4D

from nn_helpers import layer_oracle

U32, U64 = unit_roundoff(np.float32), unit_roundoff(np.float64)


def test_fft_length_rule():
    for L in (1, 7, 512, 1000, 4096):
        assert fft_length(L, U64, U32) == 1 << (L - 1).bit_length()          # nextpow2(L)
        assert fft_length(L, U64, U64) == 1 << (2 * L - 1).bit_length()      # nextpow2(2L)
    assert fft_length(1024, U32, U32) == 2048                               # float32 synthesis: no room


def test_contour_guard_is_the_kernel_length():
    choose_contour(100, np.ones(1), U64, M=100)
    with pytest.raises(ValueError, match=">= L = 100"):
        choose_contour(100, np.ones(1), U64, M=99)


@pytest.mark.parametrize("L", [512, 700])
def test_float32_forward_at_M_L_matches_the_float64_recurrence(L):
    layer = DS4D(6, 16, l_max=L, seed=3)
    assert layer.contour(L, out_dtype=torch.float32)[0] == 1 << (L - 1).bit_length()
    assert layer.contour(L)[0] == 1 << (2 * L - 1).bit_length()             # float64 kernel(): unchanged
    seen = []
    import ddesys.nn.ds4d as ds4d_mod
    real = ds4d_mod.synthesize_kernel
    try:
        ds4d_mod.synthesize_kernel = lambda *a, **k: seen.append(a[6]) or real(*a, **k)
        x = torch.zeros(1, L, 6)
        x[0, 0] = 1.0                                                       # impulse: y = K + D delta
        x[0, L // 3] = -0.5
        with torch.no_grad():
            y = layer(x)
    finally:
        ds4d_mod.synthesize_kernel = real
    assert seen == [1 << (L - 1).bit_length()]                             # the forward used M = nextpow2(L)
    ref = layer_oracle(layer, x.double().numpy().transpose(0, 2, 1))       # (1, H, L) float64
    err = np.abs(y.double().numpy().transpose(0, 2, 1) - ref).max(-1) / np.abs(ref).max(-1)
    assert err.max() <= 2e-7, err                                          # float32 rounding of kernel and FFT
