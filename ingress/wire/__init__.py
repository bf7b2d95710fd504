"""The FlatBuffers wire format, and a small public API for internal Python services.

The contract alone: the schema's types, the generated encoders, readers and verifier, framing, the
passport's layout and readers, a request's canonical form. It imports nothing of the edge's dialects
(OpenAI's, Anthropic's) nor of its token counting: a request mapped from a dialect onto these tables, its
passport computed, and read back into OpenAI's shape are the edge's, in `ingress.encoding`
(`ingress.encoding.reading.decode_request(body)`, `decode_text_request(body)` for a service that wants
OpenAI's request shape).

An internal service reads a request without copying and answers with a response buffer, or with a
stream of size-prefixed chunk frames::

    from ingress import wire

    wire.verify_request(body)                   # first: a buffer from outside is checked whole
    request = wire.read_request(body)           # zero-copy view over `body`
    request.ModelName(), request.Stream(), request.MessagesLength()
    wire.read_request_data(body)                # or every field, as a CompletionRequestData
    request.TextCompletion()                    # a legacy text completion: request.Prompts(i), not messages

    wire.write_response(wire.Response(...))     # one CompletionResponse buffer
    wire.write_chunk(wire.Chunk(sequence=0, ...))  # one stream frame; the last one has done=True
    wire.write_error(wire.ErrorInfo(status=429, message="..."), framed=False)

Embeddings (`POST EMBED_PATH`): `wire.read_embedding_request(body)` verifies and reads an
EmbeddingRequest; `wire.write_embeddings(wire.Embeddings(model=..., vectors=[[...], ...], usage=...))`
answers it, one vector per input.

Tracing: the passport carries the sender's trace context, read in place with no header to parse:
`wire.trace_context(body)` gives its traceparent and tracestate, and `wire.start_span(tracer, body, name)`
starts an OpenTelemetry span as the child of the edge's attempt (end it when the answer ends).
"""

from __future__ import annotations

from ingress.wire.decode import (
    RequestView,
    WireError,
    decode_chunk,
    decode_error,
    decode_response,
    read_request,
    read_request_data,
)
from ingress.wire.embeddings import (
    EmbeddingInputData,
    EmbeddingRequestData,
    Embeddings,
    encode_embeddings,
    read_embedding_request,
)
from ingress.wire.encode import FINISH_REASONS, PROVIDERS, ROLES, encode_chunk_frame, encode_error, encode_response
from ingress.wire.framing import FrameDecoder, FrameError, frame
from ingress.wire.identifiers import COMPLETE_PATH, CONTENT_TYPE, EMBED_PATH, STREAM_CONTENT_TYPE
from ingress.wire.passport import start_span, trace_context
from ingress.wire.stock import BuilderPool
from ingress.wire.types import (
    Annotation,
    Choice,
    Chunk,
    CompletionRequestData,
    ErrorInfo,
    FunctionCall,
    MessageData,
    PromptInputData,
    Response,
    TokenLogprob,
    ToolCallDelta,
    TopLogprob,
    Usage,
)
from ingress.wire.verify import verify_request


def write_response(response: Response) -> bytearray:
    """A CompletionResponse buffer, for a non-streamed answer (HTTP 200, Content-Type CONTENT_TYPE)."""
    return encode_response(response)


def write_chunk(chunk: Chunk) -> bytearray:
    """A size-prefixed CompletionChunk frame, for a streamed answer (Content-Type STREAM_CONTENT_TYPE)."""
    return encode_chunk_frame(chunk)


def write_error(error: ErrorInfo, *, framed: bool = False) -> bytearray:
    """An Error buffer: alone, answered with HTTP status `error.status`, or `framed` inside a stream."""
    return encode_error(error, framed=framed)


def write_embeddings(embeddings: Embeddings) -> bytearray:
    """An EmbeddingResponse buffer, the answer to an EmbeddingRequest (HTTP 200, Content-Type CONTENT_TYPE)."""
    return encode_embeddings(embeddings)


__all__ = [
    "COMPLETE_PATH",
    "CONTENT_TYPE",
    "EMBED_PATH",
    "FINISH_REASONS",
    "PROVIDERS",
    "ROLES",
    "STREAM_CONTENT_TYPE",
    "Annotation",
    "BuilderPool",
    "Choice",
    "Chunk",
    "CompletionRequestData",
    "EmbeddingInputData",
    "EmbeddingRequestData",
    "Embeddings",
    "ErrorInfo",
    "FrameDecoder",
    "FrameError",
    "FunctionCall",
    "MessageData",
    "PromptInputData",
    "RequestView",
    "Response",
    "TokenLogprob",
    "ToolCallDelta",
    "TopLogprob",
    "Usage",
    "WireError",
    "decode_chunk",
    "decode_error",
    "decode_response",
    "frame",
    "read_embedding_request",
    "read_request",
    "read_request_data",
    "start_span",
    "trace_context",
    "verify_request",
    "write_chunk",
    "write_embeddings",
    "write_error",
    "write_response",
]
