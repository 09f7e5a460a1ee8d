"""The fast paths of the exact margins (``ddesys.control.margins``, ``_lft.transfer_at``, ``_zero_floor``) miss no
crossing: loops whose crossings a coarse frequency grid would miss (two gain crossovers across a lightly damped
resonance, phase crossovers 1% apart, the many phase crossovers of a long dead time at high gain), each crossing
checked against mpmath (``findroot`` at 30 digits of ``|L| = 1`` or ``Im L = 0``), on the small-system (dense)
and the Schur (``n + q > 12``) evaluation paths; and the evaluators and the rounding floor agree with their
reference forms."""
from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest

import ddesys
from ddesys.control import _lft, margins
from ddesys.control._zero_floor import ZERO_TOL, zero_cluster

PAD_POLES = np.linspace(50.0, 200.0, 14)      # a 14-state flat factor M(s) = mean(a / (s + a)): the Schur path


def _pad():
    a = PAD_POLES
    return ddesys.ss(-np.diag(a), np.ones((a.size, 1)), (a / a.size)[None, :], np.zeros((1, 1)))


def _pad_mp(s):
    return sum(mp.mpf(a) / (s + a) for a in PAD_POLES) / len(PAD_POLES)


def _roots(f, guesses):
    """mpmath roots of the real function ``f`` at 30 digits (sorted), from starting points or from brackets
    ``(a, b)`` of a sign change (Anderson-Bjorck's bracketing solver)."""
    mp.mp.dps = 30

    def one(g):
        if isinstance(g, tuple):
            return mp.findroot(f, (mp.mpf(float(g[0])), mp.mpf(float(g[1]))), solver="anderson")
        return mp.findroot(f, mp.mpf(float(g)))
    return np.array(sorted(float(one(g)) for g in guesses))


def _close(ours, ref, rtol=1e-12):
    ours, ref = np.sort(np.asarray(ours, float)), np.asarray(ref, float)
    assert ours.size == ref.size, (ours, ref)
    assert np.all(np.abs(ours - ref) <= rtol * np.abs(ref)), (ours, ref)


@pytest.mark.parametrize("padded", [False, True], ids=["dense", "schur"])
def test_two_gain_crossovers_across_a_lightly_damped_resonance(padded):
    """``0.03 * 9 / (s^2 + 0.06 s + 9) e^{-0.05 s}``: ``|L| < 1`` except on the resonance peak (1.5), so two gain
    crossovers about 2% apart around ``w0 = 3`` and nowhere else."""
    zeta, w0, g0, tau = 0.01, 3.0, 0.03, 0.05
    L = ddesys.tf([g0 * w0 ** 2], [1.0, 2 * zeta * w0, w0 ** 2], delay=tau)
    if padded:
        L = L * _pad()
    assert (_lft.coerce(L).A.shape[0] + _lft.coerce(L).tau.size > _lft.SMALL) == padded

    def Lmp(w):
        s = mp.mpc(0, w)
        v = g0 * w0 ** 2 / (s ** 2 + 2 * zeta * w0 * s + w0 ** 2) * mp.exp(-tau * s)
        return v * _pad_mp(s) if padded else v

    # |L| = 1 without the pad: u = w^2 solves u^2 + (4 zeta^2 - 2) w0^2 u + (1 - g0^2) w0^4 = 0
    u = np.roots([1.0, (4 * zeta ** 2 - 2) * w0 ** 2, (1 - g0 ** 2) * w0 ** 4])
    ref = _roots(lambda w: abs(Lmp(w)) - 1, np.sqrt(np.sort(u.real)))
    assert 0.01 < ref[1] / ref[0] - 1 < 0.03
    GM, PM, SM, w180, wc, ws = ddesys.stability_margins(L, returnall=True)
    _close(wc, ref)
    ph = [float(mp.degrees(mp.arg(Lmp(w)))) for w in ref]
    assert np.allclose(np.sort(PM), np.sort(np.remainder(ph, 360.0) - 180.0), rtol=0, atol=1e-9)
    gm, pm, sm, wpc, wgc, wms = ddesys.stability_margins(L)
    j = int(np.argmin(np.abs(PM)))
    assert pm == PM[j] and wgc == wc[j]


@pytest.mark.parametrize("padded", [False, True], ids=["dense", "schur"])
def test_phase_crossovers_one_percent_apart(padded):
    """``2 e^{-s} / (s + 1)`` times a pole pair at 1.89 and a zero pair at 1.9 (damping 5e-4): the phase dips
    below -180 deg and back within 1%, then crosses again at ~2.03; one gain crossover in between."""
    wz, wp, z = 1.9, 1.89, 5e-4
    num = np.array([1.0, 2 * z * wz, wz ** 2]) * wp ** 2 / wz ** 2
    L = ddesys.tf([2.0], [1.0, 1.0], delay=1.0) * ddesys.tf(num, [1.0, 2 * z * wp, wp ** 2])
    if padded:
        L = L * _pad()

    def Lmp(w):
        s = mp.mpc(0, w)
        v = 2 * mp.exp(-s) / (s + 1) * (s ** 2 + 2 * z * wz * s + wz ** 2) / (s ** 2 + 2 * z * wp * s + wp ** 2)
        v = v * wp ** 2 / wz ** 2
        return v * _pad_mp(s) if padded else v

    mp.mp.dps = 30                         # the reference brackets: a fine scan of [1.7, 2.2], refined by findroot
    scan = np.linspace(1.7, 2.2, 2001)
    vals = [Lmp(w) for w in scan]
    im = np.array([float(mp.im(v)) for v in vals])
    mag = np.array([float(abs(v)) - 1 for v in vals])
    i = np.flatnonzero(np.sign(im[:-1]) != np.sign(im[1:]))
    j = np.flatnonzero(np.sign(mag[:-1]) != np.sign(mag[1:]))
    ref180 = _roots(lambda w: mp.im(Lmp(w)), [(scan[a], scan[a + 1]) for a in i])
    ref180 = ref180[[float(mp.re(Lmp(w))) < 0 for w in ref180]]
    refc = _roots(lambda w: abs(Lmp(w)) - 1, [(scan[a], scan[a + 1]) for a in j])
    assert ref180.size == 3 and refc.size == 1 and ref180[1] / ref180[0] - 1 < 0.011
    GM, PM, SM, w180, wc, ws = ddesys.stability_margins(L, returnall=True)
    win = lambda w: w[(w > 1.7) & (w < 2.2)]                                     # noqa: E731
    _close(win(w180), ref180)
    _close(win(wc), refc)
    ref_gm = [1 / float(abs(Lmp(w))) for w in ref180]
    assert np.allclose(np.sort(GM[(w180 > 1.7) & (w180 < 2.2)]), np.sort(ref_gm), rtol=1e-11, atol=0)


def test_many_phase_crossovers_of_a_long_dead_time_at_high_gain():
    """``30 e^{-20 s} / (s + 1)^3``: a phase crossover at each root of ``20 w + 3 atan(w) = (2k + 1) pi``
    (about ``pi / 10`` apart: 33 up to ``w = 10``, ten of them with ``|L| > 1``); every one is found, and the gain
    crossover."""
    k, tau = 30.0, 20.0
    L = ddesys.tf([k], [1.0, 3.0, 3.0, 1.0], delay=tau)
    theta = lambda w: tau * w + 3 * mp.atan(w)                                   # noqa: E731
    mp.mp.dps = 30
    ks = [j for j in range(200) if (2 * j + 1) * np.pi < float(theta(10.0))]
    Lmp = lambda w: k * mp.exp(-tau * mp.mpc(0, w)) / (1 + mp.mpc(0, w)) ** 3      # noqa: E731
    # Im L = 0 with Re L < 0: theta(w) = (2j + 1) pi, bracketed by 0 <= 3 atan(w) < 3 pi / 2
    ref180 = np.array([float(mp.findroot(lambda w: theta(w) - (2 * j + 1) * mp.pi,
                                         (max(0.0, (2 * j - 0.5) * np.pi / tau), (2 * j + 1) * np.pi / tau),
                                         solver="anderson")) for j in ks])
    assert np.all(np.diff(ref180) > 0) and ref180.size == len(ks) == 33
    assert all(abs(mp.im(Lmp(w))) < 1e-12 * abs(Lmp(w)) and mp.re(Lmp(w)) < 0 for w in ref180)
    GM, PM, SM, w180, wc, ws = ddesys.stability_margins(L, returnall=True)
    _close(w180[w180 <= 10.0], ref180)
    refc = _roots(lambda w: k / (1 + mp.mpf(w) ** 2) ** 1.5 - 1, [np.sqrt(k ** (2 / 3) - 1)])
    _close(wc, refc)
    gm, pm, sm, wpc, wgc, wms = ddesys.stability_margins(L)
    mags = np.array([k / (1 + w ** 2) ** 1.5 for w in ref180])
    best = int(np.argmin(np.abs(np.log(mags))))
    assert abs(wpc - ref180[best]) <= 1e-12 * ref180[best] and abs(gm - 1 / mags[best]) <= 1e-10 / mags[best]


def _loop(n, seed=0):
    rng = np.random.default_rng(seed)
    A = -np.diag(np.linspace(0.5, 5.0, n)) + 0.1 * rng.standard_normal((n, n))
    return ddesys.tf([0.5, 0.3], [1.0, 0.0]) * ddesys.ss(A, rng.standard_normal((n, 1)),
                                                         rng.standard_normal((1, n)) / n, input_delay=0.7)


def test_schur_evaluator_agrees_with_the_dense_solve_and_few_points_are_the_dense_solve():
    rng = np.random.default_rng(4)
    for g in (_lft.coerce(_loop(20)),
              _lft.make(rng.standard_normal((16, 16)) - 2 * np.eye(16), rng.standard_normal((16, 2)),
                        rng.standard_normal((2, 16)), rng.standard_normal((2, 2)), B2=rng.standard_normal((16, 2)),
                        C2=rng.standard_normal((2, 16)), D12=rng.standard_normal((2, 2)),
                        D21=rng.standard_normal((2, 2)), D22=0.3 * rng.standard_normal((2, 2)), tau=[0.4, 1.3])):
        G = _lft.transfer_at(g)
        s = np.concatenate([1j * np.logspace(-3, 3, 3000), rng.standard_normal(50) + 1j * rng.standard_normal(50)])
        ref = _lft._transfer_dense(g, s)
        assert np.abs(G(s) - ref).max() <= 1e-12 * np.abs(ref).max()
        for few in (s[:1], s[100:103], s[-_lft.FEW_POINTS:]):
            assert np.array_equal(G(few), _lft._transfer_dense(g, few))
        ev = np.linalg.eigvals(g.A)[:3]                      # at an eigenvalue of A: the dense solve
        pts = np.concatenate([ev, s[:20]])
        try:
            ref = _lft._transfer_dense(g, ev)
        except np.linalg.LinAlgError:                        # a pole of the loop: singular either way
            with pytest.raises(np.linalg.LinAlgError):
                G(pts)
        else:
            assert np.allclose(G(pts)[..., :3], ref, rtol=1e-10, atol=0)


def test_grid_values_are_the_margin_grid_and_the_response_on_it():
    for L in (_loop(20), ddesys.tf([1.0], [1.0, 1.0], delay=1.0), ddesys.tf([1.0, 2.0], [1.0, 3.0, 3.0, 1.0])):
        g = _lft.coerce(L)
        G = _lft.transfer_at(g)
        grid, values = margins._grid_values(g, G, zero_cluster(g)[1])
        assert np.array_equal(grid, margins.margin_grid(g))
        ref = G(1j * grid)
        assert np.allclose(values, ref, rtol=1e-13, atol=0)


def _zero_cluster_by_poly(g):
    """The definition of :func:`zero_cluster` with ``np.poly`` of each prefix."""
    from ddesys.control._zero_floor import FLOOR_FACTOR, _static_matrix

    A0 = _static_matrix(g)
    if A0 is None or A0.size == 0:
        return 0, 0.0
    lam = np.linalg.eigvals(A0)
    lam = lam[np.argsort(np.abs(lam), kind="stable")]
    S = float(np.linalg.norm(A0, 2)) or 1.0
    m = 0
    for k in range(1, lam.size + 1):
        if np.all(np.abs(np.poly(lam[:k] / S)[1:]) <= ZERO_TOL):
            m = k
    return m, (FLOOR_FACTOR * float(np.abs(lam[m - 1])) if m else 0.0)


def test_zero_cluster_matches_its_definition():
    rng = np.random.default_rng(2)
    found = set()
    for t in range(120):
        n = int(rng.integers(1, 10))
        z0 = min(n, int(rng.integers(0, 4)))
        J = np.triu(rng.standard_normal((n, n)), 1) + np.diag(np.r_[np.zeros(z0), rng.standard_normal(n - z0)])
        if t % 3 == 0:                      # complex pairs about a zero cluster
            J[z0:, z0:] = rng.standard_normal((n - z0, n - z0))
        V = rng.standard_normal((n, n))
        A = V @ J @ np.linalg.inv(V) if t % 2 else J
        g = _lft.make(A, np.ones((n, 1)), np.ones((1, n)), 0.0)
        ours = zero_cluster(g)
        assert ours == _zero_cluster_by_poly(g)
        found.add(ours[0])
    assert {0, 1, 2, 3} <= found
