"""ddesys: linear delay systems, continuous and discrete, for analysis and for neural layers.

NumPy always; CuPy arrays are accepted where noted; Numba compiles the CPU recurrences when installed;
torch and CuPy are never imported here. See the README for a tour.

The names here are the analysis API: systems, roots and stability, transfer functions and kernels,
contours, discretization, charts and their results. Plumbing is reached through its module
(``ddesys.contour.next_pow2``, ``ddesys.contour.unit_roundoff``, ``ddesys.recurrence.numba_available``,
``ddesys.discrete.MAX_DELAY_STEPS``); the matrix family's machinery lives in :mod:`ddesys.matrix`, the
compiled decode runtime in :mod:`ddesys.cpu`.
"""
from .contour import Contour, choose_contour, fft_length
from .continuous import DelaySystem
from .discrete import DiscreteDelaySystem
from .discretize import discretize_modes, euler, zoh
from .interpolation import interpolation_response, split_delay
from .stability import (is_stable_exact, radius_bound, spectral_radius, stability_margin,
                        sufficient_margin, winding_number)
from .parameterization import DS4DDiscrete, S4DDiscrete, ds4d_discrete, s4d_discrete
from .tap import DelayTap
from .sum_system import SumSystem
from .lti import DelayLTI, FrequencyResponse
from .matrix.statespace import DelayStateSpace
from .matrix.discrete import DiscreteDelayStateSpace
from .matrix.discretize import zoh_statespace
from .matrix.chart import StabilityChart, delay_chart, stability_chart
from .matrix.crossings import Crossing
from .matrix.roots import RootsResult, UndecidableStability
from .matrix.iosystem import DelayIOSystem
from .matrix._io_reduce import AlgebraicLoopError
from .matrix.xferfcn import ss, tf
from .matrix.bdalg import append, feedback, parallel, series
from .matrix.freqplot import nyquist_response
from .matrix.margins import SensitivityPeaks, margin, nyquist_plot, sensitivity_peaks, stability_margins
from .matrix.convert import from_control, to_control
from .matrix.design import DesignResult, abscissa_gradient, hinf_design, stabilize, static_output_feedback
from .matrix.quasipoly import quasipolynomial_roots
from .matrix.neutral import EssentialSpectrum, NeutralAbscissa, NeutralStateSpace, StrongStability
from .matrix.timeresp import TimeResponse
from .transfer import synthesize_kernel, transfer_function, vandermonde_kernel
from .clock import clock_index, clocked_simulate

from ._version import __version__

__all__ = [
    "AlgebraicLoopError", "DelayIOSystem", "EssentialSpectrum", "NeutralAbscissa", "NeutralStateSpace",
    "StrongStability", "UndecidableStability", "quasipolynomial_roots", "DesignResult", "abscissa_gradient", "hinf_design", "stabilize", "static_output_feedback", "SensitivityPeaks", "append", "feedback", "from_control", "margin",
    "nyquist_plot", "nyquist_response", "parallel", "sensitivity_peaks", "series", "ss", "stability_margins", "tf", "to_control",
    "Contour", "Crossing", "DS4DDiscrete", "DelayLTI", "DelayStateSpace", "DelaySystem", "DelayTap",
    "DiscreteDelayStateSpace", "DiscreteDelaySystem", "FrequencyResponse", "RootsResult", "S4DDiscrete",
    "StabilityChart", "SumSystem", "TimeResponse", "choose_contour", "clock_index", "clocked_simulate",
    "delay_chart", "discretize_modes", "ds4d_discrete", "euler", "fft_length", "interpolation_response",
    "is_stable_exact", "radius_bound", "s4d_discrete", "spectral_radius", "split_delay", "stability_chart",
    "stability_margin", "sufficient_margin", "synthesize_kernel", "transfer_function", "vandermonde_kernel",
    "winding_number", "zoh", "zoh_statespace",
]
