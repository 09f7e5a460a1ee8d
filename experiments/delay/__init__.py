"""The continuous delay task (band-limited white noise, target = the input delayed by fixed lags):
``python -m experiments.delay``."""

FAMILIES = ("ds4d", "s4d")                  # model families (see .models)
