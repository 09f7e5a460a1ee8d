"""Fixed-order controller design for matrix delay systems: spectral abscissa and Hinf norm minimization.

A controller with a few real parameters ``p`` (a static gain, PI gains, ...) closed around a delay plant
gives a closed loop ``system_fn(p)``, a :class:`~ddesys.DelayStateSpace`. Its infinitely many
characteristic roots cannot be placed; instead (as TDS-CONTROL and tdcpy do):

* :func:`stabilize` minimizes the spectral abscissa ``alpha(p) = max Re s`` (negative: stable);
* :func:`hinf_design` minimizes the closed loop's Hinf norm from a stabilizing ``p``.

Both use the gradients of :func:`abscissa_gradient` (of the rightmost root: ``ds/dp_j = -u^H (dM/dp_j)
v / (u^H M'(s) v)``, ``v``, ``u`` the right and left null vectors of ``M(s) = s I - A - sum_k Ad_k
e^{-s tau_k}``, ``M'(s) = I + sum_k tau_k Ad_k e^{-s tau_k}``) and of ``sigma_max`` at the Hinf peak
(``Re(u^H dG v)``, ``G(i w) = C M(i w)^{-1} B + D``). Both objectives are nonsmooth where two roots (or two
peaks) tie and at multiple roots, so the minimizer is HANSO's: BFGS with a weak Wolfe line search, then
gradient sampling (:mod:`ddesys.matrix._design_opt`). The result is a local minimum. The abscissa part
lives in :mod:`ddesys.matrix._design_abscissa`, the Hinf part in :mod:`ddesys.matrix._design_hinf`, the
closed-loop builders in :mod:`ddesys.matrix._design_loops`. ``system_fn`` may also return a
:class:`~ddesys.DelayIOSystem` (a loop built with :func:`ddesys.feedback`): its roots are those of its
internal dynamics, and its norm is that of its whole transfer function, delayed inputs and outputs included.

Closed loops: :func:`static_output_feedback` (``u = K y``), :func:`pi_closed_loop` (PI(D) of a SISO
plant), :func:`fopdt_pi_loop` (PI of ``gain e^{-L s} / (T s + 1)``).
"""
from __future__ import annotations

import numpy as np

from ._design_abscissa import AbscissaGradient, DesignResult, abscissa_gradient, stabilize
from ._design_hinf import HinfGradient, hinf_design, hinf_gradient
from ._design_loops import fopdt_pi_loop, pi_closed_loop, sof_closed_loop


# ------------------------------------------------------------------------------------------ loops
def static_output_feedback(plant, K0, *, objective="abscissa", **options):
    """Design the static output feedback ``u = K y`` of ``plant`` from the gain ``K0``.

    Parameters
    ----------
    plant : DelayStateSpace or DelayIOSystem
        ``m`` inputs, ``q`` outputs; a :class:`~ddesys.DelayIOSystem` may carry dead time on its inputs
        and outputs (``ddesys.ss(..., input_delay=h)``, ``ddesys.tf(..., delay=h)``).
    K0 : array_like ``(m, q)``
        Starting gain.
    objective : {"abscissa", "hinf"}
        Minimize the closed loop's spectral abscissa (:func:`stabilize`) or the Hinf norm from a
        disturbance ``w`` at the plant input (``u = K y + w``) to ``y`` (:func:`hinf_design`).
    **options
        Passed to :func:`stabilize` / :func:`hinf_design` (``target``, ``max_iter``, ...).

    Returns
    -------
    DesignResult
        ``gain`` holds ``K``; ``params`` is ``K`` flattened row by row; ``system`` the closed loop
        (:func:`~ddesys.matrix._design_loops.sof_closed_loop`; for a ``DelayIOSystem`` plant
        ``plant.feedback(K, sign=1)``, with the abscissa of its internal dynamics).

    Notes
    -----
    With ``D = 0`` the closed loop is ``A + B K C`` (with the plant's ``Ad``), affine in ``K``, and its
    derivative is exact (``dA / dK_ij = B[:, i] C[j, :]``). With ``D != 0`` the loop ``u = K (C x + D u)``
    is solved as ``u = (I - K D)^{-1} K C x``: the closed loop is ``A + B (I - K D)^{-1} K C``, smooth in
    ``K`` where ``I - K D`` is invertible (differentiated by central differences); a gain that makes it
    singular raises ``ValueError``.
    """
    from .iosystem import DelayIOSystem
    from .statespace import DelayStateSpace

    if not isinstance(plant, (DelayStateSpace, DelayIOSystem)):
        raise TypeError(f"plant must be a DelayStateSpace or a DelayIOSystem (e.g. with input dead time), got "
                        f"{type(plant).__name__}")
    m, q = plant.n_inputs, plant.n_outputs
    K0 = np.asarray(K0, dtype=float)
    if K0.shape != (m, q):
        raise ValueError(f"K0 must have shape (n_inputs, n_outputs) = {(m, q)}, got {K0.shape}")

    def system_fn(p):
        if isinstance(plant, DelayIOSystem):                 # u = K y + w around the plant, w to y
            return plant.feedback(p.reshape(m, q), sign=1)
        return sof_closed_loop(plant, p.reshape(m, q))

    if isinstance(plant, DelayStateSpace) and "derivative" not in options and not np.any(plant.D != 0):
        dA = np.einsum("ai,jb->ijab", plant.B, plant.C).reshape(m * q, *plant.A.shape)
        options["derivative"] = lambda p: {"A": dA}
    if objective == "abscissa":
        res = stabilize(system_fn, K0.reshape(-1), **options)
    elif objective == "hinf":
        res = hinf_design(system_fn, K0.reshape(-1), **options)
    else:
        raise ValueError(f"objective must be 'abscissa' or 'hinf', got {objective!r}")
    return DesignResult(res.params, res.value, res.initial_value, res.system, res.history, res.n_iter, res.n_eval,
                        res.success, res.message, res.objective, res.params.reshape(m, q).copy())


__all__ = ["AbscissaGradient", "DesignResult", "HinfGradient", "abscissa_gradient", "fopdt_pi_loop", "hinf_design",
           "hinf_gradient", "pi_closed_loop", "sof_closed_loop", "stabilize", "static_output_feedback"]
