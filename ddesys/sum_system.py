"""Sums of discrete systems sharing one input: ``y = y_1 + y_2 + ...`` (a parallel connection).

The DS4D layer with its delayed input tap is a :class:`~ddesys.DiscreteDelaySystem` (the feedback
part, with poles) plus a :class:`~ddesys.DelayTap` (an FIR term, no poles); ``sys + tap`` builds their
:class:`SumSystem`. Kernels, impulse responses, transfer functions, frequency responses and
simulations are the sums of the parts'; poles and stability are those of the parts that have poles.
"""
from __future__ import annotations

import numpy as np

from ._array import real_dtype_of
from ._pairs import refuse_tap
from ._validate import as_array, check_batch
from .lti import DelayLTI

__all__ = ["SumSystem", "Summable"]

# attributes a sum with exactly one pole-carrying part reads from that part (the delay system's own)
_IIR_ATTRS = frozenset(("lam", "mu", "bbar", "c", "delay", "d", "k", "alpha", "n_modes", "xp", "sufficient_margin",
                        "spectral_radius", "poles", "decay_bound", "contour", "states"))


class Summable:
    """What a part of a :class:`SumSystem` is: a discrete batch of SISO channels that adds with ``+``.

    A mixin of :class:`~ddesys.DiscreteDelaySystem`, :class:`~ddesys.DelayTap` and :class:`SumSystem`
    (this module imports none of the first two: they import it). ``sys + other`` is the
    :class:`SumSystem` of both. ``has_poles`` says whether the part has poles (False for an FIR part,
    whose stability is given and which adds nothing to the poles of a sum); a part offers
    ``batch_shape``, ``dt``, ``kernel``, ``impulse``, ``transfer``, ``simulate`` and ``is_stable``.
    """

    has_poles = True

    def __add__(self, other):
        """``self + other``: the :class:`SumSystem` of both (e.g. a :class:`~ddesys.DelayTap`)."""
        return SumSystem(self, other)

    __radd__ = __add__


class SumSystem(Summable, DelayLTI):
    """The sum of discrete systems driven by the same input.

    Parameters
    ----------
    *parts : DiscreteDelaySystem or DelayTap (or SumSystem, flattened)
        At least one; batch shapes broadcast together; all with the same ``dt``.

    Attributes
    ----------
    parts : tuple
        The parts, in order.
    iir : tuple
        The parts with poles (``has_poles``: every part that is not a :class:`~ddesys.DelayTap`).
    tap : DelayTap or None
        The one FIR tap, or None (a sum of several taps: see ``parts``).
    batch_shape, dt

    Raises
    ------
    TypeError
        A part that is not a discrete ddesys system of these kinds.
    ValueError
        Batch shapes that do not broadcast, different ``dt``.

    Notes
    -----
    With exactly one part that has poles, the delay system's attributes and analysis methods (``lam``,
    ``mu``, ``bbar``, ``c``, ``delay``, ``d``, ``k``, ``alpha``, ``n_modes``, ``sufficient_margin``,
    ``spectral_radius``, ``poles``, ``decay_bound``, ``contour``, ``states``) are that part's: an FIR term
    changes none of them (docs/theory.md §8.3). ``to_statespace`` is refused while a tap is part of the
    sum. Immutable.

    Examples
    --------
    >>> import numpy as np
    >>> from ddesys import DelayTap, DiscreteDelaySystem
    >>> iir = DiscreteDelaySystem(lam=[0.9, 0.5], mu=[0.05, 0.1], bbar=[1.0, 1.0], c=[0.5, 0.25], delay=3.5)
    >>> total = iir + DelayTap(e=0.5, delay=2.25)
    >>> bool(np.allclose(total.kernel(8), iir.kernel(8) + DelayTap(0.5, 2.25).kernel(8)))
    True
    >>> bool(total.is_stable()), total.sufficient_margin().round(3)     # the delay system's
    (True, array([0.05, 0.4 ]))
    """

    def __init__(self, *parts):
        flat = []
        for p in parts:
            flat.extend(p.parts if isinstance(p, SumSystem) else (p,))
        if not flat:
            raise TypeError("SumSystem needs at least one part")
        batch = ()
        for i, p in enumerate(flat):
            if not isinstance(p, Summable):
                raise TypeError(f"SumSystem part {i} must be a DiscreteDelaySystem or a DelayTap, got "
                                f"{type(p).__name__}")
            batch = check_batch(f"SumSystem part {i} ({type(p).__name__})", p.batch_shape, batch)
        dts = {p.dt for p in flat}
        if len(dts) > 1:
            raise ValueError(f"SumSystem parts must share dt, got {sorted(map(str, dts))}")
        self.parts = tuple(flat)
        self.iir = tuple(p for p in flat if p.has_poles)
        taps = [p for p in flat if not p.has_poles]
        self.tap = taps[0] if len(taps) == 1 else None
        self.dt, self._batch = flat[0].dt, tuple(batch)
        self._freeze()

    @property
    def batch_shape(self):
        """Broadcast batch shape of the parts."""
        return self._batch

    def __getattr__(self, name):
        if name in _IIR_ATTRS:
            iir = self.__dict__.get("iir", ())
            if len(iir) == 1:
                return getattr(iir[0], name)
            raise AttributeError(f"SumSystem.{name}: defined for a sum with exactly one delay system, this one has "
                                 f"{len(iir)} (read it from .parts)")
        raise AttributeError(f"'SumSystem' object has no attribute {name!r}")

    def __repr__(self):
        return f"SumSystem({', '.join(map(repr, self.parts))})"

    # ------------------------------------------------------------------ stability: the poles' parts
    def _is_stable_exact(self, **kwargs):
        out = np.ones(self._batch, dtype=bool)
        for p in self.parts:
            out = out & np.asarray(p.is_stable(**kwargs))
        return out if self._batch else np.bool_(out)

    def _is_stable_sufficient(self):
        out = np.ones(self._batch, dtype=bool)
        for p in self.parts:
            out = out & np.asarray(p.is_stable(method="sufficient"))
        return out if self._batch else np.bool_(out)

    # ------------------------------------------------------------------ responses: sums
    def _real_dtype(self, dtype):
        xp = self.parts[0].xp
        if dtype is not None:
            return dtype
        first = self.iir[0].lam.dtype if self.iir else self.parts[0].e.dtype
        return real_dtype_of(xp, first)

    def kernel(self, L, dtype=None, **kernel_kw):
        """Sum of the parts' kernels (``d`` excluded).

        Parameters
        ----------
        L : int
            Kernel length.
        dtype : float32 or float64, optional
            Real output dtype (default: the delay system's). The parts are summed in float64.
        **kernel_kw
            Passed to every part's ``kernel`` (``method``, ``eps``, ``M``, ``compute_dtype``; the taps'
            kernels are exact whatever they say).

        Returns
        -------
        ndarray, real ``(batch, L)``
            ``batch`` the broadcast batch shape.

        Raises
        ------
        ValueError, TypeError
            As the parts' ``kernel`` (:meth:`ddesys.DiscreteDelaySystem.kernel`).
        """
        xp = self.parts[0].xp
        out = self._real_dtype(dtype)
        K = sum(xp.astype(p.kernel(L, dtype=xp.float64, **kernel_kw), xp.float64) for p in self.parts)
        return xp.astype(xp.broadcast_to(K, self._batch + (K.shape[-1],)), out)

    def impulse(self, L, **kernel_kw):
        """Impulse response: the kernel with the delay systems' ``d`` added at ``t = 0``.

        Parameters
        ----------
        L : int
            Length.
        **kernel_kw
            Passed to :meth:`kernel` (``dtype``, ``method``, ``eps``, ``M``, ``compute_dtype``).

        Returns
        -------
        ndarray, real ``(batch, L)``

        Raises
        ------
        ValueError, TypeError
            As :meth:`kernel`.
        """
        K = self.kernel(L, **kernel_kw)
        for p in self.iir:
            K[..., 0] = K[..., 0] + p.d
        return K

    def transfer(self, z):
        """Sum of the parts' transfer functions.

        Parameters
        ----------
        z : array_like, complex ``(F,)``
            Nonzero points.

        Returns
        -------
        ndarray, complex ``(batch, F)``

        Raises
        ------
        ValueError
            A ``z`` holding 0 (refused by a tap part).
        """
        return sum(p.transfer(z) for p in self.parts)

    def freqresp(self, omega):
        """Sum of the parts' frequency responses.

        Parameters
        ----------
        omega : array_like, real ``(F,)``
            Radians per step.

        Returns
        -------
        ndarray, complex ``(batch, F)``

        Raises
        ------
        ValueError, TypeError
            Non-finite or complex ``omega``.
        """
        xp = self.parts[0].xp
        omega = as_array(xp, omega, "omega", "real")
        cdt = self.iir[0].lam.dtype if self.iir else xp.complex128
        return self.transfer(xp.exp(1j * xp.astype(xp.reshape(omega, (-1,)), cdt)))

    def simulate(self, x):
        """Sum of the parts' outputs, zero initial history (the parts run on ``x`` in float64 and are
        summed there).

        Parameters
        ----------
        x : array_like, real ``(..., L)``
            Inputs; the batch part broadcasts with the system's batch shape.

        Returns
        -------
        ndarray, real ``(batch, L)``
            In ``x``'s dtype.

        Raises
        ------
        TypeError
            Complex ``x``.
        ValueError
            Non-finite ``x``, a batch that does not broadcast.
        """
        xp = self.parts[0].xp
        if getattr(x, "dtype", None) is not None and "complex" in str(x.dtype):
            raise TypeError("simulate(x): x must be real; a complex input has no meaning for the real system")
        x = as_array(xp, x, "x", "real")
        x64 = xp.astype(x, xp.float64)
        y = sum(xp.astype(p.simulate(x64), xp.float64) for p in self.parts)
        return xp.astype(y, x.dtype)

    def to_statespace(self, index=None):
        """Refused: a tap is not a state-space term, and a sum of delay systems has no single state-space
        form here (convert the parts, ``SumSystem.parts``, one by one).

        Parameters
        ----------
        index : int or tuple of int, optional
            The channel, as :meth:`ddesys.DiscreteDelaySystem.to_statespace`.

        Raises
        ------
        ValueError
            Always.
        """
        for p in self.parts:
            if not p.has_poles:
                refuse_tap(p)
        raise ValueError("to_statespace(): a sum of several delay systems has no one diagonal state-space form "
                         "here; convert the parts (SumSystem.parts) one by one")
