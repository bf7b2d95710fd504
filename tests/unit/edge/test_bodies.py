"""ingress/edge/bodies.py without a server: a body decoded from its Content-Encoding (gzip, deflate with or
without its zlib header, zstd, concatenated members and frames) within the body limit; malformed data a
400, a bomb a 413, any other coding a 415 that names it only when it is short and plain; read_body's
limits on the body as sent. The same, over HTTP, in tests/unit/test_edge.py."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import Callable
from unittest import mock

import pytest
from aiohttp import streams, web
from aiohttp.test_utils import make_mocked_request

from ingress.edge.bodies import _decode_body, read_body
from ingress.errors import InvalidRequest, PayloadTooLarge, UnsupportedEncoding
from unit.test_edge import MALFORMED_ENCODINGS, deflated, gzipped, zstd_streamed, zstded

RAW = b'{"model": "ingress-demo", "messages": [{"role": "user", "content": "hi"}]}' * 20


@pytest.mark.parametrize(("encoding", "encode"), [
    ("gzip", gzipped), ("x-gzip", gzipped), ("GZip", gzipped), ("deflate", deflated),
    ("deflate", lambda raw: deflated(raw, -15)), ("identity", lambda raw: raw), ("", lambda raw: raw),
    ("gzip, identity", gzipped), ("zstd", zstded), ("zstd", zstd_streamed),
    ("gzip", lambda raw: gzipped(raw[:100]) + gzipped(raw[100:])),
    ("zstd", lambda raw: zstded(raw[:100]) + zstd_streamed(raw[100:])),
])
def test_an_encoded_body_decodes_to_what_was_sent(encoding: str, encode: Callable[[bytes], bytes]) -> None:
    assert _decode_body(encode(RAW), encoding, len(RAW)) == RAW


@pytest.mark.parametrize(("encoding", "raw"), MALFORMED_ENCODINGS)
def test_malformed_data_is_invalid_encoding(encoding: str, raw: bytes) -> None:
    with pytest.raises(InvalidRequest) as caught:
        _decode_body(raw, encoding, 1 << 20)
    assert (caught.value.status, caught.value.code) == (400, "invalid_encoding")
    assert caught.value.message == f"The request body is not valid {encoding} data."


@pytest.mark.parametrize(("encoding", "encode"), [("gzip", gzipped), ("deflate", deflated), ("zstd", zstded),
                                                 ("zstd", zstd_streamed)])
def test_a_body_at_the_limit_once_decoded_is_taken_and_one_byte_over_refused(encoding: str,
                                                                            encode: Callable[[bytes], bytes]) -> None:
    assert _decode_body(encode(RAW), encoding, len(RAW)) == RAW
    with pytest.raises(PayloadTooLarge, match=f"larger than {len(RAW) - 1} bytes once decoded"):
        _decode_body(encode(RAW), encoding, len(RAW) - 1)


def test_a_bomb_is_refused_without_decoding_it_whole() -> None:
    bomb = gzip.compress(b"\0" * (64 << 20), mtime=0)
    with pytest.raises(PayloadTooLarge):
        _decode_body(bomb, "gzip", 1 << 20)


@pytest.mark.parametrize(("encoding", "named"), [
    ("br", "Content-Encoding 'br' is not supported"),
    ("gzip, gzip", "Content-Encoding 'gzip, gzip' is not supported"),
    ("x-" + "q" * 60, "Content-Encoding this encoding is not supported"),
    ("g\x7fzip", "Content-Encoding this encoding is not supported"),
])
def test_another_coding_is_unsupported_and_named_only_when_plain(encoding: str, named: str) -> None:
    with pytest.raises(UnsupportedEncoding) as caught:
        _decode_body(RAW, encoding, 1 << 20)
    assert caught.value.message.startswith(named) and caught.value.status == 415


async def request(body: bytes, headers: dict[str, str]) -> web.Request:
    payload = streams.StreamReader(mock.Mock(_reading_paused=False), 2**16, loop=asyncio.get_running_loop())
    payload.feed_data(body)
    payload.feed_eof()
    return make_mocked_request("POST", "/v1/chat/completions", headers=headers, payload=payload)


async def test_read_body_takes_a_whole_body_and_decodes_it() -> None:
    plain = await request(RAW, {"Content-Length": str(len(RAW))})
    assert await read_body(plain, len(RAW)) == RAW
    packed = gzipped(RAW)
    encoded = await request(packed, {"Content-Length": str(len(packed)), "Content-Encoding": "gzip"})
    assert await read_body(encoded, len(RAW)) == RAW


async def test_read_body_refuses_what_is_announced_or_sent_over_the_limit() -> None:
    with pytest.raises(PayloadTooLarge, match="larger than 10 bytes"):
        await read_body(await request(b"", {"Content-Length": "11"}), 10)
    with pytest.raises(PayloadTooLarge, match=f"larger than {len(RAW) - 1} bytes"):
        await read_body(await request(RAW, {}), len(RAW) - 1)
