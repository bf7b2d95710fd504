"""Bridges: internal services that speak our contract on one side and a real engine's or provider's
API on the other (`dialect.py` says what a dialect is; `service.py` is the I/O around one)."""
