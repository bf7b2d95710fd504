"""What the benchmark scripts share: servers run as subprocesses (`servers`) and what /proc says about them
(`procs`).

The scripts run as `python bench/NAME.py`, which puts bench/ first on sys.path: they import `lib.servers`.
"""
