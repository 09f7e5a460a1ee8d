"""Misuse of :mod:`ddesys.tap`'s functions (and of the shared step check ``dt``) is refused by an error that
names the argument and the value, instead of an empty array, zeros or a broadcast error."""
import numpy as np
import pytest

from ddesys import DelayStateSpace
from ddesys.tap import tap_filter, tap_kernel, tap_weights


@pytest.mark.parametrize("n", [-3, -1, 2.5, True])
def test_tap_weights_needs_a_non_negative_length(n):
    with pytest.raises(ValueError, match=rf"n must be a non-negative integer.*{n!r}"):
        tap_weights(np.array([2.0]), 1.0, n)
    assert tap_weights(np.array([2.0]), 1.0, 0).shape == (1, 0)


def test_tap_kernel_needs_a_non_negative_length():
    with pytest.raises(ValueError, match="-4"):
        tap_kernel(np.array([1.0]), np.array([2.0]), 1.0, -4)


@pytest.mark.parametrize("s", [-1.0, -0.25, np.nan, np.inf])
def test_tap_filter_refuses_a_negative_or_non_finite_delay(s):
    x = np.random.default_rng(0).standard_normal((2, 8))
    with pytest.raises(ValueError, match="delay"):
        tap_filter(np.array([1.0, 1.0]), np.array([1.0, s]), 1.0, x)


def test_tap_filter_names_gains_that_do_not_match_the_channels():
    x = np.random.default_rng(0).standard_normal((3, 2, 8))          # (B, C=2, L)
    with pytest.raises(ValueError, match=r"e.*3.*s.*2"):
        tap_filter(np.ones(3), np.array([1.0, 2.0]), 1.0, x)
    with pytest.raises(ValueError, match=r"3 channels.*\(3, 2, 8\)"):
        tap_filter(np.ones(3), np.array([1.0, 2.0, 3.0]), 1.0, x)


def test_tap_filter_broadcasts_a_scalar_gain_or_delay():
    x = np.random.default_rng(1).standard_normal((3, 2, 8))
    ref = np.zeros_like(x)
    e, s = np.array([2.0, -1.0]), np.array([1.0, 3.0])
    for c in range(2):                                               # a pure delay by s[c] steps, times e[c]
        k = int(s[c])
        ref[:, c, k:] = e[c] * x[:, c, :8 - k]
    np.testing.assert_allclose(tap_filter(e, s, 1.0, x), ref, atol=1e-12)
    np.testing.assert_allclose(tap_filter(2.0, s, 1.0, x)[:, 0], ref[:, 0], atol=1e-12)
    np.testing.assert_allclose(tap_filter(e, 1.0, 1.0, x)[:, 0], ref[:, 0], atol=1e-12)
    np.testing.assert_allclose(tap_filter(e, 1.0, 1.0, x)[:, 1, 1:], -x[:, 1, :7], atol=1e-12)


@pytest.mark.parametrize("dt", [True, False, np.bool_(True)])
def test_a_boolean_step_says_booleans_are_not_steps(dt):
    sys_ = DelayStateSpace([[-1.0]], [[0.1]], [1.0])
    with pytest.raises((TypeError, ValueError)) as err:
        sys_.discretize(dt)
    msg = str(err.value)
    assert "dt must be True" not in msg and "boolean" in msg and str(bool(dt)) in msg, msg
