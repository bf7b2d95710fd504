"""The OpenAI-compatible dialect (ingress/bridges/openai.py): the path under the target's URL, which API a
request goes to, JSON nested too deeply refused, a Responses request sent on whole; and the helpers its
modules' tests share (the request body: test_openai_request.py; engines' answers and streams:
test_openai_answers.py, OpenAI's own Responses API: test_responses_answers.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from bad_requests import assert_nested_too_deeply, deep_buffer

from ingress import wire
from ingress.bridges.dialect import EngineRequest, Target
from ingress.bridges.openai import OpenAIDialect
from ingress.bridges.openai_answers import OpenAIStream
from ingress.encoding.requests import encode_messages_request, encode_request, encode_text_request
from ingress.oai.codec import decode_chat_request
from ingress.oai.completions import decode_text_request
from ingress.wire.passport import Passport

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "bridges" / "openai"
DIALECT = OpenAIDialect(clock=lambda: 1_700_000_000.0)
TARGET = Target(url="http://127.0.0.1:8000", api_key="sk-bridge-key")


def fixture(name: str) -> bytes:
    return (FIXTURES / f"{name}.sse").read_bytes()


def chat_buffer(body: dict[str, Any], *, extras: dict[str, Any] | None = None, model_name: str | None = None,
                request_id: str = "req-7") -> bytes:
    request = decode_chat_request(msgspec.json.encode(body))
    extra = msgspec.json.encode(extras).decode() if extras is not None else None
    return bytes(encode_request(request, request_id, Passport(), "openai", model_name, extra))


def sent(buf: bytes, target: Target = TARGET) -> dict[str, Any]:
    body: dict[str, Any] = msgspec.json.decode(DIALECT.build(buf, target).request.body)
    return body


def run(data: bytes | list[bytes], *, fallback_id: str = "chatcmpl-req-7", text: bool = False) -> list[wire.Chunk]:
    stream = OpenAIStream(fallback_id=fallback_id, text=text)
    chunks: list[wire.Chunk] = []
    for piece in [data] if isinstance(data, bytes) else data:
        chunks += stream.feed(piece)
    return chunks + stream.finish()


def calls(chunks: list[wire.Chunk]) -> list[tuple[int, str | None, str | None, str | None]]:
    return [(d.index, d.id, d.name, d.arguments) for c in chunks for d in c.tool_calls]


def whole_calls(chunks: list[wire.Chunk]) -> dict[int, tuple[str, str, str]]:
    """Each call as a client accumulates it: the id and name of its first delta, the arguments joined."""
    acc: dict[int, list[str]] = {}
    for index, call_id, name, arguments in calls(chunks):
        entry = acc.setdefault(index, [call_id or "", name or "", ""])
        entry[2] += arguments or ""
    return {i: (v[0], v[1], v[2]) for i, v in acc.items()}


def text_of(chunks: list[wire.Chunk], field: str = "content") -> str:
    return "".join(getattr(c, field) or "" for c in chunks)


# --- build ----------------------------------------------------------------------------------------

HELLO = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
EngineRequestStub = EngineRequest(path="/v1/responses", headers={}, body=b"", stream=False)


def test_a_text_completion_goes_to_completions() -> None:
    request = decode_text_request(b'{"model": "m", "prompt": "Once upon", "max_tokens": 5, "stream": true}')
    buf = bytes(encode_text_request(request, "req-8", Passport(), "openai", None, '{"min_p": 0.1}'))
    call = DIALECT.build(buf, TARGET)
    assert call.request.path == "/v1/completions"
    assert msgspec.json.decode(call.request.body) == {
        "model": "m", "prompt": "Once upon", "max_tokens": 5, "stream": True,
        "stream_options": {"include_usage": True}, "min_p": 0.1}


# --- JSON nested too deeply: a 400, as at the edge, never a crash -----------------------------------

_DECODED = ("parameters", "schema", "extra_json")  # a tool call's arguments travel as text


@pytest.mark.parametrize("levels", [990, 100_000])
@pytest.mark.parametrize("where", ["parameters", "schema", "extra_json", "arguments"])
def test_json_nested_too_deeply_in_any_field_is_a_400(where: str, levels: int) -> None:
    buf = deep_buffer(where, levels, "openai")
    if where not in _DECODED:  # passed along as text, never read
        DIALECT.build(buf, TARGET)
    else:
        assert_nested_too_deeply(lambda: DIALECT.build(buf, TARGET))


def test_earlier_reasoning_goes_to_engines_and_never_to_openais_own_api() -> None:
    buf = chat_buffer({"model": "m", "messages": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "reasoning_content": "think first", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "r"}]})
    assert sent(buf)["messages"][1]["reasoning_content"] == "think first"
    assert "reasoning_content" not in sent(buf, Target(url="https://api.openai.com/v1"))["messages"][1]


# --- a Responses request sent on whole (a route to OpenAI's own API) ---------------------------------

def responses_buffer(body: dict[str, Any], model_name: str = "gpt-5") -> bytes:
    request = decode_chat_request(msgspec.json.encode({"model": body["model"], "stream": body.get("stream", False),
                                                       "messages": [{"role": "user", "content": "q"}]}))
    return bytes(encode_messages_request(request, "req-8", Passport(), "openai", model_name,
                                         responses_json=msgspec.json.encode(body).decode()))


def test_a_responses_request_sent_whole_goes_to_responses_as_its_client_sent_it() -> None:
    body = {"model": "codex-alias", "input": "q", "client_metadata": {"session_id": "s"}, "stream": True,
            "tools": [{"type": "web_search"}], "include": ["reasoning.encrypted_content"], "store": False}
    call = DIALECT.build(responses_buffer(body), TARGET)
    assert call.request.path == "/v1/responses" and call.request.stream
    assert msgspec.json.decode(call.request.body) == {**body, "model": "gpt-5"}
    assert call.request.headers["authorization"] == "Bearer sk-bridge-key"
