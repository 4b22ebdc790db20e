"""Synthetic workloads and peer implementations for tools/benchmark.py (not imported by the metrics)."""
