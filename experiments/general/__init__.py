"""General sequence benchmarks (paper section 5.3): ``python -m ddesys.experiments.general``."""
