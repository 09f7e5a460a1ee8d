"""ddesys: linear delay systems, continuous and discrete, for analysis and for neural layers.

NumPy always; CuPy arrays are accepted where noted; Numba compiles the CPU recurrences when installed;
torch and CuPy are never imported here. See the README for a tour.

The names here are the analysis API: systems, roots and stability, transfer functions and kernels,
contours, discretization, charts and their results. Plumbing is reached through its module
(``ddesys.contour.next_pow2``, ``ddesys.contour.unit_roundoff``, ``ddesys.recurrence.numba_available``,
``ddesys.discrete.MAX_DELAY_STEPS``); the matrix family's machinery lives in :mod:`ddesys.matrix`, control
with dead time (interconnections, margins, design) in :mod:`ddesys.control`, the compiled decode runtime in
:mod:`ddesys.cpu`.
"""
from .contour import Contour, choose_contour, fft_length
from .continuous import DelaySystem
from .discrete import DiscreteDelaySystem
from .discretize import discretize_modes, euler, zoh
from .interpolation import interpolation_response, split_delay
from .stability import is_stable_exact, radius_bound, spectral_radius, sufficient_margin, winding_number
from .parameterization import DS4DDiscrete, S4DDiscrete, ds4d_discrete, s4d_discrete
from .tap import DelayTap
from .sum_system import SumSystem
from .lti import DelayLTI, FrequencyResponse
from .matrix.statespace import DelayStateSpace
from .matrix.discrete import DiscreteDelayStateSpace
from .matrix.discretize import zoh_statespace
from .matrix.chart import StabilityChart, delay_chart, stability_chart
from .matrix.crossings import Crossing
from .matrix.errors import AlgebraicLoopError, UndecidableStability
from .matrix.roots import RootsResult
from .control import DelayIOSystem, append, feedback, from_control, margin, nyquist_plot, nyquist_response, parallel
from .control import SensitivityPeaks, sensitivity_peaks, series, ss, stability_margins, tf, to_control
from .control import DesignResult, abscissa_gradient, hinf_design, stabilize, static_output_feedback
from .matrix.quasipoly import quasipolynomial_roots
from .matrix.neutral import EssentialSpectrum, NeutralAbscissa, NeutralStateSpace, StrongStability
from .matrix.timeresp import TimeResponse
from .transfer import synthesize_kernel, transfer_function, vandermonde_kernel
from .clock import clock_index, clocked_simulate

from ._version import __version__ as __version__

__all__ = [
    "abscissa_gradient", "AlgebraicLoopError", "append", "choose_contour", "clock_index",
    "clocked_simulate", "Contour", "Crossing", "delay_chart", "DelayIOSystem", "DelayLTI", "DelayStateSpace",
    "DelaySystem", "DelayTap", "DesignResult", "DiscreteDelayStateSpace", "DiscreteDelaySystem", "discretize_modes",
    "ds4d_discrete", "DS4DDiscrete", "EssentialSpectrum", "euler", "feedback", "fft_length", "FrequencyResponse",
    "from_control", "hinf_design", "interpolation_response", "is_stable_exact", "margin", "NeutralAbscissa",
    "NeutralStateSpace", "nyquist_plot", "nyquist_response", "parallel", "quasipolynomial_roots", "radius_bound",
    "RootsResult", "s4d_discrete", "S4DDiscrete", "sensitivity_peaks", "SensitivityPeaks", "series",
    "spectral_radius", "split_delay", "ss", "stability_chart", "stability_margins", "StabilityChart", "stabilize",
    "static_output_feedback", "StrongStability", "sufficient_margin", "SumSystem", "synthesize_kernel", "tf",
    "TimeResponse", "to_control", "transfer_function", "UndecidableStability", "vandermonde_kernel",
    "winding_number", "zoh", "zoh_statespace",
]
