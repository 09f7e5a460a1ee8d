"""Stability decided next to the imaginary axis (private helper of :func:`ddesys.matrix.roots.is_stable`).

When the argument-principle count on ``{Re s >= 0}`` cannot resolve its edge (a root on the imaginary axis
or within about ``1e-12`` of it), the roots of a thin strip around the axis are computed and each one is
enclosed in the smallest counted circle (:func:`ddesys.matrix._roots_cluster.inclusion_radius`); a circle
on one side of the axis certifies the sign of the root's real part. Float64 cannot decide a root whose
circle must cross the axis: :class:`UndecidableStability` says so.
"""
from __future__ import annotations

import warnings

from ._roots_cluster import inclusion_radius
from .errors import UndecidableStability

__all__ = ["edge_decision"]


def edge_decision(A, Ad, tau, box, fn=None, *, find_roots, abscissa):
    """Stability when a root lies within rounding of the axis: the sign of each root near it, certified
    by an inclusion circle; ``False`` with :class:`UndecidableStability` when a circle must cross it.

    Parameters
    ----------
    A, Ad, tau : the system
    box : tuple
        The a priori box of ``{Re s >= 0}`` (sets the width ``w = 1e-6 (1 + |s|_max)`` of the strip
        ``Re s >= -w`` whose roots are computed).
    fn : callable, optional
        The function whose zeros are the roots, when not ``det M`` (see
        :func:`ddesys.matrix._roots_count.winding_numbers`).
    find_roots, abscissa : callable
        :func:`ddesys.matrix.roots.characteristic_roots` and :func:`~ddesys.matrix.roots.spectral_abscissa`
        (passed in: that module calls this one).

    Returns
    -------
    bool
    """
    w = 1e-6 * (1 + max(abs(v) for v in box))
    res = find_roots(A, Ad, tau, -w)
    if not res.certified:
        warnings.warn(f"is_stable: a root lies next to the imaginary axis and the roots near it could not "
                      f"be certified ({res.message}); deciding by the spectral abscissa", RuntimeWarning,
                      stacklevel=3)
        return abscissa(A, Ad, tau) < 0
    undecided = []
    for i, (z, m) in enumerate(zip(res.roots, res.multiplicity)):
        if i and z == res.roots[i - 1]:
            continue                                         # the copies of a multiple root
        if abs(z.real) > 0.5 * w:
            if z.real > 0:
                return False
            continue
        r = inclusion_radius(A, Ad, tau, z, int(m), limit=abs(z.real), fn=fn)
        if r is None:
            undecided.append(z)
        elif z.real > 0:
            return False
    if undecided:
        warnings.warn(f"is_stable: float64 cannot decide: a characteristic root lies within rounding of the "
                      f"imaginary axis (s = {undecided[0]:.17g}); not proven stable", UndecidableStability,
                      stacklevel=3)
        return False
    return True
