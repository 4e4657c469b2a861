"""Benchmarks: speed and learning, measured outside the test suite; results land in bench/results/."""
