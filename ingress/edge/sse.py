"""Server-sent events: the pipeline's stream events as `data: ...\\n\\n` lines, in a reused buffer.

The only place SSE bytes are made."""

from __future__ import annotations

from typing import Any

import msgspec

from ingress import pipeline
from ingress.errors import IngressError
from ingress.oai.answers import ChatCompletionChunk
from ingress.oai.completions import TextCompletion

DONE = b"data: [DONE]\n\n"
HEARTBEAT = b": ping\n\n"  # a comment: clients ignore it, proxies see traffic
_PREFIX = b"data: "

_encoder = msgspec.json.Encoder()


class SseWriter:
    """Encodes events into one reused bytearray; each call returns an independent bytes object."""

    def __init__(self) -> None:
        self._buf = bytearray(_PREFIX)

    def event(self, obj: Any) -> bytes:
        _encoder.encode_into(obj, self._buf, len(_PREFIX))
        self._buf += b"\n\n"
        return bytes(self._buf)

    def error(self, exc: IngressError) -> bytes:
        """A failure once the stream has begun: OpenAI's error shape as a data line (the SDKs raise it)."""
        return self.event(exc.body())

    def render(self, event: pipeline.StreamEvent) -> bytes:
        """One event's bytes (b"" for OPENED, which only commits the response)."""
        if type(event) is ChatCompletionChunk or type(event) is TextCompletion:
            return self.event(event)
        if event is pipeline.HEARTBEAT:
            return HEARTBEAT
        if event is pipeline.DONE:
            return DONE
        if isinstance(event, pipeline.Failed):
            return self.error(event.error)
        assert event is pipeline.OPENED, event
        return b""
