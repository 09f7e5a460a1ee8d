"""Matrix delay systems: ``x'(t) = A x(t) + sum_k A_k x(t - tau_k) + B u(t)``, continuous and discrete.

:class:`~ddesys.matrix.statespace.DelayStateSpace` (continuous) and
:class:`~ddesys.matrix.discrete.DiscreteDelayStateSpace` (discrete) with their roots, crossings,
stability charts, norms and time responses, one module per analysis. The classes are exported by
``ddesys`` itself; the modules here hold their machinery.
"""
