"""POST a CompletionRequest (or an EmbeddingRequest) to an internal service and read its answer; timeouts,
oversized answers and error statuses become IngressErrors here (transport failures already are: see http1)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import TypeVar

from ingress.errors import IngressError, UpstreamError, UpstreamProtocolError, UpstreamTimeout
from ingress.settings import Timeouts
from ingress.upstream.http1 import Response
from ingress.upstream.pool import KEEPALIVE, ConnectionPool
from ingress.wire import identifiers
from ingress.wire.answer import decode_refusal

TOO_LARGE = "The model service answer is too large."

R = TypeVar("R")


def _timeout(waiting_for: str, *, after_head: bool = False) -> UpstreamTimeout:
    return UpstreamTimeout(f"The model service did not {waiting_for} in time.", after_head=after_head)


class UpstreamClient:
    """One internal service endpoint, with its own pool of kept-alive connections."""

    def __init__(self, url: str, timeouts: Timeouts, max_answer_bytes: int, keepalive: float = KEEPALIVE) -> None:
        self.endpoint = url
        self.timeouts = timeouts
        self._max_answer = max_answer_bytes
        self._pool = ConnectionPool(url, keepalive)

    async def close(self) -> None:
        await self._pool.close()

    async def _post(self, body: bytes | bytearray, headers: Mapping[str, str], t: Timeouts,
                    path: str = identifiers.COMPLETE_PATH) -> Response:
        """Send, and wait for the response head within `first_byte` (and the total, if any)."""
        head_within = t.first_byte if t.total is None else min(t.first_byte, t.total)
        deadline = asyncio.get_running_loop().time() + head_within
        hdrs = {**headers, "Content-Type": identifiers.CONTENT_TYPE}
        try:
            return await self._pool.request("POST", path, hdrs, body, t.connect, deadline)
        except TimeoutError as exc:
            raise _timeout("answer") from exc

    async def _send(self, body: bytes | bytearray, headers: Mapping[str, str], t: Timeouts,
                    path: str = identifiers.COMPLETE_PATH) -> Response:
        """`_post`, and any status but 200 raised as the service's error."""
        response = await self._post(body, headers, t, path)
        if response.status != 200:
            raise await self._refusal(response, t)
        return response

    async def _refusal(self, response: Response, t: Timeouts) -> UpstreamError:
        """The error an answer of a failure status stands for: the service's `Error` buffer, with its
        Retry-After, or a protocol error if it sent anything else. Reads and closes the response."""
        try:
            answer = await self._read_all(response, t)
        finally:
            response.close()
        raw = response.headers.get("retry-after", "")
        retry_after = min(int(raw), 3600) if raw.isascii() and raw.isdigit() else None
        if identifiers.identifier_of(answer) == identifiers.ERROR:
            return decode_refusal(answer, retry_after=retry_after)
        return UpstreamProtocolError(f"The model service failed with status {response.status}.",
                                     retry_after=retry_after)

    async def _read_all(self, response: Response, t: Timeouts, *, after_head: bool = False) -> bytes:
        """The whole body; `after_head`: it is the answer itself (not an error status's body), so a
        failure reading it may come after the generation ran."""
        length = response.headers.get("content-length")
        if length is not None and int(length) > self._max_answer:
            raise UpstreamProtocolError(TOO_LARGE, after_head=after_head)
        parts: list[bytes] = []
        size = 0
        try:
            while data := await response.read(t.idle):
                size += len(data)
                if size > self._max_answer:
                    raise UpstreamProtocolError(TOO_LARGE, after_head=after_head)
                parts.append(data)
        except TimeoutError as exc:
            raise _timeout("finish its answer", after_head=after_head) from exc
        except UpstreamError as exc:  # the connection broke mid-body (http1 cannot know what the body was)
            if not after_head or exc.after_head:
                raise
            raise type(exc)(exc.message, param=exc.param, code=exc.code, after_head=True) from exc.__cause__
        return b"".join(parts)

    async def complete(self, body: bytes | bytearray, headers: Mapping[str, str],
                       timeouts: Timeouts | None = None, *, path: str = identifiers.COMPLETE_PATH) -> bytes:
        """A non-streamed exchange: the whole answer body (a CompletionResponse or Error buffer)."""
        t = timeouts or self.timeouts
        if t.total is None:
            return await self._complete(body, headers, t, path)
        try:
            async with asyncio.timeout(t.total):
                return await self._complete(body, headers, t, path)
        except TimeoutError as exc:
            raise _timeout("finish its answer") from exc

    async def embed(self, body: bytes | bytearray, headers: Mapping[str, str],
                    timeouts: Timeouts | None = None) -> bytes:
        """An embeddings exchange, on the service's EMBED_PATH: the whole answer body (an
        EmbeddingResponse or Error buffer), with the same deadlines and errors as `complete`."""
        return await self.complete(body, headers, timeouts, path=identifiers.EMBED_PATH)

    async def _complete(self, body: bytes | bytearray, headers: Mapping[str, str], t: Timeouts, path: str) -> bytes:
        response = await self._send(body, headers, t, path)
        try:
            return await self._read_all(response, t, after_head=True)
        finally:
            response.close()

    @asynccontextmanager
    async def stream(self, body: bytes | bytearray, headers: Mapping[str, str],
                     timeouts: Timeouts | None = None) -> AsyncIterator[Reads]:
        """A streamed exchange: entering raises before the first byte; the body is read inside."""
        t = timeouts or self.timeouts
        deadline = None if t.total is None else asyncio.get_running_loop().time() + t.total
        response = await self._send(body, headers, t)
        if not response.headers.get("content-type", "").startswith(identifiers.STREAM_CONTENT_TYPE):
            response.close()
            raise UpstreamProtocolError("The model service did not answer with a stream.")
        try:
            yield Reads(response, t.idle, deadline)
        finally:
            response.close()  # also on cancellation: the upstream call ends with the client's

    async def probe(self, path: str, timeout: float) -> bool:
        """An active health check: GET `path`, healthy on any 2xx."""
        deadline = asyncio.get_running_loop().time() + timeout
        try:
            response = await self._pool.request("GET", path, {}, None, timeout, deadline)
        except (IngressError, OSError, ValueError):  # OSError: TimeoutError too; ValueError: an unsendable path
            return False
        response.close()
        return 200 <= response.status < 300

    async def forward(self, body: bytes, headers: Mapping[str, str],
                    timeouts: Timeouts | None = None) -> tuple[Response, Reads]:
        """Binary ingress: send, and hand back the open response of any status below 500 with its reads
        (idle and total deadlines applied), for relaying unmodified; the caller closes it. A 5xx is raised
        as the service's error, before anything is relayed, so that a fallback may serve the request."""
        t = timeouts or self.timeouts
        deadline = None if t.total is None else asyncio.get_running_loop().time() + t.total
        response = await self._post(body, headers, t)
        if response.status >= 500:
            raise await self._refusal(response, t)
        return response, Reads(response, t.idle, deadline)


class Reads:
    """A streamed answer's body, read by read (an async iterator of bytes, b"" never), or pumped: each read
    handed to a callback as it arrives (`pump`). Between two reads the service has `idle` seconds, and
    the whole answer must be in by `deadline` (loop time); past either, UpstreamTimeout."""

    __slots__ = ("_deadline", "_idle", "_response")

    def __init__(self, response: Response, idle: float, deadline: float | None) -> None:
        self._response, self._idle, self._deadline = response, idle, deadline

    def __aiter__(self) -> Reads:
        return self

    async def __anext__(self) -> bytes:
        wait = self._idle
        if self._deadline is not None:
            wait = max(min(wait, self._deadline - asyncio.get_running_loop().time()), 0.0)
        try:
            data = await self._response.read(wait)
        except TimeoutError as exc:
            raise _timeout("send the next part of its answer") from exc
        if not data:
            raise StopAsyncIteration
        return data

    async def pump(self, consume: Callable[[bytes], R | None]) -> R | None:
        """`consume` each read as it arrives, in the connection's callback, until it returns something
        (returned) or the body ends (None). `consume` must not raise."""
        try:
            return await self._response.pump(consume, self._idle, self._deadline)
        except TimeoutError as exc:
            raise _timeout("send the next part of its answer") from exc
