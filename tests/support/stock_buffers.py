"""The stock flatbuffers.Builder encoders of the answers and the embeddings messages: the reference the
tests compare the generated encoders with. ingress keeps only the request's (ingress/encoding/stock.py), which
the benchmarks swap into an edge; these five ship nowhere."""

from __future__ import annotations

from ingress.encoding.embeddings import embedding_request_data
from ingress.oai.embeddings import EmbeddingRequest
from ingress.wire import identifiers
from ingress.wire._generated import encoders as gen
from ingress.wire.embeddings import Embeddings, embeddings_data
from ingress.wire.encode import chunk_data, error_data, response_data
from ingress.wire.stock import BuilderPool, encode_stock
from ingress.wire.types import Chunk, ErrorInfo, Response


def encode_response_stock(pool: BuilderPool, response: Response) -> bytes:
    return encode_stock(pool, gen.build_CompletionResponse, response_data(response), identifiers.RESPONSE)


def encode_chunk_frame_stock(pool: BuilderPool, chunk: Chunk) -> bytes:
    return encode_stock(pool, gen.build_CompletionChunk, chunk_data(chunk), identifiers.CHUNK, size_prefixed=True)


def encode_error_stock(pool: BuilderPool, error: ErrorInfo, *, framed: bool = False) -> bytes:
    return encode_stock(pool, gen.build_Error, error_data(error), identifiers.ERROR, size_prefixed=framed)


def encode_embedding_request_stock(pool: BuilderPool, request: EmbeddingRequest, request_id: str,
                                   passport: gen.PassportData, provider: str = "openai",
                                   model_name: str | None = None) -> bytes:
    data = embedding_request_data(request, request_id, passport, provider, model_name)
    return encode_stock(pool, gen.build_EmbeddingRequest, data, identifiers.EMBEDDING_REQUEST)


def encode_embeddings_stock(pool: BuilderPool, embeddings: Embeddings) -> bytes:
    return encode_stock(pool, gen.build_EmbeddingResponse, embeddings_data(embeddings), identifiers.EMBEDDING_RESPONSE)
