"""Fixed-order controller design for matrix delay systems: spectral abscissa and Hinf norm minimization.

A controller with a few real parameters ``p`` (a static gain, PI gains, ...) closed around a delay plant
gives a closed loop ``system_fn(p)``, a :class:`~ddesys.DelayStateSpace`. Its infinitely many
characteristic roots cannot be placed; instead (as TDS-CONTROL and tdcpy do):

* :func:`~ddesys.stabilize` minimizes the spectral abscissa ``alpha(p) = max Re s`` (negative: stable);
* :func:`~ddesys.hinf_design` minimizes the closed loop's Hinf norm from a stabilizing ``p``.

Both use the gradients of :func:`~ddesys.abscissa_gradient` (of the rightmost root: ``ds/dp_j = -u^H (dM/dp_j)
v / (u^H M'(s) v)``, ``v``, ``u`` the right and left null vectors of ``M(s) = s I - A - sum_k Ad_k
e^{-s tau_k}``, ``M'(s) = I + sum_k tau_k Ad_k e^{-s tau_k}``) and of ``sigma_max`` at the Hinf peak
(``Re(u^H dG v)``, ``G(i w) = C M(i w)^{-1} B + D``). Both objectives are nonsmooth where two roots (or two
peaks) tie and at multiple roots, so the minimizer is HANSO's: BFGS with a weak Wolfe line search, then
gradient sampling. The result is a local minimum. The closed-loop builders are defined here; the
abscissa part, the Hinf part, their gradients and the minimizer are private helpers of this module, which
re-exports their public names. ``system_fn`` may also return a
:class:`~ddesys.DelayIOSystem` (a loop built with :func:`ddesys.feedback`): its roots are those of its
internal dynamics, and its norm is that of its whole transfer function, delayed inputs and outputs included.

Closed loops: :func:`~ddesys.static_output_feedback` designs ``u = K y``; the closed-loop builders
:func:`~ddesys.control.sof_closed_loop` (``u = K y + w``), :func:`~ddesys.control.pi_closed_loop` (PI(D) of a
SISO plant) and :func:`~ddesys.control.fopdt_pi_loop` (PI of ``gain e^{-L s} / (T s + 1)``) give the
``system_fn`` of common loops.

The builders write the closed loop's matrices themselves instead of calling :func:`~ddesys.feedback`,
whose loops they are (a test compares them): they keep the plant's coordinates and delays (``feedback``
gives a :class:`~ddesys.DelayIOSystem` whose internal dynamics sort and merge the delays and, around a PI
controller, use the controller realization's state), they take complex gains (the complex-step
derivative) and the derivative action on the measured output (an improper controller, which ``feedback``
cannot take), and one costs tens of microseconds instead of about a millisecond. Designs evaluate them
hundreds of times and follow roots through a nonsmooth minimizer: other coordinates, or the rounding of
``feedback``'s solve of the interconnection (``1e-17`` in ``A``), lead it to another local minimum.
"""
from __future__ import annotations

import numpy as np

from ..matrix.statespace import DelayStateSpace
from ._design_abscissa import AbscissaGradient, DesignResult, abscissa_gradient, stabilize
from ._design_hinf import HinfGradient, hinf_design, hinf_gradient
from .iosys import DelayIOSystem


# ------------------------------------------------------------------------------------------ loops
def _plant(plant):
    if not isinstance(plant, DelayStateSpace):
        raise TypeError(f"plant must be a DelayStateSpace, got {type(plant).__name__}")
    return plant


def sof_closed_loop(plant, K):
    """The loop ``u = K y + w`` around ``plant``, from ``w`` (added at the plant input) to ``y``.

    Parameters
    ----------
    plant : DelayStateSpace
        ``x' = A x + sum_k Ad_k x(t - tau_k) + B u``, ``y = C x + D u`` with ``m`` inputs, ``q`` outputs.
    K : array_like ``(m, q)``
        The gain.

    Returns
    -------
    DelayStateSpace
        With ``D = 0``: ``A + B K C``, ``B``, ``C``, ``0``. With ``D != 0`` the loop is ``u = F (K C x + w)``,
        ``F = (I - K D)^{-1}``: ``A + B F K C``, ``B F``, ``C + D F K C``, ``D F`` (smooth, not affine, in
        ``K``).

    Raises
    ------
    ValueError
        A gain of the wrong shape, or ``I - K D`` singular (an ill-posed algebraic loop).
    """
    plant = _plant(plant)
    m, q = plant.n_inputs, plant.n_outputs
    K = np.asarray(K)
    if K.shape != (m, q):
        raise ValueError(f"K must have shape (n_inputs, n_outputs) = {(m, q)}, got {K.shape}")
    A, B, C, D = plant.A, plant.B, plant.C, plant.D
    if not np.any(D != 0):
        return DelayStateSpace(A + B @ K @ C, plant.Ad, plant.tau, B, C, D)
    IKD = np.eye(m) - K @ D
    if np.linalg.cond(IKD) > 1e12:
        raise ValueError("I - K D is singular: the loop u = K (C x + D u) has no unique solution")
    F = np.linalg.inv(IKD)
    return DelayStateSpace(A + B @ F @ K @ C, plant.Ad, plant.tau, B @ F, C + D @ F @ K @ C, D @ F)


def pi_closed_loop(plant, kp, ki, kd=0.0):
    """PI(D) control ``u = kp e + ki z - kd y'``, ``z' = e = r - y``, of a SISO plant, as one system.

    Parameters
    ----------
    plant : DelayStateSpace
        One input, one output, ``D = 0``.
    kp, ki, kd : float
        Proportional, integral and derivative gains. The derivative acts on the measured output ``y = C x``
        (``y' = C A x + sum_k C Ad_k x(t - tau_k)`` needs ``C B = 0``; else ``u`` would depend on ``u'``).

    Returns
    -------
    DelayStateSpace
        State ``(x, z)`` of size ``n + 1``; input ``r``; output ``y``::

            A_cl = [[A - kp B C - kd B C A, ki B], [-C, 0]],  Ad_cl_k = [[Ad_k - kd B C Ad_k, 0], [0, 0]],
            B_cl = [[kp B], [1]],  C_cl = [C, 0].

    Raises
    ------
    ValueError
        Not SISO, ``D != 0``, or ``kd != 0`` with ``C B != 0``.
    """
    plant = _plant(plant)
    if plant.n_inputs != 1 or plant.n_outputs != 1:
        raise ValueError(f"pi_closed_loop needs a SISO plant, got {plant.n_inputs} inputs and "
                         f"{plant.n_outputs} outputs")
    if np.any(plant.D != 0):
        raise ValueError("pi_closed_loop needs D = 0 (a direct feedthrough makes e depend on u)")
    A, Ad, B, C = plant.A, plant.Ad, plant.B, plant.C
    kp, ki, kd = (np.asarray(v).item() for v in (kp, ki, kd))        # complex allowed (complex step)
    if kd != 0 and abs((C @ B)[0, 0]) > 0:
        raise ValueError("derivative action on y needs C B = 0 (else u depends on u': a neutral loop)")
    n = A.shape[0]
    Acl = np.zeros((n + 1, n + 1), dtype=np.result_type(A, kp, ki, kd))
    Acl[:n, :n] = A - kp * B @ C - kd * B @ C @ A
    Acl[:n, n] = ki * B[:, 0]
    Acl[n, :n] = -C[0]
    Adcl = np.zeros((Ad.shape[0], n + 1, n + 1), dtype=np.result_type(Ad, kd))
    Adcl[:, :n, :n] = Ad - kd * np.einsum("ij,kjl->kil", B @ C, Ad)
    Bcl = np.concatenate([kp * B[:, 0], [1.0]])
    Ccl = np.concatenate([C[0], [0.0]])
    return DelayStateSpace(Acl, Adcl, plant.tau, Bcl, Ccl)


def fopdt_pi_loop(gain, T, L, kp, ki):
    """PI control of the dead-time plant ``gain e^{-L s} / (T s + 1)`` as one :class:`~ddesys.DelayStateSpace`.

    With ``x' = -x / T + (gain / T) u(t - L)``, ``y = x``, ``u = kp e + ki z``, ``z' = e = r - y``::

        d/dt [x, z] = [[-1/T, 0], [-1, 0]] [x, z] + [[-gain kp/T, gain ki/T], [0, 0]] [x, z](t - L) + [0, 1] r

    Parameters
    ----------
    gain, T, L : float
        Static gain, time constant ``> 0`` and dead time ``> 0``.
    kp, ki : float
        The PI gains.

    Returns
    -------
    DelayStateSpace
        State ``(x, z)``, input ``r``, output ``y``. The reference enters through the integrator only:
        the proportional path's ``r(t - L)`` is a delayed input, which this class does not hold. The
        characteristic roots are those of the unity-feedback loop; its step response is this one plus
        the step response of the input column ``[gain kp / T, 0]`` delayed by ``L``.
    """
    T, L = float(T), float(L)
    if not T > 0:
        raise ValueError(f"T must be > 0, got {T}")
    A = np.array([[-1.0 / T, 0.0], [-1.0, 0.0]])
    Ad = np.array([[-gain * kp / T, gain * ki / T], [0.0, 0.0]])
    return DelayStateSpace(A, Ad, L, B=[0.0, 1.0], C=[1.0, 0.0])


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
        (:func:`~ddesys.control.sof_closed_loop`; for a ``DelayIOSystem`` plant
        ``plant.feedback(K, sign=1)``, with the abscissa of its internal dynamics).

    Notes
    -----
    With ``D = 0`` the closed loop is ``A + B K C`` (with the plant's ``Ad``), affine in ``K``, and its
    derivative is exact (``dA / dK_ij = B[:, i] C[j, :]``). With ``D != 0`` the loop ``u = K (C x + D u)``
    is solved as ``u = (I - K D)^{-1} K C x``: the closed loop is ``A + B (I - K D)^{-1} K C``, smooth in
    ``K`` where ``I - K D`` is invertible (differentiated by central differences); a gain that makes it
    singular raises ``ValueError``.
    """
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
