"""The request passport: facts computed once at the edge and carried on every internal hop, read here in
place from a request buffer (what computes them from a client's request: ingress/encoding/passport.py)."""

from __future__ import annotations

import hashlib
import random
import re
import struct
from collections.abc import Mapping
from typing import Any

from ingress.wire import identifiers
from ingress.wire._generated.LLMGateway.CompletionRequest import CompletionRequest as CompletionTable
from ingress.wire._generated.LLMGateway.EmbeddingRequest import EmbeddingRequest as EmbeddingTable
from ingress.wire.types import PassportData

_ROOTS: dict[bytes, type[CompletionTable] | type[EmbeddingTable]] = {
    identifiers.REQUEST: CompletionTable, identifiers.EMBEDDING_REQUEST: EmbeddingTable}
_TRACEPARENT = re.compile(r"^00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$")
_TRACESTATE = re.compile(r"[\x20-\x7e]{1,512}")


# The schema's Passport table as plain data, generated from it: a field added there is carried here.
Passport = PassportData


def key_id_of(api_key: str | None) -> str | None:
    """A stable, non-reversible id of the API key; the key itself never leaves the edge."""
    if not api_key:
        return None
    return hashlib.blake2b(api_key.encode(), digest_size=8).hexdigest()


def new_traceparent(sampled: bool = True) -> str:
    # Trace ids need to be unique, not secret: OpenTelemetry's SDK also uses random.getrandbits.
    return f"00-{random.getrandbits(128) or 1:032x}-{random.getrandbits(64) or 1:016x}-{'01' if sampled else '00'}"


def valid_traceparent(value: str | None) -> str | None:
    return value if value is not None and _TRACEPARENT.fullmatch(value) else None


def valid_tracestate(value: str | None) -> str | None:
    """W3C tracestate is at most 512 printable ASCII characters; anything else is not forwarded."""
    return value if value is not None and _TRACESTATE.fullmatch(value) else None


MAX_READ_BLOCKS = 1024  # of a client's own chain, read for routing (the edge's own has at most ~50)


def prefix_at(buf: bytes | bytearray) -> tuple[tuple[int, ...], int]:
    """A request buffer's prefix hash chain (at most MAX_READ_BLOCKS of it) and conversation block, read in
    place from its passport: what a cache-affine group chooses a client's own buffer by. ((), 0): none."""
    root = _ROOTS.get(identifiers.identifier_of(buf))
    passport = root.GetRootAs(buf, 0).Passport() if root is not None else None
    if passport is None:
        return (), 0
    tab = passport._tab
    slot = tab.Offset(20)  # Passport.prefix_blocks: field 8, vtable slot 4 + 2 * 8
    if not slot:
        return (), 0
    at = tab.Vector(slot)
    count = min(tab.VectorLen(slot), MAX_READ_BLOCKS)
    return struct.unpack_from(f"<{count}Q", buf, at), passport.ConversationBlock()


def trace_context(buf: bytes | bytearray) -> tuple[str | None, str | None]:
    """A request buffer's traceparent and tracestate, read in place from its passport (well-formed ones
    only): the context a service continues the trace from, with no header to parse."""
    root = _ROOTS.get(identifiers.identifier_of(buf))
    passport = root.GetRootAs(buf, 0).Passport() if root is not None else None
    if passport is None:
        return None, None
    traceparent = valid_traceparent((passport.Traceparent() or b"").decode("ascii", "replace") or None)
    tracestate = valid_tracestate((passport.Tracestate() or b"").decode("ascii", "replace") or None)
    return traceparent, tracestate if traceparent else None


def model_name(buf: bytes | bytearray) -> str:
    """A request buffer's model name, read in place (a CompletionRequest's or an EmbeddingRequest's)."""
    root = _ROOTS.get(identifiers.identifier_of(buf))
    name = root.GetRootAs(buf, 0).ModelName() if root is not None else None
    return (name or b"").decode("utf-8", "replace")


def start_span(tracer: Any, buf: bytes | bytearray, name: str, *, kind: Any = None,
               attributes: Mapping[str, Any] | None = None) -> Any:
    """For a Python service behind the edge: its span for a request buffer, the child of the span that sent
    it (the edge's attempt), from the passport's trace context. `tracer` is an OpenTelemetry Tracer; the
    span is started, not made current, and ends when the caller ends it."""
    from opentelemetry.trace import SpanKind
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    traceparent, tracestate = trace_context(buf)
    carrier = {"traceparent": traceparent, "tracestate": tracestate or ""} if traceparent else {}
    parent = TraceContextTextMapPropagator().extract(carrier) if carrier else None
    return tracer.start_span(name, context=parent, kind=SpanKind.SERVER if kind is None else kind,
                             attributes=attributes)
