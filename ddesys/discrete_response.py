"""Time-domain responses of :class:`~ddesys.DiscreteDelaySystem`: kernel, contour, impulse response,
simulation and states (docs/theory.md §2, §5). The class inherits them from :class:`DiscreteResponses`.

Every method returns one kind of value whatever its options: ``kernel`` the kernel, ``contour`` the
:class:`~ddesys.Contour` the FFT kernel uses, ``simulate`` the outputs, ``states`` the states. No method
changes the system.
"""
from __future__ import annotations

import warnings

import numpy as np

from . import stability as _st
from ._array import is_numpy, real_dtype_of, to_numpy, unit_roundoff
from ._validate import as_array, check_batch, check_length, check_real_dtype
from .contour import choose_contour
from .recurrence import run_recurrence
from .transfer import synthesize_kernel


class DiscreteResponses:
    """Mixin of :class:`~ddesys.DiscreteDelaySystem` (see the module docstring)."""

    def contour(self, L, eps="auto", M=None, compute_dtype=None):
        """The sampling contour that ``kernel(L, eps=eps, M=M, compute_dtype=compute_dtype)`` uses.

        Parameters
        ----------
        L, eps, M, compute_dtype
            As :meth:`kernel` (``method="fft"``).

        Returns
        -------
        Contour
            ``M``, and per channel ``rho``, ``eps``, ``predicted_error`` ``(...)``.

        Raises
        ------
        ValueError
            As :meth:`kernel`: an unstable system, a bad ``eps``/``M``/``L``, an exact stability test
            over its memory budget.

        Examples
        --------
        >>> from ddesys import DiscreteDelaySystem
        >>> sys = DiscreteDelaySystem(lam=[[0.9], [0.5]], mu=[0.05], bbar=[1.0], c=[0.5],
        ...                           delay=[3.5, 10.0])
        >>> c = sys.contour(16)
        >>> c.M, c.rho.shape             # nextpow2(4L): the slow channel has not decayed within 2L
        (64, (2,))
        """
        xp = self.xp
        cdt = check_real_dtype(xp, compute_dtype, "compute_dtype") if compute_dtype is not None else xp.float64
        return self._fft_contour(check_length(L), eps, M, cdt, "contour()")

    def _fft_contour(self, L, eps, M, cdt, who):
        try:
            stable = self.is_stable()
        except ValueError as exc:
            raise ValueError(f"{who} needs the exact stability test, which refused: {exc}. (is_stable() "
                             "caches its answer; kernel(method='recurrence') needs no test)") from None
        if not np.all(stable):
            bad = np.argwhere(~np.asarray(stable)).tolist()[:5] if np.ndim(stable) else "the only channel"
            raise ValueError(f"{who} asked of an unstable system ({bad}): its impulse response grows, so no "
                             "contour inside the unit disk represents it. Use kernel(method='recurrence') for "
                             "a finite-length response.")
        return choose_contour(L, self.decay_bound(), unit_roundoff(cdt), eps=eps, M=M)

    def kernel(self, L, method="fft", eps="auto", M=None, dtype=None, compute_dtype=None):
        """The length-``L`` real convolution kernel ``K_t = 2 Re sum_n c_n g_{n,t}`` (``d`` excluded).

        Parameters
        ----------
        L : int
            Kernel length.
        method : {"fft", "recurrence"}
            Contour-shifted synthesis (docs/theory.md §5) or the exact recurrence.
        eps : "auto" or float
            Aliasing suppression ``rho^M`` in ``(0, 1)``, or ``"auto"``: chosen per channel from the
            working precision and the system's decay to minimize the predicted error
            (:mod:`ddesys.contour`; about 1e-13 relative in float64).
        M : int or None
            FFT length ``>= L``; default ``nextpow2(2L)``, or ``nextpow2(4L)`` when ``eps="auto"``
            predicts a larger error than the precision's tolerance at ``2L`` (slow modes).
        dtype : float32 or float64, optional
            Real output dtype (default: that of the parameters).
        compute_dtype : float32 or float64, optional
            Real dtype of the synthesis. Default float64: the synthesis costs ``O(M N2)`` per channel
            and does not depend on the batch, and float64 removes the float32 restoration floor
            (docs/theory.md §5). Pass float32 for the fast/low-precision path.

        Returns
        -------
        ndarray, real ``(..., L)``

        Raises
        ------
        ValueError
            An unstable system (the FFT kernel of a growing response does not exist), a bad
            ``eps``/``M``/``L``/``method``, a stability test over its memory budget (see
            :meth:`is_stable`).
        TypeError
            ``dtype`` or ``compute_dtype`` not float32/float64 (integer outputs are refused).

        See Also
        --------
        contour : the contour this kernel is synthesized on.
        impulse : the kernel with ``d`` added at ``t = 0``.
        ddesys.choose_contour, ddesys.synthesize_kernel

        Examples
        --------
        >>> import numpy as np
        >>> from ddesys import DiscreteDelaySystem
        >>> sys = DiscreteDelaySystem(lam=[[0.9], [0.5]], mu=[0.05], bbar=[1.0], c=[0.5],
        ...                           delay=[3.5, 10.0])
        >>> K = sys.kernel(16)
        >>> K.shape, sys.contour(16).M
        ((2, 16), 64)
        >>> bool(np.allclose(K, sys.kernel(16, method="recurrence"), atol=1e-12))
        True
        """
        L = check_length(L)
        xp = self.xp
        out_dt = check_real_dtype(xp, dtype, "dtype") if dtype is not None else real_dtype_of(xp, self.lam.dtype)
        cdt = check_real_dtype(xp, compute_dtype, "compute_dtype") if compute_dtype is not None else xp.float64
        if method == "recurrence":
            return xp.astype(self._kernel_recurrence(L), out_dt)
        if method != "fft":
            raise ValueError(f"method must be 'fft' or 'recurrence', got {method!r}")
        contour = self._fft_contour(L, eps, M, cdt, "kernel(method='fft')")
        cplx = xp.complex64 if cdt == xp.float32 else xp.complex128
        rho = xp.asarray(contour.rho, dtype=cdt)
        if not is_numpy(xp):
            rho = xp.asarray(rho, device=self.lam.device)
        K = synthesize_kernel(xp.astype(self.lam, cplx), xp.astype(self.mu, cplx),
                              xp.astype(self.c * self.bbar, cplx), self.k, self.alpha, L, contour.M, rho)
        return xp.astype(K, out_dt)

    def _kernel_recurrence(self, L):
        xp = self.xp
        x = xp.zeros(self.batch_shape + (L,), dtype=real_dtype_of(xp, self.lam.dtype))
        x[..., 0] = 1
        # the finite-length response of an unstable system is what was asked: warn only on overflow
        return self._simulate(x, False, warn_unstable=False, d=xp.zeros_like(self.d))

    def impulse(self, L, **kernel_kw):
        """Impulse response of ``x -> y``: the kernel with ``d`` added at ``t = 0``.

        Parameters
        ----------
        L : int
            Length.
        **kernel_kw
            Passed to :meth:`kernel` (``method``, ``eps``, ``M``, ``dtype``, ``compute_dtype``).

        Returns
        -------
        ndarray, real ``(..., L)``

        Raises
        ------
        ValueError, TypeError
            As :meth:`kernel`.
        """
        K = self.kernel(L, **kernel_kw)
        K[..., 0] = K[..., 0] + self.d
        return K

    def simulate(self, x):
        """Run the exact recurrence (docs/theory.md §2) on real inputs, zero initial history.

        Parameters
        ----------
        x : array_like, real ``(..., L)``
            Inputs; the batch part broadcasts with the system's batch shape.

        Returns
        -------
        ndarray, real ``(batch, L)``
            ``batch`` is the broadcast batch shape; ``x``'s dtype.

        Raises
        ------
        TypeError
            Complex ``x``.
        ValueError
            Non-finite ``x``, a batch that does not broadcast, no time axis.

        Warns
        -----
        RuntimeWarning
            Once per call for a system that is not stable, naming the channels, their sufficient margin
            ``1 - |lam| - |mu|`` and spectral radius: nothing is checked when the sufficient criterion
            certifies every mode; otherwise the exact test runs (cached) when it costs no more than the
            simulation itself (or ``2**20`` samples). A non-finite output always warns.

        See Also
        --------
        states : the states ``h`` of the same run.

        Notes
        -----
        NumPy: compiled with Numba (parallel over channels, complex128 states), or the vector path when
        Numba is absent. CuPy: the array module's vector path. Memory ``O(batch L)`` whatever the delay:
        a delay ``>= L`` is simply never read.

        Examples
        --------
        >>> import numpy as np
        >>> from ddesys import DiscreteDelaySystem
        >>> sys = DiscreteDelaySystem(lam=[[0.9], [0.5]], mu=[0.05], bbar=[1.0], c=[0.5],
        ...                           delay=[3.5, 10.0])
        >>> x = np.zeros((4, 2, 16)); x[..., 0] = 1            # (batch 4, channels 2, L)
        >>> y = sys.simulate(x)
        >>> y.shape, bool(np.allclose(y[0], sys.impulse(16)))
        ((4, 2, 16), True)
        """
        return self._simulate(x, False, warn_unstable=True)

    def states(self, x):
        """The states of the exact recurrence for real inputs ``x``, zero initial history.

        Parameters
        ----------
        x : array_like, real ``(..., L)``
            As :meth:`simulate`.

        Returns
        -------
        ndarray, complex ``(batch, N2, L)``
            ``h_{n,t}`` of the stored modes (the conjugate partners are ``conj(h)``), so that the output
            of :meth:`simulate` is ``2 Re(sum_n c_n h_{n,t}) + d x_t``.

        Raises
        ------
        TypeError, ValueError
            As :meth:`simulate`.

        Warns
        -----
        RuntimeWarning
            As :meth:`simulate`.

        Notes
        -----
        Memory ``O(batch N2 L)``.

        Examples
        --------
        >>> import numpy as np
        >>> from ddesys import DiscreteDelaySystem
        >>> sys = DiscreteDelaySystem(lam=[0.5], mu=[0.25], bbar=[1.0], c=[0.5], delay=2.0)
        >>> h = sys.states([1.0, 0.0, 0.0, 0.0])
        >>> h.shape, h.real.round(4)                           # 1, lam, lam^2 + mu, ...
        ((1, 4), array([[1.   , 0.5  , 0.5  , 0.375]]))
        """
        return self._simulate(x, True, warn_unstable=True)[1]

    def _simulate(self, x, return_states, warn_unstable, d=None):
        xp = self.xp
        if getattr(x, "dtype", None) is not None and "complex" in str(x.dtype):
            raise TypeError("simulate(x): x must be real; a complex input has no meaning for the real "
                            "system (split it into real and imaginary parts)")
        x = as_array(xp, x, "x", "real")
        if x.ndim < 1:
            raise ValueError("x must have a trailing time axis (shape (..., L))")
        batch = check_batch("x (batch part)", x.shape[:-1], self.batch_shape)
        L = x.shape[-1]
        B = int(np.prod(batch, dtype=np.int64))
        flat = lambda a, tail: xp.reshape(xp.broadcast_to(a, tuple(batch) + tail), (B,) + tail)  # noqa: E731
        N2 = (self.n_modes,)
        res = run_recurrence(flat(self.lam, N2), flat(self.mu, N2), flat(self.bbar, N2), flat(self.c, N2),
                             flat(self.k, ()), flat(self.alpha, ()), flat(self.d if d is None else d, ()),
                             flat(x, (L,)), return_states=return_states)
        y = res[0] if return_states else res
        self._warn_unstable(y, B * self.n_modes * L, warn_unstable)
        odt = x.dtype
        if return_states:
            return xp.reshape(xp.asarray(y, dtype=odt), tuple(batch) + (L,)), \
                xp.reshape(res[1], tuple(batch) + N2 + (L,))
        return xp.reshape(xp.asarray(y, dtype=odt), tuple(batch) + (L,))

    def _warn_unstable(self, y, work, check_stability):
        """One ``RuntimeWarning`` for :meth:`DiscreteDelaySystem.simulate` (see its docstring)."""
        xp = self.xp
        nonfinite = int(xp.sum(xp.astype(~xp.isfinite(y), xp.int64))) if y.size else 0
        margin = self.sufficient_margin()                                 # (..., N2)
        uncertified = ~(margin > 0)
        unstable, skipped = None, False
        if check_stability and uncertified.any():
            k = np.broadcast_to(to_numpy(self.k)[..., None], margin.shape)[uncertified]
            cost = int(_st.samples_per_mode(k).sum())
            if "stable_modes" in self._cache or cost <= max(2**20, work):
                try:
                    unstable = ~np.asarray(self.is_stable())
                except ValueError:
                    skipped = True
            else:
                skipped = True
        bad = unstable is not None and bool(unstable.any())
        if not nonfinite and not bad:
            return
        if bad:
            chans, what = unstable, "not stable"
        elif unstable is None and uncertified.any():
            chans = np.any(uncertified, axis=-1)
            what = ("not certified stable (|lam| + |mu| >= 1; the exact test was "
                    + ("skipped as too costly)" if skipped else "not run)"))
        else:
            warnings.warn(f"simulate: the output holds {nonfinite} non-finite value(s) although the system is "
                          "stable: the inputs or parameters are too large for the floating-point range",
                          RuntimeWarning, stacklevel=4)
            return
        idx = [tuple(int(j) for j in i) for i in np.argwhere(chans)] if np.ndim(chans) else []
        where = f"{len(idx)} of {chans.size} channel(s), first {idx[:5]}" if np.ndim(chans) else "its only channel"
        sel = np.broadcast_to(np.asarray(chans)[..., None], margin.shape)
        lam, mu, k, alpha = (np.broadcast_to(a, margin.shape)[sel] for a in self._host())
        if int(k.max()) + 1 < _st.EIG_MAX_DEGREE:
            radius = f"spectral radius {float(_st.spectral_radius(lam, mu, k, alpha).max()):.6g}"
        else:
            radius = (f"spectral radius <= {float(_st.radius_bound(lam, mu, k, alpha).max()):.6g} (Rouche bound; "
                      "spectral_radius() gives it exactly)")
        out = f"; here the output holds {nonfinite} non-finite value(s)" if nonfinite else ""
        warnings.warn(f"simulate: the system is {what} in {where}: sufficient margin 1 - |lam| - |mu| down to "
                      f"{float(margin[sel].min()):.6g}, {radius}. Its response may grow without bound{out}. "
                      "Check is_stable() (the exact test) before simulating long sequences.", RuntimeWarning,
                      stacklevel=4)


__all__ = ["DiscreteResponses"]
