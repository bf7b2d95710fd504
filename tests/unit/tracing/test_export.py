"""ingress/tracing/export.py: the export thread POSTs batches of encoded spans as OTLP/HTTP, with the
configured headers, to a collector (a stdlib HTTP server on loopback here), and a failed batch is dropped
without stopping the next one."""

from __future__ import annotations

import collections
import http.server
import threading
from collections.abc import Iterator

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from waiting import eventually

from ingress.settings import Tracing
from ingress.tracing import otlp
from ingress.tracing.export import Exporter
from unit.tracing.test_otlp import Record

PREFIX = otlp.resource_prefix({"service.name": "edge"}, "ingress", "0")


class Collector(http.server.ThreadingHTTPServer):
    """What it was sent: (path, headers, the export request) a POST; `statuses` answers them in turn (200
    after the last)."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.received: list[tuple[str, dict[str, str], ExportTraceServiceRequest]] = []
        self.statuses: collections.deque[int] = collections.deque()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1/traces"

    def names(self) -> list[list[str]]:
        return [[s.name for s in request.resource_spans[0].scope_spans[0].spans] for _, _, request in self.received]


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Collector

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        status = self.server.statuses.popleft() if self.server.statuses else 200
        self.server.received.append((self.path, dict(self.headers), ExportTraceServiceRequest.FromString(body)))
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[Collector]:
    server = Collector()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


def _spans(*names: str) -> list[bytes]:
    return [otlp.span(Record(name=name)) for name in names]


def _exporter(url: str, queue: collections.deque[bytes], **config: object) -> Exporter:
    settings = Tracing(endpoint=url, **{"flush_interval": 60.0, "export_timeout": 2.0, **config})  # type: ignore[arg-type]
    return Exporter(settings, {"Authorization": "Bearer t0ken"}, queue, PREFIX)


async def test_a_full_batch_is_sent_at_once_with_the_configured_headers(collector: Collector) -> None:
    queue = collections.deque(_spans("a", "b", "c"))
    exporter = _exporter(collector.url, queue, max_batch=2)
    try:
        exporter.wake()  # as the tracer does when a batch is waiting
        await eventually(lambda: collector.names() == [["a", "b"]] or None, "the full batch")
        assert list(queue) == _spans("c")  # less than a batch waits for the interval, or the stop
    finally:
        exporter.stop(5)
    assert collector.names() == [["a", "b"], ["c"]] and not queue
    path, headers, request = collector.received[0]
    assert (path, headers["Content-Type"], headers["Authorization"]) == (
        "/v1/traces", "application/x-protobuf", "Bearer t0ken")
    assert request.resource_spans[0].resource.attributes[0].value.string_value == "edge"
    assert request.resource_spans[0].scope_spans[0].scope.name == "ingress"


def test_stopping_sends_what_is_left_in_batches(collector: Collector) -> None:
    queue: collections.deque[bytes] = collections.deque()
    exporter = _exporter(collector.url, queue, max_batch=2)
    queue.extend(_spans("a", "b", "c", "d", "e"))

    exporter.stop(5)

    assert collector.names() == [["a", "b"], ["c", "d"], ["e"]]


async def test_a_refused_batch_is_dropped_and_the_next_one_still_goes(collector: Collector) -> None:
    collector.statuses.extend([503])
    queue = collections.deque(_spans("refused"))
    exporter = _exporter(collector.url, queue)
    try:
        exporter.wake()
        await eventually(lambda: collector.names() == [["refused"]] or None, "the first batch")
        queue.extend(_spans("next"))
        exporter.wake()
        await eventually(lambda: collector.names() == [["refused"], ["next"]] or None, "the next batch")
    finally:
        exporter.stop(5)
    assert not queue  # the refused span was not put back


def test_an_unreachable_collector_costs_only_the_spans() -> None:
    queue = collections.deque(_spans("lost"))
    exporter = _exporter("http://127.0.0.1:9/v1/traces", queue, export_timeout=0.5)

    exporter.stop(5)

    assert not queue and not exporter._sender.is_alive()
