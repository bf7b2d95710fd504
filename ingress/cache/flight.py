"""A miss in flight: the identical requests that arrive while it is being answered (its followers) wait for
its answer instead of each calling the service (single flight, per worker).

The leader's answer is shared as the entry it makes (ingress/cache/entries.py), so each follower reads it
back in its own shape and dialect, as a hit. A leader that ends with nothing to share (an error, a stream
cut short or failed, its client gone, an answer too large to store) frees its followers to call on their
own: a failure is never shared. A follower waits no longer than it would for its own answer: the route's
connect and first-byte timeouts until the leader's answer first moves, then its idle timeout between moves;
a leader stalled past them is let go, and taken out of the worker's flights.
"""

from __future__ import annotations

import asyncio


class Flight:
    """One key's miss in flight: what its leader has read so far moves it (`moved`), its end settles it."""

    __slots__ = ("_ended", "_moved", "moved_once", "value", "waiting")

    def __init__(self) -> None:
        self.value: bytes | None = None  # the entry the leader's answer made; None: nothing to share
        self.moved_once = False
        self.waiting = 0  # followers waiting now
        self._ended = False
        self._moved = asyncio.Event()

    @property
    def ended(self) -> bool:
        return self._ended

    def moved(self) -> None:
        """The leader read a part of its answer."""
        self.moved_once = True
        if not self.waiting or self._ended:
            return
        moved, self._moved = self._moved, asyncio.Event()
        moved.set()

    def end(self, value: bytes | None) -> None:
        """The leader is done: `value` is its entry, or None when it has nothing to share. Once only."""
        if self._ended:
            return
        self.value, self._ended = value, True
        self._moved.set()

    async def joined(self, first: float, idle: float) -> bytes | None:
        """The leader's entry, once it ends; None when it had nothing to share, or stalled: no move within
        `first` seconds before its first, or `idle` seconds between two (then `ended` is still False)."""
        self.waiting += 1
        try:
            while not self._ended:
                moved = self._moved
                try:
                    await asyncio.wait_for(moved.wait(), idle if self.moved_once else first)
                except TimeoutError:
                    return None
        finally:
            self.waiting -= 1
        return self.value
