"""Trainable DS4D and S4D layers (PyTorch), blocks, models and optimizer groups.

Requires torch (``pip install 'ddesys[torch]'``; a CPU-only build: ``pip install torch --index-url
https://download.pytorch.org/whl/cpu``); ``ddesys`` owns the mathematics. Without torch, importing this
package raises an ImportError that says so.
"""

if __name__ != "ddesys.nn":  # the clone's folder imported as a top-level package
    raise ImportError("this folder is the package ddesys.nn: import it as `import ddesys.nn` "
                      "(importing `nn` from the clone's root loads a second copy under another name)")

from ddesys.io import extra_message, missing_modules

if missing_modules("torch"):                     # one clear line instead of a failed import deep inside
    raise ImportError(extra_message("ddesys.nn", "torch", ["torch"]), name="torch")
del extra_message, missing_modules

from .branch import Branch
from .clock import Clocked, ClockedCache, TokenClock
from .clocked_layer import ClockedLayer
from .common import NonFiniteInputError
from .ds4d import DS4D, DS4DCache
from .model import SequenceBlock, SequenceModel
from .optim import param_groups
from .s4d import S4D, S4DCache
from .learned_clock import BinaryClock, HardClocked, HardGateClock, TimeCost
from .learned_token_clock import LearnedTokenClock
from .flip_explore import Explore, ExploreEach, ExploreRows
from .flip_run_clock import FlipRunClock
from .flip_token_clock import FlipTokenClock
from .selective import GateClock, SoftClock, SoftClocked
from .tap import TapWidthSchedule, set_tap_width

__all__ = [
    "BinaryClock", "Branch", "Clocked", "ClockedCache", "ClockedLayer", "DS4D", "DS4DCache", "Explore",
    "ExploreEach", "ExploreRows", "FlipRunClock", "FlipTokenClock", "GateClock", "HardClocked", "HardGateClock",
    "LearnedTokenClock", "NonFiniteInputError", "param_groups", "S4D", "S4DCache",
    "SequenceBlock", "SequenceModel", "set_tap_width", "SoftClock", "SoftClocked", "TapWidthSchedule", "TimeCost",
    "TokenClock",
]
