"""One analysis API for every ddesys system (python-control's ``LTI`` and scipy's ``lti``/``dlti`` habits).

:class:`DelayLTI` is the base of the continuous classes (:class:`~ddesys.DelaySystem`,
:class:`~ddesys.DelayStateSpace`, ``dt = 0``) and the discrete ones
(:class:`~ddesys.DiscreteDelaySystem`, :class:`~ddesys.DiscreteDelayStateSpace`, ``dt = True`` for an
unspecified step or the step in time units). What every class offers under the same name:

* ``dt``, ``isctime()``, ``isdtime()``; ``discretize(dt)`` keeps ``dt`` on the result;
* ``sys(x)``: the transfer function at ``s`` (continuous) or ``z`` (discrete), as ``transfer(x)``;
* ``freqresp(omega)``: the complex response as an array (scipy's name: radians per time unit for a
  continuous system, radians per *step* for a discrete one); ``frequency_response(omega)``: a
  :class:`FrequencyResponse` (python-control's name; for a discrete system with a numeric ``dt``,
  ``omega`` is in radians per time unit, ``z = exp(i omega dt)``);
* ``is_stable()``: exact by default; ``is_stable(method="sufficient")`` the cheap sufficient test,
  whose margin is ``sufficient_margin()`` (not called a "stability margin": control engineers mean
  gain and phase margins by that);
* systems are immutable: attributes cannot be rebound after construction, and no method changes them.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np


class FrequencyResponse(NamedTuple):
    """A frequency response: unpacks as ``omega, response``.

    Attributes
    ----------
    omega : ndarray, real ``(F,)``
        The frequencies asked for.
    response : ndarray, complex ``(..., F)``
        The response (``(p, m, F)`` for a state-space system, ``(..., F)`` for a batch of SISO channels).
    """

    omega: np.ndarray
    response: np.ndarray

    @property
    def magnitude(self):
        """``|response|``."""
        return np.abs(self.response)

    @property
    def phase(self):
        """Unwrapped phase along the frequency axis, radians."""
        return np.unwrap(np.angle(self.response), axis=-1)


STABILITY_METHODS = ("exact", "sufficient")


class DelayLTI:
    """Base of the ddesys systems: ``dt``, the transfer call, frequency responses, ``is_stable``.

    Subclasses implement ``transfer(x)``, ``freqresp(omega)``, ``_is_stable_exact(**kw)`` and
    ``_is_stable_sufficient()``, and call ``self._freeze()`` at the end of ``__init__``. Derived,
    cached results go into ``self._cache`` (a dict), which is the only thing that may change later.
    """

    dt = 0

    # ---------------------------------------------------------------- immutability
    def _freeze(self):
        object.__setattr__(self, "_frozen", True)

    def __setattr__(self, name, value):
        if getattr(self, "_frozen", False):
            raise AttributeError(f"{type(self).__name__} is immutable: cannot set {name!r} (build a new "
                                 "system instead)")
        object.__setattr__(self, name, value)

    @property
    def _cache(self):
        try:
            return self.__dict__["_cache_dict"]
        except KeyError:
            d = {}
            object.__setattr__(self, "_cache_dict", d)
            return d

    # ---------------------------------------------------------------- time base
    def isctime(self, strict=False):
        """True for a continuous-time system (``dt == 0``).

        Parameters
        ----------
        strict : bool, default False
            python-control's argument, accepted for its signature; the answer does not depend on it.

        Returns
        -------
        bool
        """
        return self.dt == 0

    def isdtime(self, strict=False):
        """True for a discrete-time system (``dt`` is ``True`` or a step ``> 0``).

        Parameters
        ----------
        strict : bool, default False
            Only for a numeric step (``dt = True``, an unspecified step, then gives False).

        Returns
        -------
        bool
        """
        if self.dt is True:
            return not strict
        return self.dt != 0

    # ---------------------------------------------------------------- frequency domain
    def __call__(self, x):
        """The transfer function at ``x`` (``s`` for a continuous system, ``z`` for a discrete one)."""
        return self.transfer(x)

    def frequency_response(self, omega):
        """The frequency response at ``omega`` as a :class:`FrequencyResponse` (unpacks as
        ``omega, response``).

        Parameters
        ----------
        omega : array_like, real ``(F,)``
            Radians per time unit; for a discrete system with ``dt = True``, radians per step.

        Returns
        -------
        FrequencyResponse
        """
        omega = np.asarray(omega, dtype=float).reshape(-1)
        w = omega * self.dt if (self.isdtime(strict=True)) else omega
        return FrequencyResponse(omega, self.freqresp(w))

    # ---------------------------------------------------------------- stability
    def is_stable(self, method="exact", **kwargs):
        """Whether the system is stable.

        Parameters
        ----------
        method : {"exact", "sufficient"}, default "exact"
            ``"exact"``: every characteristic root strictly in the stable region (open left
            half-plane, or open unit disk for a discrete system). ``"sufficient"``: the cheap test
            whose margin is :meth:`sufficient_margin`; True proves stability, False proves nothing.
        **kwargs
            Passed to the exact test (e.g. ``max_bytes``).

        Returns
        -------
        bool or ndarray of bool ``(...)``
            Per channel for a batch of channels.

        Warns
        -----
        UndecidableStability
            (continuous matrix systems) a characteristic root lies within rounding of the imaginary
            axis, closer than float64 can resolve: the answer is ``False`` (stability not proven).

        Examples
        --------
        Outside the sufficient diamond ``|lam| + |mu| < 1`` yet stable:

        >>> from ddesys import DiscreteDelaySystem
        >>> sys = DiscreteDelaySystem(lam=[0.5], mu=[-0.6], bbar=[1.0], c=[1.0], delay=1.0)
        >>> bool(sys.is_stable()), bool(sys.is_stable(method="sufficient"))
        (True, False)
        """
        if method not in STABILITY_METHODS:
            raise ValueError(f"method must be one of {STABILITY_METHODS}, got {method!r}")
        if method == "sufficient":
            if kwargs:
                raise TypeError(f"is_stable(method='sufficient') takes no options, got {sorted(kwargs)}")
            return self._is_stable_sufficient()
        return self._is_stable_exact(**kwargs)


__all__ = ["DelayLTI", "FrequencyResponse", "STABILITY_METHODS"]
