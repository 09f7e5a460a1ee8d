"""Matrix delay systems: ``x'(t) = A x(t) + sum_k A_k x(t - tau_k) + B u(t)``, continuous and discrete.

:class:`~ddesys.matrix.statespace.DelayStateSpace` (continuous) and
:class:`~ddesys.matrix.discrete.DiscreteDelayStateSpace` (discrete) with their roots, crossings,
stability charts, norms and time responses, one module per concept. The classes and result types are
exported by ``ddesys`` itself; the modules here hold their machinery:

* continuous: ``statespace`` (the class), ``charmatrix`` (validation, ``M(s)``), ``roots`` (certified
  characteristic roots, spectral abscissa, exact stability; ``_roots_count``, ``_roots_igd``),
  ``rightmost`` (batched rightmost roots), ``crossings`` and ``sweeps`` (delay sweeps, delay margin),
  ``chart`` (stability charts), ``freqresp`` and ``norms`` (frequency response, H2, Hinf;
  ``_spectral_est``), ``timeresp`` and ``continuous_response`` (method of steps; the class's
  ``simulate``/``impulse``/``step``), ``plot`` (Bode and time-response plots), ``quasipoly`` (roots of
  quasi-polynomials given by coefficients);
* neutral: ``neutral`` (:class:`~ddesys.NeutralStateSpace`: essential spectrum, strong stability);
* discrete: ``discrete`` (the class), ``discrete_response`` (kernels, simulation), ``discrete_stability``
  (lag form, certified winding count), ``discrete_radius`` (companion matrix, spectral radius),
  ``discretize`` (:func:`~ddesys.zoh_statespace`).

Every class takes its time responses from a ``*Responses`` mixin of its ``*_response`` module (as the
diagonal classes do).

Control with dead time (:class:`~ddesys.DelayIOSystem`, ``tf``, ``ss``, block diagrams, margins, Nyquist,
python-control conversion, controller design) is the package :mod:`ddesys.control`, which builds on this
one; nothing here imports it.
"""
