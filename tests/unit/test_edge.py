"""The edge over HTTP: every refusal is OpenAI's error shape with the right status, never a 500."""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
import zstandard
from bad_completions import BAD_COMPLETIONS, completions_body
from bad_embeddings import BAD_EMBEDDINGS, embeddings_body
from bad_requests import BAD_REQUESTS, MISNAMED_PARAMS, Bad, body, deep, spliced
from bad_responses import BAD_RESPONSES, responses_body
from fakes.upstream import FakeUpstream

from ingress.oai.codec import MAX_NESTING
from ingress.serve.app import create_app, serve_app
from ingress.settings import DEMO_MODEL, EMBEDDED, Endpoint, Group, Route, Settings
from ingress.wire import read_request

CHAT = "/v1/chat/completions"
EMBEDDINGS = "/v1/embeddings"
COMPLETIONS = "/v1/completions"
RESPONSES = "/v1/responses"
JSON_HEADERS = {"Content-Type": "application/json"}
GENERATED_ID = re.compile(r"^[0-9a-f]{32}$")


@dataclass
class Answer:
    status: int
    headers: Any
    doc: Any


@dataclass
class Edge:
    url: str
    session: aiohttp.ClientSession

    async def call(self, method: str, path: str, data: Any = None, headers: dict[str, str] | None = None) -> Answer:
        async with self.session.request(method, self.url + path, data=data, headers=headers) as response:
            raw = await response.read()
            return Answer(response.status, response.headers, json.loads(raw))

    async def chat(self, raw: Any, **headers: str) -> Answer:
        return await self.call("POST", CHAT, raw, {**JSON_HEADERS, **headers})

    async def embed(self, raw: Any, **headers: str) -> Answer:
        return await self.call("POST", EMBEDDINGS, raw, {**JSON_HEADERS, **headers})

    async def complete_text(self, raw: Any, **headers: str) -> Answer:
        return await self.call("POST", COMPLETIONS, raw, {**JSON_HEADERS, **headers})

    async def respond(self, raw: Any, **headers: str) -> Answer:
        return await self.call("POST", RESPONSES, raw, {**JSON_HEADERS, **headers})


@asynccontextmanager
async def running(settings: Settings) -> AsyncIterator[Edge]:
    """The edge on a free loopback port, with the demo service embedded, and a client for it."""
    async with serve_app(create_app(settings), "127.0.0.1", 0) as url, aiohttp.ClientSession() as session:
        yield Edge(url, session)


@pytest.fixture
async def edge() -> AsyncIterator[Edge]:
    async with running(Settings()) as e:
        yield e


@pytest.fixture
async def small_edge() -> AsyncIterator[Edge]:
    async with running(Settings(max_body_bytes=1024)) as e:
        yield e


@pytest.fixture
async def forwarding_edge() -> AsyncIterator[Edge]:
    """The demo behind a route that forwards engine extras (which is what reads a body's fields apart)."""
    groups = {"demo": Group(endpoints=[Endpoint(url=EMBEDDED)])}
    async with running(Settings(groups=groups, routes=(Route(model=DEMO_MODEL, group="demo",
                                                             extra_fields="forward"),))) as e:
        yield e


@pytest.fixture
async def service() -> AsyncIterator[FakeUpstream]:
    """A fake internal service that records what it receives."""
    fake = FakeUpstream()
    async with fake.running():
        yield fake


@pytest.fixture
async def forwarding_to_service(service: FakeUpstream) -> AsyncIterator[Edge]:
    """The edge forwarding engine extras to `service`."""
    groups = {"service": Group(endpoints=[Endpoint(url=service.url)])}
    async with running(Settings(groups=groups, routes=(Route(model=DEMO_MODEL, group="service",
                                                             extra_fields="forward"),))) as e:
        yield e


def assert_error(answer: Answer, status: int, *, param: str | None = None, code: str | None = None) -> None:
    """OpenAI's error shape, exactly: {"error": {"message", "type", "param", "code"}}."""
    assert answer.status == status
    assert answer.headers["Content-Type"].startswith("application/json")
    assert list(answer.doc) == ["error"]
    error = answer.doc["error"]
    assert sorted(error) == ["code", "message", "param", "type"]
    assert isinstance(error["message"], str) and error["message"]
    assert error["type"] == ("invalid_request_error" if status < 500 else "server_error")
    assert error["param"] == param
    if code is not None:
        assert error["code"] == code
    assert answer.headers["x-request-id"]


def valid(**fields: Any) -> bytes:
    return body(model=DEMO_MODEL, **fields)


@pytest.mark.parametrize("bad", BAD_REQUESTS)
async def test_bad_body_is_a_400_naming_the_field(edge: Edge, bad: Bad) -> None:
    assert_error(await edge.chat(bad.body), 400, param=bad.param, code=bad.code)


@pytest.mark.parametrize("raw", [pytest.param(row.values[0], id=row.id) for row in MISNAMED_PARAMS])
async def test_bad_dict_entry_is_a_400(edge: Edge, raw: bytes) -> None:
    # The param these are refused with is wrong (see test_codec); the status and shape are not.
    answer = await edge.chat(raw)
    assert answer.status == 400 and answer.doc["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("bad", BAD_EMBEDDINGS)
async def test_bad_embeddings_body_is_a_400_naming_the_field(edge: Edge, bad: Bad) -> None:
    assert_error(await edge.embed(bad.body), 400, param=bad.param, code=bad.code)


@pytest.mark.parametrize("bad", BAD_COMPLETIONS)
async def test_bad_completions_body_is_a_400_naming_the_field(edge: Edge, bad: Bad) -> None:
    assert_error(await edge.complete_text(bad.body), 400, param=bad.param, code=bad.code)


@pytest.mark.parametrize("bad", BAD_RESPONSES)
async def test_bad_responses_body_is_a_400_naming_the_field(edge: Edge, bad: Bad) -> None:
    assert_error(await edge.respond(bad.body), 400, param=bad.param, code=bad.code)


EXTRAS_ENDPOINTS = [
    pytest.param(CHAT, body, id="chat"),
    pytest.param(COMPLETIONS, completions_body, id="completions"),
    pytest.param(RESPONSES, responses_body, id="responses"),
]


@pytest.mark.parametrize("levels", [MAX_NESTING + 1, 990, 100_000])
@pytest.mark.parametrize(("path", "make"), EXTRAS_ENDPOINTS)
async def test_an_extra_nested_too_deeply_for_a_forwarding_route_is_a_400(
        forwarding_edge: Edge, path: str, make: Any, levels: int) -> None:
    answer = await forwarding_edge.call("POST", path, spliced("x", deep(levels), make), JSON_HEADERS)
    assert_error(answer, 400, param=None, code="invalid_json")
    assert answer.doc["error"]["message"] == "The request body is nested too deeply."


@pytest.mark.parametrize(("path", "make"), EXTRAS_ENDPOINTS)
async def test_an_extra_at_the_nesting_limit_is_forwarded(forwarding_to_service: Edge, service: FakeUpstream,
                                                          path: str, make: Any) -> None:
    answer = await forwarding_to_service.call("POST", path, spliced("x", deep(MAX_NESTING), make), JSON_HEADERS)

    assert answer.status == 200, answer.doc
    [received] = service.received
    assert json.loads(read_request(received.body).ExtraJson() or b"") == {"x": json.loads(deep(MAX_NESTING))}


async def test_embeddings_refuse_a_deep_extra_by_name_on_a_forwarding_route(forwarding_edge: Edge) -> None:
    answer = await forwarding_edge.embed(spliced("x", deep(100_000), embeddings_body))
    assert_error(answer, 400, param="x", code="invalid_request")


async def test_valid_responses_body_is_answered(edge: Edge) -> None:
    answer = await edge.respond(responses_body(input=[{"role": "user", "content": "a b"}]))
    assert answer.status == 200 and answer.doc["object"] == "response" and answer.doc["status"] == "completed"
    assert answer.doc["output"][0]["content"][0]["text"] == "a b"


async def test_valid_completions_body_is_answered(edge: Edge) -> None:
    answer = await edge.complete_text(completions_body(prompt=["a", "b"]))
    assert answer.status == 200 and answer.doc["object"] == "text_completion"
    assert [(c["index"], c["text"]) for c in answer.doc["choices"]] == [(0, "a"), (1, "b")]


async def test_valid_embeddings_body_is_answered(edge: Edge) -> None:
    answer = await edge.embed(embeddings_body(input=["a", "b"]))
    assert answer.status == 200 and answer.doc["object"] == "list"
    assert [item["index"] for item in answer.doc["data"]] == [0, 1]


async def test_embeddings_the_demo_cannot_make_are_its_400(edge: Edge) -> None:
    # Valid for the edge (dimensions >= 1), refused by the service with an Error buffer naming the field.
    assert_error(await edge.embed(embeddings_body(dimensions=100_000)), 400, param="dimensions")
    assert_error(await edge.embed(embeddings_body(input="w " * 9000)), 400, param="input[0]")


async def test_valid_body_is_answered(edge: Edge) -> None:
    answer = await edge.chat(valid())
    assert answer.status == 200 and answer.doc["object"] == "chat.completion"
    assert answer.doc["choices"][0]["message"]["content"] == "hi"


async def test_json_sent_as_flatbuffers_is_refused_before_any_upstream(edge: Edge) -> None:
    answer = await edge.call("POST", CHAT, valid(), {"Content-Type": "application/x-flatbuffers"})
    assert_error(answer, 400, code="invalid_flatbuffer")


# --- body size -----------------------------------------------------------------------------------


def padded(size: int) -> bytes:
    """A valid request of exactly `size` bytes (JSON allows trailing whitespace)."""
    raw = valid()
    assert len(raw) <= size
    return raw + b" " * (size - len(raw))


async def test_body_at_the_limit_is_accepted(small_edge: Edge) -> None:
    assert (await small_edge.chat(padded(1024))).status == 200


async def test_body_over_the_limit_with_content_length_is_a_413(small_edge: Edge) -> None:
    assert_error(await small_edge.chat(padded(1025)), 413, code="request_too_large")
    assert_error(await small_edge.chat(padded(16 * 1024)), 413, code="request_too_large")


async def test_embeddings_body_over_the_limit_is_a_413(small_edge: Edge) -> None:
    assert_error(await small_edge.embed(embeddings_body(input=["word"] * 300)), 413, code="request_too_large")


async def test_body_over_the_limit_when_chunked_is_a_413(small_edge: Edge) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        raw = padded(4096)
        for i in range(0, len(raw), 256):
            yield raw[i : i + 256]

    answer = await small_edge.chat(chunks())
    assert_error(answer, 413, code="request_too_large")


async def test_chunked_body_under_the_limit_is_accepted(small_edge: Edge) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        raw = padded(1000)
        for i in range(0, len(raw), 100):
            yield raw[i : i + 100]

    assert (await small_edge.chat(chunks())).status == 200


# --- routes --------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/nope", "/v1/chat/completion", "/v2/chat/completions",
                                  "/v1/embedding", "/v1/embed"])
async def test_unknown_path_is_a_404(edge: Edge, path: str) -> None:
    assert_error(await edge.call("POST", path, valid(), JSON_HEADERS), 404, code="unknown_url")


@pytest.mark.parametrize("path", [CHAT, EMBEDDINGS])
@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH"])
async def test_wrong_method_is_a_405(edge: Edge, method: str, path: str) -> None:
    assert_error(await edge.call(method, path), 405, code="method_not_allowed")


async def test_unknown_model_is_a_404(edge: Edge) -> None:
    assert_error(await edge.chat(body(model="gpt-unknown")), 404, param="model", code="model_not_found")
    assert_error(await edge.embed(embeddings_body(model="gpt-unknown")), 404, param="model", code="model_not_found")
    assert_error(await edge.call("GET", "/v1/models/gpt-unknown"), 404, param="model", code="model_not_found")


# --- headers -------------------------------------------------------------------------------------


@pytest.mark.parametrize("raw", [valid(), b"{"], ids=["answered", "refused"])
@pytest.mark.parametrize("request_id", ["abc-123", "A.b_c:d-9", "x" * 128])
async def test_valid_request_id_is_echoed(edge: Edge, raw: bytes, request_id: str) -> None:
    answer = await edge.chat(raw, **{"x-request-id": request_id})
    assert answer.headers["x-request-id"] == request_id


@pytest.mark.parametrize("raw", [valid(), b"{"], ids=["answered", "refused"])
@pytest.mark.parametrize("request_id", ["x" * 129, "a" * 300, "has space", "semi;colon", "", "ünï"])
async def test_invalid_request_id_is_replaced(edge: Edge, raw: bytes, request_id: str) -> None:
    answer = await edge.chat(raw, **{"x-request-id": request_id})
    assert GENERATED_ID.match(answer.headers["x-request-id"])


async def test_request_id_is_generated_when_absent(edge: Edge) -> None:
    first, second = await edge.chat(valid()), await edge.chat(valid())
    assert GENERATED_ID.match(first.headers["x-request-id"])
    assert first.headers["x-request-id"] != second.headers["x-request-id"]
    assert first.doc["id"] == "chatcmpl-" + first.headers["x-request-id"]


@pytest.mark.parametrize("value", ["high", "128", "-1", "1.5", "", "0x10", "99999999999999999999"])
async def test_bad_priority_header_is_a_400(edge: Edge, value: str) -> None:
    answer = await edge.chat(valid(), **{"x-ingress-priority": value})
    assert_error(answer, 400, param="x-ingress-priority", code="invalid_request")


@pytest.mark.parametrize("value", ["²", "⑦"])
async def test_priority_header_with_non_decimal_digit_is_a_400(edge: Edge, value: str) -> None:
    answer = await edge.chat(valid(), **{"x-ingress-priority": value})
    assert_error(answer, 400, param="x-ingress-priority", code="invalid_request")


@pytest.mark.parametrize("value", ["0", "127"])
async def test_priority_header_in_range_is_accepted(edge: Edge, value: str) -> None:
    assert (await edge.chat(valid(), **{"x-ingress-priority": value})).status == 200


@pytest.mark.parametrize("value", ["0", "86400001", "soon"])
async def test_bad_timeout_header_is_a_400(edge: Edge, value: str) -> None:
    answer = await edge.chat(valid(), **{"x-ingress-timeout-ms": value})
    assert_error(answer, 400, param="x-ingress-timeout-ms", code="invalid_request")


# --- Content-Encoding: gzip, deflate and zstd decoded within the body limit, anything else a 415 -


def gzipped(raw: bytes) -> bytes:
    return gzip.compress(raw, mtime=0)


def deflated(raw: bytes, wbits: int = zlib.MAX_WBITS) -> bytes:
    packer = zlib.compressobj(wbits=wbits)
    return packer.compress(raw) + packer.flush()


def zstded(raw: bytes) -> bytes:
    """A zstd frame that declares its content size, as a one-shot compressor writes it."""
    return zstandard.ZstdCompressor().compress(raw)


def zstd_streamed(raw: bytes) -> bytes:
    """A zstd frame without its content size, as a streaming compressor (Codex CLI's) writes it."""
    packer = zstandard.ZstdCompressor().compressobj()
    return packer.compress(raw) + packer.flush()


@pytest.mark.parametrize(("encoding", "encode"), [
    pytest.param("gzip", gzipped, id="gzip"),
    pytest.param("x-gzip", gzipped, id="x-gzip"),
    pytest.param("GZip", gzipped, id="any-case"),
    pytest.param("deflate", deflated, id="deflate-zlib-wrapped"),
    pytest.param("deflate", lambda raw: deflated(raw, -zlib.MAX_WBITS), id="deflate-raw"),
    pytest.param("identity", lambda raw: raw, id="identity"),
    pytest.param("gzip, identity", gzipped, id="gzip-then-identity"),
    pytest.param("zstd", zstded, id="zstd"),
    pytest.param("zstd", zstd_streamed, id="zstd-without-content-size"),
    pytest.param("ZSTD", lambda raw: zstded(raw) + zstd_streamed(b""), id="zstd-two-frames"),
])
async def test_an_encoded_body_is_decoded(edge: Edge, encoding: str, encode: Any) -> None:
    answer = await edge.chat(encode(valid()), **{"Content-Encoding": encoding})

    assert answer.status == 200, answer.doc
    assert answer.doc["choices"][0]["message"]["content"] == "hi"


async def test_two_gzip_members_are_one_body(edge: Edge) -> None:
    """The members are read one after the other: the demo echoes the message the boundary cuts in two."""
    text = "the first member ends here and the second member begins"
    raw = valid(messages=[{"role": "user", "content": text}])
    cut = raw.index(b"ends here")

    plain = await edge.chat(raw)
    answer = await edge.chat(gzipped(raw[:cut]) + gzipped(raw[cut:]), **{"Content-Encoding": "gzip"})

    assert answer.status == 200, answer.doc
    assert answer.doc["choices"][0]["message"]["content"] == text
    assert answer.doc["usage"] == plain.doc["usage"]


async def test_accept_encoding_on_a_request_changes_nothing(edge: Edge) -> None:
    """What the client accepts names the answer's codings: the request's body is read by its own header."""
    plain = await edge.chat(valid(), **{"Accept-Encoding": "zstd,gzip"})
    packed = await edge.chat(zstded(valid()), **{"Accept-Encoding": "zstd,gzip", "Content-Encoding": "zstd"})

    assert plain.status == packed.status == 200, (plain.doc, packed.doc)
    assert "Content-Encoding" not in plain.headers and "Content-Encoding" not in packed.headers
    assert plain.doc["choices"] == packed.doc["choices"]


MALFORMED_ENCODINGS = [
    pytest.param("gzip", b"{\"model\": \"not gzip at all\"}", id="plain-bytes-as-gzip"),
    pytest.param("deflate", b"{\"model\": \"not deflate at all\"}", id="plain-bytes-as-deflate"),
    pytest.param("gzip", gzipped(b"{" * 4000)[:-12], id="truncated-gzip"),
    pytest.param("deflate", deflated(b"{" * 4000)[:20], id="truncated-deflate"),
    pytest.param("gzip", gzipped(b"{}") + b"trailing garbage", id="garbage-after-the-member"),
    pytest.param("deflate", deflated(b"{}") + b"trailing garbage", id="garbage-after-deflate"),
    pytest.param("gzip", gzipped(b"") * 10_000, id="ten-thousand-empty-members"),
    pytest.param("gzip", bytes(gzipped(b"{}")[:-8]) + b"\0\0\0\0\2\0\0\0", id="bad-checksum"),
    pytest.param("zstd", b"{\"model\": \"not zstd at all\"}", id="plain-bytes-as-zstd"),
    pytest.param("zstd", zstded(bytes(range(256)) * 40)[:-12], id="truncated-zstd"),
    pytest.param("zstd", zstd_streamed(bytes(range(256)) * 40)[:-12], id="truncated-zstd-without-content-size"),
    pytest.param("zstd", zstded(b"{}") + b"trailing garbage", id="garbage-after-the-frame"),
    pytest.param("zstd", zstded(b"") * 17, id="seventeen-zstd-frames"),
    pytest.param("zstd", b"", id="empty-zstd"),
    pytest.param("zstd", bytes(zstandard.ZstdCompressor(write_checksum=True).compress(b"{}")[:-4]) + b"\0\0\0\0",
                 id="bad-zstd-checksum"),
]


@pytest.mark.parametrize(("encoding", "raw"), MALFORMED_ENCODINGS)
async def test_a_malformed_encoded_body_is_a_400(edge: Edge, encoding: str, raw: bytes) -> None:
    answer = await edge.chat(raw, **{"Content-Encoding": encoding})

    assert_error(answer, 400, code="invalid_encoding")


@pytest.mark.parametrize(("encoding", "encode"), [
    pytest.param("gzip", gzipped, id="gzip"),
    pytest.param("deflate", deflated, id="deflate"),
    pytest.param("zstd", zstded, id="zstd"),
    pytest.param("zstd", zstd_streamed, id="zstd-without-content-size"),
])
async def test_a_bomb_is_refused_at_the_body_limit(small_edge: Edge, encoding: str, encode: Any) -> None:
    bomb = encode(padded(64 * 1024 * 1024))
    assert len(bomb) < 1024 * 1024

    answer = await small_edge.chat(bomb, **{"Content-Encoding": encoding})

    assert_error(answer, 413, code="request_too_large")


@pytest.mark.parametrize(("encoding", "encode"), [
    pytest.param("gzip", gzipped, id="gzip"),
    pytest.param("zstd", zstd_streamed, id="zstd"),
])
async def test_an_encoded_body_at_the_limit_once_decoded_is_accepted(small_edge: Edge, encoding: str,
                                                                     encode: Any) -> None:
    answer = await small_edge.chat(encode(padded(1024)), **{"Content-Encoding": encoding})

    assert answer.status == 200, answer.doc
    assert (await small_edge.chat(encode(padded(1025)), **{"Content-Encoding": encoding})).status == 413


@pytest.mark.parametrize(("encoding", "named"), [
    pytest.param("br", "'br'", id="brotli"),
    pytest.param("zstd, gzip", "'zstd, gzip'", id="zstd-then-gzip"),
    pytest.param("compress", "'compress'", id="lzw"),
    pytest.param("gzip, gzip", "'gzip, gzip'", id="gzip-twice"),
    pytest.param("deflate, br", "'deflate, br'", id="two-encodings"),
    pytest.param("x-" + "q" * 200, "this encoding", id="a-long-name-is-not-echoed"),
])
async def test_an_unsupported_encoding_is_a_415_naming_it(edge: Edge, encoding: str, named: str) -> None:
    answer = await edge.chat(valid(), **{"Content-Encoding": encoding})

    assert_error(answer, 415, code="unsupported_encoding")
    message = answer.doc["error"]["message"]
    assert named in message and "gzip" in message, message

