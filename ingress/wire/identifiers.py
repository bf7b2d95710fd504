"""File identifiers of the root tables (bytes 4..8 of a buffer, after the root offset), and the service paths."""

from __future__ import annotations

REQUEST = b"LGRQ"
RESPONSE = b"LGRS"
CHUNK = b"LGCK"
ERROR = b"LGER"
EMBEDDING_REQUEST = b"LGEQ"
EMBEDDING_RESPONSE = b"LGES"

CONTENT_TYPE = "application/x-flatbuffers"
STREAM_CONTENT_TYPE = "application/x-flatbuffers-frames"
COMPLETE_PATH = "/v1/complete"  # where internal services take a CompletionRequest
EMBED_PATH = "/v1/embed"  # where they take an EmbeddingRequest
COUNT_PATH = "/v1/count_tokens"  # a CompletionRequest's prompt counted: a CompletionResponse with only its usage


def identifier_of(buf: bytes | bytearray | memoryview, offset: int = 0) -> bytes:
    """The 4-byte identifier of an unprefixed buffer starting at `offset` (b"" if too short)."""
    return bytes(buf[offset + 4 : offset + 8]) if len(buf) >= offset + 8 else b""
