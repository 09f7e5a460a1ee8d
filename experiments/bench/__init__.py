"""Benchmarks: each prints ratios against a baseline measured in the same run (S4D, a plain loop).

``python -m ddesys.experiments.bench.<name>`` with ``decode``, ``layers``, ``step``, ``clock``, ``dss``,
``simulate``, ``ring_layout``, ``control`` (margins and closed loops with dead time against python-control's
Pade models), ``chart_executor`` (a stability chart through process pools).
"""
