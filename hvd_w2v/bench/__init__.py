"""Benchmark scripts: each prints its figures side by side in one run (run them under mpi/launch)."""
