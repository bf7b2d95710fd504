"""A bounded pool of reused flatbuffers.Builders; one grown too large is dropped, not kept."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import flatbuffers


class BuilderPool:
    """Stock flatbuffers.Builders, cleared for reuse; the reference encoding path."""

    def __init__(self, size: int = 64, initial: int = 16 * 1024, max_keep: int = 1024 * 1024) -> None:
        self._free: list[flatbuffers.Builder] = []
        self._size = size
        self._initial = initial
        self._max_keep = max_keep
        self.created = 0

    @contextmanager
    def builder(self) -> Iterator[flatbuffers.Builder]:
        if self._free:
            builder = self._free.pop()
        else:
            self.created += 1
            builder = flatbuffers.Builder(self._initial)
        try:
            yield builder
        finally:
            if len(self._free) < self._size and len(builder.Bytes) <= self._max_keep:
                builder.Clear()
                self._free.append(builder)

    def __len__(self) -> int:
        return len(self._free)
