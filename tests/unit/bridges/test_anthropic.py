"""The Anthropic dialect (ingress/bridges/anthropic.py), without a socket: the provider's refusals and
statuses with their waits and scrubbed text, JSON nested too deeply, a Messages request or a count sent as
its client sent it; and the helpers its modules' tests share (the request: test_anthropic_request.py;
answers and streams: test_anthropic_answers.py)."""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec
import pytest
from bad_requests import assert_nested_too_deeply, deep_buffer
from fakes.anthropic import fixture

from ingress import wire
from ingress.bridges import anthropic_request
from ingress.bridges.anthropic import AnthropicDialect
from ingress.bridges.dialect import EngineFailed, Target, Unsupported
from ingress.encoding.requests import encode_messages_request, encode_request, encode_text_request
from ingress.oai.codec import decode_chat_request
from ingress.oai.completions import TextCompletionRequest
from ingress.wire.passport import Passport

CREATED = 1_700_000_000
DIALECT = AnthropicDialect(clock=lambda: CREATED)
TARGET = Target(url="https://api.anthropic.com", api_key="sk-ant-secret", max_tokens=1000)
HELLO = [{"role": "user", "content": "Hello"}]
STREAMS = ("text", "tool_use", "thinking")


def buffer(doc: dict[str, Any], extra: dict[str, Any] | None = None) -> bytes:
    request = decode_chat_request(json.dumps({"model": "claude-sonnet-4-5", **doc}).encode())
    return bytes(encode_request(request, "r", Passport(), "anthropic", None,
                                json.dumps(extra) if extra is not None else None))


def body(doc: dict[str, Any], target: Target = TARGET, **kw: Any) -> dict[str, Any]:
    call = DIALECT.build(buffer(doc, **kw), target)
    result: dict[str, Any] = json.loads(call.request.body)
    return result


def refused(doc: dict[str, Any]) -> str:
    with pytest.raises(Unsupported) as raised:
        DIALECT.build(buffer(doc), TARGET)
    assert raised.value.info().status == 400 and raised.value.info().code == "unsupported_parameter"
    return raised.value.param


def answer(name: str) -> wire.Response:
    return DIALECT.build(buffer({"messages": HELLO}), TARGET).answer(fixture(f"{name}.json"))


def decode(data: bytes, pieces: list[bytes] | None = None) -> list[wire.Chunk]:
    stream = DIALECT.build(buffer({"messages": HELLO, "stream": True}), TARGET).stream()
    out: list[wire.Chunk] = []
    for piece in pieces if pieces is not None else [data]:
        out += stream.feed(piece)
    return out + stream.finish()


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


# --- the request -----------------------------------------------------------------------------------


def test_a_text_completion_is_refused() -> None:
    buf = bytes(encode_text_request(TextCompletionRequest(model="m", prompt="Once"), "r", Passport()))
    with pytest.raises(Unsupported) as raised:
        DIALECT.build(buf, TARGET)
    assert raised.value.param == "prompt"


# --- errors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "expected"), [
    (400, (400, "invalid_request_error", "invalid_request")),
    (401, (502, "server_error", "upstream_auth_failed")),
    (429, (429, "rate_limit_error", "rate_limit_exceeded")),
    (529, (503, "server_error", "upstream_overloaded")),
])
def test_the_providers_refusals(status: int, expected: tuple[int, str, str]) -> None:
    info = DIALECT.error(status, {"retry-after": "7"}, fixture(f"error_{status}.json"))
    assert (info.status, info.type, info.code) == expected
    said = json.loads(fixture(f"error_{status}.json"))["error"]["message"]
    assert scrubbed_part(said) in info.message


def scrubbed_part(text: str) -> str:
    return text.split("https://")[0].strip()[:60]


@pytest.mark.parametrize(("status", "body", "expected"), [
    (401, b'{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}',
     (401, "authentication_error", "Anthropic refused the key sent with the request: invalid x-api-key")),
    (403, b'{"type":"error","error":{"type":"permission_error","message":"no access"}}',
     (403, "permission_error", "Anthropic refused the key sent with the request: no access")),
    (402, b'{"type":"error","error":{"type":"billing_error","message":"credit balance too low"}}',
     (402, "billing_error", "Anthropic refused the key sent with the request: credit balance too low")),
    (401, b"", (401, "authentication_error", "Anthropic refused the key sent with the request: HTTP 401")),
])
def test_the_clients_own_key_refused_is_its_own_status(status: int, body: bytes,
                                                      expected: tuple[int, str, str]) -> None:
    info = DIALECT.error(status, {}, body, clients_key=True)
    assert (info.status, info.type, info.message) == expected


@pytest.mark.parametrize(("status", "body", "expected"), [
    (403, b'{"type":"error","error":{"type":"permission_error","message":"no access"}}', (502, "upstream_auth_failed")),
    (404, b'{"type":"error","error":{"type":"not_found_error","message":"model: x"}}', (404, "not_found")),
    (413, b'{"type":"error","error":{"type":"request_too_large","message":"big"}}', (413, "request_too_large")),
    (500, b'{"type":"error","error":{"type":"api_error","message":"Internal server error"}}', (502, "upstream_error")),
    (504, b"<html>gateway timeout</html>", (504, "upstream_timeout")),
    (502, b"<html>bad gateway</html>", (502, "upstream_error")),
    (409, b"conflict", (409, "invalid_request")),
    (401, b"", (502, "upstream_auth_failed")),
])
def test_statuses_without_anthropics_shape_too(status: int, body: bytes, expected: tuple[int, str]) -> None:
    info = DIALECT.error(status, {}, body)
    assert (info.status, info.code) == expected


def test_provider_text_is_scrubbed_of_secrets_and_addresses() -> None:
    body = msgspec.json.encode({"type": "error", "error": {"type": "invalid_request_error", "message": (
        "bad key sk-ant-api03-AbCdEf_123-xyz for http://10.0.0.5:8080/v1/messages via proxy.internal:3128, "
        "Bearer abc.def.ghi and 192.168.1.1, x-api-key: sk-ant-zzz " + "x" * 2000)}})
    info = DIALECT.error(400, {}, body)
    for secret in ("sk-ant", "10.0.0.5", "proxy.internal", "abc.def", "192.168", "zzz"):
        assert secret not in info.message
    assert len(info.message) < 700 and re.search(r"bad key \[redacted\]", info.message)


def test_an_overloaded_anthropic_is_a_503_with_a_retry_after_whether_or_not_it_named_one() -> None:
    body = b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
    named = DIALECT.error(529, {"retry-after": "7"}, body)
    assert (named.status, named.code, named.retry_after) == (503, "upstream_overloaded", 7)
    assert DIALECT.error(529, {}, body).retry_after == 1
    limited = DIALECT.error(429, {"Retry-After": "12"}, b'{"type":"error","error":{"type":"rate_limit_error"}}')
    assert (limited.status, limited.retry_after) == (429, 12)


# --- JSON nested too deeply: a 400, as at the edge, never a crash -----------------------------------

_DECODED = ("parameters", "schema", "extra_json", "arguments")


@pytest.mark.parametrize("levels", [990, 100_000])
@pytest.mark.parametrize("where", ["parameters", "schema", "extra_json", "arguments"])
def test_json_nested_too_deeply_in_any_field_is_a_400(where: str, levels: int) -> None:
    buf = deep_buffer(where, levels, "anthropic")
    if where not in _DECODED:  # passed along as text, never read
        DIALECT.build(buf, TARGET)
    else:
        assert_nested_too_deeply(lambda: DIALECT.build(buf, TARGET))


# --- a Messages request as its client sent it ------------------------------------------------------


def sent_whole(doc: dict[str, Any], model: str | None = "claude-opus-4-6", betas: list[str] | None = None,
               version: str | None = None) -> bytes:
    """A buffer as the edge makes it for a Messages request bound for Anthropic: the request as sent."""
    request = decode_chat_request(json.dumps({"model": "claude-sonnet-4-5", "messages": HELLO}).encode())
    return bytes(encode_messages_request(request, "r", Passport(), "anthropic", model,
                                         anthropic_json=json.dumps(doc), anthropic_beta=betas,
                                         anthropic_version=version))


AS_SENT = {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": HELLO, "container": "c_1",
           "tools": [{"type": "web_search_20250305", "name": "web_search"}], "zzz_new_beta_field": {"a": [1]}}


def test_a_request_as_sent_goes_as_it_is_with_the_routes_model_name() -> None:
    call = DIALECT.build(sent_whole(AS_SENT, betas=["a-2025", "b-2025"], version="2023-06-01"), TARGET)
    assert json.loads(call.request.body) == {**AS_SENT, "model": "claude-opus-4-6"}
    assert list(json.loads(call.request.body)) == list(AS_SENT)  # its fields in the client's order
    assert call.request.headers["anthropic-beta"] == "a-2025,b-2025"
    assert call.request.headers["anthropic-version"] == "2023-06-01"
    assert call.request.headers["x-api-key"] == "sk-ant-secret" and call.request.path == "/v1/messages"
    assert call.request.stream is False


def test_a_request_as_sent_without_beta_flags_or_version_gets_the_bridges_version() -> None:
    call = DIALECT.build(sent_whole(AS_SENT), TARGET)
    assert "anthropic-beta" not in call.request.headers
    assert call.request.headers["anthropic-version"] == anthropic_request.VERSION


def test_a_count_asks_anthropics_count_tokens_and_answers_with_usage() -> None:
    doc = {"model": "claude-sonnet-4-5", "messages": HELLO, "system": "Be brief."}
    call = DIALECT.count(sent_whole(doc, betas=["a-2025"]), TARGET)
    assert call.request.path == "/v1/messages/count_tokens"
    assert json.loads(call.request.body) == {**doc, "model": "claude-opus-4-6"}
    assert call.request.headers["anthropic-beta"] == "a-2025"
    answer = call.answer(b'{"input_tokens": 77}')
    assert answer.choices == [] and answer.usage is not None and answer.usage.prompt_tokens == 77
    with pytest.raises(EngineFailed) as broken:
        call.answer(b'{"tokens": 77}')
    assert broken.value.info.status == 502


def test_a_count_of_a_chat_request_is_refused() -> None:
    with pytest.raises(Unsupported) as refused_count:
        DIALECT.count(buffer({"messages": HELLO}), TARGET)
    assert refused_count.value.param == "messages"
