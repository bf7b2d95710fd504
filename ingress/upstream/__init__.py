"""The internal hop: HTTP/1.1 to internal services (http1), one client per endpoint, groups of endpoints."""
