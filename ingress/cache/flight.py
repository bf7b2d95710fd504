"""A miss in flight: the identical requests that arrive while it is being answered (its followers) are
answered with its answer instead of each calling the service (single flight, per worker).

A follower that asked for a stream, of a leader that streams, tails the leader's frames as they arrive, once
the leader's answer has begun (its first frame read from the attempt a fallback chain settled on): its
time to first token is the leader's, not the whole answer's, and its producer (the route and model of the
attempt that answered) the one the leader's chain settled on. Every other follower waits for the entry the
leader's answer makes (ingress/cache/entries.py), which records its producer, and reads it back in its own
shape, as a hit; either way each is translated into its own dialect.

A failure is never shared as an answer: a leader that ends with nothing to share (an error, a stream cut
short, an answer too large to store) before a follower began reading frees that follower to call on its
own; a stream that breaks after a tailing follower began ends that follower's stream with an in-band error,
as its own would. A leader whose client leaves while others wait reads its stream to the end for them
(`waited`). A follower waits no longer than it would for its own answer: the route's connect and first-byte
timeouts until the leader's answer first moves, then its idle timeout between moves; a leader stalled past
them is let go, and taken out of the worker's flights.
"""

from __future__ import annotations

import asyncio

from ingress.cache.entries import Producer, Shape


class Flight:
    """One key's miss in flight: the leader's reads move it (`moved`), its end settles it (`end`)."""

    __slots__ = ("_ended", "_moved", "_waiters", "frames", "joining", "moved_once", "opened", "producer", "shape",
                 "tailing", "value")

    def __init__(self, shape: Shape) -> None:
        self.shape = shape  # what the leader asked for: a stream's frames can be tailed
        self.value: bytes | None = None  # the entry the leader's answer made; None: nothing to share
        self.frames: list[bytes] = []  # a stream's reads so far, of its current attempt
        self.opened = False  # the attempt the leader's chain settled on is the answer: its frames can be tailed
        self.producer: Producer | None = None  # once opened: the route and model of that attempt
        self.moved_once = False
        self.joining = 0  # followers waiting for its end, or for its stream to begin
        self.tailing = 0  # followers reading the frames
        self._waiters = 0  # of either, those waiting for its next move now
        self._ended = False
        self._moved = asyncio.Event()

    @property
    def ended(self) -> bool:
        return self._ended

    @property
    def waited(self) -> bool:
        """Followers depend on it: a leader whose client leaves reads on for them."""
        return bool(self.joining or self.tailing)

    def read(self, data: bytes) -> None:
        """The leader read a part of its answer (a stream's, kept for the followers that tail it)."""
        if self.shape == "stream":
            self.frames.append(data)
        self.moved()

    def moved(self) -> None:
        self.moved_once = True
        if not self._waiters or self._ended:
            return
        moved, self._moved = self._moved, asyncio.Event()
        moved.set()

    def open(self, producer: Producer | None) -> None:
        """The leader's attempt, made by `producer`, is the answer (a chain moves no more): its frames may be
        tailed."""
        self.opened, self.producer = True, producer
        self.moved()

    def end(self, value: bytes | None) -> None:
        """The leader is done: `value` is its entry, or None when it has nothing to share. Once only."""
        if self._ended:
            return
        self.value, self._ended = value, True
        self._moved.set()

    async def joined(self, first: float, idle: float, *, tail: bool = False) -> bool:
        """Wait until the leader ends, or (`tail`) until its stream has begun; False when it stalled: no move
        within `first` seconds before its first, or `idle` seconds between two."""
        self.joining += 1
        try:
            while not self._ended and not (tail and self.opened and self.frames):
                if not await self._move(idle if self.moved_once else first):
                    return False
        finally:
            self.joining -= 1
        return True

    async def frame(self, at: int, idle: float) -> bytes | None:
        """The leader's read number `at` (waiting up to `idle` seconds for it); b"" once the stream ended
        whole and every read was taken; None when it ended with nothing to share, or stalled."""
        while at >= len(self.frames):
            if self._ended:
                return b"" if self.value is not None else None
            if not await self._move(idle):
                return None
        return self.frames[at]

    async def _move(self, timeout: float) -> bool:
        self._waiters += 1
        try:
            await asyncio.wait_for(self._moved.wait(), timeout)
        except TimeoutError:
            return False
        finally:
            self._waiters -= 1
        return True
