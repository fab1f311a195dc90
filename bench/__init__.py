"""Benchmarks, each side by side with the alternative its issue names."""
