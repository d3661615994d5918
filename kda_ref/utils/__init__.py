"""Small process-level helpers shared by the CLI and the benchmarks."""
