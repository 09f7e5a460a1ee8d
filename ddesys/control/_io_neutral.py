"""Delay input-output systems with a delay-difference part: roots and stability through an equivalent
neutral system (docs/theory.md §9.7).

A :class:`~ddesys.DelayIOSystem` whose delay channels close a loop among themselves (``D22`` with a
cycle: a biproper loop with dead time, a neutral system inside an interconnection) has the
characteristic function ``det K(s)``,
``K(s) = [[s I - A, -B2], [-E(s) C2, I - E(s) D22]]``, ``E(s) = diag(e^{-s tau_j})``. With the channel
signals written ``w = (s + a) v`` (``a > 0``) and the first block row combined with the second,
``K(s) diag(I, (s + a) I)`` is, up to a unit factor, the characteristic matrix of the neutral system in
``X = (x, v)``::

    X' - sum_d H_d X'(t - d) = A_X X + sum_d Ad_d X(t - d)
    A_X  = [[A, 0], [0, -a I]]
    Ad_d = [[B2 S_d C2, a B2 S_d D22], [S_d C2, a S_d D22]]
    H_d  = [[0, B2 S_d D22], [0, S_d D22]]

(``S_d`` selects the channels of delay ``d``). Its determinant is ``(s + a)^q det K(s)``: the same roots
plus ``q`` roots at ``-a``, chosen left of every region searched and removed. The difference operator
is ``det(I - E(s) D22)``, the loop's essential spectrum.
"""
from __future__ import annotations

import numpy as np


def neutral_equivalent(g, a):
    """The neutral system of the module docstring for the matrices ``g`` (an ``IOData``).

    Returns
    -------
    NeutralStateSpace
        ``n + q`` states, no inputs or outputs of interest (``B``, ``C`` zero).
    """
    from scipy.linalg import block_diag

    from ..matrix.neutral import NeutralStateSpace

    n, q = g.A.shape[0], g.tau.size
    delays = np.unique(g.tau)
    AX = block_diag(g.A, -a * np.eye(q))
    Ad, H = [], []
    for d in delays:
        S = np.diag((g.tau == d).astype(float))
        SC, SD = S @ g.C2, S @ g.D22
        Ad.append(np.block([[g.B2 @ SC, a * g.B2 @ SD], [SC, a * SD]]))
        H.append(np.block([[np.zeros((n, n)), g.B2 @ SD], [np.zeros((q, n)), SD]]))
    N = n + q
    return NeutralStateSpace(AX, np.array(Ad), np.array(H), delays, np.zeros((N, 1)), np.zeros((1, N)))


class DifferenceLoop:
    """Roots and stability of a delay input-output system with a delay-difference part (see the module
    docstring). Built by :meth:`ddesys.DelayIOSystem.difference_loop`.

    Parameters
    ----------
    g : IOData
        The system's matrices (``D22`` with a cycle).
    """

    def __init__(self, g):
        self.g = g
        self.q = int(g.tau.size)
        self._systems = {}

    def _neutral(self, a):
        if a not in self._systems:
            self._systems[a] = neutral_equivalent(self.g, a)
        return self._systems[a]

    def _shift(self, re_min):
        """A shift ``a`` with ``-a`` well left of ``re_min`` and of the difference operator's chains."""
        e = self._neutral(1.0).difference_spectrum()
        floor = min(re_min, e.c_D if np.isfinite(e.c_D) else re_min)
        return float(max(1.0, 2.0 * (1.0 - floor)))

    def difference_spectrum(self):
        """:class:`~ddesys.EssentialSpectrum` of ``det(I - E(s) D22)`` (``c_D``, ``C_D``, ``gamma0``)."""
        return self._neutral(1.0).difference_spectrum()

    def roots(self, re_min=None):
        """Every characteristic root with ``Re s >= re_min`` (``re_min > c_D``; default as
        :meth:`ddesys.NeutralStateSpace.roots`), as a ``RootsResult``."""
        if re_min is None:
            c_D, tmax = self.difference_spectrum().c_D, float(self.g.tau.max())
            re_min = c_D + 0.1 / tmax if np.isfinite(c_D) else -1.0 / tmax
        return self._neutral(self._shift(float(re_min))).roots(re_min)

    def spectral_abscissa(self, detail=False):
        """``max(c_D, max Re s)`` (see :meth:`ddesys.NeutralStateSpace.spectral_abscissa`)."""
        a = self._shift(0.0)
        for _ in range(6):
            r = self._neutral(a).spectral_abscissa(detail=True)
            if abs(r.value + a) > 1e-6 * (1 + a):             # not the shift's own roots at -a
                return r if detail else r.value
            a *= 16.0
        raise ValueError(f"the spectral abscissa could not be separated from the auxiliary roots at -a: every "
                         f"characteristic root lies left of Re s = {-a:.3g}")

    def is_stable(self, method="exact"):
        """Exponential (``"exact"``) or strong (``"strong"``) stability: ``c_D < 0`` and no root in
        ``Re s >= 0`` (strong: ``gamma0 < 1`` as well)."""
        return self._neutral(self._shift(0.0)).is_stable(method)

    def strong_stability(self):
        """:class:`~ddesys.StrongStability` of the loop."""
        return self._neutral(self._shift(0.0)).strong_stability()


__all__ = ["DifferenceLoop", "neutral_equivalent"]
