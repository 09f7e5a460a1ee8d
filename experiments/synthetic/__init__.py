"""The paper's synthetic delay tasks (section 5.1, appendix C.2): ``python -m ddesys.experiments.synthetic``."""

FAMILIES = ("ds4d", "ds4d-tap", "s4d", "lstm", "mamba", "gpt2", "llama",   # model families (see .models)
            "ds4d-clock", "s4d-clock",                     # with the selective clock (pauses at padding)
            "ds4d-gate", "s4d-gate")                       # with a learned clock (a gate per layer)
HF_FAMILIES = ("mamba", "gpt2", "llama")                          # the ones built by transformers
