"""Shared code for the benchmarks in ``bench/``: data, metrics, timing and the baselines.

Every baseline answers the same System One requests as the decision model and returns, per
question, a probability vector indexed like ``clef_agents.wire.option_names``. The scripts in
``bench/compare`` and ``bench/latency`` put the repository root on ``sys.path`` and import
``bench.baselines``.
"""
