"""POST a CompletionRequest to an internal service; aiohttp failures become IngressErrors here."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import aiohttp

from ingress.errors import IngressError, UpstreamProtocolError, UpstreamTimeout, UpstreamUnavailable
from ingress.settings import Timeouts
from ingress.translate.completion import decode_answer
from ingress.wire import identifiers

UNAVAILABLE = "The model service is unavailable."


def _wrap(exc: BaseException, waiting_for: str) -> IngressError:
    """Client-facing error for a transport failure; never an internal address in the message."""
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return UpstreamTimeout(f"The model service did not {waiting_for} in time.")
    if isinstance(exc, aiohttp.ClientPayloadError):
        return UpstreamProtocolError("The model service connection broke while sending its answer.")
    return UpstreamUnavailable(UNAVAILABLE)


class UpstreamClient:
    """One internal service at `base_url`, over the process's shared ClientSession."""

    def __init__(
        self, session: aiohttp.ClientSession, base_url: str, timeouts: Timeouts, max_answer_bytes: int
    ) -> None:
        self._session = session
        self.url = base_url.rstrip("/") + identifiers.COMPLETE_PATH
        self._timeouts = timeouts
        self._max_answer = max_answer_bytes
        # No total timeout: connect and per-read limits only, so long generations are never cut.
        self._client_timeout = aiohttp.ClientTimeout(
            total=None, connect=timeouts.connect, sock_connect=timeouts.connect, sock_read=None
        )

    async def _send(self, body: bytes, headers: Mapping[str, str]) -> aiohttp.ClientResponse:
        hdrs = {**headers, "Content-Type": identifiers.CONTENT_TYPE}
        try:
            async with asyncio.timeout(self._timeouts.first_byte):
                response = await self._session.post(self.url, data=body, headers=hdrs, timeout=self._client_timeout)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise _wrap(exc, "answer") from exc
        if response.status != 200:
            try:
                answer = await self._read_all(response)
            finally:
                response.release()
            if identifiers.identifier_of(answer) == identifiers.ERROR:
                decode_answer(answer)  # verifies, then raises UpstreamAnswered with the service's status
            raise UpstreamProtocolError(f"The model service failed with status {response.status}.")
        return response

    async def _read_all(self, response: aiohttp.ClientResponse) -> bytes:
        if (response.content_length or 0) > self._max_answer:
            raise UpstreamProtocolError("The model service answer is too large.")
        parts: list[bytes] = []
        size = 0
        try:
            while True:
                async with asyncio.timeout(self._timeouts.idle):
                    data = await response.content.readany()
                if not data:
                    return b"".join(parts)
                size += len(data)
                if size > self._max_answer:
                    raise UpstreamProtocolError("The model service answer is too large.")
                parts.append(data)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise _wrap(exc, "finish its answer") from exc

    async def complete(self, body: bytes, headers: Mapping[str, str]) -> bytes:
        """A non-streamed exchange: the whole answer body (a CompletionResponse or Error buffer)."""
        response = await self._send(body, headers)
        try:
            return await self._read_all(response)
        finally:
            response.close()

    @asynccontextmanager
    async def stream(self, body: bytes, headers: Mapping[str, str]) -> AsyncIterator[AsyncIterator[bytes]]:
        """A streamed exchange: entering raises before the first byte; the body is read inside."""
        response = await self._send(body, headers)
        content_type = response.headers.get("Content-Type", "")
        if not content_type.startswith(identifiers.STREAM_CONTENT_TYPE):
            response.close()
            raise UpstreamProtocolError("The model service did not answer with a stream.")
        try:
            yield self._reads(response)
        finally:
            response.close()  # also on cancellation: the upstream call ends with the client's

    async def _reads(self, response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
        try:
            while True:
                async with asyncio.timeout(self._timeouts.idle):
                    data = await response.content.readany()
                if not data:
                    return
                yield data
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise _wrap(exc, "send the next part of its answer") from exc
