"""Closed loops of fixed-order controllers as :class:`~ddesys.DelayStateSpace` (re-exported by
:mod:`ddesys.matrix.design`).

* :func:`sof_closed_loop`: static output feedback ``u = K y + w`` of a plant;
* :func:`pi_closed_loop`: PI (or PID with the derivative on the measured output) around a SISO plant
  ``x' = A x + sum_k Ad_k x(t - tau_k) + B u``, ``y = C x``, the state augmented by the integrator;
* :func:`fopdt_pi_loop`: PI around the dead-time plant ``gain e^{-L s} / (T s + 1)``, whose input delay
  goes into the delayed-state matrix.
"""
from __future__ import annotations

import numpy as np


def _plant(plant):
    from .statespace import DelayStateSpace

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
    from .statespace import DelayStateSpace

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
    from .statespace import DelayStateSpace

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
    """PI control of the dead-time plant ``gain e^{-L s} / (T s + 1)`` as one :class:`DelayStateSpace`.

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
    from .statespace import DelayStateSpace

    T, L = float(T), float(L)
    if not T > 0:
        raise ValueError(f"T must be > 0, got {T}")
    A = np.array([[-1.0 / T, 0.0], [-1.0, 0.0]])
    Ad = np.array([[-gain * kp / T, gain * ki / T], [0.0, 0.0]])
    return DelayStateSpace(A, Ad, L, B=[0.0, 1.0], C=[1.0, 0.0])


__all__ = ["fopdt_pi_loop", "pi_closed_loop", "sof_closed_loop"]
