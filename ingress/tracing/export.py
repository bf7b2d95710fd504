"""The thread that exports a worker's ended spans: batches of them, encoded, POSTed over OTLP/HTTP."""

from __future__ import annotations

import collections
import http.client
import threading
import urllib.parse

from ingress import metrics
from ingress.log import get_logger
from ingress.settings import Tracing
from ingress.tracing import otlp

log = get_logger("ingress.tracing")


class Exporter:
    """The thread that sends the queued spans: a batch every `flush_interval`, or as soon as `max_batch`
    are waiting; one POST of an ExportTraceServiceRequest each, on a kept-alive connection, within
    `export_timeout`. A batch that fails (an error status, no connection, too slow) is dropped and counted:
    the collector's absence must cost the edge nothing but its spans."""

    def __init__(self, config: Tracing, headers: dict[str, str], queue: collections.deque[bytes],
                 prefix: tuple[bytes, bytes]) -> None:
        url = urllib.parse.urlsplit(config.endpoint)
        self._https, self._host, self._port = url.scheme == "https", url.hostname or "", url.port
        self._path = url.path or "/v1/traces"
        self._headers = {"Content-Type": "application/x-protobuf", **headers}
        self._config, self._queue, self._prefix = config, queue, prefix
        self._event, self._stopping = threading.Event(), False
        self._connection: http.client.HTTPConnection | None = None
        self._sender = threading.Thread(target=self._run, name="ingress-trace-export", daemon=True)
        self._sender.start()

    def wake(self) -> None:
        if not self._event.is_set():
            self._event.set()

    def stop(self, timeout_s: float) -> None:
        self._stopping = True
        self._event.set()
        self._sender.join(timeout_s)

    def _run(self) -> None:
        interval, full = self._config.flush_interval, self._config.max_batch
        while True:
            self._event.wait(interval)
            self._event.clear()
            # What is queued, then whole batches only: the spans that arrive while a batch is sent wait for
            # the next interval or a full batch, not a POST each (which cost the loop a thread switch a span).
            self._send(self._batch())
            while len(self._queue) >= full or (self._stopping and self._queue):
                self._send(self._batch())
            if self._stopping:
                if self._connection is not None:
                    self._connection.close()
                return

    def _batch(self) -> list[bytes]:
        queue, batch = self._queue, []
        for _ in range(min(len(queue), self._config.max_batch)):
            batch.append(queue.popleft())
        return batch

    def _send(self, spans: list[bytes]) -> None:
        if not spans:
            return
        try:
            body = otlp.export_encoded(self._prefix, spans)
            connection = self._connection or self._connect()
            connection.request("POST", self._path, body, self._headers)
            response = connection.getresponse()
            response.read()
            ok = 200 <= response.status < 300
            if response.will_close or not ok:
                self._close()
        except Exception as exc:  # the collector unreachable, too slow, a fault: never the edge's
            self._close()
            ok = False
            log.debug("trace export failed", error=type(exc).__name__)
        if ok:
            metrics.TRACE_SPANS_EXPORTED.inc(len(spans))
        else:
            metrics.TRACE_SPANS_DROPPED.labels("export_failed").inc(len(spans))

    def _connect(self) -> http.client.HTTPConnection:
        kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        self._connection = kind(self._host, self._port, timeout=self._config.export_timeout)
        return self._connection

    def _close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

