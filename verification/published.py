"""Published problems of the delay-systems literature, each with its source, for the matrix check (check 8).

Every reference is computed here without ddesys (mpmath, closed forms, a lifted companion matrix): the
first-order plant with dead time (margins), the TDS-CONTROL manual's neutral example, the stiff discrete
system whose longest-lag matrix is singular.
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


PARTS = (dead_time_loop, neutral_tds_control, stiff_discrete)

__all__ = ["PARTS", "dead_time_loop", "neutral_tds_control", "stiff_discrete"]
