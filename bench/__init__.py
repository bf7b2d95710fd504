"""The benchmarks: one module per question, each run as `python -m bench NAME [ARGS...]` (bench/README.md);
`bench.lib` holds what they share."""
