"""Check 8: matrix delay systems (docs/theory.md §9): :class:`ddesys.DelayStateSpace` against references
computed here without ddesys: Lambert W, closed-form crossings and H2 norms, a lifted companion matrix,
an independent method-of-steps integration (SciPy DOP853), and the diagonal classes' exact formulas."""
from __future__ import annotations

import numpy as np
from scipy.integrate import solve_ivp
from scipy.linalg import expm
from scipy.special import lambertw

import ddesys

from .published import PARTS as PUBLISHED


def _order(z):
    z = np.asarray(z, dtype=complex)
    return z[np.lexsort((z.imag, np.round(z.real, 8)))]


def _row(problem, quantity, value, reference, bound):
    err = float(np.max(np.abs(np.asarray(value) - np.asarray(reference)) / np.maximum(1.0, np.abs(reference))))
    return dict(problem=problem, quantity=quantity, error=err, bound=bound, passed=bool(err <= bound))


def _lambert_rightmost(a, b, tau, branches=range(-6, 7)):
    """Roots of s = a + b e^{-s tau} (Lambert W branches), sorted by descending real part."""
    r = np.array([a + lambertw(b * tau * np.exp(-a * tau), k) / tau for k in branches])
    return r[np.argsort(-r.real, kind="stable")]


def _scalar_roots():
    rows = []
    for a, b, tau in ((0.0, -1.0, 1.0), (-0.5 + 2j, 0.8 - 0.3j, 2.0), (-1.0, -2.0, 0.7)):
        ref = _lambert_rightmost(a, b, tau)
        ref = ref[ref.real >= ref[0].real - 1.0]
        got = ddesys.DelayStateSpace([[a]], [[b]], tau).roots(re_min=float(ref[-1].real) - 1e-3)
        ok = got.certified and got.roots.size == ref.size
        rows.append(_row(f"scalar s = {a} + {b} e^(-s {tau})", f"{ref.size} rightmost roots vs Lambert W",
                         _order(got.roots) if ok else np.full(ref.size, np.inf), _order(ref), 1e-10))
    return rows


def _nilpotent():
    rows = []
    A = np.array([[-1.0, 0.3], [0.0, -2.0]])
    for tau in (10.0, 50.0):
        got = ddesys.DelayStateSpace(A, [[0.0, 1.0], [0.0, 0.0]], tau).roots(re_min=-10.0)
        ok = got.certified and got.roots.size == 2
        rows.append(_row(f"nilpotent coupling, tau = {tau}", "only the roots of A (no spurious one), certified",
                         np.sort_complex(got.roots) if ok else [np.inf, np.inf], [-2.0, -1.0], 1e-12))
    return rows


def _crossings():
    rows = []
    sys = ddesys.DelayStateSpace([[0.0]], [[-1.0]], 1.0)                  # x' = -x(t - tau)
    rows.append(_row("x' = -x(t - tau)", "delay margin vs pi/2", sys.delay_margin(), np.pi / 2, 1e-8))
    a, b = -1.0, -2.0                                                    # |b| > |a|: one frequency
    w = np.sqrt(b * b - a * a)
    ref = [(np.arccos(-a / b) + 2 * np.pi * k) / w for k in range(3)]
    c = ddesys.DelayStateSpace([[a]], [[b]], 1.0).crossings(ref[-1] + 0.1)
    got = [x.tau for x in c] if len(c) == 3 and all(x.direction == 1 for x in c) else [np.inf] * 3
    rows.append(_row("x' = -x - 2 x(t - tau)", "crossing delays (arccos(-a/b) + 2 pi k)/w, all +1", got, ref, 1e-8))
    # triangular 2 x 2: the crossings are those of its diagonal scalar equations
    sysm = ddesys.DelayStateSpace([[a, 5.0], [0.0, -0.5]], [[b, -1.0], [0.0, -1.0]], 1.0)
    w2 = np.sqrt(1.0 - 0.25)
    ref2 = min(np.arccos(-0.5) / w2, ref[0])
    rows.append(_row("triangular 2 x 2", "delay margin vs its scalar factors'", sysm.delay_margin(), ref2, 1e-8))
    return rows


def _h2_scalar(a, b, tau):
    """H2^2 of x' = a x + b x(t - tau) + u, y = x: the delay Lyapunov function's 2 x 2 boundary problem
    V' = a V + b W, W' = -b V - a W on [0, tau], W(0) = V(tau), 2 a V(0) + 2 b W(0) = -1."""
    E = expm(np.array([[a, b], [-b, -a]]) * tau)
    M = np.array([[E[0, 0], E[0, 1] - 1.0], [2 * a, 2 * b]])
    V0, _ = np.linalg.solve(M, [0.0, -1.0])
    return V0


def _h2():
    rows = []
    for a, b, tau in ((-1.0, 0.5, 1.0), (-2.0, -1.5, 0.4)):
        got = ddesys.DelayStateSpace([[a]], [[b]], tau, B=[1.0], C=[1.0]).h2_norm()
        rows.append(_row(f"x' = {a} x + {b} x(t - {tau}) + u", "H2 norm vs delay-Lyapunov closed form",
                         got, np.sqrt(_h2_scalar(a, b, tau)), 1e-6))
    return rows


def _simulation():
    """Two states, one delay: the method of steps, piece by piece on [j tau, (j+1) tau] (SciPy DOP853)."""
    A = np.array([[-1.0, 0.5], [-0.3, -0.8]])
    A1 = np.array([[0.2, -0.4], [0.6, -0.1]])
    B = np.array([1.0, 0.5])
    tau, J, n = 1.0, 4, 2
    u = np.cos
    pieces, start = [], np.zeros(n)
    for j in range(J):
        def rhs(r, x, j=j):
            past = pieces[j - 1].sol(r) if j else np.zeros(n)
            return A @ x + A1 @ past + B * u(r + j * tau)
        piece = solve_ivp(rhs, (0, tau), start, method="DOP853", rtol=1e-12, atol=1e-14, dense_output=True)
        pieces.append(piece)
        start = piece.y[:, -1]
    t = np.linspace(0, J * tau - 1e-9, 41)
    idx = np.minimum((t // tau).astype(int), J - 1)
    ref = np.stack([pieces[j].sol(ti - j * tau) for j, ti in zip(idx, t)], 1)
    sys = ddesys.DelayStateSpace(A, A1, tau, B=B, C=np.eye(2))
    got = sys.simulate(lambda tt: u(tt)[None], t, h=tau / 200).y
    return [_row("2 states, 1 delay, u = cos t", "simulate vs method of steps (DOP853, rtol 1e-12)", got, ref, 1e-8)]


def _diagonal():
    """A diagonal DelaySystem and its state-space form: roots (Lambert W), stability, frequency response."""
    rng = np.random.default_rng(0)
    a = -rng.uniform(0.2, 1.0, 3) + 1j * rng.uniform(-3, 3, 3)
    ad = 0.6 * rng.standard_normal(3) * np.exp(1j * rng.uniform(0, 2 * np.pi, 3))
    diag = ddesys.DelaySystem(a=a, ad=ad, b=np.ones(3), c=rng.standard_normal(3) + 0j, tau=1.3)
    ss = diag.to_statespace()
    right = max(_lambert_rightmost(x, y, 1.3)[0].real for x, y in zip(a, ad))
    omega = np.linspace(0, 5, 11)
    return [_row("diagonal DelaySystem -> DelayStateSpace", "spectral abscissa vs Lambert W",
                 ss.spectral_abscissa(), right, 1e-10),
            _row("diagonal DelaySystem -> DelayStateSpace", "frequency response vs DelaySystem.freqresp",
                 ss.freqresp(omega)[0, 0], diag.freqresp(omega), 1e-12),
            dict(problem="diagonal DelaySystem -> DelayStateSpace", quantity="is_stable agrees",
                 error=0.0 if bool(ss.is_stable()) == bool(diag.is_stable()) else 1.0, bound=0.0,
                 passed=bool(ss.is_stable()) == bool(diag.is_stable()))]


def _discrete():
    """ZOH discretization: exact discrete stability vs the eigenvalues of the lifted companion matrix."""
    A = np.array([[-0.5, 1.0, 0.0], [-1.0, -0.5, 0.2], [0.0, 0.3, -1.0]])
    Ad = np.array([[0.1, 0.0, 0.3], [0.0, -0.4, 0.0], [0.2, 0.0, 0.1]])
    sd = ddesys.DelayStateSpace(A, Ad, 0.73).discretize(0.1)             # delay 7.3 steps
    n, k, al = 3, 7, 0.3
    Phi, Gam = expm(A * 0.1), None
    aug = expm(np.block([[A, np.eye(n)], [np.zeros((n, n)), np.zeros((n, n))]]) * 0.1)
    Gam = aug[:n, n:]
    G = Gam @ Ad
    K = k + 1                                                            # x_t depends on x_{t-1} .. x_{t-K}
    comp = np.zeros((n * K, n * K))
    comp[:n, :n] = Phi
    comp[:n, (k - 1) * n:k * n] += (1 - al) * G
    comp[:n, k * n:(k + 1) * n] += al * G
    comp[n:, :-n] = np.eye(n * (K - 1))
    rho = float(np.abs(np.linalg.eigvals(comp)).max())
    return [_row("3 states, delay 7.3 steps (ZOH, dt 0.1)", "spectral radius vs lifted companion eigenvalues",
                 sd.spectral_radius(), rho, 1e-10),
            dict(problem="3 states, delay 7.3 steps (ZOH, dt 0.1)", quantity="exact is_stable agrees",
                 error=0.0 if bool(sd.is_stable()) == (rho < 1) else 1.0, bound=0.0,
                 passed=bool(sd.is_stable()) == (rho < 1))]


PARTS = (_scalar_roots, _nilpotent, _crossings, _h2, _simulation, _diagonal, _discrete) + PUBLISHED


def check_dss(cfg, plot_dir, progress):
    """Roots, crossings, norms, simulation, the diagonal link and the discretization of matrix systems."""
    rows = []
    for part in PARTS:
        rows += part()
        progress()
    return dict(name="Matrix delay systems (DelayStateSpace) vs independent references", passed=all(
        r["passed"] for r in rows), rows=rows, plots=[],
        criterion="roots of simple roots within 1e-10 relative of Lambert W and certified, no spurious root "
                  "(nilpotent coupling at tau 10 and 50); crossings and delay margins within 1e-8 of closed "
                  "forms; H2 within 1e-6 of the delay-Lyapunov closed form; simulation within 1e-8 of an "
                  "independent DOP853 method of steps; the diagonal classes' roots to 1e-10 and responses "
                  "to 1e-12; the discrete spectral radius within 1e-10 of the lifted companion matrix; published "
                  "problems (ddesys.verification.published, each with its source) within their bounds",
        setup="scalar real and complex DDEs, a nilpotent coupling, scalar and triangular crossing problems, "
              "scalar H2 problems, a 2-state simulation with u = cos t, a 3-mode diagonal system, a 3-state "
              "ZOH discretization with a fractional delay; published problems: the first-order plant with dead "
              "time (margins, PI loop), TDS-CONTROL's neutral eq. (2.20), a stiff discrete system with a "
              "singular longest-lag matrix, the Wood-Berry column under BLT PI control (a dead time per "
              "entry), a biproper loop with dead time (a delay-difference closed loop), an unstable plant with "
              "dead time whose static gain is a phase crossover, python-control's margin example 21, the "
              "Vyhlidal-Zitek neutral benchmark")
