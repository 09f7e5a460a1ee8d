"""Hinf norm design (private helper of :mod:`ddesys.control.design`, which re-exports these names)."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..matrix._roots_igd import single_blas_thread
from ..matrix.norms import top_singular
from ..matrix.statespace import DelayStateSpace
from ._design_abscissa import DesignResult, check_design_options, params_vector, stabilize
from ._design_grad import sigma_gradient, system_derivatives
from ._design_opt import minimize_nonsmooth


class HinfGradient(NamedTuple):
    """The Hinf norm and its gradient: unpacks as ``value, gradient, omega_peak``.

    Attributes
    ----------
    value : float
        ``sup_w sigma_max(G(i w))``; ``inf`` for an unstable system.
    gradient : float ndarray ``(P,)``
        ``Re(u^H (dG(i w*)/dp) v)`` at the peak ``w*`` (``nan`` when unstable).
    omega_peak : float
        ``w*`` (``inf`` when the supremum is ``||D||_2`` at high frequency).
    """

    value: float
    gradient: np.ndarray
    omega_peak: float


def hinf_gradient(system_fn, p, *, derivative=None, method="central", rtol=1e-9):
    """The Hinf norm of ``system_fn(p)`` and its gradient with respect to ``p``.

    Parameters
    ----------
    system_fn, p, derivative, method
        As in :func:`abscissa_gradient`.
    rtol : float
        Relative accuracy of the norm (:meth:`DelayStateSpace.hinf_norm`).

    Returns
    -------
    HinfGradient
        ``(inf, nan..., nan)`` when the system is not stable (exact test).

    Notes
    -----
    ``G = C M^{-1} B + D`` gives ``dG = dC X + Y dB + dD - Y dM X`` with ``X = M^{-1} B``, ``Y = C M^{-1}``
    at ``s = i w*``; the top singular pair ``u``, ``v`` of ``G(i w*)`` gives ``d sigma_max = Re(u^H dG v)``.
    Where two peaks tie, or ``sigma_max`` is multiple, the norm is not differentiable and this is the
    gradient of one branch.

    Examples
    --------
    ``G(s) = 1 / (s + 2)`` scaled by ``p``: ``||p G|| = p / 2``, gradient ``1 / 2``:

    >>> from ddesys import DelayStateSpace
    >>> from ddesys.control.design import hinf_gradient
    >>> r = hinf_gradient(lambda p: DelayStateSpace([[-2.0]], [[0.0]], 1.0, B=[1.0], C=[p[0]]), [3.0])
    >>> round(r.value, 9), round(float(r.gradient[0]), 9), r.omega_peak
    (1.5, 0.5, 0.0)
    """
    p = params_vector(p)
    sys = performance_system(system_fn, p)
    if not sys.is_stable():
        return HinfGradient(np.inf, np.full(p.size, np.nan), np.nan)
    val, w = sys.hinf_norm(rtol=rtol)
    if not isinstance(sys, DelayStateSpace):
        return HinfGradient(float(val), _io_sigma_gradient(system_fn, p, w, derivative, method), float(w))
    dsys = system_derivatives(system_fn, p, sys, derivative=derivative, method=method)
    return HinfGradient(float(val), sigma_gradient(sys, dsys, w), float(w))


def performance_system(system_fn, p):
    """``system_fn(p)``: a :class:`~ddesys.DelayStateSpace` or a :class:`~ddesys.DelayIOSystem` (a loop
    built with ``ddesys.feedback``), kept whole: its delayed inputs, outputs and feedthrough are part
    of the transfer function whose norm is taken (its internal dynamics alone would drop them)."""
    from .iosys import DelayIOSystem

    sys = system_fn(p)
    if not isinstance(sys, (DelayStateSpace, DelayIOSystem)):
        raise TypeError(f"system_fn(p) must return a DelayStateSpace or a DelayIOSystem, got {type(sys).__name__}")
    return sys


def _top_sigma(sys, w):
    """``sigma_max(G(i w))``; at ``w = inf`` the high-frequency value ``sigma_max(D0)`` (the peak search
    returns ``inf`` only without delayed feedthrough)."""
    G = sys.transfer([1j * w])[..., 0] if np.isfinite(w) else sys.explicit_form().D0
    return float(top_singular(np.atleast_2d(G)[None])[0])


def _io_sigma_gradient(system_fn, p, w, derivative, method):
    """``d sigma_max(G(i w)) / dp`` at the fixed peak ``w`` by central differences of the exact transfer
    matrix (``w`` moving with ``p`` does not contribute: ``sigma_max`` is stationary in ``w`` there)."""
    if derivative is not None or method != "central":
        raise ValueError("derivative= and method= apply to DelayStateSpace systems; the gradient of a "
                         "DelayIOSystem's norm is taken by central differences of G(i w) at the peak")
    g = np.empty(p.size)
    for j in range(p.size):
        h = np.finfo(float).eps ** (1 / 3) * max(1.0, abs(p[j]))
        e = np.zeros(p.size)
        e[j] = h
        g[j] = (_top_sigma(performance_system(system_fn, p + e), w)
                - _top_sigma(performance_system(system_fn, p - e), w)) / (2 * h)
    return g


def hinf_design(system_fn, p0, *, derivative=None, method="central", stabilize_first=False, max_iter=100,
                max_eval=1000, sampling=True, seed=0, rtol=1e-9):
    """Minimize the Hinf norm of ``system_fn(p)`` over ``p``, from a stabilizing ``p0``.

    Parameters
    ----------
    system_fn : callable
        ``p (P,) -> DelayStateSpace`` or ``DelayIOSystem`` (e.g. built with :func:`ddesys.feedback`):
        the closed loop from the exogenous inputs to the performance outputs, delayed inputs and outputs
        included.
    p0 : array_like, real ``(P,)``
        Starting parameters; the closed loop there must be stable.
    derivative, method
        As in :func:`abscissa_gradient` (here the derivatives of ``B``, ``C``, ``D`` count too).
    stabilize_first : bool
        When ``p0`` does not stabilize: run :func:`stabilize` first (to an abscissa ``<= -0.01``) instead
        of raising.
    max_iter, max_eval, sampling, seed
        As in :func:`stabilize`.
    rtol : float
        Relative accuracy of each norm (:meth:`DelayStateSpace.hinf_norm`).

    Returns
    -------
    DesignResult
        ``value`` the Hinf norm; ``success`` when it is finite and no larger than at the start.

    Raises
    ------
    ValueError
        The closed loop at ``p0`` is unstable (and ``stabilize_first`` is False, or stabilization failed).

    Notes
    -----
    The gradient of ``sigma_max(G(i w))`` at the peak frequency ``w*`` is ``Re(u^H (dG/dp) v)`` with the
    top singular vectors ``u``, ``v``; ``w*`` moving with ``p`` does not contribute (``sigma_max`` is
    stationary in ``w`` there). Unstable trial points count as ``+inf``, so the iterates stay stable.

    Examples
    --------
    Disturbance to output of ``x' = -k x(t - 1) + d``, ``y = x``: ``G(s) = 1 / (s + k e^{-s})``:

    >>> from ddesys import DelayStateSpace
    >>> from ddesys.control.design import hinf_design
    >>> res = hinf_design(lambda p: DelayStateSpace([[0.0]], [[-p[0]]], 1.0, B=[1.0], C=[1.0]), [0.3])
    >>> res.success, res.value < res.initial_value
    (True, True)
    """
    max_iter, max_eval, _ = check_design_options(max_iter=max_iter, max_eval=max_eval, sampling=sampling, seed=seed,
                                                 method=method)
    p0 = params_vector(p0)
    sys0 = performance_system(system_fn, p0)
    if not sys0.is_stable():
        if not stabilize_first:
            raise ValueError(f"hinf_design needs a stabilizing start: the closed loop at p0 has spectral abscissa "
                             f"{sys0.spectral_abscissa():.6g} >= 0; pass stabilize_first=True or start from "
                             "stabilize(system_fn, p0).params")
        st = stabilize(system_fn, p0, target=-0.01, derivative=derivative, method=method, max_iter=max_iter,
                       max_eval=max_eval, sampling=sampling, seed=seed)
        if not st.success:
            raise ValueError(f"hinf_design: stabilize_first could not stabilize (abscissa {st.value:.6g}): "
                             f"{st.message}")
        p0 = st.params

    def f(p):
        r = hinf_gradient(system_fn, p, derivative=derivative, method=method, rtol=rtol)
        return r.value, r.gradient

    with single_blas_thread():                  # many small dense problems: BLAS threads only compete
        v0 = f(p0)[0]
        opt = minimize_nonsmooth(f, p0, max_iter=max_iter, max_eval=max_eval, sampling=sampling, seed=seed)
    sys = performance_system(system_fn, opt.x)
    ok = bool(np.isfinite(opt.f) and opt.f <= v0)
    return DesignResult(opt.x, float(opt.f), float(v0), sys, np.array(opt.history), opt.n_iter, opt.n_eval + 1,
                        ok, opt.message, "hinf norm")


__all__ = ["HinfGradient", "hinf_design", "hinf_gradient", "performance_system"]
