"""The stock flatbuffers.Builder request encoder, with a bounded pool of reused Builders (one grown too
large is dropped, not kept): the reference tests compare the generated encoder with, and the baseline the
benchmarks swap into an edge to measure it against. Not on the request path; the other messages' stock
encoders, which only tests use, are in tests/support/stock_buffers.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import flatbuffers

from ingress.wire import identifiers
from ingress.wire._generated import encoders as gen

D = TypeVar("D")


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


def encode_stock(pool: BuilderPool, build: Callable[[Any, D], int], data: D, identifier: bytes,
                 size_prefixed: bool = False) -> bytes:
    """One buffer of `data` through a generated `build_<Table>` on a pooled Builder."""
    with pool.builder() as b:
        root = build(b, data)
        (b.FinishSizePrefixed if size_prefixed else b.Finish)(root, file_identifier=identifier)
        return bytes(b.Output())


def encode_request_data_stock(pool: BuilderPool, data: gen.CompletionRequestData) -> bytes:
    """One CompletionRequest buffer through the stock Builder (from OpenAI's request: ingress/encoding/stock.py)."""
    return encode_stock(pool, gen.build_CompletionRequest, data, identifiers.REQUEST)
