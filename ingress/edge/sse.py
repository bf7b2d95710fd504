"""Server-sent events: the pipeline's stream events as `data: ...\\n\\n` lines, in a reused buffer, or
for the Responses API as `event: <type>` and `data: ...` lines; and Google's streams, as SSE or as a JSON
array that grows.

The only place stream bytes are made."""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

import msgspec

from ingress import pipeline
from ingress.edge import resume
from ingress.errors import IngressError
from ingress.oai.chat_answers import ChatCompletionChunk
from ingress.oai.completions import TextCompletion
from ingress.oai.responses_answers import ErrorEvent
from ingress.translate.gemini import error_event as gemini_error_event
from ingress.translate.messages import error_event
from ingress.translate.responses_events import ResponseEvents
from ingress.translate.stream import Delta, Head

DONE = b"data: [DONE]\n\n"
HEARTBEAT = b": ping\n\n"  # a comment: clients ignore it, proxies see traffic
_PREFIX = b"data: "
_END = b"\n\n"

_encoder = msgspec.json.Encoder()
E = TypeVar("E", contravariant=True)


class EventWriter(Protocol[E]):
    """What the edge's stream writer needs: one event's bytes, and a failure's once the stream has begun."""

    def render(self, event: E) -> bytes: ...

    def error(self, exc: IngressError) -> bytes: ...


class SseWriter:
    """Encodes events into one reused bytearray; each call returns an independent bytes object."""

    def __init__(self) -> None:
        self._buf = bytearray(_PREFIX)
        self._head: Head | None = None  # the last Delta's head and choice, and their template as an event
        self._index = 0
        self._before: bytes | None = None
        self._after = b""

    def event(self, obj: Any) -> bytes:
        _encoder.encode_into(obj, self._buf, len(_PREFIX))
        self._buf += _END
        return bytes(self._buf)

    def delta(self, d: Delta) -> bytes:
        """A Delta's event: its head's template (`Head.template`) framed as an event once, around its
        content encoded alone; the same bytes as `event(d.chunk())`, as `Delta.json` is its JSON."""
        if d.head is not self._head or d.index != self._index:
            self._head, self._index = d.head, d.index
            template = d.head.template(d.index)
            self._before, self._after = (_PREFIX + template[0], template[1] + _END) if template else (None, b"")
        if self._before is None:
            return self.event(d.chunk())
        return b"".join((self._before, _encoder.encode(d.content), self._after))

    def error(self, exc: IngressError) -> bytes:
        """A failure once the stream has begun: OpenAI's error shape as a data line (the SDKs raise it)."""
        return self.event(exc.body())

    def events(self, objs: list[Any]) -> bytes:
        """Several events' bytes, one after the other."""
        return b"".join([self.delta(o) if type(o) is Delta else self.event(o) for o in objs])

    def render(self, event: pipeline.StreamEvent) -> bytes:
        """One event's bytes (b"" for OPENED, which only commits the response); a Burst's, together."""
        if type(event) is Delta:
            return self.delta(event)
        if type(event) is ChatCompletionChunk or type(event) is TextCompletion:
            return self.event(event)
        if type(event) is pipeline.Burst:
            return self.events(event.chunks)
        if event is pipeline.HEARTBEAT:
            return HEARTBEAT
        if event is pipeline.DONE:
            return DONE
        if isinstance(event, pipeline.Failed):
            return self.error(event.error)
        assert event is pipeline.OPENED, event
        return b""


class _NamedEvents:
    """Events that name their type: `event: <obj.type>` and `data: <obj>`."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def event(self, obj: Any) -> bytes:
        buf = self._buf
        del buf[:]
        buf += b"event: "
        buf += obj.type.encode()
        buf += b"\ndata: "
        _encoder.encode_into(obj, buf, len(buf))
        buf += b"\n\n"
        return bytes(buf)


class ResponsesSseWriter(_NamedEvents):
    """The Responses API's stream: each event as `event: <its type>` and `data: <it>`. No [DONE]: the
    stream's last event says how it ended (response.completed, .incomplete, or error and .failed)."""

    def __init__(self, events: ResponseEvents) -> None:
        super().__init__()
        self._events = events

    def error(self, exc: IngressError) -> bytes:
        """A failure once the stream has begun: `error`, then response.failed (the stream's own events)."""
        return b"".join(self.event(e) for e in self._events.failed(exc))

    def render(self, event: pipeline.ResponsesStreamEvent) -> bytes:
        if event is pipeline.HEARTBEAT:
            return HEARTBEAT
        if event is pipeline.OPENED or event is pipeline.DONE:
            return b""
        if isinstance(event, pipeline.Failed):
            return self.error(event.error)
        if type(event) is pipeline.ResponsesBurst:
            return b"".join([self.event(e) for e in event.events])
        return self.event(event)


class StoredEventsWriter:
    """A stored response's stream read again (GET /v1/responses/{id}?stream=true): each event's JSON as it
    was kept (ingress/edge/resume.py), framed as it was first sent; an empty read, a heartbeat. A failure
    of the reading itself: an `error` event numbered after the last one sent."""

    def __init__(self, start: int) -> None:
        self._next = start

    def render(self, batch: list[bytes]) -> bytes:
        if not batch:
            return HEARTBEAT
        self._next += len(batch)
        return b"".join([b"event: %s\ndata: %s\n\n" % (resume.event_type(e).encode(), e) for e in batch])

    def error(self, exc: IngressError) -> bytes:
        return _NamedEvents().event(ErrorEvent(sequence_number=self._next, code=exc.code or exc.type,
                                               message=exc.message, param=exc.param))


PING = b'event: ping\ndata: {"type":"ping"}\n\n'


class MessagesSseWriter(_NamedEvents):
    """Anthropic's Messages stream: each event as `event: <its type>` and `data: <it>`; `ping` while the
    service is silent. Its last event says how it ended: message_stop, or `error` (the client raises)."""

    def __init__(self, request_id: str) -> None:
        super().__init__()
        self._request_id = request_id

    def error(self, exc: IngressError) -> bytes:
        """A failure once the stream has begun: the `error` event, and no message_stop after it."""
        return self.event(error_event(exc, request_id=self._request_id))

    def render(self, event: pipeline.StreamEvent) -> bytes:
        if event is pipeline.HEARTBEAT:
            return PING
        if event is pipeline.OPENED or event is pipeline.DONE:
            return b""  # the translator writes message_stop at the final frame
        if isinstance(event, pipeline.Failed):
            return self.error(event.error)
        if type(event) is pipeline.Burst:
            return b"".join([self.event(e) for e in event.chunks])
        return self.event(event)


class GeminiSseWriter:
    """Google's stream with `alt=sse`: each partial GenerateContentResponse as `data: <it>` ended by CRLFs, as
    Google ends them. Nothing while the service is silent (Google's SDKs read any other line as an event's
    JSON) and no end marker: the last event carries the finish reasons and usage. A failure once the stream
    has begun: Google's error envelope as the last event (its SDKs raise it)."""

    def __init__(self) -> None:
        self._buf = bytearray(_PREFIX)

    def event(self, obj: Any) -> bytes:
        _encoder.encode_into(obj, self._buf, len(_PREFIX))
        self._buf += b"\r\n\r\n"
        return bytes(self._buf)

    def error(self, exc: IngressError) -> bytes:
        return self.event(gemini_error_event(exc))

    def render(self, event: pipeline.StreamEvent) -> bytes:
        if isinstance(event, pipeline.Signal):
            return b""  # OPENED, HEARTBEAT, DONE: nothing Google sends
        if isinstance(event, pipeline.Failed):
            return self.error(event.error)
        if type(event) is pipeline.Burst:
            return b"".join([self.event(e) for e in event.chunks])
        return self.event(event)


class GeminiArrayWriter:
    """Google's stream without `alt=sse`: one JSON array written as it grows, `[{...},\\r\\n{...}]`, each
    element a partial GenerateContentResponse; closed at the end, or by the error envelope as its last
    element when the stream fails once begun."""

    def __init__(self) -> None:
        self._opened = False
        self._closed = False

    def _element(self, obj: Any) -> bytes:
        lead = b",\r\n" if self._opened else b"["
        self._opened = True
        return lead + _encoder.encode(obj)

    def _close(self) -> bytes:
        if self._closed:
            return b""
        self._closed = True
        return b"]" if self._opened else b"[]"

    def error(self, exc: IngressError) -> bytes:
        return self._element(gemini_error_event(exc)) + self._close()

    def render(self, event: pipeline.StreamEvent) -> bytes:
        if event is pipeline.DONE:
            return self._close()
        if isinstance(event, pipeline.Signal):
            return b""
        if isinstance(event, pipeline.Failed):
            return self.error(event.error)
        if type(event) is pipeline.Burst:
            return b"".join([self._element(e) for e in event.chunks])
        return self._element(event)
