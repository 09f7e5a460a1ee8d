"""One analysis API for the diagonal classes (issue 19): ``DelaySystem`` and ``DiscreteDelaySystem`` as
``DelayLTI``: ``dt``, exact-by-default ``is_stable``, ``sufficient_margin``, ``transfer``/``sys(x)``,
``frequency_response``, ``contour``/``states``, immutability, the old forms refused, and the checks
of ``to_statespace`` that need no matrix class.

References are independent of the code under test: closed forms (Hayes 1950; Levin & May 1976), roots
by ``numpy.roots`` of the characteristic polynomial, a brute-force recurrence, a dense linear solve of
the characteristic matrix, and an argument-principle root count written here.
"""
import warnings

import numpy as np
import pytest

import ddesys
from ddesys import DelaySystem, DelayTap, DiscreteDelaySystem
from ddesys._pairs import pair_matrices


# ----------------------------------------------------------------------------------- references
def loop_recurrence(lam, mu, bbar, c, delay, d, x):
    """Brute force: h_t = lam h_{t-1} + mu((1-a) h_{t-k} + a h_{t-k-1}) + bbar x_t; y = 2 Re(c.h) + d x."""
    k, a = int(np.floor(delay)), delay - np.floor(delay)
    lam, mu, bbar, c = (np.asarray(v, complex) for v in (lam, mu, bbar, c))
    L = len(x)
    h = np.zeros((L, lam.size), complex)
    at = lambda t: h[t] if t >= 0 else 0.0  # noqa: E731
    for t in range(L):
        h[t] = lam * at(t - 1) + mu * ((1 - a) * at(t - k) + a * at(t - k - 1)) + bbar * x[t]
    return 2 * np.real(h @ c) + d * np.asarray(x), h.T


def char_poly_radius(lam, mu, delay):
    """Largest root modulus of P(z) = z^(k+1) - lam z^k - mu ((1 - a) z + a), by numpy.roots."""
    k, a = int(np.floor(delay)), delay - np.floor(delay)
    co = np.zeros(k + 2, complex)
    co[0], co[1] = 1, -lam
    co[-2] -= mu * (1 - a)
    co[-1] -= mu * a
    return np.abs(np.roots(co)).max()


def rhp_root_count(a, ad, tau, n=4000):
    """Zeros of f(s) = s - a - ad e^{-s tau} with Re s >= 0, by the argument principle on a rectangle.

    A root with Re s >= 0 has |s - a| = |ad e^{-s tau}| <= |ad|, so the rectangle [0, Re a + |ad| + 1] x
    [Im a - |ad| - 1, Im a + |ad| + 1] holds all of them. Returns (count, min |f| on the imaginary edge)."""
    x1 = max(a.real + abs(ad), 0.0) + 1.0
    y0, y1 = a.imag - abs(ad) - 1.0, a.imag + abs(ad) + 1.0
    t = np.linspace(0, 1, n, endpoint=False)
    path = np.concatenate([x1 * t + 1j * y0, x1 + 1j * (y0 + (y1 - y0) * t),
                           x1 * (1 - t) + 1j * y1, 1j * (y1 - (y1 - y0) * t)])
    f = path - a - ad * np.exp(-path * tau)
    edge = float(np.abs(f[3 * n:]).min())
    dphi = np.angle(np.roll(f, -1) / f)
    if edge < 1e-3 or np.abs(dphi).max() > 0.5:          # a root on (or too near) the axis: no count
        return None, edge
    return int(round(dphi.sum() / (2 * np.pi))), edge


def dense_transfer(A, Ad, tau, B, C, D, s):
    """C (s I - A - Ad e^{-s tau})^{-1} B + D by a dense solve."""
    n = A.shape[0]
    return np.array([(C @ np.linalg.solve(z * np.eye(n) - A - Ad[0] * np.exp(-z * tau), B) + D)[0, 0]
                     for z in s])


def chan(params, i):
    """Channel ``i`` of a 2-channel parameter dict: mode arrays (2, N2) broadcast, per-channel scalars."""
    modes = [k for k in params if k in ("a", "ad", "b", "c", "lam", "mu", "bbar")]
    full = np.broadcast_arrays(*(np.asarray(params[k], complex) for k in modes))
    out = {k: v[i] for k, v in zip(modes, full)}
    for k in params:
        if k not in modes:
            out[k] = float(np.broadcast_to(np.asarray(params[k], float), (2,))[i])
    return out


CONT = dict(a=[[-1.0 + 2j, -0.3 + 0.5j], [-0.5, -2.0]], ad=[[0.5 - 0.2j, 0.1j], [0.2, -0.3]],
            b=[1.0, 0.5 + 0.5j], c=[0.7 - 0.1j, 0.2 + 0.3j], tau=[1.3, 0.7], d=[0.25, -0.1])
DISC = dict(lam=[[0.8 * np.exp(0.4j), 0.5], [0.3j, -0.6]], mu=[[0.1, -0.05j], [0.2, 0.1]],
            bbar=[1.0, 0.5 - 0.5j], c=[0.5, 0.25 + 0.1j], delay=[3.5, 7.0], d=[0.2, 0.0])


# ----------------------------------------------------------------------------------- dt
def test_dt_continuous_is_zero_and_discretize_passes_a_scalar_dt():
    sc = DelaySystem(**CONT)
    assert sc.dt == 0 and sc.isctime() and not sc.isdtime()
    sd = sc.discretize(0.05)
    assert sd.dt == 0.05 and sd.isdtime(strict=True) and not sd.isctime()
    np.testing.assert_allclose(sd.delay, np.array(CONT["tau"]) / 0.05, rtol=1e-15)
    assert "dt=0.05" in repr(sd)
    assert sc.discretize(0.05, method="euler").dt == 0.05
    per_channel = sc.discretize(np.array([0.05, 0.1]))       # no single step: dt unspecified
    assert per_channel.dt is True and per_channel.isdtime() and not per_channel.isdtime(strict=True)
    assert DiscreteDelaySystem(**DISC).dt is True


@pytest.mark.parametrize("dt, err", [(0, ValueError), (-0.1, ValueError), (np.nan, ValueError),
                                     (np.inf, ValueError), (False, ValueError), ("0.1", TypeError),
                                     ([0.1, 0.2], TypeError), (1j, TypeError), (None, TypeError)])
def test_dt_is_validated(dt, err):
    with pytest.raises(err, match="dt"):
        DiscreteDelaySystem(**DISC, dt=dt)


def test_frequency_response_uses_the_step_of_a_numeric_dt():
    """With dt numeric, omega is in rad per time unit: K(e^{i omega dt}), against the z-transform of
    the brute-force impulse response (a stable channel, 600 steps: the tail is below 1e-20)."""
    p = chan(DISC, 0)
    dt = 0.05
    sd = DiscreteDelaySystem(**p, dt=dt)
    x = np.zeros(600); x[0] = 1
    h, _ = loop_recurrence(p["lam"], p["mu"], p["bbar"], p["c"], p["delay"], p["d"], x)
    omega = np.array([0.0, 3.0, 20.0, np.pi / dt])
    fr = sd.frequency_response(omega)
    w, resp = fr                                            # unpacks as (omega, response)
    ref = np.exp(-1j * np.outer(omega * dt, np.arange(600))) @ h
    np.testing.assert_array_equal(w, omega)
    np.testing.assert_allclose(resp, ref, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(fr.magnitude, np.abs(ref), rtol=1e-12, atol=1e-13)
    # dt unspecified: radians per step
    _, per_step = DiscreteDelaySystem(**p).frequency_response(omega * dt)
    np.testing.assert_allclose(per_step, ref, rtol=1e-12, atol=1e-13)


def test_continuous_frequency_response_and_call_are_the_transfer_function():
    sc = DelaySystem(**CONT)
    omega = np.array([0.0, 0.5, 3.0, 40.0])
    w, resp = sc.frequency_response(omega)
    s = np.array([0.3 + 1.0j, -0.2 - 2.0j, 1.5])
    for i in range(2):
        A, Ad, B, C, D = pair_matrices(*(chan(CONT, i)[n] for n in ("a", "ad", "b", "c", "d")))
        tau = CONT["tau"][i]
        np.testing.assert_allclose(resp[i], dense_transfer(A, Ad, tau, B, C, D, 1j * omega), rtol=1e-12)
        np.testing.assert_allclose(sc.transfer(s)[i], dense_transfer(A, Ad, tau, B, C, D, s), rtol=1e-12)
    np.testing.assert_array_equal(sc(s), sc.transfer(s))
    np.testing.assert_array_equal(sc.freqresp(omega), resp)
    real_axis = sc.transfer([0.0, 2.0])                     # real output: G real on the real axis
    assert np.abs(real_axis.imag).max() <= 1e-15 * np.abs(real_axis).max()
    with pytest.raises(ValueError, match="s"):
        sc.transfer([np.nan])


def test_discrete_call_is_transfer():
    sd = DiscreteDelaySystem(**DISC)
    z = np.array([1.2, 0.9j + 0.5, -1.1 - 0.3j])
    np.testing.assert_array_equal(sd(z), sd.transfer(z))
    p = chan(DISC, 1)     # z-transform of the brute-force impulse response
    x = np.zeros(400); x[0] = 1
    h, _ = loop_recurrence(p["lam"], p["mu"], p["bbar"], p["c"], p["delay"], p["d"], x)
    ref = np.array([np.sum(h * zz ** -np.arange(400.0)) for zz in z])
    np.testing.assert_allclose(sd(z)[1], ref, rtol=1e-12)


# ----------------------------------------------------------------------------------- stability
@pytest.mark.parametrize("tau, stable", [(1.0, True), (1.15, True), (1.27, False), (2.0, False)])
def test_continuous_is_stable_is_exact_by_default(tau, stable):
    """x' = -x - 2 x(t - tau): stable iff tau < arccos(-a/b) / sqrt(b^2 - a^2) = (2 pi/3)/sqrt(3) = 1.2092
    (a = -1, b = -2; Hayes 1950, J. London Math. Soc. 25, 226-232). |b| > -a: the delay-independent
    sufficient test cannot certify it at any tau."""
    assert abs(2 * np.pi / 3 / np.sqrt(3) - 1.2092) < 1e-4
    s = DelaySystem(a=[-1.0], ad=[-2.0], b=[1.0], c=[1.0], tau=tau)
    assert bool(s.is_stable()) == stable
    assert bool(s.is_stable(method="exact")) == stable
    assert not s.is_stable(method="sufficient")
    np.testing.assert_allclose(s.sufficient_margin(), [1.0 - 2.0])


@pytest.mark.parametrize("k, frac, stable", [(3, 0.8, True), (3, 1.05, False), (5, 0.9, True),
                                             (5, 1.1, False)])
def test_discrete_is_stable_is_exact_by_default(k, frac, stable):
    """Levin & May (1976): h_t = h_{t-1} - q h_{t-k} is stable iff 0 < q < 2 cos((k-1) pi / (2k-1))
    (docs/theory.md §3.4); |lam| + |mu| = 1 + q > 1, so the sufficient test never certifies it."""
    q = frac * 2 * np.cos((k - 1) * np.pi / (2 * k - 1))
    assert (char_poly_radius(1.0, -q, k) < 1) == stable     # numpy.roots agrees with the closed form
    s = DiscreteDelaySystem(lam=[1.0], mu=[-q], bbar=[1.0], c=[1.0], delay=float(k))
    assert bool(s.is_stable()) == stable
    assert not s.is_stable(method="sufficient")
    np.testing.assert_allclose(s.sufficient_margin(), [-q], rtol=1e-15)
    with pytest.raises(ValueError, match="method"):
        s.is_stable(method="roots")
    with pytest.raises(TypeError, match="sufficient"):
        s.is_stable(method="sufficient", max_bytes=2**20)


def test_continuous_sufficient_implies_exact_on_random_modes():
    """The delay-independent test |ad| < -Re(a) against the Lambert-W exact test and an independent
    argument-principle count of right-half-plane roots, on 300 random complex modes."""
    rng = np.random.default_rng(19)
    n = 300
    a = -rng.uniform(0, 2, n) + 1j * rng.uniform(-3, 3, n)
    ad = rng.uniform(0, 2.5, n) * np.exp(2j * np.pi * rng.uniform(size=n))
    tau = rng.uniform(0.2, 3.0, n)
    s = DelaySystem(a=a[:, None], ad=ad[:, None], b=np.ones((n, 1)), c=np.ones((n, 1)), tau=tau)
    suff, exact = s.is_stable(method="sufficient"), s.is_stable()
    assert suff.shape == exact.shape == (n,)
    np.testing.assert_array_equal(suff, abs(ad) < -a.real)
    assert np.all(exact[suff]) and 0.2 < suff.mean() < 0.8 and np.any(exact & ~suff)
    checked = 0
    for i in range(n):
        count, edge = rhp_root_count(a[i], ad[i], tau[i])
        if count is not None:                              # no root on or near the imaginary axis
            assert (count == 0) == exact[i], i
            checked += 1
    assert checked > 0.9 * n


def test_sufficient_margin_function_and_method():
    lam, mu = np.array([0.5, 0.3j, -0.9]), np.array([0.25, -0.7, 0.2j])
    np.testing.assert_allclose(ddesys.sufficient_margin(lam, mu), [0.25, 0.0, -0.1], atol=1e-15)
    sd = DiscreteDelaySystem(**DISC)
    np.testing.assert_allclose(sd.sufficient_margin(), 1 - np.abs(DISC["lam"]) - np.abs(DISC["mu"]), rtol=1e-15)
    sc = DelaySystem(**CONT)
    np.testing.assert_allclose(sc.sufficient_margin(), -np.real(CONT["a"]) - np.abs(CONT["ad"]), rtol=1e-15)


# ----------------------------------------------------------------------------------- old forms
def test_old_forms_are_refused():
    """The forms renamed before any release are gone, not kept as aliases: Python's own TypeError for a
    removed keyword, AttributeError for a removed name, ValueError for a bool where ``method`` is."""
    sd, sc = DiscreteDelaySystem(**DISC), DelaySystem(**CONT)
    x, t = np.random.default_rng(0).standard_normal((2, 40)), np.linspace(0, 3, 7)
    for sys_ in (sd, sc):
        with pytest.raises(TypeError, match="exact"):
            sys_.is_stable(exact=True)
        with pytest.raises(ValueError, match="method must be one of"):
            sys_.is_stable(False)
    assert not hasattr(sd, "stability_margin") and not hasattr(ddesys, "stability_margin")
    assert "stability_margin" not in dir(ddesys.stability)
    with pytest.raises(TypeError, match="return_states"):
        sd.simulate(x, return_states=True)
    with pytest.raises(TypeError, match="return_contour"):
        sd.kernel(32, return_contour=True)
    with pytest.raises(TypeError, match="return_states"):
        sc.simulate(np.ones_like, t, return_states=True)


def test_new_forms_raise_no_future_warning():
    sd, sc = DiscreteDelaySystem(**DISC, dt=0.1), DelaySystem(**CONT)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sd.is_stable(); sd.is_stable(method="sufficient"); sd.sufficient_margin()
        sd.kernel(16); sd.contour(16); sd.impulse(16); sd.simulate(np.ones(16)); sd.states(np.ones(16))
        sd.kernel(16, method="recurrence"); sd.frequency_response([0.1]); sd(np.array([1.5]))
        sc.is_stable(); sc.is_stable(method="sufficient"); sc.sufficient_margin(); sc.discretize(0.1)
        sc.simulate(np.ones_like, [0.0, 1.0]); sc.states(np.ones_like, [0.0, 1.0]); sc.frequency_response([1.0])


def test_contour_is_the_kernels_and_refuses_an_unstable_system():
    sd = DiscreteDelaySystem(**DISC)
    ct = sd.contour(64, eps=1e-6, M=256)
    assert ct.M == 256 and ct.rho.shape == (2,)
    np.testing.assert_allclose(ct.eps, 1e-6, rtol=1e-9)
    ct32 = sd.contour(64, compute_dtype=np.float32)
    assert ct32.M >= 128 and np.all(ct32.predicted_error >= ct.predicted_error * 0)
    unstable = DiscreteDelaySystem(lam=[1.01], mu=[0.1], bbar=[1.0], c=[1.0], delay=2.0)
    for call in (lambda: unstable.contour(8), lambda: unstable.kernel(8)):
        with pytest.raises(ValueError, match="unstable.*recurrence"):
            call()


# ----------------------------------------------------------------------------------- states
def test_discrete_states_against_brute_force():
    sd = DiscreteDelaySystem(**DISC)
    x = np.random.default_rng(1).standard_normal((3, 2, 50))         # batch (3,) broadcasts with (2,)
    h = sd.states(x)
    assert h.shape == (3, 2, 2, 50) and np.iscomplexobj(h)
    for i in range(2):
        p = chan(DISC, i)
        y_ref, h_ref = loop_recurrence(p["lam"], p["mu"], p["bbar"], p["c"], p["delay"], p["d"], x[0, i])
        np.testing.assert_allclose(h[0, i], h_ref, rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(sd.simulate(x)[0, i], y_ref, rtol=1e-13, atol=1e-13)


def test_continuous_states_against_method_of_steps_by_hand():
    """Step input, t in [0, 2 tau]: h = b (e^{at} - 1)/a, plus (ad b / a)(u e^{au} - (e^{au} - 1)/a) after
    u = t - tau > 0 (the delayed term of the first interval, integrated by hand)."""
    a, ad, b, tau = -0.7 + 1.1j, 0.4 - 0.3j, 1.0 + 0.5j, 1.2
    s = DelaySystem(a=[a], ad=[ad], b=[b], c=[1.0], tau=tau)
    t = np.linspace(0, 2 * tau, 25)
    u = np.clip(t - tau, 0, None)
    ref = b * (np.exp(a * t) - 1) / a + (ad * b / a) * (u * np.exp(a * u) - (np.exp(a * u) - 1) / a)
    h = s.states(np.ones_like, t)
    assert h.shape == (1, t.size)
    np.testing.assert_allclose(h[0], ref, rtol=0, atol=1e-9)
    np.testing.assert_allclose(s.simulate(np.ones_like, t), 2 * ref.real, rtol=0, atol=2e-9)


# ----------------------------------------------------------------------------------- immutability
def test_systems_are_immutable_and_recurrence_kernel_leaves_d_alone():
    sd = DiscreteDelaySystem(**DISC)
    sc = DelaySystem(**CONT)
    for sys_, names in ((sd, ("d", "lam", "delay", "k", "tap", "dt", "new_name")),
                        (sc, ("d", "a", "tau", "dt", "new_name"))):
        for name in names:
            with pytest.raises(AttributeError, match="immutable"):
                setattr(sys_, name, 0.0)
    for arr in (sd.lam, sd.d, sd.k, sd.alpha, sc.a, sc.tau):
        with pytest.raises(ValueError, match="read-only"):
            arr[...] = 0
    d_before = sd.d
    K = sd.kernel(60, method="recurrence")                  # used to rebind self.d to zeros and back
    assert sd.d is d_before
    np.testing.assert_array_equal(sd.d, DISC["d"])
    x = np.zeros(60); x[0] = 1
    for i in range(2):
        p = chan(DISC, i)
        ref, _ = loop_recurrence(p["lam"], p["mu"], p["bbar"], p["c"], p["delay"], 0.0, x)
        np.testing.assert_allclose(K[i], ref, rtol=1e-13, atol=1e-14)
        np.testing.assert_allclose(sd.impulse(60, method="recurrence")[i, 0], ref[0] + p["d"], rtol=1e-14)
    first = sd.is_stable()                                 # the exact answer is cached, not set
    assert "stable_modes" in sd._cache and np.array_equal(sd.is_stable(), first)


def test_recurrence_kernel_of_a_tapped_frozen_system():
    e, s_tap = np.array([0.5]), np.array([2.25])
    p = chan(DISC, 0)
    sd = DiscreteDelaySystem(**{k: np.atleast_1d(v) for k, v in p.items()}) + DelayTap(e, s_tap)
    K = sd.kernel(12, method="recurrence")
    x = np.zeros(12); x[0] = 1
    ref, _ = loop_recurrence(p["lam"], p["mu"], p["bbar"], p["c"], p["delay"], 0.0, x)
    ref[2] += 0.5 * 0.75                                   # linear-interpolation tap at 2.25 steps
    ref[3] += 0.5 * 0.25
    np.testing.assert_allclose(K[0], ref, rtol=1e-13, atol=1e-14)


# ----------------------------------------------------------------------------------- conversion
def test_to_statespace_refuses_a_tap_and_bad_indices():
    p = {k: np.asarray(v) for k, v in DISC.items()}
    tapped = DiscreteDelaySystem(**p) + DelayTap(np.array([0.5, 0.1]), np.array([2.0, 1.0]))
    with pytest.raises(ValueError, match="tap"):
        tapped.to_statespace(0)
    sd, sc = DiscreteDelaySystem(**DISC), DelaySystem(**CONT)
    for sys_ in (sd, sc):
        with pytest.raises(ValueError, match="index is required"):
            sys_.to_statespace()
        for bad, err in ((2, ValueError), (-3, ValueError), ((0, 0), ValueError), (1.0, TypeError),
                         ("0", TypeError), (True, TypeError)):
            with pytest.raises(err, match="index"):
                sys_.to_statespace(bad)


def test_pair_matrices_reproduce_the_diagonal_transfer():
    """The n = 2 N2 matrices of to_statespace: their dense C (sI - A - Ad e^{-s tau})^{-1} B + D is the
    diagonal channel's G(s) (continuous), and the same layout with z gives K(z) (discrete)."""
    sc = DelaySystem(**CONT)
    s = np.array([0.2 + 0.7j, -0.1 + 3j])
    A, Ad, B, C, D = pair_matrices(*(chan(CONT, 0)[n] for n in ("a", "ad", "b", "c", "d")))
    assert A.shape == (4, 4) and Ad.shape == (1, 4, 4) and B.shape == (4, 1) and C.shape == (1, 4)
    np.testing.assert_allclose(dense_transfer(A, Ad, CONT["tau"][0], B, C, D, s), sc.transfer(s)[0], rtol=1e-12)
    sd = DiscreteDelaySystem(**DISC)
    z = np.array([1.3, 0.4 + 1.0j])
    i = 1
    Phi, G, Bd, C, D = pair_matrices(*(chan(DISC, i)[n] for n in ("lam", "mu", "bbar", "c", "d")))
    k = int(DISC["delay"][i])                              # integer delay: P(z) = I - Phi/z - G z^-k
    ref = [(C @ np.linalg.solve(np.eye(4) - Phi / zz - G[0] * zz ** -k, Bd) + D)[0, 0] for zz in z]
    np.testing.assert_allclose(sd.transfer(z)[i], ref, rtol=1e-12)
