"""Published problems of the delay-systems literature, each with its source, for the matrix check (check 8).

Every reference is computed here without ddesys (mpmath, closed forms, a lifted companion matrix): the
first-order plant with dead time (margins), the TDS-CONTROL manual's neutral example, the stiff discrete
system whose longest-lag matrix is singular, NLEVP's time_delay with a double root on the axis.
"""
from __future__ import annotations

import mpmath as mp
import numpy as np
from scipy.linalg import expm

import ddesys


def _row(problem, quantity, value, reference, bound):
    err = float(np.max(np.abs(np.asarray(value) - np.asarray(reference)) / np.maximum(1.0, np.abs(reference))))
    return dict(problem=problem, quantity=quantity, error=err, bound=bound, passed=bool(err <= bound))


def dead_time_loop():
    """``e^{-s} / (s + 1)`` (Astrom & Murray, *Feedback Systems*, ch. 10): the critical gain ``sqrt(1 + w^2)``
    with ``w + atan(w) = pi``; the phase margin of ``2 G`` at ``w = sqrt 3``; the closed loop's delay margin
    ``(pi - atan(sqrt 3)) / sqrt 3``; a PI loop's rightmost root (mpmath ``findroot``)."""
    mp.mp.dps = 30
    w = mp.findroot(lambda x: x + mp.atan(x) - mp.pi, 2.0)
    G = ddesys.tf([1.0], [1.0, 1.0], delay=1.0)
    name = "e^-s / (s + 1), Astrom & Murray ch. 10"
    rows = [_row(name, "critical gain vs sqrt(1 + w^2), w + atan w = pi", ddesys.stability_margins(G)[0],
                 float(mp.sqrt(1 + w ** 2)), 1e-9),
            _row(name, "phase margin of 2G (deg) vs 180 - (pi/3 + sqrt 3) 180/pi",
                 ddesys.stability_margins(2.0 * G)[1], float(180 - (mp.pi / 3 + mp.sqrt(3)) * 180 / mp.pi), 1e-9),
            _row(name, "delay margin of feedback(2G) vs (pi - atan sqrt 3)/sqrt 3",
                 ddesys.feedback(2.0 * G).delay_margin(), float((mp.pi - mp.atan(mp.sqrt(3))) / mp.sqrt(3)), 1e-9)]
    kp, ki = 0.6, 0.4
    loop = ddesys.feedback(ddesys.tf([kp, ki], [1.0, 0.0]) * G)
    z = complex(loop.poles()[0])
    ref = complex(mp.findroot(lambda s: s * (s + 1) + (kp * s + ki) * mp.exp(-s), mp.mpc(z.real + 0.01, z.imag)))
    rows.append(_row(name, "PI loop (0.6 + 0.4/s): rightmost root vs mpmath", z, ref, 1e-10))
    return rows


def neutral_tds_control():
    """TDS-CONTROL manual (Appeltans & Michiels), eq. (2.20): ``x' = x/4 - x(t-1)/3 + 3/4 x'(t-1) - 1/2 x'(t-2)``.
    The difference operator ``1 - 3/4 e^{-s} + 1/2 e^{-2s}``: its roots ``e^{-s} = (3 +- i sqrt 23)/4`` have
    ``|e^{-s}| = sqrt 2``, so ``c_D = -ln(2)/2``; ``gamma_0 = 3/4 + 1/2 = 1.25`` (not strongly stable)."""
    sys = ddesys.NeutralStateSpace([[0.25]], Ad=[[[-1.0 / 3.0]], [[0.0]]], H=[0.75, -0.5], tau=[1.0, 2.0])
    e = sys.difference_spectrum()
    name = "neutral, TDS-CONTROL manual eq. (2.20)"
    return [_row(name, "essential bound c_D vs -ln(2)/2", e.c_D, -np.log(2.0) / 2, 1e-10),
            _row(name, "gamma_0 vs 3/4 + 1/2", e.gamma0, 1.25, 1e-10)]


def stiff_discrete():
    """``DelayStateSpace([[-1000, 1], [0.5, -2]], [[0, 0], [-1, -1]], 1).discretize(0.001)``: a singular
    longest-lag matrix (the spectral radius is 0.9991397 by the lifted companion matrix, python-control's
    poles and mpmath)."""
    A = np.array([[-1000.0, 1.0], [0.5, -2.0]])
    Ad = np.array([[0.0, 0.0], [-1.0, -1.0]])
    sd = ddesys.DelayStateSpace(A, Ad, 1.0).discretize(0.001)
    n, k, h = 2, 1000, 0.001
    aug = expm(np.block([[A, np.eye(n)], [np.zeros((n, n)), np.zeros((n, n))]]) * h)
    Phi, Gam = aug[:n, :n], aug[:n, n:]
    comp = np.zeros((n * k, n * k))               # blocks x_t, ..., x_{t-k+1}: x_{t+1} = Phi x_t + Gam Ad x_{t+1-k}
    comp[:n, :n] = Phi
    comp[:n, (k - 1) * n:] += Gam @ Ad
    comp[n:, :-n] = np.eye(n * (k - 1))
    rho = float(np.abs(np.linalg.eigvals(comp)).max())
    return [_row("stiff 2-state, 1000-step delay (ZOH, dt 1e-3)", "spectral radius vs lifted companion (0.9991397)",
                 sd.spectral_radius(), rho, 1e-10)]


def nlevp_time_delay():
    """NLEVP ``time_delay`` (Betcke, Higham, Mehrmann, Schroeder & Tisseur 2013, ACM TOMS 39(2); from
    Jarlebring & Michiels 2010): ``p(s) + q(s) e^{-s tau}``, a double root ``3 pi i`` on the axis at
    ``tau = 1`` (``f = f' = 0`` there, checked in mpmath); the delay margin ``1/9``, the first crossing
    (at ``4.5 pi i``)."""
    mp.mp.dps = 30
    pi = mp.pi
    a = [2 * (65 * pi + 32) / (5 * (8 + 5 * pi)), 9 * pi ** 2 * (13 + 5 * pi) / (8 + 5 * pi),
         324 * pi ** 2 * (5 * pi + 4) / (5 * (8 + 5 * pi))]
    b = [(260 * pi + 128 + 225 * pi ** 2) / (10 * (8 + 5 * pi)), 45 * pi ** 2 / (8 + 5 * pi),
         81 * pi ** 2 * (40 * pi + 32 + 25 * pi ** 2) / (10 * (8 + 5 * pi))]
    f = lambda s: s ** 3 + a[0] * s ** 2 + a[1] * s + a[2] + (b[0] * s ** 2 + b[1] * s + b[2]) * mp.exp(-s)  # noqa: E731
    z = 3j * pi
    assert abs(f(z)) < 1e-20 and abs(mp.diff(f, z)) < 1e-15          # the reference itself: a double root
    fa = [float(v) for v in a]
    fb = [float(v) for v in b]
    A0 = np.array([[0, 1, 0], [0, 0, 1], [-fa[2], -fa[1], -fa[0]]])
    A1 = np.array([[0, 0, 0], [0, 0, 0], [-fb[2], -fb[1], -fb[0]]])
    sys = ddesys.DelayStateSpace(A0, A1, 1.0)
    at_one = [c for c in sys.crossings(1.0) if abs(c.tau - 1.0) < 1e-9 and abs(c.omega - 3 * np.pi) < 1e-6]
    name = "NLEVP time_delay (Betcke et al. 2013)"
    return [_row(name, "crossings(1.0): the double root 3 pi i at tau = 1 listed twice",
                 [c.omega for c in at_one] if len(at_one) == 2 else [np.inf, np.inf], [3 * np.pi] * 2, 1e-9),
            _row(name, "delay margin vs 1/9", sys.delay_margin(), 1.0 / 9.0, 1e-9)]


PARTS = (dead_time_loop, neutral_tds_control, stiff_discrete, nlevp_time_delay)

__all__ = ["PARTS", "dead_time_loop", "neutral_tds_control", "nlevp_time_delay", "stiff_discrete"]
