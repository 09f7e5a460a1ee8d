"""The continuous delay task (band-limited white noise, target = the input delayed by fixed lags):
``python -m ddesys.experiments.delay``."""

FAMILIES = ("ds4d", "s4d", "ds4d-tap")      # model families (see .models); ds4d-tap: DS4D with the input tap
DEFAULT_FAMILIES = ("ds4d", "s4d")          # what --models runs by default
