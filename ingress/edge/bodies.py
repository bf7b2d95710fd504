"""Request bodies: read within the size limit and the body deadline, decoded from their Content-Encoding."""

from __future__ import annotations

import asyncio
import zlib

import zstandard
from aiohttp import web

from ingress.edge.appkeys import GATEWAY
from ingress.errors import InvalidRequest, PayloadTooLarge, RequestTimeout, UnsupportedEncoding

_GZIP, _ZLIB, _RAW_DEFLATE = 16 + zlib.MAX_WBITS, zlib.MAX_WBITS, -zlib.MAX_WBITS
_CODINGS = {"gzip": _GZIP, "x-gzip": _GZIP, "deflate": _ZLIB}
_GZIP_MEMBERS = 16  # concatenated members are valid gzip; thousands of them are only work for us
_ZSTD_FRAMES = 16  # the same bound for concatenated zstd frames
_ZSTD_WINDOW = 8 * 1024 * 1024  # RFC 9659: zstd as an HTTP content coding uses a window of at most 8 MiB
_ZSTD_READ = 64 * 1024  # what the first pass decodes at a time, and forgets


def _decode_body(body: bytes | bytearray, encoding: str, limit: int) -> bytes:
    """`body` decoded from its Content-Encoding, never past `limit` bytes (a bomb is a 413, not memory)."""
    codings = [c.strip().lower() for c in encoding.split(",") if c.strip().lower() not in ("", "identity")]
    if not codings:
        return bytes(body)
    if len(codings) > 1 or (codings[0] not in _CODINGS and codings[0] != "zstd"):
        plain = encoding.isascii() and len(encoding) <= 40 and all(c.isalnum() or c in " ,._-" for c in encoding)
        named = f"'{encoding}'" if plain else "this encoding"
        raise UnsupportedEncoding(f"Content-Encoding {named} is not supported; send the body as gzip, deflate, "
                                  "zstd or unencoded.")
    if codings[0] == "zstd":
        return _decode_zstd(body, limit)
    wbits = _CODINGS[codings[0]]
    if wbits == _ZLIB and not (len(body) >= 2 and body[0] & 0x0F == 8 and int.from_bytes(body[:2]) % 31 == 0):
        wbits = _RAW_DEFLATE  # "deflate" without its zlib header, as some clients send it
    decoded, data = bytearray(), body
    try:
        for _ in range(_GZIP_MEMBERS):
            decoder = zlib.decompressobj(wbits)
            decoded += decoder.decompress(data, limit + 1 - len(decoded))  # max_length >= 1: 0 means no limit
            if len(decoded) > limit:
                raise PayloadTooLarge(f"The request body is larger than {limit} bytes once decoded.")
            if not decoder.eof:
                raise zlib.error("the compressed body ends early")
            data = decoder.unused_data
            if not data:
                return bytes(decoded)
            if wbits != _GZIP:
                break
    except zlib.error:
        pass
    raise InvalidRequest(f"The request body is not valid {codings[0]} data.", code="invalid_encoding")


def _decode_zstd(body: bytes | bytearray, limit: int) -> bytes:
    """`body` decoded from zstd frames, as `_decode_body` decodes gzip.

    Two passes, because `zstandard` offers no decoder both bounded and telling where a frame ends: its
    stream reader reads at most what it is asked for but takes a frame cut short for a finished one; its
    decompressobj says where each frame ends (`eof`, `unused_data`) but returns all it can decode at once.
    So the reader first counts what the body decodes to, forgetting it as it goes (a bomb stops at
    `limit` + 1 bytes), then decompressobj, whose output that count bounds, decodes it frame by frame.
    """
    decoder = zstandard.ZstdDecompressor(max_window_size=_ZSTD_WINDOW)
    try:
        if not body:  # not even a frame (and some releases' stream reader spins on an empty source: #194)
            raise zstandard.ZstdError("no frame")
        counted = 0
        with decoder.stream_reader(body, read_across_frames=True) as reader:
            while chunk := reader.read(_ZSTD_READ):
                counted += len(chunk)
                if counted > limit:
                    raise PayloadTooLarge(f"The request body is larger than {limit} bytes once decoded.")
        decoded, data = bytearray(), body
        for _ in range(_ZSTD_FRAMES):
            frame = decoder.decompressobj()
            decoded += frame.decompress(data)
            if not frame.eof:
                break  # the frame ends early
            data = frame.unused_data
            if not data:
                return bytes(decoded)
    except zstandard.ZstdError:
        pass
    raise InvalidRequest("The request body is not valid zstd data.", code="invalid_encoding")


async def read_body(request: web.Request, limit: int) -> bytes:
    """The body, decoded from its Content-Encoding (aiohttp's own decoding is off: its errors are 500s and
    its refusals plain text); a 408 if the client stops sending it for `client.body_timeout`."""
    if (request.content_length or 0) > limit:
        raise PayloadTooLarge(f"The request body is larger than {limit} bytes.")
    content = request.content
    try:
        # Most bodies arrive whole with their head: taken at once, with no timer and no wait.
        body = content.read_nowait() if content.is_eof() else await _arriving(request, limit)
    except web.RequestPayloadError:  # a bad chunk size, a body cut short: not the server's error
        raise InvalidRequest("The request body could not be read as sent.", code="invalid_body") from None
    if len(body) > limit:
        raise PayloadTooLarge(f"The request body is larger than {limit} bytes.")
    encoding = request.headers.get("Content-Encoding")
    return bytes(body) if encoding is None else _decode_body(body, encoding, limit)


async def _arriving(request: web.Request, limit: int) -> bytearray:
    """A body still arriving, read as it comes, each part within `client.body_timeout` of the last."""
    idle = request.app[GATEWAY].settings.client.body_timeout
    body = bytearray()
    try:
        while True:
            async with asyncio.timeout(idle):
                chunk = await request.content.readany()
            if not chunk:
                return body
            body += chunk
            if len(body) > limit:
                return body
    except TimeoutError:
        raise RequestTimeout(f"No part of the request body arrived for {idle:g} s.") from None
