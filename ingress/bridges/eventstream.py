"""Server-sent events parsed from a body that arrives in any split (sans-I/O): bytes in, events out.

As the HTML standard's event-stream parser: a line ends at CRLF, LF or a lone CR (a CR at the end of
one feed waits for the next, which may begin with its LF); a `:` line is a comment; `data:` lines
accumulate, joined by LF, into one event that a blank line dispatches; `event:` names it ("message"
when unnamed); `id:`, `retry:` and unknown fields are ignored; one space after the colon is dropped.
One addition: llama.cpp's server writes an in-stream failure as an `error: {...}` line, which is read
as the data of an event named "error" (the standard would drop it and leave a stream that merely
stops). The body's end dispatches an event still pending: a stream cut inside one is the reader's
to judge (its data is incomplete JSON, or it lacks the final marker).
"""

from __future__ import annotations

import re
from typing import NamedTuple

MAX_EVENT_BYTES = 16 * 1024 * 1024  # one event's data, and one unfinished line: an engine's answer is smaller

_LINE_END = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"


class EventStreamError(ValueError):
    """The body is not an event stream we can read (an event or a line beyond MAX_EVENT_BYTES)."""


class Event(NamedTuple):
    type: str
    data: bytes


class EventStreamParser:
    """One body's events. `feed` returns the events its bytes completed; `finish`, at the body's end,
    those still pending."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._data: list[bytes] = []
        self._size = 0
        self._type = ""
        self._started = False

    def feed(self, data: bytes) -> list[Event]:
        self._buffer += data
        if not self._started:
            if len(self._buffer) < len(_BOM) and _BOM.startswith(self._buffer):
                return []  # perhaps the start of a byte order mark
            self._started = True
            if self._buffer.startswith(_BOM):
                del self._buffer[:len(_BOM)]
        events: list[Event] = []
        start = 0
        buffer = self._buffer
        while (end := _LINE_END.search(buffer, start)) is not None:
            if end.group() == b"\r" and end.end() == len(buffer):
                break  # a CR that may be the first half of a CRLF
            self._line(bytes(buffer[start:end.start()]), events)
            start = end.end()
        del buffer[:start]
        if len(buffer) > MAX_EVENT_BYTES:
            raise EventStreamError("an event stream line is longer than the bridge reads")
        return events

    def finish(self) -> list[Event]:
        events: list[Event] = []
        if self._buffer:
            self._line(bytes(self._buffer.rstrip(b"\r")), events)
            self._buffer.clear()
        self._line(b"", events)
        return events

    def _line(self, line: bytes, events: list[Event]) -> None:
        if not line:
            if self._data:
                events.append(Event(self._type or "message", b"\n".join(self._data)))
            self._data, self._size, self._type = [], 0, ""
            return
        if line.startswith(b":"):
            return
        name, colon, value = line.partition(b":")
        if colon and value.startswith(b" "):
            value = value[1:]
        if name == b"data" or name == b"error":
            self._size += len(value) + 1
            if self._size > MAX_EVENT_BYTES:
                raise EventStreamError("an event in the stream is larger than the bridge reads")
            self._data.append(value)
            if name == b"error":
                self._type = "error"
        elif name == b"event":
            self._type = value.decode("utf-8", "replace")
