"""handgrad's benchmark harness (run ``python -m benchmarks``)."""
