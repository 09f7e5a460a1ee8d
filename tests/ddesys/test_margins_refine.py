"""The refinements of the exact margins (``ddesys.control.margins``): every bracket at once by the steps of scipy's
``brentq`` (bit for bit the same zeros), the stability margin as the zero of the slope of ``|1 + L|`` (its frequency
to rounding, against mpmath), a pass of the Nyquist curve close to ``-1`` that the grid sees only as a shallow dip
(against mpmath and a brute-force scan), every minimum of a long dead time with ``returnall``, and the Schur
evaluator through a delay channel of high relative degree (against the closed form)."""
from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest
from scipy.optimize import brentq

import ddesys
from ddesys.control import _lft, margins


def test_zeros_take_brentqs_steps_on_every_bracket_at_once():
    g = lambda x: np.sin(x) - 0.25                     # noqa: E731  zeros near 0.2527 + 2 pi k and pi - 0.2527 + 2 pi k
    k = np.arange(12)
    a = np.where(k % 2 == 0, 2 * np.pi * (k // 2) - 0.5, 2 * np.pi * (k // 2) + 2.0)
    b = np.where(k % 2 == 0, 2 * np.pi * (k // 2) + 1.0, 2 * np.pi * (k // 2) + 3.5)
    a[0] = 0.0
    xtol = 1e-15 * b
    ref = [brentq(g, lo, hi, xtol=t, rtol=4 * np.finfo(float).eps) for lo, hi, t in zip(a, b, xtol)]
    assert np.array_equal(margins._zeros(g, a, b, xtol, 4 * np.finfo(float).eps), ref)
    assert np.array_equal(margins._zeros(g, a[:2], b[:2], xtol[:2], 4 * np.finfo(float).eps), ref[:2])
    assert a.size > margins.FEW_BRACKETS >= 2            # the arrays' path, then scipy's own loop
    lo, hi = np.array([0.5, 1.0, 3.0, 4.0]), np.array([1.0, 2.0, 3.1, 5.0])      # no sign change: no zero
    assert np.isnan(margins._zeros(g, lo, hi, np.full(4, 1e-15), 4 * np.finfo(float).eps)).all()
    assert np.isnan(margins._zeros(g, lo[:2], hi[:2], np.full(2, 1e-15), 4 * np.finfo(float).eps)).all()


def _fopdt(K, tau):
    return lambda w: K * mp.exp(-tau * mp.mpc(0, w)) / (1 + mp.mpc(0, w))


def _mp_minimum(L, w0):
    """The minimum of ``|1 + L(i w)|`` near ``w0``: the zero of the derivative of ``|1 + L|^2`` at 30 digits."""
    mp.mp.dps = 30
    f = lambda w: abs(1 + L(w)) ** 2                    # noqa: E731
    w = mp.findroot(lambda x: mp.diff(f, x), mp.mpf(float(w0)))
    return float(w), float(mp.sqrt(f(w)))


def test_stability_margin_frequency_to_rounding():
    """``1.5 e^{-s} / (s + 1)``: ``wms`` is the zero of the slope of ``|1 + L|``, to rounding (a search on
    ``|1 + L|`` itself stops at ``sqrt(eps)``)."""
    _, _, sm, _, _, wms = ddesys.stability_margins(1.5 * ddesys.tf([1.0], [1.0, 1.0], delay=1.0))
    w, s = _mp_minimum(_fopdt(mp.mpf("1.5"), 1), wms)
    assert abs(wms - w) <= 1e-14 * w and abs(sm - s) <= 1e-15


def test_a_pass_close_to_minus_one_between_grid_points_is_the_stability_margin():
    """``3.8 e^{-20 s} / (s + 1)``: the Nyquist curve passes within 0.031 of ``-1`` at ``w = 3.548``, between grid
    points whose ``|1 + L|`` (0.086, 0.124) are above the grid's smallest value (0.073, at ``w = 3.86``, where the
    minimum is 0.047): a choice by grid values refines the wrong minimum, the grid's lower bound keeps the
    pass. Reference: a scan of 5e6 points, refined by mpmath."""
    K, tau = 3.8, 20.0
    L = ddesys.tf([K], [1.0, 1.0], delay=tau)
    w = np.linspace(1e-4, 50.0, 5_000_001)
    scan = np.abs(1 + K * np.exp(-1j * w * tau) / (1 + 1j * w))
    w_ref, sm_ref = _mp_minimum(_fopdt(mp.mpf(K), mp.mpf(tau)), w[np.argmin(scan)])
    assert sm_ref <= scan.min() and scan.min() - sm_ref < 1e-6
    _, _, sm, _, _, wms = ddesys.stability_margins(L)
    assert abs(sm - sm_ref) <= 1e-15 and abs(wms - w_ref) <= 1e-13 * w_ref
    assert abs(ddesys.sensitivity_peaks(L).ms - 1 / sm_ref) <= 1e-12 / sm_ref


def test_returnall_refines_every_minimum_of_a_long_dead_time():
    """``e^{-s}`` touches ``-1`` at every odd multiple of ``pi``: with ``returnall`` each of its ~1600 minima up to
    ``1e4`` is refined to a touch (``sm`` at rounding), all at once."""
    GM, PM, SM, w180, wc, ws = ddesys.stability_margins(ddesys.tf([1.0], [1.0], delay=1.0), returnall=True)
    inner, s = ws[2:], SM[2:]
    assert inner.size > 1500 and np.all(s < 1e-12)
    k = inner / np.pi
    assert np.all(np.abs(k - np.round(k)) < 1e-11 * k) and np.all(np.round(k) % 2 == 1)


@pytest.mark.parametrize("order", [3, 5])
def test_schur_path_through_a_delay_channel_of_high_relative_degree(order):
    """``e^{-s} / (s + 1)^k``: ``C B = 0`` up to ``C A^(k-2) B`` in the realization, reached through the delay
    channel; where the Schur basis leaves rounding only, the dense solve takes the point. Against the closed
    form from ``1e-2`` to ``1e5`` (``k = 5`` was off by a factor 8e4 at ``1e5`` before the channels were checked)."""
    den = np.poly(-np.ones(order))
    g = _lft.coerce(ddesys.tf([1.0], den, delay=1.0))
    s = 1j * np.logspace(-2, 5, 701)
    exact = np.exp(-s) / np.polyval(den, s)
    got = _lft.schur_at(g)(s)[0, 0]
    assert np.max(np.abs(got - exact) / np.abs(exact)) < 1e-8
    assert np.allclose(_lft.transfer_at(g)(s)[0, 0], exact, rtol=1e-8, atol=0)


def _loop(n, seed=0):
    rng = np.random.default_rng(seed)
    A = -np.diag(np.linspace(0.5, 5.0, n)) + 0.1 * rng.standard_normal((n, n))
    return ddesys.tf([0.5, 0.3], [1.0, 0.0]) * ddesys.ss(A, rng.standard_normal((n, 1)),
                                                         rng.standard_normal((1, n)) / n, input_delay=0.7)


@pytest.mark.parametrize("L", [_loop(2), _loop(5), _loop(10), 30.0 * _loop(5, 1),
                               3.8 * ddesys.tf([1.0], [1.0, 1.0], delay=20.0),
                               ddesys.tf([30.0], [1.0, 3.0, 3.0, 1.0], delay=20.0)],
                         ids=["pi-2", "pi-5", "pi-10", "pi-5-gain-30", "fopdt-20", "third-order-20"])
def test_the_minima_left_out_hold_no_smaller_stability_margin(L):
    """The deciding ``sm`` refines only the grid minima that the grid's lower bound cannot exclude; ``returnall``
    refines every one: none is smaller."""
    sm, wms = ddesys.stability_margins(L)[2::3]
    SM, ws = ddesys.stability_margins(L, returnall=True)[2::3]
    assert sm <= SM.min() * (1 + 1e-14)
    assert abs(sm - abs(1 + L.transfer([1j * wms])[0, 0, 0])) <= 1e-14
