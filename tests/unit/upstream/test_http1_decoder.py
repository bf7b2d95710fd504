"""The upstream response decoder without I/O (ingress/upstream/http1_decoder.py): fed every split of a set of
responses, cut short, malformed, oversized, kept alive."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from raw_servers import CHUNKED, INFORMATIONAL, OK

from ingress.errors import UpstreamProtocolError, UpstreamUnavailable
from ingress.upstream.http1_decoder import HEAD_LIMIT, ResponseDecoder


@dataclass
class Case:
    raw: bytes
    status: int
    headers: dict[str, str]
    body: bytes
    keep_alive: bool


CASES = {
    "content-length": Case(OK, 200, {"content-type": "text/plain", "content-length": "11"}, b"hello world", True),
    "chunked": Case(CHUNKED, 200, {"transfer-encoding": "chunked"}, b"hello world", True),
    "1xx-skipped": Case(INFORMATIONAL, 200, {"content-length": "11"}, b"hello world", True),
    "connection-close": Case(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nhi", 200,
                             {"connection": "close", "content-length": "2"}, b"hi", False),
    "http-1.0": Case(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nhi", 200,
                     {"connection": "keep-alive", "content-length": "2"}, b"hi", False),
    "no-content": Case(b"HTTP/1.1 204 No Content\r\n\r\n", 204, {}, b"", True),
    "repeated-header": Case(b"HTTP/1.1 503 Busy\r\nVary: a\r\nVARY: b\r\nContent-Length: 0\r\n\r\n", 503,
                            {"vary": "a, b", "content-length": "0"}, b"", True),
}


def _decoded(pieces: list[bytes]) -> ResponseDecoder:
    decoder = ResponseDecoder()
    body = bytearray()
    for piece in pieces:
        decoder.feed(piece)
        if decoder.buffered:
            body += decoder.take()
    decoder.body.append(bytes(body))
    return decoder


def _check(decoder: ResponseDecoder, case: Case) -> None:
    assert (decoder.status, decoder.headers, decoder.done, decoder.keep_alive) == (
        case.status, case.headers, True, case.keep_alive)
    assert b"".join(decoder.body) == case.body


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_response_decodes_the_same_however_it_is_split(case: Case) -> None:
    _check(_decoded([case.raw]), case)
    _check(_decoded([case.raw[i : i + 1] for i in range(len(case.raw))]), case)
    for at in range(1, len(case.raw)):
        _check(_decoded([case.raw[:at], case.raw[at:]]), case)


def test_a_body_delimited_by_the_end_of_the_connection() -> None:
    decoder = ResponseDecoder()
    decoder.feed(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nhello ")
    decoder.feed(b"world")
    assert not decoder.done
    decoder.finish()
    assert decoder.done and not decoder.keep_alive
    assert decoder.take() == b"hello world"


@pytest.mark.parametrize(("raw", "error", "message"), [
    pytest.param(b"", UpstreamUnavailable, "unavailable", id="nothing"),
    pytest.param(OK[:20], UpstreamUnavailable, "unavailable", id="half-a-head"),
    pytest.param(OK[:-3], UpstreamProtocolError, "connection broke", id="short-body"),
    pytest.param(CHUNKED[:-5], UpstreamProtocolError, "connection broke", id="no-last-chunk"),
])
def test_a_response_cut_short_by_the_end_of_the_connection(raw: bytes, error: type[Exception], message: str) -> None:
    decoder = ResponseDecoder()
    decoder.feed(raw)
    with pytest.raises(error, match=message):
        decoder.finish()


@pytest.mark.parametrize("raw", [
    pytest.param(b"SMTP ready\r\n\r\n", id="not-http"),
    pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nhi", id="two-lengths"),
    pytest.param(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", id="bad-chunk-size"),
    pytest.param(b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: x\r\n\r\n", id="upgrade"),
])
def test_a_malformed_response_is_a_protocol_error(raw: bytes) -> None:
    with pytest.raises(UpstreamProtocolError, match="malformed"):
        ResponseDecoder().feed(raw)


def test_an_oversized_head_is_a_protocol_error_whether_it_ends_or_not() -> None:
    big = b"X-Big: " + b"a" * HEAD_LIMIT + b"\r\n"
    with pytest.raises(UpstreamProtocolError, match="over 64 KiB"):
        ResponseDecoder().feed(b"HTTP/1.1 200 OK\r\n" + big + b"Content-Length: 0\r\n\r\n")
    decoder = ResponseDecoder()
    decoder.feed(b"HTTP/1.1 200 OK\r\n")
    with pytest.raises(UpstreamProtocolError, match="over 64 KiB"):
        for _ in range(HEAD_LIMIT // 1000 + 1):
            decoder.feed(b"X-Many: " + b"a" * 990 + b"\r\n")


def test_one_decoder_reads_kept_alive_responses_back_to_back() -> None:
    decoder = ResponseDecoder()
    for case in (CASES["chunked"], CASES["repeated-header"], CASES["content-length"]):
        decoder.start()
        decoder.feed(case.raw)
        assert (decoder.status, decoder.headers, decoder.done, decoder.keep_alive) == (
            case.status, case.headers, True, True)
        assert b"".join(decoder.body) == case.body


def test_bytes_after_the_response_keep_it_but_not_its_connection() -> None:
    decoder = ResponseDecoder()
    decoder.feed(OK + b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nno")
    assert (decoder.done, decoder.keep_alive, decoder.take()) == (True, False, b"hello world")
    decoder = ResponseDecoder()
    decoder.feed(OK)
    decoder.feed(b"junk")
    assert (decoder.done, decoder.keep_alive) == (True, False)
