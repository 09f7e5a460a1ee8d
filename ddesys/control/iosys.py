"""Linear systems with delays on inputs, outputs and inside loops: :class:`~ddesys.DelayIOSystem`
(docs/theory.md §9.7).

The form is the one MATLAB calls a state-space model with internal delays, and it is closed under
every interconnection (:mod:`ddesys.control.bdalg`)::

    x'(t) = A x + B1 u + B2 w          y = C1 x + D11 u + D12 w
    z(t)  = C2 x + D21 u + D22 w       w_j(t) = z_j(t - tau_j)

Dead time on an input, a transfer function ``e^{-L s} N(s) / D(s)``, and the closed loop of a plant
with dead time are all of this form. Its transfer function is exact at every ``s``; its roots,
stability and time responses come from the explicit form (:meth:`~ddesys.DelayIOSystem.explicit_form`), a
retarded :class:`~ddesys.DelayStateSpace` with delayed inputs and outputs, whenever the delay
channels close no loop among themselves.
"""
from __future__ import annotations

import numpy as np
import scipy.linalg

from ..matrix.base import MatrixLTI
from ..matrix.charmatrix import real_vector
from ..matrix.statespace import DelayStateSpace
from . import _lft
from ._io_neutral import DifferenceLoop
from ._io_reduce import delay_cycle, explicit_form
from .margins import LoopAnalysis


def _real(name, value, shape):
    arr = np.asarray(value if value is not None else np.zeros(shape))
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    arr = np.array(arr, dtype=np.float64)
    if arr.ndim == 0 and shape != ():
        arr = np.full(shape, float(arr))
    if arr.size == 0 and 0 in shape:
        arr = arr.reshape(shape)
    if arr.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite")
    arr.setflags(write=False)
    return arr


# ------------------------------------------------------------------------------------------ zeros
def _single_delays(f, axis):
    """Per input (``axis=1``) or output (``axis=0``): the one dead time of its delayed terms, or ``None``
    when the terms of one input (output) carry different delays or mix with undelayed ones."""
    delays = f.input_delays if axis == 1 else f.output_delays
    mats = f.Bd if axis == 1 else f.Cd
    base = f.B0 if axis == 1 else f.C0
    size = base.shape[1] if axis == 1 else base.shape[0]
    out = np.zeros(size)
    for j in range(size):
        sel = (lambda M: M[:, j]) if axis == 1 else (lambda M: M[j])
        used = [d for d, M in zip(delays, mats) if np.any(sel(M) != 0)]
        if len(used) > 1 or (used and np.any(sel(base) != 0)):
            return None
        out[j] = used[0] if used else 0.0
    return out


def _rational_feedthrough(f, hin, hout):
    """``D`` of the rational part: entry ``(i, j)`` carries the dead time ``hout_i + hin_j`` or is zero;
    ``None`` when some feedthrough term has another delay."""
    total = hout[:, None] + hin[None, :]
    D = np.where(total == 0, f.D0, 0.0)
    if np.any(f.D0[total > 0] != 0):
        return None
    for d, M in zip(f.feed_delays, f.Dd):
        on = M != 0
        if np.any(np.abs(total[on] - d) > 1e-12 * (1 + d)):
            return None
        D = D + np.where(on, M, 0.0)
    return D


def transmission_zeros(sys):
    """The transmission zeros of ``sys`` (see :meth:`DelayIOSystem.zeros`), sorted by descending real part.

    Raises
    ------
    ValueError
        A non-square system, a state read late, a feedthrough with dead time, or an input or output with
        more than one dead time: the zeros are then roots of a quasi-polynomial, not computed here.
    """
    f = sys.explicit_form()
    p, m = f.C0.shape[0], f.B0.shape[1]
    if p != m:
        raise ValueError(f"transmission zeros are defined here for square systems; this one is {p}x{m}")
    hin, hout = _single_delays(f, 1), _single_delays(f, 0)
    D = _rational_feedthrough(f, hin, hout) if hin is not None and hout is not None else None
    if f.state_delays.size or D is None:
        raise ValueError("the zeros of this system are roots of a quasi-polynomial (a state read late, or an input "
                         "or output with more than one dead time); transmission zeros are computed for systems "
                         "with one dead time per input and output")
    B = f.B0 + sum(f.Bd) if f.input_delays.size else f.B0       # the rational part R(s)
    C = f.C0 + sum(f.Cd) if f.output_delays.size else f.C0
    n = f.A.shape[0]
    if n == 0:
        return np.zeros(0, complex)
    P = np.block([[f.A, B], [C, D]])
    Q = np.zeros_like(P)
    Q[:n, :n] = np.eye(n)
    with np.errstate(all="ignore"):
        z = scipy.linalg.eigvals(P, Q)
    z = z[np.isfinite(z) & (np.abs(z) < 1e12 * (1 + np.linalg.norm(P)))]
    return z[np.argsort(-z.real, kind="stable")]


class DelayIOSystem(LoopAnalysis, MatrixLTI):
    """A linear system with delays on its inputs, outputs and internal loops (docs/theory.md §9.7)::

        x'(t) = A x + B1 u + B2 w,      y = C1 x + D11 u + D12 w,
        z(t)  = C2 x + D21 u + D22 w,   w_j(t) = z_j(t - tau_j)

    Build one with :func:`ddesys.tf` (a transfer function with dead time), :func:`ddesys.ss`
    (state-space matrices with input, output and state delays) or from other systems: ``k * sys``,
    ``sys1 * sys2`` (``sys2`` first), ``sys1 + sys2``, :func:`ddesys.series`, :func:`ddesys.parallel`,
    :func:`ddesys.feedback`; python-control systems with :func:`ddesys.from_control`.

    Parameters
    ----------
    A : array_like ``(n, n)``
    B, C, D : array_like
        ``B1 (n, m)``, ``C1 (p, n)``, ``D11 (p, m)``: the delay-free part.
    B2, C2, D12, D21, D22 : array_like, optional
        ``(n, q)``, ``(q, n)``, ``(p, q)``, ``(q, m)``, ``(q, q)``: the delay channels (zero by default).
    tau : array_like ``(q,)``
        The channels' delays, ``> 0``.

    Attributes
    ----------
    A, B1, C1, D11, B2, C2, D12, D21, D22, tau : ndarray
        Read-only float64.
    dt : 0

    Raises
    ------
    ValueError, TypeError
        Shapes that do not fit, non-finite or complex entries, a delay ``<= 0``.

    Examples
    --------
    The first-order plant with dead time ``e^{-s} / (s + 1)`` under proportional feedback:

    >>> import ddesys
    >>> G = ddesys.tf([1.0], [1.0, 1.0], delay=1.0)
    >>> G
    DelayIOSystem(n_states=1, n_inputs=1, n_outputs=1, delays=[1.0])
    >>> loop = ddesys.feedback(2.0 * G)
    >>> round(loop.delay_margin(), 6)                # (pi - atan(sqrt 3)) / sqrt 3
    1.2092
    """

    dt = 0
    _input_matrix, _output_matrix = "B1", "C1"

    def __init__(self, A, B, C, D=None, *, B2=None, C2=None, D12=None, D21=None, D22=None, tau=()):
        tau = real_vector(tau, "tau", "delays (time units)")
        if np.any(tau <= 0):
            raise ValueError(f"every delay must be > 0, got {tau.tolist()}")
        A = np.asarray(A, dtype=float) if np.size(A) else np.zeros((0, 0))
        if A.ndim != 2 or A.shape[0] != A.shape[1]:
            raise ValueError(f"A must be square (n, n), got shape {A.shape}")
        n, q = A.shape[0], tau.size
        B = np.asarray(B, dtype=float)
        C = np.asarray(C, dtype=float)
        if B.ndim != 2 or C.ndim != 2:
            raise ValueError(f"B and C must be 2-D, got shapes {B.shape} and {C.shape}")
        m, p = B.shape[1], C.shape[0]
        mats = dict(A=(A, (n, n)), B1=(B, (n, m)), C1=(C, (p, n)), D11=(D, (p, m)), B2=(B2, (n, q)),
                    C2=(C2, (q, n)), D12=(D12, (p, q)), D21=(D21, (q, m)), D22=(D22, (q, q)))
        for name, (value, shape) in mats.items():
            object.__setattr__(self, name, _real(name, value, shape))
        tau.setflags(write=False)
        self.tau = tau
        self._freeze()

    # ---------------------------------------------------------------- shapes (n_states, n_inputs, n_outputs: MatrixLTI)
    @property
    def n_channels(self):
        """Number of delay channels ``q``."""
        return int(self.tau.size)

    def io_data(self):
        """The matrices as an ``IOData`` named tuple ``(A, B1, C1, D11, B2, C2, D12, D21, D22, tau)``."""
        return _lft.IOData(self.A, self.B1, self.C1, self.D11, self.B2, self.C2, self.D12, self.D21, self.D22,
                           self.tau)

    @classmethod
    def from_data(cls, g):
        """A system from an ``IOData`` (see :meth:`io_data`).

        Parameters
        ----------
        g : IOData
            ``(A, B1, C1, D11, B2, C2, D12, D21, D22, tau)``, shapes as in the class docstring.

        Returns
        -------
        DelayIOSystem

        Raises
        ------
        ValueError, TypeError
            As the constructor.
        """
        return cls(g.A, g.B1, g.C1, g.D11, B2=g.B2, C2=g.C2, D12=g.D12, D21=g.D21, D22=g.D22, tau=g.tau)

    # ---------------------------------------------------------------- interconnection operators
    def __mul__(self, other):                     # self * other: other first
        return type(self).from_data(_lft.series(*_lft.coerce_chain([other, self])))

    def __rmul__(self, other):                    # other * self: self first
        return type(self).from_data(_lft.series(*_lft.coerce_chain([self, other])))

    def __add__(self, other):
        return type(self).from_data(_lft.parallel(*_lft.coerce_sum([self, other])))

    __radd__ = __add__

    def __neg__(self):
        return (-1.0) * self

    def __sub__(self, other):
        return self + (-1.0) * type(self).from_data(_lft.coerce_sum([self, other])[1])

    def __rsub__(self, other):
        return (-self) + other

    def feedback(self, other=1, sign=-1):
        """The closed loop ``y = self u``, ``u = r + sign * other y`` (see :func:`ddesys.feedback`).

        Parameters
        ----------
        other : system or gain, default 1
            The feedback path, ``(m, p)`` (a number is ``k I``).
        sign : {-1, 1}, default -1
            Negative or positive feedback.

        Returns
        -------
        DelayIOSystem
            From ``r`` to ``y``.

        Raises
        ------
        ValueError
            ``sign`` not -1 or 1; an ``other`` whose shape does not close the loop; an algebraic loop
            (:class:`~ddesys.AlgebraicLoopError`: a loop with neither a delay nor dynamics).
        TypeError
            An ``other`` that is not a continuous real system or a number.
        """
        if sign not in (-1, 1):
            raise ValueError(f"sign must be -1 or 1, got {sign!r}")
        return type(self).from_data(_lft.feedback(self.io_data(), _lft.coerce(other, size=self.n_outputs), sign))

    def to_control(self, pade_order=None):
        """A python-control ``StateSpace``, each delay replaced by its Pade approximation of ``pade_order``
        (see :func:`ddesys.to_control`).

        Parameters
        ----------
        pade_order : int, optional
            Order of every delay's Pade approximation, in ``[1, MAX_PADE_ORDER]``; required when the
            system has delay channels.

        Returns
        -------
        control.StateSpace

        Raises
        ------
        ImportError
            python-control is not installed.
        ValueError
            No ``pade_order`` for a system with delays, or one out of range.
        TypeError
            A ``pade_order`` that is not an integer.
        """
        return _lft.to_control(self.io_data(), pade_order)

    def _repr_delays(self):                      # the distinct delays (tau holds one per channel)
        return "delays", sorted({float(t) for t in self.tau})

    def __str__(self):
        """The transfer function of each input-output pair with its dead time, in python-control's layout
        (``exp(-d s)`` after each fraction); a compact description for internal delays or large systems.

        Examples
        --------
        >>> import ddesys
        >>> print(ddesys.tf([1.0], [3.0, 1.0], delay=1.0))
        DelayIOSystem: 1 input, 1 output, 1 state
        <BLANKLINE>
             1
          ------- exp(-1 s)
          3 s + 1
        """
        from ._io_str import io_str

        return io_str(self)

    def issiso(self):
        """One input and one output."""
        return self.n_inputs == 1 and self.n_outputs == 1

    # ---------------------------------------------------------------- frequency domain
    def transfer(self, s):
        """Transfer matrix at complex points ``s``, exact (delays as ``e^{-s tau}``).

        One linear solve per point of ``[[sI - A, -B2], [-E C2, I - E D22]] [X; W] = [B1; E D21]``,
        ``E = diag(e^{-s tau})``; ``G = C1 X + D12 W + D11``.

        Parameters
        ----------
        s : array_like, complex ``(F,)``

        Returns
        -------
        ndarray, complex ``(p, m, F)``
        """
        return _lft.transfer(self.io_data(), s)

    def dcgain(self):
        """``G(0)``, ``(p, m)`` (python-control's name); infinite entries for an integrator."""
        with np.errstate(all="ignore"):
            try:
                return self.transfer([0.0])[:, :, 0].real
            except np.linalg.LinAlgError:
                return np.full((self.n_outputs, self.n_inputs), np.inf)

    def hinf_norm(self, rtol=1e-9):
        """Hinf norm ``sup_w sigma_max(G(i w))`` and a peak frequency, exact with every delay (the
        transfer matrix of the explicit form on the grids of :meth:`ddesys.DelayStateSpace.hinf_norm`, the
        rest of the axis bounded; docs/theory.md §9.7).

        Parameters
        ----------
        rtol : float, default 1e-9
            Relative tolerance of the peak value.

        Returns
        -------
        HinfNorm
            ``(value, omega_peak)``; ``omega_peak = inf`` when the supremum is the high-frequency value.

        Raises
        ------
        ValueError
            An unstable system, a bad ``rtol``.

        Examples
        --------
        The sensitivity ``1 / (1 + L)`` of ``L = 0.5 e^{-s} / (s + 1)``, largest near the phase crossover:

        >>> import ddesys
        >>> S = ddesys.feedback(1.0, 0.5 * ddesys.tf([1.0], [1.0, 1.0], delay=1.0))
        >>> round(S.hinf_norm().value, 6)
        1.299931
        """
        from ._io_norms import io_hinf_norm

        return io_hinf_norm(self, rtol=rtol)

    def h2_norm(self, rtol=1e-8):
        """H2 norm ``sqrt((1/2 pi) int ||G(i w)||_F^2 dw)``, exact with every delay (``inf`` with a
        feedthrough; the tail beyond the grid integrated exactly with the sine integral, docs/theory.md §9.7).

        Parameters
        ----------
        rtol : float, default 1e-8
            Relative tolerance of the quadrature.

        Returns
        -------
        float
            ``inf`` when the system has a feedthrough (``D0`` or a delayed ``Dd`` nonzero).

        Raises
        ------
        ValueError
            An unstable system, a bad ``rtol``.

        Warns
        -----
        RuntimeWarning
            The quadrature did not meet ``rtol``.
        """
        from ._io_norms import io_h2_norm

        return io_h2_norm(self, rtol=rtol)

    # ---------------------------------------------------------------- explicit form and dynamics
    def explicit_form(self):
        """The explicit form: a retarded state part with delayed inputs and outputs.

        Returns
        -------
        ExplicitForm
            ``x' = A x + sum_d Ad(d) x(t - d) + B0 u + sum_d Bd(d) u(t - d)``, ``y = C0 x + sum_d Cd(d) x(t - d)
            + D0 u + sum_d Dd(d) u(t - d)``: the fields ``A, B0, C0, D0``, and per distinct delay
            ``state_delays, Ad``, ``input_delays, Bd``, ``output_delays, Cd``, ``feed_delays, Dd``.

        Raises
        ------
        AlgebraicLoopError
            The delay channels close a loop among themselves (a delay-difference part).
        """
        if "explicit" not in self._cache:
            self._cache["explicit"] = explicit_form(*self.io_data())
        return self._cache["explicit"]

    def difference_loop(self):
        """The delay-difference part's analysis (a ``DifferenceLoop``: roots,
        stability, strong stability and essential spectrum through an equivalent neutral system), or
        ``None`` when the delay channels close no loop among themselves (a retarded system)."""
        if "difference" not in self._cache:
            g = self.io_data()
            self._cache["difference"] = None if delay_cycle(g.D22) is None else DifferenceLoop(g)
        return self._cache["difference"]

    def internal_dynamics(self):
        """The state part as a :class:`~ddesys.DelayStateSpace` (``x' = A x + sum_d Ad(d) x(t - d)``,
        with ``B0``, ``C0``, ``D0``), or ``None`` when no state is read late (then the roots are the
        eigenvalues of ``A``). Its characteristic roots are this system's.

        Raises
        ------
        AlgebraicLoopError
            A delay-difference part (see :meth:`difference_loop`, which analyses it).
        """
        f = self.explicit_form()
        if f.state_delays.size == 0:
            return None
        return DelayStateSpace(f.A, f.Ad, f.state_delays, f.B0, f.C0, f.D0)

    def roots(self, re_min=None, **kwargs):
        """Characteristic roots (see :meth:`ddesys.DelayStateSpace.roots`); eigenvalues of ``A`` when no
        state is read late.

        Parameters
        ----------
        re_min : float, optional
            Left edge of the region ``Re s >= re_min``. With a delay-difference part (a neutral loop) it
            must exceed the essential bound ``c_D`` (see :meth:`ddesys.NeutralStateSpace.roots`). Default:
            every eigenvalue of ``A`` when no state is read late, else as the retarded or neutral
            ``roots``.
        **kwargs
            Passed to :meth:`ddesys.DelayStateSpace.roots` of the state part (``n_grid``, ``max_grid``,
            ``tol``, ``certify``); none is taken with a delay-difference part.

        Returns
        -------
        ndarray, complex ``(r,)`` or RootsResult
            An array (descending real part) when no state is read late (the spectrum is finite), else a
            ``RootsResult`` (``roots``, ``residuals``, ``certified``, ...).

        Raises
        ------
        TypeError
            Keyword options with a delay-difference part.
        ValueError
            A non-finite ``re_min``, or one ``<= c_D`` with a delay-difference part.
        """
        loop = self.difference_loop()
        if loop is not None:
            if kwargs:
                raise TypeError(f"roots of a loop with a delay-difference part take only re_min, got {sorted(kwargs)}")
            return loop.roots(re_min)
        sys = self.internal_dynamics()
        if sys is None:
            ev = np.linalg.eigvals(self.A)
            ev = ev[np.argsort(-ev.real, kind="stable")]
            return ev if re_min is None else ev[ev.real >= re_min]
        return sys.roots(re_min, **kwargs)

    def zeros(self):
        """Transmission zeros (python-control's name), where finitely many, sorted by descending real part.

        With no state read late, a square system whose every input and output carries at most one dead time
        (``G(s) = diag(e^{-s h_out}) R(s) diag(e^{-s h_in})``, ``R`` rational) has the zeros of ``R``: the finite
        generalized eigenvalues of the Rosenbrock pencil ``[[A, B], [C, D]] - s [[I, 0], [0, 0]]``
        (python-control's ``zeros``).

        Raises
        ------
        ValueError
            A non-square system, a state read late, a feedthrough with dead time, or an input or output with
            more than one dead time: the zeros are then roots of a quasi-polynomial (infinitely many in
            general), not computed here.

        Examples
        --------
        >>> import ddesys
        >>> ddesys.tf([1.0, 2.0], [1.0, 3.0, 1.0], delay=0.5).zeros()
        array([-2.+0.j])
        """
        return transmission_zeros(self)

    def poles(self, re_min=None, **kwargs):
        """The characteristic roots as an array (python-control's name).

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
        ValueError, TypeError
            As :meth:`roots`.
        """
        r = self.roots(re_min, **kwargs)
        return r if isinstance(r, np.ndarray) else r.roots

    def spectral_abscissa(self):
        """Largest real part of the characteristic roots (``-inf`` for a system without states); with a
        delay-difference part ``max(c_D, rightmost root)``, ``c_D`` the essential bound."""
        loop = self.difference_loop()
        if loop is not None:
            return loop.spectral_abscissa()
        sys = self.internal_dynamics()
        if sys is None:
            return float(np.linalg.eigvals(self.A).real.max(initial=-np.inf))
        return sys.spectral_abscissa()

    def strong_stability(self):
        """Strong stability: stability that survives small changes of the delays (see
        :meth:`ddesys.NeutralStateSpace.strong_stability`). A retarded system (no delay-difference part)
        is strongly stable exactly when it is stable: ``gamma0 = 0``.

        Returns
        -------
        StrongStability
        """
        from ..matrix.neutral import StrongStability

        loop = self.difference_loop()
        if loop is not None:
            return loop.strong_stability()
        r = self.roots(0.0)
        n, certified = (r.size, True) if isinstance(r, np.ndarray) else (r.roots.size, bool(r.certified))
        return StrongStability(n == 0, True, 0.0, (0.0, 0.0), int(n), certified,
                               f"retarded: no difference operator (gamma0 = 0); {n} roots in Re s >= 0")

    def _is_stable_exact(self, **kwargs):
        loop = self.difference_loop()
        if loop is not None:
            if kwargs:
                raise TypeError(f"is_stable of a loop with a delay-difference part takes no options, got "
                                f"{sorted(kwargs)}")
            return bool(loop.is_stable())
        sys = self.internal_dynamics()
        if sys is None:
            return bool(self.spectral_abscissa() < 0)
        return bool(sys.is_stable(**kwargs))

    def _is_stable_sufficient(self):
        if self.difference_loop() is not None:
            raise ValueError("is_stable(method='sufficient') is not available for loops with a delay-difference "
                             "part; use 'exact' or strong_stability()")
        sys = self.internal_dynamics()
        if sys is None:
            return bool(self.spectral_abscissa() < 0)
        return bool(sys.is_stable(method="sufficient"))

    def delay_margin(self):
        """For a system whose state is read late through one delay: the smallest value of that delay
        at which the system, stable as the delay tends to ``0+``, loses stability (``inf`` if none).
        For a closed loop this is the total loop delay it tolerates; the extra dead time it tolerates
        is ``delay_margin() - delay``.

        Raises
        ------
        ValueError
            No delayed state, or more than one delay.
        """
        sys = self.internal_dynamics()
        if sys is None:
            raise ValueError("no state is read late: the roots do not depend on the delays (the margin is "
                             "infinite if A is Hurwitz)")
        return sys.delay_margin()

    # ---------------------------------------------------------------- time responses
    def step(self, t, **kwargs):
        """Step response on the times ``t`` (a unit step on each input in turn, zero history).

        Parameters
        ----------
        t : array_like, real ``(T,)``
            Output times ``>= 0``.
        **kwargs
            Passed to :func:`ddesys.matrix.timeresp.step` (``h``, ``rtol``, ``atol``, ``max_bytes``).

        Returns
        -------
        TimeResponse
            ``y (p, m, T)`` (input ``j`` in ``[:, j]``), ``x (n, m, T)`` and ``error_estimate`` (a bound of
            the output's error from the state part's; None for a fixed step ``h`` alone).

        Raises
        ------
        ValueError
            Negative times, bad step or tolerances; a delay-difference part
            (:class:`~ddesys.AlgebraicLoopError`).
        """
        from ._io_time import io_step

        return io_step(self, t, **kwargs)

    def impulse(self, t, **kwargs):
        """Impulse response on the times ``t``; impulses through a feedthrough are omitted.

        Parameters
        ----------
        t : array_like, real ``(T,)``
            Output times ``>= 0``.
        **kwargs
            Passed to :func:`ddesys.matrix.timeresp.impulse` (``h``, ``rtol``, ``atol``, ``max_bytes``).

        Returns
        -------
        TimeResponse
            ``y (p, m, T)``, ``x (n, m, T)``, ``error_estimate``.

        Raises
        ------
        ValueError
            As :meth:`step`.
        """
        from ._io_time import io_impulse

        return io_impulse(self, t, **kwargs)

    def simulate(self, u, t, x0=None, **kwargs):
        """Response to the input ``u`` on the times ``t`` (zero history).

        Parameters
        ----------
        u : callable
            ``u(times) -> (m, len(times))`` real (or ``(len(times),)`` for one input); zero before ``t = 0``.
        t : array_like, real ``(T,)``
            Output times ``>= 0``.
        x0 : array_like ``(n,)``, optional
            State at ``t = 0``.
        **kwargs
            Passed to :func:`ddesys.matrix.timeresp.simulate` (``h``, ``rtol``, ``atol``, ``max_bytes``,
            ``breaks``).

        Returns
        -------
        TimeResponse
            ``y (p, T)``, ``x (n, T)``, ``error_estimate``.

        Raises
        ------
        TypeError
            A ``u`` that is not callable or returns complex or non-numeric values.
        ValueError
            ``u`` returning another shape, negative times, a bad ``x0``; a delay-difference part
            (:class:`~ddesys.AlgebraicLoopError`).
        """
        from ._io_time import io_simulate

        return io_simulate(self, u, t, x0=x0, **kwargs)

    # ---------------------------------------------------------------- plots
    def bode(self, omega=None, axes=None):
        """Bode plot of every input-output pair, exact with the delays; returns the figure.

        Parameters
        ----------
        omega : array_like, real ``(F,)``, optional
            Frequencies (rad per time unit); default chosen from the system's features
            (:func:`ddesys.control.margins.default_omega`).
        axes : array of matplotlib Axes, optional

        Returns
        -------
        matplotlib.figure.Figure
        """
        from .margins import default_omega
        from ..matrix.plot import plot_bode

        return plot_bode(*self.frequency_response(default_omega(self) if omega is None else omega), axes=axes)


__all__ = ["DelayIOSystem"]
