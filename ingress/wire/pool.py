"""A bounded pool of reused flatbuffers.Builders; builders that grew too large are dropped."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import flatbuffers


class BuilderPool:
    """Hands out cleared builders. At most `size` are kept; one grown past `max_keep` bytes is let go."""

    def __init__(self, size: int = 64, initial: int = 16 * 1024, max_keep: int = 1024 * 1024) -> None:
        self._free: list[flatbuffers.Builder] = []
        self._size = size
        self._initial = initial
        self._max_keep = max_keep
        self.created = 0

    @contextmanager
    def builder(self) -> Iterator[flatbuffers.Builder]:
        builder = self._free.pop() if self._free else self._new()
        try:
            yield builder
        finally:
            if len(self._free) < self._size and len(builder.Bytes) <= self._max_keep:
                builder.Clear()
                self._free.append(builder)

    def _new(self) -> flatbuffers.Builder:
        self.created += 1
        return flatbuffers.Builder(self._initial)

    def __len__(self) -> int:
        return len(self._free)
