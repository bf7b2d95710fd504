"""Graceful drain: the state a SIGTERM starts, read by readiness, the middleware and open streams."""

from __future__ import annotations

import asyncio

from aiohttp import web


class Drain:
    def __init__(self) -> None:
        self.draining = False
        self._expired: asyncio.Event | None = None

    @property
    def expired(self) -> asyncio.Event:
        """Set when the drain deadline passes: whatever is still running must end now."""
        if self._expired is None:
            self._expired = asyncio.Event()
        return self._expired

    def start(self) -> None:
        """Readiness turns false; responses ask clients to close their connections."""
        self.draining = True

    def expire(self) -> None:
        self.draining = True
        self.expired.set()


DRAIN = web.AppKey("drain", Drain)
