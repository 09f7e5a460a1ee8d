"""The paper's synthetic delay tasks (section 5.1, appendix C.2): ``python -m ddesys.experiments.synthetic``."""

from .._models import FAMILIES    # model labels (experiments._models.ModelSpec; ds4d-clock: the given clock,
                                  # pausing at padding; ds4d-gate: a learned clock, a gate per layer;
                                  # ds4d-tick: a learned binary clock)
HF_FAMILIES = ("mamba", "gpt2", "llama")                          # the ones built by transformers

__all__ = ["FAMILIES", "HF_FAMILIES"]
