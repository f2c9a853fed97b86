"""Benchmarks: one module per claim, each returning records measured side by side in one run."""
