"""Strong stabilization of neutral closed loops (private helper of :func:`ddesys.matrix.design.stabilize`).

A closed loop with a neutral part (a :class:`~ddesys.NeutralStateSpace`, or a
:class:`~ddesys.DelayIOSystem` whose delay channels close a loop: a biproper controller around a plant
with dead time) can be stable for its nominal delays and lose stability under arbitrarily small changes
of them. Its robust (strong) spectral abscissa is ``max(C_D, alpha)``: ``C_D`` the supremum of the
difference operator's essential bound over small delay changes (``C_D < 0`` iff ``gamma0 < 1``), and
``alpha`` the rightmost characteristic root (Michiels, Vyhlidal, Zitek, Nijmeijer and Henrion, SIAM J.
Control Optim. 48 (2009); TDS-CONTROL's ``tds_strong_stabilization`` minimizes the same quantity).
Minimizing it with the nonsmooth minimizer of :mod:`ddesys.matrix._design_opt` (gradients by central
differences: the objective is a maximum of a root's real part and of a quantity of the difference
operator alone) gives a controller whose loop is strongly stable once the value is negative.
"""
from __future__ import annotations

import numpy as np

from ._design_opt import minimize_nonsmooth
from ._roots_igd import single_blas_thread


def neutral_part(sys):
    """The object analysing ``sys``'s neutral part (with ``difference_spectrum``, ``spectral_abscissa``,
    ``strong_stability``), or ``None`` for a retarded system."""
    if hasattr(sys, "difference_loop"):
        return sys.difference_loop()
    if hasattr(sys, "difference_spectrum") and hasattr(sys, "strong_stability"):
        return sys
    return None


def strong_abscissa(part):
    """``max(C_D, spectral abscissa)`` of a neutral part (see the module docstring)."""
    return float(max(part.difference_spectrum().C_D, part.spectral_abscissa()))


def _objective(system_fn, p):
    part = neutral_part(system_fn(p))
    if part is None:
        raise ValueError("system_fn(p) lost its neutral part at some p: the structure must not depend on p")
    return strong_abscissa(part)


def strong_minimize(system_fn, p0, *, target=None, max_iter=200, max_eval=2000, sampling=True, seed=0):
    """Minimize the strong spectral abscissa ``max(C_D, alpha)`` of a neutral closed loop (the work of
    :func:`ddesys.matrix.design.stabilize` for such loops).

    Parameters
    ----------
    system_fn : callable
        ``p (P,) -> NeutralStateSpace`` or ``DelayIOSystem`` with a delay-difference part.
    p0 : float ndarray ``(P,)``
    target, max_iter, max_eval, sampling, seed
        As in :func:`ddesys.matrix.design.stabilize`.

    Returns
    -------
    opt : OptResult
        The minimizer's result (:mod:`ddesys.matrix._design_opt`).
    initial_value : float
    system : the loop at ``opt.x``
    strong : StrongStability
        Its strong-stability test (``gamma0 < 1`` and no root in the closed right half-plane).
    """
    def f(p):
        v = _objective(system_fn, p)
        g = np.empty(p.size)
        for j in range(p.size):
            h = np.finfo(float).eps ** (1 / 3) * max(1.0, abs(p[j]))
            e = np.zeros(p.size)
            e[j] = h
            g[j] = (_objective(system_fn, p + e) - _objective(system_fn, p - e)) / (2 * h)
        return v, g

    with single_blas_thread():
        v0 = _objective(system_fn, p0)
        opt = minimize_nonsmooth(f, p0, target=target, max_iter=max_iter, max_eval=max_eval, sampling=sampling,
                                 seed=seed)
    sys = system_fn(opt.x)
    return opt, float(v0), sys, neutral_part(sys).strong_stability()


__all__ = ["neutral_part", "strong_abscissa", "strong_minimize"]
