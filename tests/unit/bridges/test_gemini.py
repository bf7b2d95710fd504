"""The Gemini dialect (ingress/bridges/gemini.py), without a socket: the paths, the key, a Gemini request sent
as its client sent it (its ids and signatures given back to Google), a count, and Google's refusals; and the
helpers its modules' tests share (the request: test_gemini_request.py; answers and streams:
test_gemini_answers.py)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from bad_requests import assert_nested_too_deeply, deep_buffer
from fakes.gemini import fixture

from ingress import wire
from ingress.bridges.dialect import Target, Unsupported
from ingress.bridges.gemini import GeminiDialect
from ingress.bridges.gemini_request import signed_id
from ingress.encoding.requests import encode_messages_request, encode_request, encode_text_request
from ingress.oai.codec import decode_chat_request
from ingress.oai.completions import TextCompletionRequest
from ingress.wire.passport import Passport

CREATED = 1_700_000_000
DIALECT = GeminiDialect(clock=lambda: CREATED)
TARGET = Target(url="https://generativelanguage.googleapis.com", api_key="AIza-secret")
HELLO = [{"role": "user", "content": "Hello"}]
SIGNATURE = "+vv8IGNhbGwgc2lnbmF0dXJlIP/vAAAAAAA="


def buffer(doc: dict[str, Any], extra: dict[str, Any] | None = None, model: str | None = "gemini-2.5-flash") -> bytes:
    request = decode_chat_request(json.dumps({"model": "gemini-2.5-flash", **doc}).encode())
    return bytes(encode_request(request, "r", Passport(), "gemini", model,
                                json.dumps(extra) if extra is not None else None))


def whole_buffer(sent: dict[str, Any], *, stream: bool = False, model: str = "gemini-2.5-pro") -> bytes:
    """A Gemini request bound for Google: its chat reading (here a stand-in) and the request as sent."""
    request = decode_chat_request(json.dumps({"model": model, "messages": HELLO, "stream": stream}).encode())
    return bytes(encode_messages_request(request, "r", Passport(), "gemini", model,
                                         gemini_json=json.dumps(sent)))


def body(doc: dict[str, Any], **kw: Any) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(DIALECT.build(buffer(doc, **kw), TARGET).request.body)
    return result


def test_the_paths_and_the_key_as_google_takes_them() -> None:
    call = DIALECT.build(buffer({"messages": HELLO}), TARGET)
    assert (call.request.method, call.request.path, call.request.stream) == (
        "POST", "/v1beta/models/gemini-2.5-flash:generateContent", False)
    assert dict(call.request.headers) == {"content-type": "application/json", "x-goog-api-key": "AIza-secret"}
    assert "AIza-secret" not in repr(call)
    streamed = DIALECT.build(buffer({"messages": HELLO, "stream": True}), Target(url="https://gw.example/g/v1beta"))
    assert streamed.request.path == "/g/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    assert streamed.request.stream and "x-goog-api-key" not in streamed.request.headers


def test_a_model_named_as_google_names_it_is_one_segment_of_the_path() -> None:
    call = DIALECT.build(buffer({"messages": HELLO}, model="models/gemini-x"), Target(url="http://g"))
    assert call.request.path == "/v1beta/models/gemini-x:generateContent"


def test_a_gemini_request_goes_as_sent_with_the_routes_model() -> None:
    sent = {"contents": [{"role": "user", "parts": [{"text": "Search"}, {"fileData": {"fileUri": "gs://b/a.pdf"}}]}],
            "tools": [{"googleSearch": {}}], "cachedContent": "cachedContents/abc", "model": "models/client-name",
            "generationConfig": {"topK": 40, "thinkingConfig": {"includeThoughts": True}}}
    call = DIALECT.build(whole_buffer(sent, stream=True), TARGET)
    assert call.request.path == "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
    assert json.loads(call.request.body) == {k: v for k, v in sent.items() if k != "model"}


def test_the_ids_the_bridge_gave_go_back_as_google_gave_them() -> None:
    """A client sends back a call with the id the bridge gave it: the call goes to Google with its thought
    signature on its part and without the made-up id; the signature the edge showed on the turn's text is
    taken off it; a call id of Google's own is kept."""
    made = signed_id("gcall_resp_0", SIGNATURE)
    sent = {"contents": [
        {"role": "user", "parts": [{"text": "Weather?"}]},
        {"role": "model", "parts": [{"text": "Let me check.", "thoughtSignature": SIGNATURE},
                                    {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}, "id": made}},
                                    {"functionCall": {"name": "get_time", "args": {}, "id": "google-7"}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "id": made, "response": {"t": 21}}},
                                   {"functionResponse": {"name": "get_time", "id": "google-7", "response": {}}}]}]}
    contents = json.loads(DIALECT.build(whole_buffer(sent), TARGET).request.body)["contents"]
    assert contents[1]["parts"] == [
        {"text": "Let me check."},
        {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": SIGNATURE},
        {"functionCall": {"name": "get_time", "args": {}, "id": "google-7"}}]
    assert contents[2]["parts"][0]["functionResponse"] == {"name": "get_weather", "response": {"t": 21}}
    assert contents[2]["parts"][1]["functionResponse"]["id"] == "google-7"


def test_a_count_sends_contents_alone_or_the_whole_request_wrapped() -> None:
    bare = DIALECT.count(whole_buffer({"contents": [{"parts": [{"text": "Hi"}]}]}), TARGET)
    assert bare.request.path == "/v1beta/models/gemini-2.5-pro:countTokens"
    assert json.loads(bare.request.body) == {"contents": [{"parts": [{"text": "Hi"}]}]}
    sent = {"contents": [{"parts": [{"text": "Hi"}]}], "systemInstruction": {"parts": [{"text": "Be brief."}]}}
    wrapped = DIALECT.count(whole_buffer(sent), TARGET)
    assert json.loads(wrapped.request.body) == {"generateContentRequest": {"model": "models/gemini-2.5-pro", **sent}}
    counted = wrapped.answer(b'{"totalTokens": 31, "promptTokensDetails": []}')
    assert counted.choices == [] and counted.usage == wire.Usage(prompt_tokens=31, total_tokens=31)
    chat = DIALECT.count(buffer({"messages": [{"role": "system", "content": "Be brief."}, *HELLO]}), TARGET)
    assert json.loads(chat.request.body)["generateContentRequest"]["systemInstruction"] == {
        "parts": [{"text": "Be brief."}]}


def test_a_text_completion_is_refused() -> None:
    buf = bytes(encode_text_request(TextCompletionRequest(model="m", prompt="Once"), "r", Passport()))
    with pytest.raises(Unsupported) as raised:
        DIALECT.build(buf, TARGET)
    assert raised.value.param == "prompt"


@pytest.mark.parametrize("where", ["parameters", "schema", "extra_json", "arguments"])
def test_json_nested_too_deeply_in_any_field_is_a_400(where: str) -> None:
    buf = deep_buffer(where, 100_000, "gemini")
    assert_nested_too_deeply(lambda: DIALECT.build(buf, TARGET))


# --- errors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "status", "expected"), [
    ("400", 400, (400, "invalid_request", None)),
    ("400_key", 400, (502, "upstream_auth_failed", None)),
    ("403", 403, (502, "upstream_auth_failed", None)),
    ("404", 404, (404, "not_found", None)),
    ("429", 429, (429, "rate_limit_exceeded", 37)),
    ("500", 500, (502, "upstream_error", None)),
    ("503", 503, (503, "upstream_overloaded", None)),
])
def test_googles_refusals(name: str, status: int, expected: tuple[int, str, int | None]) -> None:
    info = DIALECT.error(status, {}, fixture(f"error_{name}.json"))
    assert (info.status, info.code, info.retry_after) == expected
    assert "https://" not in info.message  # scrubbed


def test_a_refusal_of_the_clients_own_key_is_the_clients_and_retry_after_is_kept() -> None:
    info = DIALECT.error(400, {}, fixture("error_400_key.json"), clients_key=True)
    assert (info.status, info.code) == (401, "invalid_api_key")
    assert DIALECT.error(503, {"Retry-After": "9"}, fixture("error_503.json")).retry_after == 9
    assert DIALECT.error(429, {"Retry-After": "3"}, fixture("error_429.json")).retry_after == 3


def test_a_body_that_is_not_googles_is_read_as_any_engines() -> None:
    info = DIALECT.error(502, {}, b"<html><body>Bad gateway</body></html>")
    assert (info.status, info.code) == (502, "upstream_error")
    listed = DIALECT.error(429, {}, b"[" + fixture("error_429.json") + b"]")  # a JSON stream's error
    assert (listed.status, listed.retry_after) == (429, 37)
    assert msgspec.json.decode(b"[]") == []
