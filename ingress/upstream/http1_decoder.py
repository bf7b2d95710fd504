"""HTTP/1.1 responses parsed as they arrive (sans-I/O): httptools (llhttp) callbacks into a status, headers
and body pieces, the limits of a head, and what the end of a connection means for the body."""

from __future__ import annotations

from collections import deque

import httptools

from ingress.errors import UpstreamProtocolError, UpstreamUnavailable

UNAVAILABLE = "The model service is unavailable."
BROKEN = "The model service connection broke while sending its answer."
MALFORMED = "The model service sent a malformed HTTP response."
HEAD_TOO_LARGE = "The model service sent an HTTP response head over 64 KiB."
HEAD_LIMIT = 64 * 1024  # bytes of status lines, headers and trailers, 1xx responses included


class ResponseDecoder:
    """The responses arriving on one connection, without I/O: `start()` before each, `feed()` what
    arrives, `finish()` when the connection ends. httptools calls the `on_*` methods."""

    def __init__(self) -> None:
        # One parser for the connection's life: llhttp reads kept-alive responses back to back, and
        # one made per response would tie it and this object in a cycle for the GC to collect.
        self._parser: httptools.HttpResponseParser | None = httptools.HttpResponseParser(self)
        self.start()

    def start(self) -> None:
        """Expect the next response."""
        self.status = 0
        self.headers: dict[str, str] = {}  # names lower-cased; repeated headers joined with ", "
        self.head_done = False
        self.done = False
        self.keep_alive = False  # once done: the connection may carry another exchange
        self.body: deque[bytes] = deque()
        self.buffered = 0  # bytes in `body`
        self._head_size = 0  # of the heads parsed so far
        self._head_bytes = 0  # fed while no final head was complete

    def feed(self, data: bytes) -> None:
        """Parse the next bytes; raises UpstreamProtocolError if they are not a response."""
        if self.done:
            self.keep_alive = False  # bytes after the response: the connection is not reused
            return
        if not self.head_done:
            self._head_bytes += len(data)
        parser = self._parser
        if parser is None:  # the connection has ended: nothing more is read from it
            raise UpstreamProtocolError(MALFORMED)
        try:
            parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            if self.done:  # the response is whole; what follows it is not ours to read
                self.keep_alive = False
                return
            raise UpstreamProtocolError(HEAD_TOO_LARGE if self._head_size > HEAD_LIMIT else MALFORMED) from exc
        if not self.head_done and self._head_bytes > HEAD_LIMIT:  # a head that never ends
            raise UpstreamProtocolError(HEAD_TOO_LARGE)

    def release(self) -> None:
        """The connection is gone: the parser, which holds this object as its protocol, is let go with it
        (freed now, not left in a cycle for the collector; the soak found one a closed connection)."""
        self._parser = None

    def finish(self) -> None:
        """The connection ended: a body delimited by that is complete; anything else was cut short."""
        if self.done:
            return
        if not self.head_done:
            raise UpstreamUnavailable(UNAVAILABLE)
        chunked = self.headers.get("transfer-encoding", "").rstrip().lower().endswith("chunked")
        if chunked or "content-length" in self.headers:
            raise UpstreamProtocolError(BROKEN)
        self.done = True

    def take(self) -> bytes:
        """Every body byte received and not yet taken."""
        body = self.body
        data = body.popleft() if len(body) == 1 else b"".join(body)
        body.clear()
        self.buffered = 0
        return data

    # --- httptools callbacks ---

    def on_message_begin(self) -> None:
        if self.done:  # a second response nobody asked for: stop parsing
            raise UpstreamProtocolError(MALFORMED)

    def on_status(self, status: bytes) -> None:
        self._head_size += len(status) + 15

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_size += len(name) + len(value) + 4
        if self._head_size > HEAD_LIMIT:
            raise UpstreamProtocolError(HEAD_TOO_LARGE)
        if self.head_done:  # a trailer field, after a chunked body: not kept
            return
        key, text = name.decode("latin-1").lower(), value.decode("latin-1")
        seen = self.headers.get(key)
        self.headers[key] = text if seen is None else f"{seen}, {text}"

    def on_headers_complete(self) -> None:
        assert self._parser is not None  # a callback of the parser's own feed_data
        status = self._parser.get_status_code()
        if status < 200:  # 100 Continue, 103 Early Hints: the final response follows
            self.headers = {}
            return
        self.status = status
        self.head_done = True

    def on_body(self, body: bytes) -> None:
        self.body.append(body)
        self.buffered += len(body)

    def on_message_complete(self) -> None:
        if not self.head_done:  # the end of a 1xx response
            return
        self.done = True
        parser = self._parser
        assert parser is not None  # a callback of the parser's own feed_data
        self.keep_alive = parser.should_keep_alive() and parser.get_http_version() == "1.1"
