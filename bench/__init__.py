"""Benchmarks of coded.codes: accuracy, decode speed and error correction, measured side by side."""
