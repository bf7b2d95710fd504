"""POST a CompletionRequest to an internal service; aiohttp failures become IngressErrors here."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import aiohttp

from ingress.errors import (
    IngressError,
    UpstreamConnectFailed,
    UpstreamProtocolError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from ingress.settings import Timeouts
from ingress.translate.completion import decode_answer
from ingress.wire import identifiers

UNAVAILABLE = "The model service is unavailable."


def _wrap(exc: BaseException, waiting_for: str) -> IngressError:
    """Client-facing error for a transport failure; never an internal address in the message."""
    if isinstance(exc, aiohttp.ClientConnectorError):  # includes refused, unreachable, no such socket
        return UpstreamConnectFailed(UNAVAILABLE)
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return UpstreamTimeout(f"The model service did not {waiting_for} in time.")
    if isinstance(exc, aiohttp.ClientPayloadError):
        return UpstreamProtocolError("The model service connection broke while sending its answer.")
    return UpstreamUnavailable(UNAVAILABLE)


def _base(url: str) -> tuple[str, str | None]:
    """(HTTP base URL, Unix socket path or None) of an endpoint URL."""
    if url.startswith("unix:"):
        return "http://localhost", url[len("unix:"):]
    return url.rstrip("/"), None


class UpstreamClient:
    """One internal service endpoint. TCP endpoints share the process's ClientSession; a Unix-socket
    endpoint has a session of its own (aiohttp binds a UnixConnector to one path)."""

    def __init__(self, session: aiohttp.ClientSession, url: str, timeouts: Timeouts, max_answer_bytes: int) -> None:
        base, self.unix_path = _base(url)
        self.endpoint = url
        self.url = base + identifiers.COMPLETE_PATH
        self._session = session
        self._own_session: aiohttp.ClientSession | None = None
        if self.unix_path is not None:
            self._own_session = aiohttp.ClientSession(connector=aiohttp.UnixConnector(self.unix_path),
                                                      auto_decompress=False)
            self._session = self._own_session
        self.timeouts = timeouts
        self._max_answer = max_answer_bytes

    async def close(self) -> None:
        if self._own_session is not None:
            await self._own_session.close()

    async def _post(self, body: bytes | bytearray, headers: Mapping[str, str], t: Timeouts) -> aiohttp.ClientResponse:
        """Send, and wait for the response head within `first_byte` (and the total, if any)."""
        hdrs = {**headers, "Content-Type": identifiers.CONTENT_TYPE}
        # No total timeout in aiohttp: connect and per-read limits only, so long generations are never cut.
        timeout = aiohttp.ClientTimeout(total=None, connect=t.connect, sock_connect=t.connect, sock_read=None)
        head_within = t.first_byte if t.total is None else min(t.first_byte, t.total)
        try:
            async with asyncio.timeout(head_within):
                return await self._session.post(self.url, data=body, headers=hdrs, timeout=timeout)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise _wrap(exc, "answer") from exc

    async def _send(self, body: bytes | bytearray, headers: Mapping[str, str], t: Timeouts) -> aiohttp.ClientResponse:
        """`_post`, and any status but 200 raised as the service's error."""
        response = await self._post(body, headers, t)
        if response.status != 200:
            try:
                answer = await self._read_all(response, t)
            finally:
                response.release()
            retry_after = response.headers.get("Retry-After", "")
            try:
                if identifiers.identifier_of(answer) == identifiers.ERROR:
                    decode_answer(answer)  # verifies, then raises UpstreamAnswered with the service's status
                raise UpstreamProtocolError(f"The model service failed with status {response.status}.")
            except IngressError as exc:
                if retry_after.isascii() and retry_after.isdigit():
                    exc.retry_after = min(int(retry_after), 3600)
                raise
        return response

    async def _read_all(self, response: aiohttp.ClientResponse, t: Timeouts) -> bytes:
        if (response.content_length or 0) > self._max_answer:
            raise UpstreamProtocolError("The model service answer is too large.")
        parts: list[bytes] = []
        size = 0
        try:
            while True:
                async with asyncio.timeout(t.idle):
                    data = await response.content.readany()
                if not data:
                    return b"".join(parts)
                size += len(data)
                if size > self._max_answer:
                    raise UpstreamProtocolError("The model service answer is too large.")
                parts.append(data)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise _wrap(exc, "finish its answer") from exc

    async def complete(self, body: bytes | bytearray, headers: Mapping[str, str], timeouts: Timeouts | None = None) -> bytes:
        """A non-streamed exchange: the whole answer body (a CompletionResponse or Error buffer)."""
        t = timeouts or self.timeouts
        try:
            async with asyncio.timeout(t.total):
                response = await self._send(body, headers, t)
                try:
                    return await self._read_all(response, t)
                except IngressError as exc:
                    exc.after_head = True
                    raise
                finally:
                    response.close()
        except TimeoutError as exc:
            raise UpstreamTimeout("The model service did not finish its answer in time.") from exc

    @asynccontextmanager
    async def stream(self, body: bytes | bytearray, headers: Mapping[str, str],
                     timeouts: Timeouts | None = None) -> AsyncIterator[AsyncIterator[bytes]]:
        """A streamed exchange: entering raises before the first byte; the body is read inside."""
        t = timeouts or self.timeouts
        deadline = None if t.total is None else asyncio.get_running_loop().time() + t.total
        response = await self._send(body, headers, t)
        content_type = response.headers.get("Content-Type", "")
        if not content_type.startswith(identifiers.STREAM_CONTENT_TYPE):
            response.close()
            raise UpstreamProtocolError("The model service did not answer with a stream.")
        try:
            yield self._reads(response, t, deadline)
        finally:
            response.close()  # also on cancellation: the upstream call ends with the client's

    async def _reads(self, response: aiohttp.ClientResponse, t: Timeouts,
                     deadline: float | None) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        try:
            while True:
                wait = t.idle if deadline is None else min(t.idle, deadline - loop.time())
                async with asyncio.timeout(max(wait, 0.0)):
                    data = await response.content.readany()
                if not data:
                    return
                yield data
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise _wrap(exc, "send the next part of its answer") from exc

    async def probe(self, path: str, timeout: float) -> bool:
        """An active health check: GET `path`, healthy on any 2xx."""
        base = self.url[: -len(identifiers.COMPLETE_PATH)]
        try:
            async with asyncio.timeout(timeout), self._session.get(base + path) as response:
                return 200 <= response.status < 300
        except (aiohttp.ClientError, OSError, TimeoutError):
            return False

    async def relay(self, body: bytes, headers: Mapping[str, str],
                    timeouts: Timeouts | None = None) -> aiohttp.ClientResponse:
        """Binary ingress: send, and hand back the open response (any status) for relaying unmodified."""
        return await self._post(body, headers, timeouts or self.timeouts)
