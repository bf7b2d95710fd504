"""The stock flatbuffers.Builder encoders, with a bounded pool of reused Builders (one grown too large
is dropped, not kept): the reference tests compare the generated encoder with, and the baseline the
benchmarks measure it against. Not on the request path."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import flatbuffers

from ingress.oai import chat
from ingress.oai.embeddings import EmbeddingRequest
from ingress.wire import identifiers
from ingress.wire import types as wire_types
from ingress.wire._generated import encoders as gen
from ingress.wire.embeddings import Embeddings, embedding_request_data, embeddings_data
from ingress.wire.encode import chunk_data, error_data, request_data, response_data

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


def _stock(pool: BuilderPool, build: Callable[[Any, D], int], data: D, identifier: bytes,
           size_prefixed: bool = False) -> bytes:
    with pool.builder() as b:
        root = build(b, data)
        (b.FinishSizePrefixed if size_prefixed else b.Finish)(root, file_identifier=identifier)
        return bytes(b.Output())


def encode_request_stock(pool: BuilderPool, request: chat.ChatCompletionRequest, request_id: str,
                         passport: gen.PassportData, provider: str = "openai", model_name: str | None = None,
                         extra_json: str | None = None) -> bytes:
    return _stock(pool, gen.build_CompletionRequest,
                  request_data(request, request_id, passport, provider, model_name, extra_json), identifiers.REQUEST)


def encode_response_stock(pool: BuilderPool, response: wire_types.Response) -> bytes:
    return _stock(pool, gen.build_CompletionResponse, response_data(response), identifiers.RESPONSE)


def encode_chunk_frame_stock(pool: BuilderPool, chunk: wire_types.Chunk) -> bytes:
    return _stock(pool, gen.build_CompletionChunk, chunk_data(chunk), identifiers.CHUNK, size_prefixed=True)


def encode_error_stock(pool: BuilderPool, error: wire_types.ErrorInfo, *, framed: bool = False) -> bytes:
    return _stock(pool, gen.build_Error, error_data(error), identifiers.ERROR, size_prefixed=framed)


def encode_embedding_request_stock(pool: BuilderPool, request: EmbeddingRequest, request_id: str,
                                   passport: gen.PassportData, provider: str = "openai",
                                   model_name: str | None = None) -> bytes:
    data = embedding_request_data(request, request_id, passport, provider, model_name)
    return _stock(pool, gen.build_EmbeddingRequest, data, identifiers.EMBEDDING_REQUEST)


def encode_embeddings_stock(pool: BuilderPool, embeddings: Embeddings) -> bytes:
    return _stock(pool, gen.build_EmbeddingResponse, embeddings_data(embeddings), identifiers.EMBEDDING_RESPONSE)
