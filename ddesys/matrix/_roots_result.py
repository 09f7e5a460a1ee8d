"""The result type of :func:`ddesys.matrix.roots.characteristic_roots` (exported as ``ddesys.RootsResult``)."""
from __future__ import annotations

import numpy as np


class RootsResult:
    """Roots of ``det M(s)`` with ``Re s >= re_min``; unpacks as ``roots, residuals``.

    Attributes
    ----------
    roots : complex ndarray ``(r,)``
        Descending real part (a conjugate pair: positive imaginary part first). A root of multiplicity
        ``m`` appears ``m`` times (as :func:`numpy.roots` does), at the centroid of its cluster.
    multiplicity : int ndarray ``(r,)``
        The multiplicity of each entry's root (counted by the argument principle on a small circle).
        Roots closer than ``1e-6 (1 + |s|)`` are one cluster: a double root that rounding split into
        two simple ones ``1e-8`` apart is reported as one root of multiplicity 2. So is a wider cluster
        that float64 cannot separate (a root of multiplicity ``m`` splits into ``m`` roots about
        ``eps^(1/m) |s|`` apart, ``4e-3 |s|`` for ``m = 6``): its centroid, accurate to rounding, with
        multiplicity ``m``; each member is only known to lie within about that radius of it.
    residuals : float ndarray ``(r,)``
        ``sigma_min(M(s)) / scale(s)`` (:func:`ddesys.matrix.charmatrix.relative_residual`).
    certified : bool
        The argument principle counts exactly ``len(roots)`` zeros in the region.
    count : int or None
        That count (``None`` when not counted or when the boundary could not be resolved).
    re_min : float
        The left edge actually used: the one asked for, or slightly left of it when a root lay on it.
    n_grid : int
        Chebyshev degree ``N`` of the last discretization (``n (N + 1)`` eigenvalues).
    message : str
        What was found, counted, or why not certified.
    """

    __slots__ = ("roots", "multiplicity", "residuals", "certified", "count", "re_min", "n_grid", "message")

    def __init__(self, roots, multiplicity, residuals, certified, count, re_min, n_grid, message):
        for name, value in zip(self.__slots__, (roots, multiplicity, residuals, certified, count, re_min,
                                                n_grid, message)):
            if isinstance(value, np.ndarray):
                value.flags.writeable = False
            object.__setattr__(self, name, value)

    def __setattr__(self, name, value):
        raise AttributeError(f"RootsResult is immutable: cannot set {name!r}")

    def __iter__(self):
        yield self.roots
        yield self.residuals

    def __repr__(self):
        first = f", rightmost {self.roots[0]:.6g}" if self.roots.size else ""
        return (f"RootsResult({self.roots.size} roots with Re s >= {self.re_min:.6g}{first}, "
                f"certified={self.certified}, n_grid={self.n_grid})")


__all__ = ["RootsResult"]
