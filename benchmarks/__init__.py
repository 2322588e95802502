"""Benchmarks and the reliability harness (not part of the package)."""
