"""OTLP/HTTP's trace payload, encoded: an `ExportTraceServiceRequest` protobuf from the edge's span records.

Sans-I/O and written by hand, as the FlatBuffers encoders are: the OpenTelemetry SDK spent ~260 µs of CPU
on a traced request's four spans before any encoding (bench/notes/tracing.md), several times the budget
a request's tracing has. Only what the edge's spans use is here: the resource's and spans' attributes
(string, bool, int, double and arrays of them), events, status, kind, parent and trace state. Decoded by
opentelemetry-proto, the result is field for field the message the tests build (tests/unit/tracing/test_otlp.py).

    ExportTraceServiceRequest  1 resource_spans
      ResourceSpans            1 resource (1 attributes)   2 scope_spans
        ScopeSpans             1 scope (1 name, 2 version) 2 spans
          Span                 1 trace_id  2 span_id  3 trace_state  4 parent_span_id  5 name  6 kind
                               7 start_time_unix_nano  8 end_time_unix_nano  9 attributes  11 events
                               15 status (2 message, 3 code)  16 flags
            Event              1 time_unix_nano  2 name  3 attributes
    KeyValue 1 key 2 value; AnyValue 1 string 2 bool 3 int 4 double 5 array (1 values)
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

_FIXED64 = struct.Struct("<Q").pack
_DOUBLE = struct.Struct("<d").pack
_FIXED32 = struct.Struct("<I").pack

KIND_INTERNAL, KIND_SERVER, KIND_CLIENT = 1, 2, 3
STATUS_UNSET, STATUS_OK, STATUS_ERROR = 0, 1, 2


class SpanData(Protocol):
    """What a span record gives the encoder (read only)."""

    @property
    def trace_id(self) -> int: ...
    @property
    def span_id(self) -> int: ...
    @property
    def parent_id(self) -> int: ...  # 0: a root span
    @property
    def trace_state(self) -> str | None: ...
    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> int: ...
    @property
    def start_ns(self) -> int: ...
    @property
    def end_ns(self) -> int: ...
    @property
    def attributes(self) -> Mapping[str, Any]: ...
    @property
    def events(self) -> Sequence[tuple[str, int, Mapping[str, Any]]]: ...  # (name, time, attributes)
    @property
    def status(self) -> int: ...
    @property
    def status_message(self) -> str: ...
    @property
    def flags(self) -> int: ...  # the W3C trace flags (bit 0: sampled), as OTLP's Span.flags low byte
    @property
    def remote_parent(self) -> bool: ...  # the parent's span is another process's (a caller's, a request's sender)


def varint(n: int) -> bytes:
    """A protobuf varint; a negative int64 as its 64-bit two's complement (ten bytes)."""
    if 0 <= n < 0x80:
        return _SMALL[n]
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL = [bytes((i,)) for i in range(0x80)]


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    n = len(payload)
    return varint(number << 3 | 2) + (_SMALL[n] if n < 0x80 else varint(n)) + payload


def _string(number: int, value: str) -> bytes:
    return _field(number, value.encode())


_KEYS: dict[str, bytes] = {}  # an attribute's name as KeyValue.key, encoded once (the names are few)
_MAX_KEYS = 4096


def _key(name: str) -> bytes:
    encoded = _KEYS.get(name)
    if encoded is None:
        encoded = _string(1, name)
        if len(_KEYS) < _MAX_KEYS:
            _KEYS[name] = encoded
    return encoded


def _any(value: Any) -> bytes:
    kind = type(value)
    if kind is str:
        raw: bytes = value.encode()
        n = len(raw)
        return b"\x0a" + (_SMALL[n] if n < 0x80 else varint(n)) + raw
    if kind is bool:  # before int: a bool is an int
        return b"\x10\x01" if value else b"\x10\x00"
    if kind is int:
        return b"\x18" + varint(value)
    if kind is float:
        return b"\x21" + _DOUBLE(value)
    if isinstance(value, (list, tuple)):
        return _field(5, b"".join(_field(1, _any(v)) for v in value))
    if isinstance(value, (str, int, float)):  # a subclass (an enum's value, a bool subclass...)
        return _any((str if isinstance(value, str) else float if isinstance(value, float) else int)(value))
    return _string(1, str(value))


# Each attribute field (tag, length, KeyValue) as encoded, by field number, name and value: a request's spans
# repeat most of theirs (a route, a tenant, an outcome, status 200, one attempt), and a hit is one lookup. A
# name's first few values of each kind are kept (a request id is never kept past these); str and int values
# apart, as True == 1 and a bool is no int here.
_STRS: dict[int, dict[str, dict[str, bytes]]] = {1: {}, 3: {}, 9: {}}
_INTS: dict[int, dict[str, dict[int, bytes]]] = {1: {}, 3: {}, 9: {}}
_PAIR_VALUES = 64


def _attribute(number: int, key: str, value: Any) -> bytes:
    """One attribute as KeyValue field `number`, kept for the next time when its name has few values."""
    kind = type(value)
    if kind is str:
        raw: bytes = value.encode()
        n = len(raw)
        any_value = b"\x0a" + (_SMALL[n] if n < 0x80 else varint(n)) + raw
    elif kind is float:
        any_value = b"\x21" + _DOUBLE(value)
    else:
        any_value = _any(value)
    n = len(any_value)
    kv = _key(key) + b"\x12" + (_SMALL[n] if n < 0x80 else varint(n)) + any_value
    n = len(kv)
    encoded = _TAGS[number] + (_SMALL[n] if n < 0x80 else varint(n)) + kv
    kept = _STRS[number] if kind is str else _INTS[number] if kind is int else None
    if kept is not None:
        values = kept.get(key)
        if values is None and len(kept) < _MAX_KEYS:
            values = kept[key] = {}
        if values is not None and len(values) < _PAIR_VALUES:
            values[value] = encoded
    return encoded


def attributes(number: int, values: Mapping[str, Any]) -> bytes:
    """Each attribute as a KeyValue field `number`; a None value is left out, as the SDK leaves it out."""
    strs, ints = _STRS[number], _INTS[number]
    parts = []
    for key, value in values.items():
        kind = type(value)
        if kind is str:
            known = strs.get(key)
        elif kind is int:
            known = ints.get(key)  # type: ignore[assignment]  # by int, as strs is by str
        elif value is None:
            continue
        else:
            known = None
        encoded = known.get(value) if known is not None else None
        parts.append(encoded if encoded is not None else _attribute(number, key, value))
    return b"".join(parts)


_TAGS = {number: varint(number << 3 | 2) for number in (1, 3, 9)}  # attributes of a resource, an event, a span
_TIMES = struct.Struct("<BQBQ").pack  # start_time_unix_nano (7) and end_time_unix_nano (8), both fixed64
_KINDS = {kind: b"\x30" + varint(kind) for kind in range(6)}
_NAMES: dict[str, bytes] = {}  # a span's name as field 5 (a route's few operations and models)
_EVENTS = {name: _string(2, name) for name in ("first_token", "usage")}  # the edge's events' names, as Event.name


def span(s: SpanData) -> bytes:
    name = _NAMES.get(s.name)
    if name is None:
        name = _string(5, s.name)
        if len(_NAMES) < _MAX_KEYS:
            _NAMES[s.name] = name
    parts = [b"\x0a\x10" + s.trace_id.to_bytes(16, "big") + b"\x12\x08" + s.span_id.to_bytes(8, "big")]
    if s.trace_state:
        parts.append(_string(3, s.trace_state))
    if s.parent_id:
        parts.append(b"\x22\x08" + s.parent_id.to_bytes(8, "big"))
    parts += [name, _KINDS.get(s.kind) or b"\x30" + varint(s.kind), _TIMES(0x39, s.start_ns, 0x41, s.end_ns),
              attributes(9, s.attributes)]
    for event_name, at, values in s.events:
        name = _EVENTS.get(event_name) or _string(2, event_name)
        parts.append(_field(11, b"\x09" + _FIXED64(at) + name + attributes(3, values)))
    if s.status:
        message = _string(2, s.status_message) if s.status_message else b""
        parts.append(_field(15, message + b"\x18" + varint(s.status)))
    # Span.flags: the trace flags in the low byte; bit 8: whether the parent is remote is known; bit 9: it is.
    parts.append(b"\x85\x01" + _FIXED32(s.flags & 0xFF | 0x100 | (0x200 if s.remote_parent else 0)))
    return b"".join(parts)


def resource_prefix(resource: Mapping[str, Any], scope: str, version: str) -> tuple[bytes, bytes]:
    """The parts of a request that are the same for every batch: the resource, and the scope."""
    return _field(1, attributes(1, resource)), _field(1, _string(1, scope) + _string(2, version))


def export_request(prefix: tuple[bytes, bytes], spans: Iterable[SpanData]) -> bytes:
    """One ExportTraceServiceRequest: one resource, one scope, `spans`."""
    return export_encoded(prefix, [span(s) for s in spans])


def export_encoded(prefix: tuple[bytes, bytes], spans: Iterable[bytes]) -> bytes:
    """One ExportTraceServiceRequest of spans already encoded (each `span(s)`)."""
    resource, scope = prefix
    scope_spans = _field(2, scope + b"".join(_field(2, s) for s in spans))
    return _field(1, resource + scope_spans)
