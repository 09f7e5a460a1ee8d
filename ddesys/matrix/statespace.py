"""Continuous matrix delay systems with several delays: :class:`DelayStateSpace` (docs/theory.md §9).

    x'(t) = A x(t) + sum_k Ad[k] x(t - tau[k]) + B u(t),      y(t) = C x(t) + D u(t)

The class holds the validated matrices and delegates each analysis to the module of its concept:
:mod:`ddesys.matrix.roots` (characteristic roots, spectral abscissa, exact stability), :mod:`ddesys.matrix.crossings`
(delay sweeps and margins), :mod:`ddesys.matrix.chart` (stability charts), :mod:`ddesys.matrix.norms` (frequency
response, H2, Hinf), :mod:`ddesys.matrix.timeresp` (simulation, impulse and step responses) and
:mod:`ddesys.matrix.discretize` (discretization). The time responses come from the mixin
:class:`~ddesys.matrix.continuous_response.ContinuousSSResponses` and the delay sweeps (crossings, delay
margin, two-delay chart) from :class:`~ddesys.matrix.sweeps.DelaySweeps`, as the other classes take
their time responses from a ``*Responses`` mixin. NumPy only: analysis runs on the host.
"""
from __future__ import annotations

import numpy as np

from .base import MatrixLTI
from .charmatrix import char_matrix, check_statespace
from .continuous_response import ContinuousSSResponses
from .sweeps import DelaySweeps


class DelayStateSpace(ContinuousSSResponses, DelaySweeps, MatrixLTI):
    """A continuous linear system with ``K`` discrete delays (docs/theory.md §9)::

        x'(t) = A x(t) + sum_k Ad[k] x(t - tau[k]) + B u(t),      y(t) = C x(t) + D u(t)

    Parameters
    ----------
    A : array_like ``(n, n)``
        Real or complex.
    Ad : array_like ``(n, n)`` or a sequence of ``K`` such matrices
        The delayed-state matrices.
    tau : float or array_like ``(K,)``
        Their delays, ``> 0``, in time units.
    B, C, D : array_like, optional
        ``(n, m)``, ``(p, n)``, ``(p, m)``; defaults ``B = I``, ``C = I``, ``D = 0`` (a 1-D ``B`` is
        one input column, a 1-D ``C`` one output row).

    Attributes
    ----------
    A, Ad, tau, B, C, D : ndarray
        Validated, read-only; float64 or (when any matrix is complex) complex128; ``Ad`` ``(K, n, n)``.
    dt : 0
        A continuous-time system.

    Raises
    ------
    ValueError
        Shapes that do not fit, non-finite entries, a delay ``<= 0``, before any work.
    TypeError
        Non-numeric input, a complex delay.

    See Also
    --------
    DelaySystem : the diagonal special case with exact scalar formulas (its ``to_statespace()``
        converts it).
    DiscreteDelayStateSpace : the result of :meth:`discretize`.

    Notes
    -----
    History before ``t = 0`` is zero. A root ``s`` of ``det M(s) = 0``, ``M(s) = s I - A - sum_k Ad[k]
    e^{-s tau[k]}``, is a characteristic root; the system is stable when every root has ``Re s < 0``.

    Examples
    --------
    Two coupled states with one delay:

    >>> import numpy as np
    >>> from ddesys import DelayStateSpace
    >>> sys = DelayStateSpace(A=[[-2.0, 1.0], [0.0, -1.0]], Ad=[[-1.0, 0.0], [0.5, -0.5]], tau=1.0,
    ...                       B=[1.0, 0.0], C=[0.0, 1.0])
    >>> sys
    DelayStateSpace(n_states=2, n_inputs=1, n_outputs=1, tau=[1.0])
    >>> bool(sys.is_stable())
    True
    >>> np.round(sys.freqresp([0.0])[0, 0], 6)                    # DC gain -C (A + Ad)^-1 B
    array([0.125+0.j])
    """

    dt = 0

    def __init__(self, A, Ad, tau, B=None, C=None, D=None):
        data = check_statespace(A, Ad, tau, B, C, D)
        for name, value in data._asdict().items():
            value = np.array(value)
            value.setflags(write=False)
            setattr(self, name, value)
        self._freeze()

    # ---------------------------------------------------------------- shapes (n_states, n_inputs, n_outputs: MatrixLTI)
    @property
    def n_delays(self):
        """Number of delays ``K``."""
        return int(self.tau.size)

    def _data(self):
        return self.A, self.Ad, self.tau

    def _full(self):
        return self.A, self.Ad, self.tau, self.B, self.C, self.D

    def characteristic_matrix(self, s):
        """``M(s) = s I - A - sum_k Ad[k] e^{-s tau[k]}`` at the points ``s``.

        Parameters
        ----------
        s : array_like, complex ``(...)``

        Returns
        -------
        ndarray, complex ``(..., n, n)``
        """
        return char_matrix(self.A, self.Ad, self.tau, np.asarray(s, dtype=complex))

    # ---------------------------------------------------------------- roots and stability
    def roots(self, re_min=None, **kwargs):
        """Every characteristic root with real part ``>= re_min``, refined on the exact ``M(s)``.

        Parameters
        ----------
        re_min : float, optional
            Left edge of the region. Default: one unit left of the spectral abscissa (so at least the
            rightmost roots are returned).
        **kwargs
            Passed to :func:`ddesys.matrix.roots.characteristic_roots` (``n_grid``, ``max_grid``, ``tol``,
            ``certify``).

        Returns
        -------
        RootsResult
            ``roots`` (descending real part), ``residuals``, ``certified`` (the argument-principle
            count of ``det M`` on the region's boundary equals the number found), ``count``,
            ``message``; unpacks as ``roots, residuals``.

        Raises
        ------
        ValueError
            A non-finite ``re_min``.

        See Also
        --------
        spectral_abscissa, is_stable

        Examples
        --------
        >>> from ddesys import DelayStateSpace
        >>> sys = DelayStateSpace(A=[[0.0]], Ad=[[-1.0]], tau=1.0)     # x' = -x(t - 1)
        >>> r = sys.roots(re_min=-1.0)
        >>> r.certified, [complex(round(z.real, 4), round(z.imag, 4)) for z in r.roots[:2]]
        (True, [(-0.3181+1.3372j), (-0.3181-1.3372j)])
        """
        from .roots import characteristic_roots, spectral_abscissa

        if re_min is None:
            re_min = spectral_abscissa(*self._data()) - 1.0
        re_min = float(re_min)
        if not np.isfinite(re_min):
            raise ValueError(f"re_min must be finite, got {re_min}")
        return characteristic_roots(*self._data(), re_min, **kwargs)

    def poles(self, re_min=None, **kwargs):
        """The characteristic roots as an array (python-control's name): ``roots(re_min).roots``.

        Parameters
        ----------
        re_min : float, optional
        **kwargs
            As :meth:`roots`.

        Returns
        -------
        ndarray, complex ``(r,)``
            Descending real part.

        Raises
        ------
        ValueError
            A non-finite ``re_min``.
        """
        return self.roots(re_min, **kwargs).roots

    def spectral_abscissa(self):
        """Largest real part of the characteristic roots (certified; see :func:`ddesys.matrix.roots.spectral_abscissa`).

        Returns
        -------
        float

        Examples
        --------
        >>> from ddesys import DelayStateSpace
        >>> round(DelayStateSpace([[-1.0]], [[0.5]], 1.0).spectral_abscissa(), 6)   # Lambert W: -1 + W(0.5 e)
        -0.314923
        """
        from .roots import spectral_abscissa

        key = "abscissa"
        if key not in self._cache:
            self._cache[key] = float(spectral_abscissa(*self._data()))
        return self._cache[key]

    def _is_stable_exact(self):
        from .roots import is_stable

        if "stable" not in self._cache:
            self._cache["stable"] = bool(is_stable(*self._data()))
        return self._cache["stable"]

    def sufficient_margin(self):
        """Margin of the delay-independent sufficient test: ``-(mu_2(A) + sum_k ||Ad[k]||_2)``.

        ``mu_2(A) = lambda_max((A + A^H) / 2)`` is the logarithmic norm. A positive margin proves the
        system stable for *every* choice of the delays: at a root ``s`` with eigenvector ``v``
        (``|v| = 1``), ``Re s = Re v^H (A + sum_k Ad_k e^{-s tau_k}) v <= mu_2(A) + sum_k ||Ad_k||_2
        |e^{-s tau_k}|``, which is negative when ``Re s >= 0`` (the Halanay-type bound; docs/theory.md
        §9). A negative margin proves nothing.

        Returns
        -------
        float
        """
        mu = float(np.linalg.eigvalsh((self.A + self.A.conj().T) / 2).max())
        return -(mu + float(sum(np.linalg.norm(m, 2) for m in self.Ad)))

    def _is_stable_sufficient(self):
        return self.sufficient_margin() > 0

    # ---------------------------------------------------------------- frequency domain
    def transfer(self, s):
        """Transfer matrix ``G(s) = C M(s)^{-1} B + D`` at complex points ``s``.

        Parameters
        ----------
        s : array_like, complex ``(F,)``

        Returns
        -------
        ndarray, complex ``(p, m, F)``

        Examples
        --------
        >>> from ddesys import DelayStateSpace
        >>> sys = DelayStateSpace([[-1.0]], [[0.5]], 1.0)
        >>> sys.transfer([0.0]).shape, complex(sys([0.0])[0, 0, 0])   # sys(s) is transfer(s)
        ((1, 1, 1), (2+0j))
        """
        from .freqresp import response_at

        s = np.asarray(s, dtype=complex).reshape(-1)
        return np.moveaxis(response_at(self.A, self.Ad, self.tau, self.B, self.C, s), 0, -1) + self.D[..., None]

    def freqresp(self, omega):
        """Exact frequency response ``G(i omega)``.

        Parameters
        ----------
        omega : array_like, real ``(F,)``
            Radians per time unit.

        Returns
        -------
        ndarray, complex ``(p, m, F)``

        Examples
        --------
        >>> import numpy as np
        >>> from ddesys import DelayStateSpace
        >>> sys = DelayStateSpace(A=[[-1.0]], Ad=[[0.5]], tau=1.0)
        >>> np.round(sys.freqresp([0.0, 1.0])[0, 0], 4)
        array([2.    +0.j    , 0.2861-0.5569j])
        """
        from .freqresp import freqresp

        omega = np.asarray(omega, dtype=float).reshape(-1)
        return freqresp(*self._full(), omega)

    def h2_norm(self, rtol=1e-8):
        """H2 norm ``sqrt((1/2 pi) int trace(G(i w)^H G(i w)) dw)`` (see :func:`ddesys.matrix.norms.h2_norm`).

        Parameters
        ----------
        rtol : float, default 1e-8
            Relative tolerance of the quadrature.

        Returns
        -------
        float
            ``inf`` for ``D != 0``.

        Raises
        ------
        ValueError
            An unstable system.

        Examples
        --------
        >>> from ddesys import DelayStateSpace
        >>> round(DelayStateSpace([[-1.0]], [[0.5]], 1.0, B=[1.0], C=[1.0]).h2_norm(), 8)
        0.85089427
        """
        from .norms import h2_norm, require_stable

        require_stable(self, "h2_norm")
        return h2_norm(*self._full(), rtol=rtol, is_stable=True)     # the exact test above

    def hinf_norm(self, rtol=1e-9):
        """Hinf norm ``sup_w sigma_max(G(i w))`` and the peak frequency (see :func:`ddesys.matrix.norms.hinf_norm`).

        Parameters
        ----------
        rtol : float, default 1e-9
            Relative tolerance of the peak value.

        Returns
        -------
        HinfNorm
            ``(value, omega_peak)``.

        Raises
        ------
        ValueError
            An unstable system.

        Examples
        --------
        >>> from ddesys import DelayStateSpace
        >>> DelayStateSpace([[-1.0]], [[0.5]], 1.0, B=[1.0], C=[1.0]).hinf_norm()    # the DC gain 1 / (1 - 0.5)
        HinfNorm(value=2.0, omega_peak=0.0)
        """
        from .norms import hinf_norm, require_stable

        require_stable(self, "hinf_norm")
        return hinf_norm(*self._full(), rtol=rtol, is_stable=True)


    # ---------------------------------------------------------------- discretization
    def discretize(self, dt, method="zoh"):
        """The discrete multi-delay system for the step ``dt`` (``dt`` kept on the result).

        Parameters
        ----------
        dt : float
            Step ``> 0``; every delay ``tau[k] / dt`` must be ``>= 1`` step.
        method : {"zoh", "euler"}
            Zero-order hold of the input and of the delayed state over a step, or forward Euler.

        Returns
        -------
        DiscreteDelayStateSpace

        Raises
        ------
        ValueError
            ``dt <= 0`` or a delay shorter than one step.

        Examples
        --------
        >>> from ddesys import DelayStateSpace
        >>> sd = DelayStateSpace([[-1.0]], [[0.5]], 1.0).discretize(0.1)
        >>> sd.dt, float(sd.delay[0]), bool(sd.is_stable())
        (0.1, 10.0, True)
        """
        from .discretize import zoh_statespace

        return zoh_statespace(*self._full(), dt, method=method)

    # ---------------------------------------------------------------- plots
    def bode(self, omega=None, axes=None):
        """Bode plot (magnitude in dB, phase in degrees) of every input-output pair; returns the figure.

        Parameters
        ----------
        omega : array_like, optional
            Frequencies (rad per time unit); default 400 log-spaced points around the system's scales.
        axes : array of matplotlib Axes, optional

        Returns
        -------
        matplotlib.figure.Figure

        Examples
        --------
        >>> from ddesys import DelayStateSpace
        >>> fig = DelayStateSpace([[-1.0]], [[0.5]], 1.0).bode()
        >>> len(fig.axes)                                            # magnitude and phase
        2
        """
        from .plot import plot_bode

        if omega is None:
            scale = max(1.0 / float(self.tau.max()), float(np.abs(np.linalg.eigvals(self.A)).max(initial=1.0)))
            omega = np.logspace(np.log10(scale) - 3, np.log10(scale) + 2, 400)
        return plot_bode(*self.frequency_response(omega), axes=axes)


__all__ = ["DelayStateSpace"]
