"""Control with dead time: interconnections, transfer functions, margins, frequency plots, conversion and
design (docs/theory.md §9.7; docs: the control guide). python-control's module names where it has them:

* ``iosys``: :class:`~ddesys.DelayIOSystem`, a linear system with delays on its inputs, outputs and inside
  its loops (what :func:`~ddesys.tf`, :func:`~ddesys.ss` and :func:`~ddesys.feedback` return); its
  algebra on the matrices, its explicit form, norms, time responses and text are private helpers here;
* ``xferfcn``: :func:`~ddesys.tf` (transfer functions with dead time) and :func:`~ddesys.ss` (state-space
  models with input, output and state delays; ``ss(sys)`` converts a :class:`~ddesys.DelayStateSpace`);
* ``bdalg``: :func:`~ddesys.series`, :func:`~ddesys.parallel`, :func:`~ddesys.feedback`,
  :func:`~ddesys.append`;
* ``margins``: gain, phase and stability margins, sensitivity peaks, the Nyquist plot, exact with the
  delays (:func:`~ddesys.stability_margins`, :func:`~ddesys.margin`, :func:`~ddesys.sensitivity_peaks`,
  :func:`~ddesys.nyquist_plot`); ``freqplot``: default frequency ranges and the Nyquist count
  (:func:`~ddesys.nyquist_response`);
* ``convert``: :func:`~ddesys.from_control` and :func:`~ddesys.to_control` (python-control, Pade models);
* ``design``: fixed-order controllers by minimizing the closed loop's spectral abscissa or Hinf norm
  (:func:`~ddesys.stabilize`, :func:`~ddesys.hinf_design`, :func:`~ddesys.static_output_feedback`) and
  the closed-loop builders ``sof_closed_loop``, ``pi_closed_loop``, ``fopdt_pi_loop``.

The loop functions take any continuous SISO system, a :class:`~ddesys.DelayStateSpace` included; the
loop methods (``stability_margins()``, ``sensitivity_peaks()``, ``nyquist()``) are those of
:class:`~ddesys.DelayIOSystem` (``ddesys.ss(sys)`` converts a state-space system). This package builds on
:mod:`ddesys.matrix` (the systems, their roots, norms and time responses), which never imports it.
Every name here is also exported by :mod:`ddesys`, except the design's closed-loop builders and gradient
types.
"""
from ..matrix.errors import AlgebraicLoopError
from .bdalg import append, feedback, parallel, series
from .convert import from_control, to_control
from .design import (AbscissaGradient, DesignResult, HinfGradient, abscissa_gradient, fopdt_pi_loop, hinf_design,
                     hinf_gradient, pi_closed_loop, sof_closed_loop, stabilize, static_output_feedback)
from .freqplot import nyquist_response
from .iosys import DelayIOSystem
from .margins import SensitivityPeaks, margin, nyquist_plot, sensitivity_peaks, stability_margins
from .xferfcn import ss, tf

__all__ = [
    "abscissa_gradient", "AbscissaGradient", "AlgebraicLoopError", "append", "DelayIOSystem", "DesignResult",
    "feedback", "fopdt_pi_loop", "from_control", "hinf_design", "hinf_gradient", "HinfGradient", "margin",
    "nyquist_plot", "nyquist_response", "parallel", "pi_closed_loop", "sensitivity_peaks", "SensitivityPeaks", "series",
    "sof_closed_loop", "ss", "stability_margins", "stabilize", "static_output_feedback", "tf", "to_control",
]
