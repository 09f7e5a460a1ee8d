"""Trainable DS4D and S4D layers (PyTorch), blocks, models and optimizer groups.

Requires torch (``pip install torch==2.13.0`` on a CPU machine); ``ddesys`` owns the mathematics.
"""


from .clock import Clocked, ClockedCache, TokenClock
from .common import NonFiniteInputError
from .ds4d import DS4D, DS4DCache
from .model import SequenceBlock, SequenceModel
from .optim import param_groups
from .s4d import S4D, S4DCache
from .selective import GateClock, SoftClocked
from .tap import TapWidthSchedule, set_tap_width

__all__ = ["Clocked", "ClockedCache", "TokenClock", "DS4D", "DS4DCache", "NonFiniteInputError", "S4D", "S4DCache", "GateClock", "SoftClocked", "SequenceBlock", "SequenceModel", "TapWidthSchedule", "param_groups",
           "set_tap_width"]
