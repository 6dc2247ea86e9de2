"""neonlite benchmarks: each workload in neonlite and, when installed, PyTorch, side by side."""
