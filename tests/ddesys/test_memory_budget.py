"""The memory budget (ddesys.budget, docs/theory.md §9.1): every analysis whose working memory grows with a
grid, a delay in steps or a window width counts the bytes before allocating, and either works in
batches that fit the budget or refuses at once, naming what asked for how much and how to proceed.

The budget is made small here (``DDESYS_MEMORY_BUDGET``, ``max_bytes=``) to provoke the batching and
the refusals without allocating much; peaks are measured with ``tracemalloc`` (NumPy reports its
arrays to it). References are independent: Lambert W for the scalar DDE's rightmost root, the hat
window written out, a plain loop for the recurrence.
"""
from __future__ import annotations

import subprocess
import sys
import time
import tracemalloc

import numpy as np
import pytest
from scipy.special import lambertw

from ddesys import DelayStateSpace, DelayTap, DiscreteDelaySystem
from ddesys.budget import BudgetError, check_bytes, memory_budget, parse_bytes, resolve
from ddesys.matrix.chart import stability_chart
from ddesys.matrix.discrete import DiscreteDelayStateSpace
from discrete_helpers import REPO

MiB = 2**20


def _peak(fn):
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# ------------------------------------------------------------------------------------------------ the budget
def test_budget_from_the_variable_and_the_argument(monkeypatch):
    monkeypatch.setenv("DDESYS_MEMORY_BUDGET", "3M")
    assert memory_budget() == 3 * MiB
    assert resolve() == 3 * MiB and resolve(cap=MiB) == MiB and resolve(max_bytes=5 * MiB) == 5 * MiB
    assert parse_bytes("1.5G") == 3 * 2**29 and parse_bytes("64KiB") == 2**16 and parse_bytes("4096") == 4096
    with pytest.raises(BudgetError, match=r"the test grid.*over the budget.*DDESYS_MEMORY_BUDGET=3M.*smaller"):
        check_bytes(4 * MiB, "the test grid", "use a smaller one")
    assert check_bytes(2 * MiB, "the test grid", "use a smaller one") == 3 * MiB
    for bad in ("lots", "-1G", "0", "nan"):
        monkeypatch.setenv("DDESYS_MEMORY_BUDGET", bad)
        with pytest.raises(ValueError, match="DDESYS_MEMORY_BUDGET"):
            memory_budget()
    monkeypatch.delenv("DDESYS_MEMORY_BUDGET")
    assert 0 < memory_budget() < 2**50
    for bad in (0, -5, "1G", True, float("inf")):
        with pytest.raises(ValueError, match="max_bytes"):
            resolve(max_bytes=bad)
    assert issubclass(BudgetError, MemoryError) and issubclass(BudgetError, ValueError)


# ------------------------------------------------------------------------------------------------ 8. charts
def _chart_case():
    """n = 6 decoupled modes x' = -g k_i x(t - tau): abscissa max_i Re W0(-g k_i tau) / tau."""
    k = np.linspace(0.4, 1.0, 6)
    fn = lambda tau, g: (np.zeros((6, 6)), -g * np.diag(k)[None], [tau])      # noqa: E731
    taus, gains = np.array([0.5, 1.0, 1.5, 2.0]), np.array([0.5, 0.9, 1.3, 1.7])
    ref = np.array([[max(lambertw(-g * ki * t).real / t for ki in k) for t in taus] for g in gains])
    return fn, taus, gains, ref


@pytest.mark.parametrize("workers", [1, 2])
def test_chart_batches_fit_the_budget(monkeypatch, workers):
    """Degree 64 on 6 states: 390 x 390 generators, ~2.5 MiB a point. With a 24 MiB budget the 16
    points go in batches that fit it (one batch of 16 asked for ~40 MiB)."""
    fn, taus, gains, ref = _chart_case()
    monkeypatch.setenv("DDESYS_MEMORY_BUDGET", "24M")
    ch, peak = _peak(lambda: stability_chart(fn, taus, gains, n_grid=64, workers=workers))
    assert peak <= 24 * MiB, peak / MiB
    assert ch.converged.all()
    np.testing.assert_allclose(ch.abscissa, ref, atol=1e-8)
    assert (ch.stable == (ref < 0)).all() and ch.stable.any() and not ch.stable.all()


def test_chart_refuses_only_when_one_point_does_not_fit(monkeypatch):
    fn, taus, gains, _ = _chart_case()
    monkeypatch.setenv("DDESYS_MEMORY_BUDGET", "1M")
    t = time.perf_counter()
    with pytest.raises(BudgetError, match=r"stability chart.*degree 64.*6 states.*DDESYS_MEMORY_BUDGET=1M"):
        stability_chart(fn, taus, gains, n_grid=64, workers=1)
    assert time.perf_counter() - t < 2


def test_fifty_state_chart_refused_at_once(monkeypatch):
    """The 50-state two-delay chart: one point's generator is 3000+ x 3000+; a 64 MiB budget refuses it
    before any allocation (it used to ask for 4.26 GiB per batch)."""
    monkeypatch.setenv("DDESYS_MEMORY_BUDGET", "64M")
    rng = np.random.default_rng(0)
    A = -2 * np.eye(50) + 0.1 * rng.standard_normal((50, 50))
    Ad = 0.2 * rng.standard_normal((2, 50, 50))
    sys_ = DelayStateSpace(A, Ad, [1.0, 2.0])
    t = time.perf_counter()
    with pytest.raises(MemoryError, match=r"stability chart.*50 states"):
        sys_.stability_chart(np.linspace(0.5, 3, 10), np.linspace(0.5, 3, 10))
    assert time.perf_counter() - t < 2


# ------------------------------------------------------------------------------------------------ 9. radius
@pytest.mark.integration
def test_matrix_spectral_radius_with_huge_delay_refused_at_once():
    """A 1e8-step delay: the bisection would run ~40 counts of 2^30 samples (hours); it is refused at
    once, naming is_stable(), which answers here (the sufficient criterion holds). Run in a child with a
    time limit, so that a regression fails instead of hanging."""
    code = ("from ddesys.matrix.discrete import DiscreteDelayStateSpace as D\n"
            "s = D([[0.5]], [[0.3]], delay=1e8)\n"
            "print('STABLE', s.is_stable())\n"
            "for call in (s.spectral_radius, D([[0.5]], [[0.7]], delay=1e8).is_stable):\n"
            "    try:\n"
            "        call(); print('ACCEPTED')\n"
            "    except MemoryError as e:\n"
            "        print('REFUSED', e)\n")
    try:
        proc = subprocess.run([sys.executable, "-c", code], cwd=str(REPO), capture_output=True, text=True,
                              timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("spectral_radius / is_stable with a 1e8-step delay ran for more than a minute")
    assert proc.returncode == 0, proc.stderr[-800:]
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == "STABLE True" and len(lines) == 3, proc.stdout
    assert lines[1].startswith("REFUSED") and "is_stable()" in lines[1] and "sufficient_margin()" in lines[1]
    assert lines[2].startswith("REFUSED") and "sufficient" in lines[2] and "max_bytes" in lines[2]


def test_matrix_radius_and_count_work_bound_mirrors_the_diagonal_class():
    """The same scalar system in both classes, at a delay whose count fits 4 MiB in neither form: both
    refuse, both name max_bytes; with the budget raised both answer, and agree."""
    lam, mu, k = 0.5, 0.7, 20_000
    diag = DiscreteDelaySystem([lam], [mu], [1.0], [1.0], delay=float(k))
    mat = DiscreteDelayStateSpace([[lam]], [[mu]], delay=float(k))
    for call in (lambda b: diag.spectral_radius(max_bytes=b), lambda b: mat.spectral_radius(max_bytes=b)):
        with pytest.raises(ValueError, match="max_bytes"):
            call(4 * MiB)
    r_diag = float(np.max(diag.spectral_radius(max_bytes=2**30)))
    r_mat = mat.spectral_radius(rtol=1e-10, max_bytes=2**30)
    assert r_mat == pytest.approx(r_diag, rel=1e-9)
    # x_t = lam x_{t-1} + mu x_{t-k}: the real root of z^(k-1) (z - lam) = mu outside the circle
    assert r_mat ** (k - 1) * (r_mat - lam) == pytest.approx(mu, rel=1e-5)


# ------------------------------------------------------------------------------------------------ 10. the tap
def test_tap_width_checked_against_the_budget(monkeypatch):
    monkeypatch.setenv("DDESYS_MEMORY_BUDGET", "1G")
    with pytest.raises(BudgetError, match=r"tap.*width.*DDESYS_MEMORY_BUDGET=1G"):
        DelayTap(1.0, 5.0, width=1e9)
    monkeypatch.setenv("DDESYS_MEMORY_BUDGET", "1M")
    with pytest.raises(BudgetError, match=r"tap.*width"):
        DelayTap(np.ones(8), np.full(8, 5.0), width=1e4)       # 8 channels x 20001 offsets
    assert DelayTap(1.0, 5.0, width=1e3).width == 1e3


def _hat_reference(s, width, n):
    """The window of docs/theory.md §8 written out: hat((j - s) / width) / Z on j = 0 .. n-1."""
    j_all = np.arange(np.floor(s - width), np.ceil(s + width) + 1)
    Z = np.clip(1 - np.abs(j_all - s) / width, 0, None).sum()
    j = np.arange(n)
    return np.clip(1 - np.abs(j - s) / width, 0, None) / Z


def test_wide_tap_simulates_in_time_bounded_by_the_input():
    """A window of 2e6 + 1 offsets on a 64-sample input: only the offsets that reach the input are read."""
    x = np.random.default_rng(1).standard_normal(64)
    tap = DelayTap(2.0, 7.5, width=1e6)
    t = time.perf_counter()
    y = tap.simulate(x)
    assert time.perf_counter() - t < 5
    w = _hat_reference(7.5, 1e6, 64)
    ref = 2.0 * np.array([np.dot(w[:t + 1], x[t::-1]) for t in range(64)])
    np.testing.assert_allclose(y, ref, rtol=1e-12, atol=1e-300)


def test_tap_transfer_batches_its_frequencies(monkeypatch):
    """(J, F) = (4001, 500) complex terms are ~30 MiB a temporary; with 8 MiB they go in batches."""
    monkeypatch.setenv("DDESYS_MEMORY_BUDGET", "8M")
    tap = DelayTap(1.5, 30.25, width=2000.0)
    z = np.exp(1j * np.linspace(0.0, np.pi, 500)) * 1.01
    H, peak = _peak(lambda: tap.transfer(z))
    assert peak <= 8 * MiB, peak / MiB
    j = np.arange(0, 2040)
    w = _hat_reference(30.25, 2000.0, j.size)
    ref = 1.5 * (w[None, :] * z[:, None] ** -j[None, :]).sum(axis=1)
    np.testing.assert_allclose(H, ref, rtol=1e-10)


# ------------------------------------------------------------------------------------------------ others
def test_matrix_discrete_simulate_history_bounded_by_the_run():
    """A 1e7-step delay on a 64-step run: the history ring holds what the run can read (it used to hold
    J + 1 states, 80 MB here)."""
    Phi, G = np.array([[0.5, 0.1], [0.0, 0.3]]), np.array([[0.2, 0.0], [0.1, 0.2]])
    u = np.random.default_rng(2).standard_normal((1, 64))
    y, peak = _peak(lambda: DiscreteDelayStateSpace(Phi, G, delay=1e7, B=[1.0, 0.0], C=[0.0, 1.0]).simulate(u))
    assert peak < 4 * MiB, peak / MiB
    x, ref = np.zeros(2), []
    for t in range(64):                       # the delayed term never reaches t >= 0 within 64 steps
        x = Phi @ x + np.array([1.0, 0.0]) * u[0, t]
        ref.append(x[1])
    np.testing.assert_allclose(y[0], ref, rtol=1e-13, atol=1e-15)
    # a short delay through the same ring: x_t = Phi x_{t-1} + G x_{t-3} + B u_t
    y3 = DiscreteDelayStateSpace(Phi, G, delay=3.0, B=[1.0, 0.0], C=[0.0, 1.0]).simulate(u)
    X = np.zeros((67, 2))
    for t in range(64):
        X[t + 3] = Phi @ X[t + 2] + G @ X[t] + np.array([1.0, 0.0]) * u[0, t]
    np.testing.assert_allclose(y3[0], X[3:, 1], rtol=1e-12, atol=1e-15)


def test_continuous_matrix_frequency_response_checks_its_output(monkeypatch):
    """freqresp's output (F, p, m) is counted before it is allocated; the solves go in bounded batches."""
    monkeypatch.setenv("DDESYS_MEMORY_BUDGET", "32M")
    sys_ = DelayStateSpace(-np.eye(20), -0.5 * np.eye(20), tau=1.0)          # B = C = I: p = m = 20
    with pytest.raises(BudgetError, match=r"frequency response.*20000 frequencies"):
        sys_.freqresp(np.linspace(0, 3, 20000))
    with pytest.raises(BudgetError, match=r"transfer.*20000 points"):
        sys_.transfer(1j * np.linspace(0, 3, 20000))
    G, peak = _peak(lambda: sys_.transfer(1j * np.linspace(0, 3, 2000)))
    assert peak <= 32 * MiB, peak / MiB
    w = np.linspace(0, 3, 2000)
    np.testing.assert_allclose(G[0, 0], 1 / (1j * w + 1 + 0.5 * np.exp(-1j * w)), rtol=1e-12)
    assert np.abs(G[0, 1]).max() == 0


def test_matrix_roots_evaluate_the_contour_in_bounded_batches():
    """The argument-principle count evaluates det M on many points; the (points, n, n) stacks go in
    batches of bounded size (a regression guard: every point at once asked 1.8 GiB for 50 states,
    a case too slow for this suite), and the roots stay right."""
    k = np.linspace(0.3, 1.2, 12)
    sys_ = DelayStateSpace(-0.2 * np.eye(12), -np.diag(k), tau=4.0)
    res, peak = _peak(lambda: sys_.roots(re_min=-0.6))
    assert peak < 64 * MiB, peak / MiB
    assert res.certified
    ref = max(lambertw(-ki * 4.0 * np.exp(0.2 * 4.0)).real / 4.0 - 0.2 for ki in k)
    assert res.roots.real.max() == pytest.approx(ref, abs=1e-9)
