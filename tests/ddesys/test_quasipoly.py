"""Roots of quasi-polynomials given by coefficients, against Lambert W (Hayes' equation) and an mpmath count by
the argument principle (a contour integral of q'/q at 30 digits) with every root refined by mpmath."""
from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest

import ddesys


def test_hayes_equation_matches_lambert_w():
    # s + 1 + 2 e^{-s} = 0: s = -1 + W_k(-2 e)
    r = ddesys.quasipolynomial_roots([[1.0, 1.0], [2.0]], [1.0], re_min=-3.0)
    ref = np.array([complex(-1 + mp.lambertw(-2 * mp.e, k)) for k in range(-12, 13)])
    ref = ref[ref.real >= -3.0]
    assert r.certified and r.roots.size == ref.size
    for z in ref:
        assert np.min(np.abs(r.roots - z)) < 1e-11


def q(s):
    return s**2 + 0.5 * s + 2 + (0.3 * s + 1) * mp.exp(-s) - 0.4 * mp.exp(-2.5 * s)


def test_two_delays_against_an_mpmath_count():
    mp.mp.dps = 30
    r = ddesys.quasipolynomial_roots([[1.0, 0.5, 2.0], [0.3, 1.0], [-0.4]], [1.0, 2.5], re_min=-1.0)
    assert r.certified
    for z in r.roots:                                           # each one a zero of q, refined at 30 digits
        ref = complex(mp.findroot(q, mp.mpc(z)))
        assert abs(ref - z) < 1e-10
    # the count of zeros with Re s >= -1, |Im s| <= 20 (no root beyond: |s| <= 8 there), argument principle
    dq = lambda s: mp.diff(q, s)                                 # noqa: E731
    corners = [mp.mpc(-1, -20), mp.mpc(6, -20), mp.mpc(6, 20), mp.mpc(-1, 20)]
    total = 0
    for a, b in zip(corners, corners[1:] + corners[:1]):
        total += mp.quad(lambda t: dq(a + t * (b - a)) / q(a + t * (b - a)) * (b - a), [0, 0.25, 0.5, 0.75, 1])
    count = int(mp.nint(mp.re(total / (2j * mp.pi))))
    assert count == r.roots.size


def test_rectangle_and_refusals():
    r = ddesys.quasipolynomial_roots([[1.0, 1.0], [2.0]], [1.0], re_min=-3.0, im_range=(0.0, 10.0))
    assert r.roots.size and np.all((r.roots.imag >= 0) & (r.roots.imag <= 10))
    with pytest.raises(ValueError, match="neutral"):
        ddesys.quasipolynomial_roots([[1.0, 1.0], [0.5, 0.0]], [1.0], re_min=-1.0)
    with pytest.raises(ValueError, match="one polynomial more"):
        ddesys.quasipolynomial_roots([[1.0, 1.0], [2.0]], [1.0, 2.0], re_min=-1.0)
    with pytest.raises(ValueError, match="> 0"):
        ddesys.quasipolynomial_roots([[1.0, 1.0], [2.0]], [0.0], re_min=-1.0)
