"""Benchmarks: each prints ratios against a baseline measured in the same run (S4D, a plain loop).

``python -m ddesys.experiments.bench.<name>`` with ``decode``, ``layers``, ``step``, ``clock``, ``dss``,
``simulate``, ``ring_layout``.
"""
