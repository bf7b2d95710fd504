"""The loopback servers' fixtures for the upstream client's tests (tests/support/raw_servers.py)."""

from raw_servers import pools, start_server  # noqa: F401 (pytest finds the fixtures by name here)
