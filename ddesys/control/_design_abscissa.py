"""Spectral-abscissa design: the abscissa's gradient from the rightmost root and its minimization
(:func:`stabilize`), with the result types shared by every design (see :mod:`ddesys.control.design`).

Neutral loops. A closed loop with a neutral part (a :class:`~ddesys.NeutralStateSpace`, or a
:class:`~ddesys.DelayIOSystem` whose delay channels close a loop: a biproper controller around a plant
with dead time) can be stable for its nominal delays and lose stability under arbitrarily small changes
of them. Its robust (strong) spectral abscissa is ``max(C_D, alpha)``: ``C_D`` the supremum of the
difference operator's essential bound over small delay changes (``C_D < 0`` iff ``gamma0 < 1``), and
``alpha`` the rightmost characteristic root (Michiels, Vyhlidal, Zitek, Nijmeijer and Henrion, SIAM J.
Control Optim. 48 (2009); TDS-CONTROL's ``tds_strong_stabilization`` minimizes the same quantity).
:func:`stabilize` minimizes it for such loops (:func:`strong_minimize`, with the same nonsmooth minimizer
and gradients by central differences: the objective is a maximum of a root's real part and of a quantity
of the difference operator alone), which gives a controller whose loop is strongly stable once the value
is negative.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ..matrix._roots_igd import single_blas_thread
from ..matrix.charmatrix import char_matrix_ds
from ._design_grad import call_system, rightmost, root_gradient, system_derivatives
from ._design_opt import minimize_nonsmooth


class AbscissaGradient(NamedTuple):
    """The spectral abscissa and its gradient: unpacks as ``value, gradient, root, active, simple``.

    Attributes
    ----------
    value : float
        ``max Re s`` (of the rightmost roots found).
    gradient : float ndarray ``(P,)``
        ``d Re s / dp`` of ``root``: the gradient where the abscissa is smooth, one of the limiting
        gradients (an element of the Clarke subdifferential) where it is not.
    root : complex
        The rightmost root used.
    active : complex ndarray ``(r,)``
        The roots whose real part is within ``active_tol (1 + |value|)`` of ``value``.
    simple : bool
        ``root`` is simple (``|u^H M'(s) v| > 1e-6 ||M'(s)||``); a multiple root has no gradient.
    """

    value: float
    gradient: np.ndarray
    root: complex
    active: np.ndarray
    simple: bool


@dataclass(frozen=True)
class DesignResult:
    """Outcome of :func:`stabilize`, :func:`hinf_design` or :func:`static_output_feedback`.

    Attributes
    ----------
    params : float ndarray ``(P,)``
        The best parameters found.
    value : float
        The objective there (spectral abscissa or Hinf norm).
    initial_value : float
        The objective at the starting parameters.
    system : DelayStateSpace
        ``system_fn(params)``.
    history : float ndarray
        The objective at each accepted iterate.
    n_iter, n_eval : int
        Iterations and objective evaluations (one root or norm computation each; gradient steps on the
        matrices only).
    success : bool
        :func:`stabilize`: the closed loop is stable (exact test) and, with a target, ``value <= target``;
        :func:`hinf_design`: a finite norm no larger than the initial one.
    message : str
        Why the minimizer stopped.
    objective : str
        ``"spectral abscissa"`` or ``"hinf norm"``.
    gain : ndarray ``(m, q)`` or None
        The static gain ``K`` (:func:`static_output_feedback` only).
    """

    params: np.ndarray
    value: float
    initial_value: float
    system: object
    history: np.ndarray
    n_iter: int
    n_eval: int
    success: bool
    message: str
    objective: str
    gain: np.ndarray | None = field(default=None)


def check_design_options(*, max_iter, max_eval, target=None, sampling=True, seed=0, method="central"):
    """Validate the options shared by the designs (:func:`stabilize`, ``hinf_design``); returns
    ``(max_iter, max_eval, target)`` as ``int, int, float or None``.

    Raises
    ------
    TypeError
        ``max_iter`` or ``max_eval`` not an integer, ``target`` not a real number, ``sampling`` not a
        bool, ``seed`` not an integer or None.
    ValueError
        ``max_iter`` or ``max_eval`` below 1, ``target`` NaN, ``method`` not ``"central"`` or ``"complex"``.
    """
    out = []
    for name, v in (("max_iter", max_iter), ("max_eval", max_eval)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be a positive integer, got {v!r}")
        if v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
        out.append(int(v))
    if target is not None:
        if isinstance(target, (bool, np.bool_, str, bytes)) or not np.isrealobj(target) or np.ndim(target):
            raise TypeError(f"target must be a real number or None, got {target!r}")
        try:
            target = float(target)
        except (TypeError, ValueError):
            raise TypeError(f"target must be a real number or None, got {target!r}") from None
        if np.isnan(target):
            raise ValueError("target must be a real number or None, got nan")
    if not isinstance(sampling, (bool, np.bool_)):
        raise TypeError(f"sampling must be True or False, got {sampling!r}")
    if seed is not None and (isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer))):
        raise TypeError(f"seed must be an integer or None, got {seed!r}")
    if not isinstance(method, str) or method not in ("central", "complex"):
        raise ValueError(f"method must be 'central' or 'complex', got {method!r}")
    return out[0], out[1], target


def params_vector(p0):
    p = np.asarray(p0)
    if p.dtype.kind not in "biuf":
        raise TypeError(f"p must hold real numbers, got dtype {p.dtype}")
    p = p.astype(float).reshape(-1)
    if p.size == 0 or not np.all(np.isfinite(p)):
        raise ValueError("p must be a non-empty vector of finite numbers")
    return p


# ------------------------------------------------------------------------------------------ gradient
def abscissa_gradient(system_fn, p, *, derivative=None, method="central", certify=False, n_grid=None,
                      active_tol=1e-6):
    """The spectral abscissa of ``system_fn(p)`` and its gradient with respect to ``p``.

    Parameters
    ----------
    system_fn : callable
        ``p (P,) -> DelayStateSpace``; the structure (sizes, number of delays) must not depend on ``p``;
        the delays may.
    p : array_like, real ``(P,)``
    derivative : callable, optional
        ``derivative(p) -> dict`` of the matrices' derivatives, keys among ``"A", "Ad", "tau", "B", "C",
        "D"`` each ``(P,) + shape`` (missing: constant). Default: differences of ``system_fn``.
    method : {"central", "complex"}
        Without ``derivative``: central differences of the matrices (exact up to rounding when they are
        affine in ``p``) or the complex step (``system_fn`` analytic in ``p``, real system, fixed delays).
    certify : bool
        Use the certified roots (:meth:`DelayStateSpace.roots`) instead of the fixed-degree
        discretization refined by Newton (faster; the default).
    n_grid : int, optional
        Chebyshev degree of the fast path (default from the matrix norms at the abscissa).
    active_tol : float
        Relative tolerance of the active set.

    Returns
    -------
    AbscissaGradient

    Raises
    ------
    TypeError
        ``system_fn(p)`` is not a DelayStateSpace; a non-real ``p``.
    ValueError
        A structure that changes with ``p``; bad ``method``.

    Notes
    -----
    Only the rightmost root is differentiated: at a point where several roots share the abscissa (not a
    conjugate pair) the abscissa is not differentiable, and the gradient returned is that of one of
    them. The cost is one root computation plus ``2 P`` calls of ``system_fn``.

    Examples
    --------
    ``x' = k x(t - 1)``: the rightmost root solves ``s e^s = k``; at ``k = -0.2`` it is real,
    ``s = W_0(-0.2)``, and ``ds/dk = s / (k (1 + s))``:

    >>> import numpy as np
    >>> from ddesys import DelayStateSpace
    >>> from ddesys.control.design import abscissa_gradient
    >>> r = abscissa_gradient(lambda p: DelayStateSpace([[0.0]], [[p[0]]], 1.0), [-0.2])
    >>> round(r.value, 8), round(float(r.gradient[0]), 6), round(r.value / (-0.2 * (1 + r.value)), 6)
    (-0.2591711, 1.749197, 1.749197)
    """
    p = params_vector(p)
    sys = call_system(system_fn, p)
    z = rightmost(sys, certify=certify, n_grid=n_grid)
    alpha = float(z[0].real)
    active = z[z.real >= alpha - active_tol * (1 + abs(alpha))]
    dsys = system_derivatives(system_fn, p, sys, derivative=derivative, method=method)
    ds, den = root_gradient(sys, dsys, z[0])
    scale = float(np.linalg.norm(char_matrix_ds(sys.A, sys.Ad, sys.tau, np.asarray(z[0])), 2))
    return AbscissaGradient(alpha, np.real(ds).astype(float), complex(z[0]), active, bool(den > 1e-6 * scale))


# ------------------------------------------------------------------------------------------ neutral loops
def neutral_part(sys):
    """The object analysing ``sys``'s neutral part (with ``difference_spectrum``, ``spectral_abscissa``,
    ``strong_stability``), or ``None`` for a retarded system."""
    if hasattr(sys, "difference_loop"):
        return sys.difference_loop()
    if hasattr(sys, "difference_spectrum") and hasattr(sys, "strong_stability"):
        return sys
    return None


def strong_abscissa(part):
    """``max(C_D, spectral abscissa)`` of a neutral part (see the module docstring, "Neutral loops")."""
    return float(max(part.difference_spectrum().C_D, part.spectral_abscissa()))


def _strong_objective(system_fn, p):
    part = neutral_part(system_fn(p))
    if part is None:
        raise ValueError("system_fn(p) lost its neutral part at some p: the structure must not depend on p")
    return strong_abscissa(part)


def strong_minimize(system_fn, p0, *, target=None, max_iter=200, max_eval=2000, sampling=True, seed=0):
    """Minimize the strong spectral abscissa ``max(C_D, alpha)`` of a neutral closed loop (the work of
    :func:`stabilize` for such loops).

    Parameters
    ----------
    system_fn : callable
        ``p (P,) -> NeutralStateSpace`` or ``DelayIOSystem`` with a delay-difference part.
    p0 : float ndarray ``(P,)``
    target, max_iter, max_eval, sampling, seed
        As in :func:`stabilize`.

    Returns
    -------
    opt : OptResult
        The nonsmooth minimizer's result.
    initial_value : float
    system : the loop at ``opt.x``
    strong : StrongStability
        Its strong-stability test (``gamma0 < 1`` and no root in the closed right half-plane).
    """
    def f(p):
        v = _strong_objective(system_fn, p)
        g = np.empty(p.size)
        for j in range(p.size):
            h = np.finfo(float).eps ** (1 / 3) * max(1.0, abs(p[j]))
            e = np.zeros(p.size)
            e[j] = h
            g[j] = (_strong_objective(system_fn, p + e) - _strong_objective(system_fn, p - e)) / (2 * h)
        return v, g

    with single_blas_thread():
        v0 = _strong_objective(system_fn, p0)
        opt = minimize_nonsmooth(f, p0, target=target, max_iter=max_iter, max_eval=max_eval, sampling=sampling,
                                 seed=seed)
    sys = system_fn(opt.x)
    return opt, float(v0), sys, neutral_part(sys).strong_stability()


# ------------------------------------------------------------------------------------------ stabilize
def stabilize(system_fn, p0, *, target=None, derivative=None, method="central", max_iter=200, max_eval=2000,
              sampling=True, seed=0, n_grid=None):
    """Minimize the spectral abscissa of ``system_fn(p)`` over ``p``, from ``p0``.

    Parameters
    ----------
    system_fn : callable
        ``p (P,) -> DelayStateSpace`` or ``DelayIOSystem`` (see :func:`abscissa_gradient`). A neutral
        closed loop (a :class:`~ddesys.NeutralStateSpace`, or a ``DelayIOSystem`` with a delay-difference
        part such as a biproper controller around a plant with dead time) is strongly stabilized: the
        objective is then its strong spectral abscissa ``max(C_D, alpha)``
        (the module docstring's "Neutral loops").
    p0 : array_like, real ``(P,)``
        Starting parameters.
    target : float, optional
        Stop as soon as the abscissa is ``<= target`` (e.g. ``-0.1`` for a stability margin).
        Default: minimize.
    derivative, method, n_grid
        As in :func:`abscissa_gradient`.
    max_iter, max_eval : int
        BFGS iterations and objective evaluations allowed.
    sampling : bool
        Refine the BFGS point by gradient sampling (radii ``1e-3 .. 1e-6`` times ``max(1, |p|)``).
    seed : int
        Seed of the sampling's local random generator.

    Returns
    -------
    DesignResult
        ``success`` is the exact stability test (:meth:`DelayStateSpace.is_stable`) of the result, and
        ``value <= target`` when a target is given.

    Raises
    ------
    TypeError, ValueError
        As :func:`abscissa_gradient`; ``max_iter`` or ``max_eval`` not a positive integer, ``target`` not
        a real number (or NaN), ``sampling`` not a bool, ``seed`` not an integer
        (:func:`check_design_options`).

    Notes
    -----
    The abscissa is nonconvex: the result is a local minimum (start from several ``p0`` for more). At a
    minimizer the rightmost roots typically coalesce or tie in real part, where the abscissa is not
    differentiable; BFGS still makes progress there and gradient sampling certifies approximate
    stationarity (Lewis & Overton 2013, Burke, Lewis & Overton 2005). The objective uses the fast,
    uncertified rightmost roots; at a root of multiplicity ``m`` their real parts are accurate to about
    ``eps^(1/m)`` (``1e-8`` for a double root, ``1e-5`` for a triple one), which bounds how well the
    minimum is resolved. The result's stability is decided by the exact test.

    Examples
    --------
    ``x' = k x(t - 1)`` (an integrator with unit input delay and static feedback): the smallest abscissa
    is ``-1``, at ``k = -1/e``, a double root:

    >>> from ddesys import DelayStateSpace
    >>> from ddesys.control.design import stabilize
    >>> res = stabilize(lambda p: DelayStateSpace([[0.0]], [[p[0]]], 1.0), [-0.1])
    >>> res.success, round(res.value, 3), round(float(res.params[0]), 4)
    (True, -1.0, -0.3679)
    """
    max_iter, max_eval, target = check_design_options(max_iter=max_iter, max_eval=max_eval, target=target,
                                                      sampling=sampling, seed=seed, method=method)
    p0 = params_vector(p0)
    if neutral_part(system_fn(p0)) is not None:     # a neutral loop: its strong abscissa (TDS-CONTROL's)
        if derivative is not None or n_grid is not None or method != "central":
            raise ValueError("derivative=, method= and n_grid= apply to retarded loops; a neutral loop's strong "
                             "abscissa is differentiated by central differences")
        opt, v0, sys, st = strong_minimize(system_fn, p0, target=target, max_iter=max_iter, max_eval=max_eval,
                                           sampling=sampling, seed=seed)
        ok = bool(st.strongly_stable) and (target is None or opt.f <= target)
        state = "strongly stable" if st.strongly_stable else "not strongly stable"
        return DesignResult(opt.x, float(opt.f), v0, sys, np.array(opt.history), opt.n_iter, opt.n_eval + 1, ok,
                            f"{opt.message}; the closed loop is {state} ({st.message})", "strong spectral abscissa")

    def f(p):
        r = abscissa_gradient(system_fn, p, derivative=derivative, method=method, n_grid=n_grid)
        return r.value, r.gradient

    with single_blas_thread():                  # many small eigenproblems: BLAS threads only compete
        v0 = f(p0)[0]
        opt = minimize_nonsmooth(f, p0, target=target, max_iter=max_iter, max_eval=max_eval, sampling=sampling,
                                 seed=seed)
    sys = call_system(system_fn, opt.x)
    stable = bool(sys.is_stable())
    ok = stable and (target is None or opt.f <= target)
    state = "stable" if stable else "not stable"
    return DesignResult(opt.x, float(opt.f), float(v0), sys, np.array(opt.history), opt.n_iter, opt.n_eval + 1,
                        ok, f"{opt.message}; the closed loop is {state} (exact test)", "spectral abscissa")


__all__ = ["AbscissaGradient", "DesignResult", "abscissa_gradient", "check_design_options", "neutral_part",
           "params_vector", "stabilize", "strong_abscissa", "strong_minimize"]
