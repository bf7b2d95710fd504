"""What the benchmark scripts share: servers run as subprocesses (`servers`), what /proc says about them
(`procs`), variants measured in interleaved rounds (`rounds`) and the tables they print (`tables`).

The scripts run as `python bench/NAME.py`, which puts bench/ first on sys.path: they import `lib.servers`.
"""
