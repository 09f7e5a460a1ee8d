"""ddesys: linear delay systems, continuous and discrete, for analysis and for neural layers.

NumPy always; CuPy arrays are accepted where noted; Numba compiles the CPU recurrences when installed;
torch and CuPy are never imported here. See the README for a tour.
"""
from ._array import next_pow2, unit_roundoff
from ._validate import MAX_DELAY_STEPS
from .contour import Contour, choose_contour, fft_length
from .continuous import DelaySystem
from .discrete import DiscreteDelaySystem
from .discretize import discretize_modes, euler, zoh
from .interpolation import interpolation_response, split_delay
from .recurrence import numba_available
from .stability import (is_stable_exact, radius_bound, spectral_radius, stability_margin,
                        sufficient_margin, winding_number)
from .parameterization import DS4DDiscrete, S4DDiscrete, ds4d_discrete, s4d_discrete
from .tap import DelayTap
from .sum_system import SumSystem
from .lti import DelayLTI, FrequencyResponse
from .matrix.statespace import DelayStateSpace
from .matrix.discrete import DiscreteDelayStateSpace, zoh_statespace
from .matrix.chart import StabilityChart, delay_chart, stability_chart
from .matrix.crossings import Crossing
from .matrix.roots import RootsResult
from .matrix.timeresp import TimeResponse
from .transfer import synthesize_kernel, transfer_function, vandermonde_kernel
from .clock import clock_index, clocked_simulate

__version__ = "0.1.0"

__all__ = [
    "Contour", "Crossing", "DS4DDiscrete", "DelayLTI", "DelayStateSpace", "DiscreteDelayStateSpace", "zoh_statespace", "FrequencyResponse", "RootsResult",
    "StabilityChart", "TimeResponse", "delay_chart", "stability_chart", "DelayTap", "DelaySystem", "DiscreteDelaySystem", "MAX_DELAY_STEPS", "S4DDiscrete", "SumSystem",
    "choose_contour", "clock_index", "fft_length", "clocked_simulate", "discretize_modes", "ds4d_discrete", "euler", "interpolation_response", "is_stable_exact",
    "next_pow2", "numba_available", "radius_bound", "s4d_discrete", "spectral_radius", "split_delay",
    "stability_margin", "sufficient_margin", "synthesize_kernel", "transfer_function", "unit_roundoff",
    "vandermonde_kernel", "winding_number", "zoh",
]
