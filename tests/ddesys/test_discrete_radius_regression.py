"""Spectral radius of discrete matrix delay systems whose longest-lag matrix is singular.

The reference is the largest eigenvalue modulus of the lifted companion matrix of the recurrence
``x_t = Phi x_{t-1} + sum_k G_k ((1 - a_k) x_{t-k_k} + a_k x_{t-k_k-1})``, built here with numpy from the
matrices (independently of the package's own lag form and companion matrix).
"""
import warnings

import numpy as np
import pytest

import ddesys
from ddesys.matrix.discrete import DiscreteDelayStateSpace
from ddesys.matrix.discrete_radius import spectral_radius as _radius_of_form
from ddesys.matrix.discrete_stability import lag_form


def lifted_radius(Phi, G, delays):
    """Largest eigenvalue modulus of the companion matrix of the recurrence (module docstring)."""
    Phi = np.asarray(Phi, float)
    n = Phi.shape[0]
    G = np.asarray(G, float).reshape(-1, n, n)
    delays = np.atleast_1d(np.asarray(delays, float))
    ks = np.floor(delays).astype(int)
    J = int(max(1, (ks + (delays > ks)).max()))
    top = np.zeros((n, n * J))
    top[:, :n] += Phi
    for g, d, k in zip(G, delays, ks):
        a = d - k
        top[:, (k - 1) * n:k * n] += (1 - a) * g
        if a > 0:
            top[:, k * n:(k + 1) * n] += a * g
    C = np.zeros((n * J, n * J))
    C[:n] = top
    C[n:, :-n] = np.eye(n * (J - 1))
    return float(np.abs(np.linalg.eigvals(C)).max())


def test_published_zoh_case_with_a_fast_mode_and_a_rank_one_delayed_branch():
    sys_ = ddesys.DelayStateSpace([[-1000, 1], [0.5, -2]], [[0, 0], [-1, -1]], 1).discretize(0.001)
    ref = lifted_radius(sys_.Phi, sys_.G, sys_.delay)
    assert ref == pytest.approx(0.9991397, abs=1e-7)       # python-control's poles and mpmath agree
    with warnings.catch_warnings():
        warnings.simplefilter("error")                     # the answer must also be certified
        r = sys_.spectral_radius(rtol=1e-10)
    assert abs(r - ref) < 1e-8 * ref
    assert sys_.is_stable() == (ref < 1)


@pytest.mark.slow
def test_zoh_case_with_a_destabilizing_rank_one_delayed_branch():
    # det(A + Ad) < 0: a real root s > 0, so a discrete root above 1
    sys_ = ddesys.DelayStateSpace([[-1000, 1], [0.5, -2]], [[0, 0], [3, 3]], 1).discretize(0.001)
    ref = lifted_radius(sys_.Phi, sys_.G, sys_.delay)
    assert ref > 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = sys_.spectral_radius(rtol=1e-10)
    assert abs(r - ref) < 1e-8 * ref
    assert sys_.is_stable() is False

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_small_cases_with_singular_longest_lag_against_the_lifted_matrix(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 4))
    delay = float(rng.integers(5, 51)) + (0.5 if seed == 2 else 0.0)
    Phi = np.diag(rng.uniform(0.2, 0.95, n)) + 0.05 * rng.standard_normal((n, n))
    G = np.outer(rng.standard_normal(n), rng.standard_normal(n))           # rank one: det E_J = 0
    G *= rng.uniform(0.05, 0.5) / np.linalg.norm(G, 2)
    ref = lifted_radius(Phi, G, delay)
    k = np.array([int(np.floor(delay))])
    form = lag_form(Phi, G[None], k, np.array([delay - k[0]]))
    r, upper, certified = _radius_of_form(form, rtol=1e-11, eig_max_size=0)  # the bisection, not eigvals
    assert certified
    assert upper >= ref * (1 - 1e-12)
    assert abs(r - ref) < 1e-9 * ref
    sys_ = DiscreteDelayStateSpace(Phi, G, delay)
    assert abs(sys_.spectral_radius() - ref) < 1e-9 * ref
    assert sys_.is_stable() == (ref < 1)
