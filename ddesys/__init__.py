"""ddesys: linear delay systems, continuous and discrete, for analysis and for neural layers.

NumPy always; CuPy arrays are accepted where noted; Numba compiles the CPU recurrences when installed;
torch and CuPy are never imported here. See the README for a tour.
"""
from ._validate import MAX_DELAY_STEPS
from .contour import Contour, choose_contour
from .continuous import DelaySystem
from .discrete import DiscreteDelaySystem
from .discretize import discretize_modes, euler, zoh
from .interpolation import interpolation_response, split_delay
from .recurrence import numba_available
from .stability import (is_stable_exact, radius_bound, spectral_radius, stability_margin,
                        winding_number)
from .transfer import synthesize_kernel, transfer_function

__version__ = "0.1.0"

__all__ = [
    "MAX_DELAY_STEPS", "Contour", "DelaySystem", "DiscreteDelaySystem", "choose_contour", "discretize_modes", "euler",
    "interpolation_response", "is_stable_exact", "numba_available", "radius_bound", "spectral_radius",
    "split_delay", "stability_margin", "synthesize_kernel", "transfer_function", "winding_number", "zoh",
]
