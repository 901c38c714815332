"""Micro-benchmarks as pytest-benchmark tests: ``python -m pytest bench/micro``."""
