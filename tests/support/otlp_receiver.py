"""A real OTLP/HTTP trace receiver on loopback: what a collector would receive, decoded with opentelemetry-proto.

    receiver = OtlpReceiver()
    async with receiver.running() as url:     # url: http://127.0.0.1:PORT/v1/traces
        ...
        spans = await receiver.wait_for(lambda spans: len(spans) >= 4, "four spans")

It answers as a collector does (200 and an empty `ExportTraceServiceResponse`), or, for the fault tests,
`stall` (holds each export for that many seconds before answering) and `refuse` (answers 503).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as SpanProto
from waiting import eventually

from ingress.serve.app import serve_app

KINDS = {SpanProto.SPAN_KIND_SERVER: "server", SpanProto.SPAN_KIND_CLIENT: "client",
         SpanProto.SPAN_KIND_INTERNAL: "internal", SpanProto.SPAN_KIND_PRODUCER: "producer",
         SpanProto.SPAN_KIND_CONSUMER: "consumer", SpanProto.SPAN_KIND_UNSPECIFIED: "unspecified"}


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


@dataclass(frozen=True)
class Span:
    """One span as the collector received it."""

    name: str
    trace_id: str  # hex, as a traceparent writes it
    span_id: str
    parent_id: str  # "" for a root
    kind: str
    attributes: dict[str, Any]
    status: str  # "unset", "ok", "error"
    status_message: str
    events: list[str]
    event_attributes: dict[str, dict[str, Any]]  # by the event's name
    start_ns: int
    end_ns: int
    service: str
    scope: str = ""
    links: list[str] = field(default_factory=list)


class OtlpReceiver:
    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.exports = 0  # requests received, answered or not
        self.stall = 0.0
        self.refuse = False
        self.content_types: set[str] = set()
        self.headers: list[dict[str, str]] = []
        self.url = ""  # the traces endpoint, once running

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/traces", self._traces)
        return app

    @asynccontextmanager
    async def running(self) -> AsyncIterator[str]:
        async with serve_app(self.app(), "127.0.0.1", 0) as url:
            self.url = f"{url}/v1/traces"
            yield self.url

    async def _traces(self, request: web.Request) -> web.Response:
        self.exports += 1
        self.content_types.add(request.content_type)
        self.headers.append(dict(request.headers))
        body = await request.read()
        if self.stall:
            await asyncio.sleep(self.stall)
        if self.refuse:
            return web.Response(status=503)
        export = ExportTraceServiceRequest()
        export.ParseFromString(body)
        for resource_spans in export.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    self.spans.append(Span(
                        name=s.name, trace_id=s.trace_id.hex(), span_id=s.span_id.hex(),
                        parent_id=s.parent_span_id.hex(), kind=KINDS[s.kind],
                        attributes={a.key: _value(a.value) for a in s.attributes},
                        status={0: "unset", 1: "ok", 2: "error"}[s.status.code], status_message=s.status.message,
                        events=[e.name for e in s.events],
                        event_attributes={e.name: {a.key: _value(a.value) for a in e.attributes} for e in s.events},
                        start_ns=s.start_time_unix_nano,
                        end_ns=s.end_time_unix_nano, service=str(resource.get("service.name", "")),
                        scope=scope_spans.scope.name, links=[link.span_id.hex() for link in s.links]))
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    async def wait_for(self, condition: Callable[[list[Span]], bool], what: str, timeout: float = 10.0) -> list[Span]:
        await eventually(lambda: condition(self.spans), what, timeout=timeout)
        return list(self.spans)

    def trace(self, trace_id: str) -> list[Span]:
        return [s for s in self.spans if s.trace_id == trace_id]
