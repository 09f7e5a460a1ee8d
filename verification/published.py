"""Published problems of the delay-systems literature, each with its source, for the matrix check (check 8).

Every reference is computed here without ddesys (mpmath, closed forms, a lifted companion matrix): the
first-order plant with dead time (margins), the TDS-CONTROL manual's neutral example, the stiff discrete
system whose longest-lag matrix is singular, NLEVP's time_delay with a double root on the axis, a
six-fold root, cancelling delayed terms, stability decided next to a crossing.
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

    def f(s):
        return s ** 3 + a[0] * s ** 2 + a[1] * s + a[2] + (b[0] * s ** 2 + b[1] * s + b[2]) * mp.exp(-s)

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


def mid_sixfold():
    """Mazanti, Boussaada & Niculescu (J. Differential Equations 286, 2021), eqs. (6.10a)-(6.10f) (qpmr's
    example): ``s^3 + a2 s^2 + a1 s + a0 + e^{-0.66 s} (b2 s^2 + b1 s + b0)`` with a root of multiplicity 6
    at ``s0 = -6.0210``; in float64 coefficients it splits into six roots ~0.02 apart, whose centroid the
    reference gives (mpmath ``polyroots`` of the Taylor expansion at ``s0``, then ``findroot``, 40 digits)."""
    kappa, k, tau = 1.964, -0.67036, 0.66
    r0 = -3.0 - 9.0 ** (1 / 3) + 3.0 ** (1 / 3)
    s0 = r0 / tau - 1 / kappa
    omega = (-kappa * (s0 ** 3 + 9 / tau * s0 ** 2 + 36 / tau ** 2 * s0 + 60 / tau ** 3)) ** 0.5
    xi = -1.5 * s0 / omega - 4.5 / omega / tau - 0.5 / omega / kappa
    e = np.exp(s0 * tau)
    beta = (-(3 * kappa * (s0 ** 2 * tau ** 2 - 8 * s0 * tau + 20) * e) / (k * omega ** 2 * tau ** 3),
            (6 * kappa * (s0 * tau - 4) * e) / (k * omega ** 2 * tau ** 2), (-3 * kappa * e) / (k * omega ** 2 * tau))
    a = [omega ** 2 / kappa, omega ** 2 + 2 * omega * xi / kappa, 2 * omega * xi + 1 / kappa]
    b = [-x * k * omega ** 2 / kappa for x in beta]
    with mp.workdps(40):
        am, bm, T = [mp.mpf(x) for x in a], [mp.mpf(x) for x in b], mp.mpf(tau)
        q = lambda z: (z ** 3 + am[2] * z ** 2 + am[1] * z + am[0]  # noqa: E731
                       + mp.exp(-z * T) * (bm[2] * z ** 2 + bm[1] * z + bm[0]))
        c = mp.mpf(s0)
        local = mp.polyroots(mp.taylor(q, c, 12)[::-1], maxsteps=200, extraprec=200)
        ref = np.array([complex(mp.findroot(q, c + z)) for z in local if abs(z) < 0.5])
    A = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [-a[0], -a[1], -a[2]]])
    Ad = np.zeros((3, 3))
    Ad[2] = -np.array(b)
    res = ddesys.DelayStateSpace(A, Ad, tau).roots(re_min=-8.0)
    ok = res.certified and res.roots.size == 6 and bool(np.all(res.multiplicity == 6)) and ref.size == 6
    name = "6-fold root, Mazanti, Boussaada & Niculescu 2021"
    return [_row(name, "the cluster: certified, multiplicity 6, centroid vs mpmath",
                 res.roots[0] if ok else np.inf, ref.mean(), 1e-8)]


def hidden_nilpotent():
    """``A = T diag(-1, -2) T^-1``, ``Ad = T [[0, 1], [0, 0]] T^-1``, ``T = [[2, 1], [1, 1]]``: every delayed
    term cancels in ``det M(s) = (s + 1)(s + 2)`` (exact: the determinant of the 2 x 2 expansion), so at delays
    10 and 50 the only roots are -1 and -2."""
    T = np.array([[2.0, 1.0], [1.0, 1.0]])
    Ti = np.linalg.inv(T)
    A, Ad = T @ np.diag([-1.0, -2.0]) @ Ti, T @ np.array([[0.0, 1.0], [0.0, 0.0]]) @ Ti
    rows = []
    for tau in (10.0, 50.0):
        r = ddesys.DelayStateSpace(A, Ad, tau).roots(re_min=-3.0)
        ok = r.certified and r.roots.size == 2
        rows.append(_row(f"hidden nilpotent coupling, tau = {tau:g}", "only -1 and -2, certified",
                         np.sort_complex(r.roots) if ok else [np.inf, np.inf], [-2.0, -1.0], 1e-12))
    return rows


def stability_at_the_edge():
    """``x' = -x(t - tau)`` at ``tau = (pi/2)(1 -+ 1e-12)``, next to its crossing (Hayes 1950): the rightmost
    root ``W_0(-tau)/tau`` (mpmath) has real part about ``-+ 4.5e-13``; ``is_stable`` must give its sign."""
    rows = []
    for rel in (-1e-12, 1e-12):
        tau = float(np.pi / 2) * (1 + rel)
        with mp.workdps(30):
            ref = float(mp.re(mp.lambertw(-mp.mpf(tau), 0) / mp.mpf(tau)))
        got = bool(ddesys.DelayStateSpace([[0.0]], [[-1.0]], tau).is_stable())
        rows.append(dict(problem=f"x' = -x(t - tau), tau = pi/2 (1 {rel:+.0e}), Hayes 1950",
                         quantity=f"is_stable agrees with the sign of Re s = {ref:.2e}",
                         error=0.0 if got == (ref < 0) else 1.0, bound=0.0, passed=got == (ref < 0)))
    return rows


def wood_berry():
    """The Wood-Berry distillation column (Wood & Berry, Chem. Eng. Sci. 28 (1973)) as a transfer matrix with
    a dead time per entry, under Luyben's BLT diagonal PI tuning (Ind. Eng. Chem. Process Des. Dev. 25 (1986):
    ``Kc = 0.375, -0.075``, ``tau_I = 8.29, 23.6``): the frequency response against the closed form, and the
    closed loop's rightmost root against mpmath ``findroot`` on ``det(I + G(s) C(s))`` cleared of its
    denominators."""
    num = [[12.8, -18.9], [6.6, -19.4]]
    T = [[16.7, 21.0], [10.9, 14.4]]
    L = [[1.0, 3.0], [7.0, 3.0]]
    G = ddesys.tf([[[num[i][j]] for j in range(2)] for i in range(2)],
                  [[[T[i][j], 1.0] for j in range(2)] for i in range(2)], delay=L)
    kc, ti = (0.375, -0.075), (8.29, 23.6)
    C = ddesys.append(*(ddesys.tf([k * t, k], [t, 0.0]) for k, t in zip(kc, ti)))
    loop = ddesys.feedback(G * C)
    name = "Wood-Berry column, BLT diagonal PI (Luyben 1986)"
    w = np.array([0.01, 0.1, 1.0])
    ref = np.array([[[num[i][j] * np.exp(-1j * x * L[i][j]) / (T[i][j] * 1j * x + 1) for x in w] for j in range(2)]
                    for i in range(2)])
    rows = [_row(name, "G(i w) at w = 0.01, 0.1, 1 vs the closed form", G.freqresp(w), ref, 1e-13)]
    mp.mp.dps = 30

    def F(s):
        g = [[num[i][j] * mp.exp(-s * L[i][j]) / (T[i][j] * s + 1) for j in range(2)] for i in range(2)]
        c = [kc[j] * (1 + 1 / (ti[j] * s)) for j in range(2)]
        det = (1 + g[0][0] * c[0]) * (1 + g[1][1] * c[1]) - g[0][1] * c[1] * g[1][0] * c[0]
        dens = s ** 2 * mp.fprod(T[i][j] * s + 1 for i in range(2) for j in range(2))
        return det * dens

    z = complex(loop.poles()[0])
    ref = complex(mp.findroot(F, mp.mpc(z.real + 1e-3, z.imag)))
    rows.append(_row(name, "closed loop: rightmost root vs mpmath", z, ref, 1e-10))
    return rows


def biproper_dead_time_loop():
    """A biproper loop with dead time, ``L = e^{-s} (s/2 + 1) / (s + 1)`` under unit feedback: a delay-difference
    (neutral) closed loop, ``(s + 1) + (s/2 + 1) e^{-s} = 0``. Its essential bound is ``ln(1/2)`` (the loop's
    high-frequency gain ``1/2``: Hale & Verduyn Lunel 2002); its roots right of it against mpmath."""
    T = ddesys.feedback(ddesys.tf([0.5, 1.0], [1.0, 1.0], delay=1.0))
    name = "biproper loop e^-s (s/2 + 1)/(s + 1), unit feedback"
    rows = [_row(name, "essential bound c_D vs ln(1/2)", T.difference_loop().difference_spectrum().c_D,
                 np.log(0.5), 1e-12)]
    mp.mp.dps = 30
    for z in T.poles(re_min=-0.6):
        ref = complex(mp.findroot(lambda s: (s + 1) + (0.5 * s + 1) * mp.exp(-s), mp.mpc(z.real + 1e-3, z.imag)))
        rows.append(_row(name, f"root {z:.6g} vs mpmath", z, ref, 1e-10))
    return rows


def unstable_fopdt_loop():
    """``1.5 e^{-0.5 s} / (s - 1)``: ``L(0) = -1.5`` lies on the negative real axis, a phase crossover at
    ``omega = 0`` by python-control's convention (its ``stability_margins`` docstring): ``gm = 1 / 1.5``; the
    gain crossover at ``|L| = 1``, ``omega = sqrt 5 / 2``, and its phase margin by mpmath."""
    mp.mp.dps = 30
    L = lambda w: 1.5 * mp.exp(-0.5j * w) / (1j * w - 1)                  # noqa: E731
    wg = mp.findroot(lambda w: abs(L(w)) - 1, 1.0)
    gm, pm, _, wpc, wgc, _ = ddesys.stability_margins(ddesys.tf([1.5], [1.0, -1.0], delay=0.5))
    name = "1.5 e^-0.5s / (s - 1), the static gain on the negative axis"
    return [_row(name, "gain margin at omega = 0 vs 1 / 1.5", [gm, wpc], [2.0 / 3.0, 0.0], 1e-13),
            _row(name, "gain crossover vs sqrt(5)/2, phase margin vs mpmath", [wgc, pm],
                 [float(wg), float(180 + mp.degrees(mp.arg(L(wg))))], 1e-10)]


def python_control_example21():
    """python-control's margin test ``example21`` (control/tests/margin_test.py):
    ``0.002 (s + 0.02)(s + 0.05)(s + 5)(s + 10) / ((s - 0.0005)(s + 0.0001)(s + 0.01)(s + 0.2)(s + 1)
    (s + 100)^2)``, ``L(0) = -100``: its published ``gm = 0.0100`` at ``omega = 0``, ``pm = -14.5640`` deg at
    ``wgc = 0.0022`` (four digits, as published)."""
    roots_num, roots_den = [-0.02, -0.05, -5.0, -10.0], [0.0005, -0.0001, -0.01, -0.2, -1.0, -100.0, -100.0]
    L = ddesys.tf(0.002 * np.poly(roots_num), np.poly(roots_den))
    gm, pm, wpc, wgc = ddesys.margin(L)
    name = "python-control margin_test example21"
    return [_row(name, "gm at omega = 0 vs 1 / |L(0)| = 0.01", [gm, wpc], [0.01, 0.0], 1e-12),
            _row(name, "pm / 100 deg, wgc vs published -14.5640, 0.0022 (4 digits)", [pm / 100, wgc],
                 [-14.5640 / 100, 0.0022], 1e-4)]


def vyhlidal_zitek_system():
    """QPmR's neutral benchmark (Vyhlidal & Zitek, IEEE TAC 54(1), 2009; the qpmr package's
    ``vyhlidal2014qpmr_03``): ``h(s) = s^4 + 0.2 s^3 + 5 s + 2.1 + (0.5 s^4 - 2.1 s) e^{-1.5 s} + (0.3 s^4 +
    3.2 s^2) e^{-2.2 s} + 1.2 s^2 e^{-4.3 s} + 3 e^{-6.3 s}`` realized in companion form.

    Returns
    -------
    A, Ad, H, tau, h
        The neutral system's matrices (``(4, 4)``, ``(4, 4, 4)``, ``(4, 4, 4)``, 4 delays) and the
        quasi-polynomial ``h`` in mpmath, its coefficients the float64 values the system holds.
    """
    tau = [1.5, 2.2, 4.3, 6.3]
    A = np.zeros((4, 4))
    A[0, 1] = A[1, 2] = A[2, 3] = 1.0
    A[3] = [-2.1, -5.0, 0.0, -0.2]
    Ad = np.zeros((4, 4, 4))
    Ad[0, 3, 1], Ad[1, 3, 2], Ad[2, 3, 2], Ad[3, 3, 0] = 2.1, -3.2, -1.2, -3.0
    H = np.zeros((4, 4, 4))
    H[0, 3, 3], H[1, 3, 3] = -0.5, -0.3

    def h(s):
        c = {k: mp.mpf(float(k)) for k in ("0.2", "2.1", "0.5", "0.3", "3.2", "1.2", "1.5", "2.2", "4.3", "6.3")}
        e = lambda t: mp.exp(-c[t] * s)                                 # noqa: E731
        return (s ** 4 + c["0.2"] * s ** 3 + 5 * s + c["2.1"] + (c["0.5"] * s ** 4 - c["2.1"] * s) * e("1.5")
                + (c["0.3"] * s ** 4 + c["3.2"] * s ** 2) * e("2.2") + c["1.2"] * s ** 2 * e("4.3") + 3 * e("6.3"))
    return A, Ad, H, tau, h


def vyhlidal_zitek_neutral():
    """The Vyhlidal-Zitek neutral benchmark (:func:`vyhlidal_zitek_system`): the spectral abscissa chosen
    without a region, against mpmath ``findroot`` on the quasi-polynomial from the reported rightmost root."""
    A, Ad, H, tau, h = vyhlidal_zitek_system()
    r = ddesys.NeutralStateSpace(A, Ad, H, tau).spectral_abscissa(detail=True)
    mp.mp.dps = 30
    z = complex(r.rightmost)
    ref = complex(mp.findroot(h, mp.mpc(z.real + 1e-3, z.imag)))
    name = "neutral benchmark, Vyhlidal & Zitek 2009 (QPmR)"
    return [_row(name, "spectral abscissa (no region given): rightmost root vs mpmath", [r.value, z],
                 [ref.real, ref], 1e-9)]


PARTS = (dead_time_loop, neutral_tds_control, stiff_discrete, nlevp_time_delay, mid_sixfold, hidden_nilpotent,
         stability_at_the_edge, wood_berry, biproper_dead_time_loop, unstable_fopdt_loop, python_control_example21,
         vyhlidal_zitek_neutral)

__all__ = ["PARTS", "biproper_dead_time_loop", "dead_time_loop", "hidden_nilpotent", "mid_sixfold",
           "neutral_tds_control", "nlevp_time_delay", "python_control_example21", "stability_at_the_edge",
           "stiff_discrete", "unstable_fopdt_loop", "vyhlidal_zitek_neutral", "vyhlidal_zitek_system",
           "wood_berry"]
