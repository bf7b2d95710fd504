"""The OpenAI-compatible dialect (ingress/bridges/openai.py): the engine request it builds, and what it
makes of each engine's answers and streams (fixtures in tests/fixtures/bridges/openai/, see its README)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from bad_requests import assert_nested_too_deeply, deep_buffer

from ingress import wire
from ingress.bridges.dialect import EngineFailed, EngineRequest, Target, under
from ingress.bridges.openai import OpenAIDialect, ResponsesCall
from ingress.bridges.openai_answers import OpenAIStream
from ingress.bridges.responses_answers import ResponsesStream
from ingress.encoding.requests import encode_messages_request, encode_request, encode_text_request
from ingress.oai.codec import decode_chat_request
from ingress.oai.completions import decode_text_request
from ingress.translate.stream import StreamTranslator
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


def test_a_chat_request_goes_to_chat_completions_with_the_routes_model_and_the_targets_key() -> None:
    call = DIALECT.build(chat_buffer(HELLO, model_name="Qwen/Qwen3-8B"), TARGET)
    assert call.request.path == "/v1/chat/completions"
    assert call.request.stream is False
    assert call.request.headers["authorization"] == "Bearer sk-bridge-key"
    assert call.request.headers["content-type"] == "application/json"
    assert msgspec.json.decode(call.request.body) == {"model": "Qwen/Qwen3-8B",
                                                      "messages": [{"role": "user", "content": "hi"}]}


def test_no_key_no_authorization_even_from_the_targets_static_headers() -> None:
    target = Target(url="http://127.0.0.1:8000", headers={"Authorization": "Bearer leaked", "X-Org": "o"})
    headers = DIALECT.build(chat_buffer(HELLO), target).request.headers
    assert "authorization" not in headers
    assert headers["x-org"] == "o"


@pytest.mark.parametrize(("url", "path"), [
    ("http://127.0.0.1:8000", "/v1/chat/completions"),
    ("https://api.openai.com/v1", "/v1/chat/completions"),
    ("https://gw.example/proxy/v1/", "/proxy/v1/chat/completions"),
    ("https://gw.example/openai", "/openai/v1/chat/completions"),
])
def test_the_path_sits_under_the_targets_base_url(url: str, path: str) -> None:
    assert under(Target(url=url), "/v1/chat/completions") == path


def test_a_stream_always_asks_for_usage_and_keeps_the_clients_stream_options() -> None:
    body = sent(chat_buffer({**HELLO, "stream": True}))
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    asked = sent(chat_buffer({**HELLO, "stream": True, "stream_options": {"include_obfuscation": False}}))
    assert asked["stream_options"] == {"include_obfuscation": False, "include_usage": True}


def test_engine_extras_merge_at_the_top_level_and_never_replace_an_openai_field() -> None:
    body = sent(chat_buffer({**HELLO, "temperature": 0.5, "stream": True},
                            extras={"top_k": 20, "chat_template_kwargs": {"enable_thinking": False},
                                    "model": "other", "temperature": 2, "stream_options": {"x": 1}, "seed": 9}))
    assert body["top_k"] == 20
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert body["model"] == "m"
    assert body["temperature"] == 0.5
    assert body["stream_options"] == {"include_usage": True}
    assert "seed" not in body  # an OpenAI field the client did not set is not the extras' either


def test_tool_types_the_structs_omit_are_sent_as_openai_requires() -> None:
    body = sent(chat_buffer({
        "model": "m",
        "messages": [{"role": "user", "content": "weather?"},
                     {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                                                           "function": {"name": "get", "arguments": "{}"}}]},
                     {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
        "tools": [{"type": "function", "function": {"name": "get", "parameters": {"type": "object"}}}],
        "tool_choice": {"type": "function", "function": {"name": "get"}},
    }))
    assert body["tools"] == [{"type": "function", "function": {"name": "get", "parameters": {"type": "object"}}}]
    assert body["messages"][1]["tool_calls"][0]["type"] == "function"
    assert body["tool_choice"] == {"type": "function", "function": {"name": "get"}}


def test_a_text_completion_goes_to_completions() -> None:
    request = decode_text_request(b'{"model": "m", "prompt": "Once upon", "max_tokens": 5, "stream": true}')
    buf = bytes(encode_text_request(request, "req-8", Passport(), "openai", None, '{"min_p": 0.1}'))
    call = DIALECT.build(buf, TARGET)
    assert call.request.path == "/v1/completions"
    assert msgspec.json.decode(call.request.body) == {
        "model": "m", "prompt": "Once upon", "max_tokens": 5, "stream": True,
        "stream_options": {"include_usage": True}, "min_p": 0.1}


# --- streams, engine by engine ---------------------------------------------------------------------


def test_openai_text_stream() -> None:
    chunks = run(fixture("openai_text"))
    assert [c.sequence for c in chunks] == [0, 1, 2, 3]
    first, *_, last = chunks
    assert (first.id, first.model, first.created, first.role, first.content) == (
        "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG", "gpt-4o-2024-08-06", 1741570283, "assistant", "")
    assert (first.system_fingerprint, first.service_tier) == ("fp_eb9dce56a8", "default")
    assert text_of(chunks) == "Hello there ☃"
    assert (last.done, last.finish_reason, last.content) == (True, "stop", None)
    assert last.usage is not None and (last.usage.prompt_tokens, last.usage.completion_tokens) == (19, 3)
    assert [c.done for c in chunks] == [False, False, False, True]


def test_openai_parallel_tool_calls() -> None:
    chunks = run(fixture("openai_tools"))
    assert whole_calls(chunks) == {0: ("call_DdmO9pD3xa9XTPNJ32zg2hcA", "get_weather", '{"city": "Paris"}'),
                                   1: ("call_ABC2", "get_time", '{"tz": "CET"}')}
    assert calls(chunks)[1] == (0, None, None, '{"city": "Pa')  # a continuation: index and arguments only
    assert chunks[-1].finish_reason == "tool_calls" and chunks[-1].done
    assert chunks[-1].usage is not None and chunks[-1].usage.cached_tokens == 64


def test_vllm_reasoning_repeated_ids_a_second_call_on_index_0_and_usage_on_every_chunk() -> None:
    chunks = run(fixture("vllm_tools"))
    assert text_of(chunks, "reasoning") == "The user wants the weather."
    assert text_of(chunks) == ""  # the reasoning never becomes content
    assert whole_calls(chunks) == {0: ("chatcmpl-tool-5c1e", "get_weather", '{"city": "Paris"}'),
                                   1: ("chatcmpl-tool-77aa", "get_time", '{"tz": "CET"}')}
    assert [d for d in calls(chunks) if d[0] == 0][1:] == [(0, None, None, '{"city": '), (0, None, None, '"Paris"}')]
    assert [c.usage is not None for c in chunks] == [False] * (len(chunks) - 1) + [True]
    usage = chunks[-1].usage
    assert usage is not None and (usage.completion_tokens, usage.cached_tokens) == (25, 32)
    assert chunks[-1].finish_reason == "tool_calls"


def test_sglang_continuations_with_an_empty_id() -> None:
    chunks = run(fixture("sglang_reasoning_tools"))
    assert text_of(chunks, "reasoning") == "Two plus two is four."
    assert whole_calls(chunks) == {0: ("call_9d0c", "add", '{"a": 2, "b": 2}')}
    assert chunks[0].id == "5a2c0f8e1b" and chunks[0].role == "assistant"


def test_tgi_ids_missing_tool_calls_as_one_object_and_the_role_on_every_delta() -> None:
    chunks = run(fixture("tgi_tools"))
    assert chunks[0].id == "chatcmpl-req-7"  # TGI's "" is no id: the request's stands in
    assert [c.role for c in chunks] == ["assistant"] + [None] * (len(chunks) - 1)
    assert whole_calls(chunks) == {0: ("call_chatcmpl-req-7_0_0", "get_current_weather", '{"location": "Paris"}')}
    assert chunks[-1].finish_reason == "stop" and chunks[-1].done  # eos_token is a stop


def test_ollama_whole_calls_in_one_delta_arguments_as_an_object_and_reasoning() -> None:
    chunks = run(fixture("ollama_tools"))
    assert text_of(chunks, "reasoning") == "Paris weather, so call the tool."
    assert whole_calls(chunks) == {0: ("call_0ttx6u4k", "get_weather", '{"city":"Paris","unit":"celsius"}'),
                                   1: ("call_1hx2", "get_time", '{"tz":"CET"}')}
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 151


def test_llamacpp_usage_and_its_prefix_cache_from_timings() -> None:
    chunks = run(fixture("llamacpp_text"))
    assert text_of(chunks) == "Hi!"
    assert chunks[-1].finish_reason == "length"
    assert chunks[-1].usage is not None and chunks[-1].usage.cached_tokens == 8


def test_no_ids_at_all_stable_ids_a_new_name_is_a_new_call_and_nothing_after_done() -> None:
    chunks = run(fixture("no_ids"))
    assert whole_calls(chunks) == {0: ("call_chatcmpl-req-7_0_0", "lookup", '{"q":"ingress"}'),
                                   1: ("call_chatcmpl-req-7_0_1", "search", '{"q":"again"}')}
    assert text_of(chunks) == ""  # "after the end" came after [DONE]
    assert run(fixture("no_ids")) == chunks  # the generated ids are stable


def test_a_choice_per_index_for_n_above_one() -> None:
    body = (b'data: {"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":"a"}},'
            b'{"index":1,"delta":{"role":"assistant","content":"b"}}]}\n\n'
            b'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
            b'data: {"id":"c","choices":[{"index":1,"delta":{},"finish_reason":"length"}]}\n\n'
            b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}\n\n'
            b"data: [DONE]\n\n")
    chunks = run(body)
    assert [(c.choice_index, c.role, c.content, c.finish_reason, c.done) for c in chunks] == [
        (0, "assistant", "a", None, False), (1, "assistant", "b", None, False),
        (0, None, None, "stop", False), (1, None, None, "length", True)]
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 3


def test_an_empty_stream_that_is_complete_still_has_its_final_chunk() -> None:
    chunks = run(b"data: [DONE]\n\n")
    assert [(c.sequence, c.id, c.done) for c in chunks] == [(0, "chatcmpl-req-7", True)]


# --- streams that fail ----------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "status", "code", "words"), [
    ("vllm_error_flat", 400, None, "longer than the maximum model length"),
    ("vllm_error", 502, "upstream_error", "EngineCore encountered an issue"),
    ("llamacpp_error", 502, "upstream_error", "context shift is disabled"),
])
def test_an_error_event_mid_stream_is_engine_failed(name: str, status: int, code: str | None, words: str) -> None:
    stream = OpenAIStream(fallback_id="x")
    with pytest.raises(EngineFailed) as failed:
        for line in fixture(name).splitlines(keepends=True):
            stream.feed(line)
        stream.finish()
    assert (failed.value.info.status, failed.value.info.code) == (status, code)
    assert words in failed.value.info.message
    assert "10.0.3.7" not in failed.value.info.message  # the address llama.cpp's text named is scrubbed


def test_the_chunks_before_an_error_were_given_out() -> None:
    stream = OpenAIStream(fallback_id="x")
    lines = fixture("vllm_error_flat").split(b"\n\n")
    given = stream.feed(lines[0] + b"\n\n" + lines[1] + b"\n\n")
    assert text_of(given) == "Once"
    with pytest.raises(EngineFailed):
        stream.feed(lines[2] + b"\n\n")


def test_a_stream_that_ends_without_done_is_a_failure_never_a_success() -> None:
    stream = OpenAIStream(fallback_id="x")
    given = stream.feed(fixture("openai_truncated"))
    assert given and not any(c.done for c in given)
    with pytest.raises(EngineFailed) as failed:
        stream.finish()
    assert (failed.value.info.status, failed.value.info.code) == (502, "upstream_unavailable")


@pytest.mark.parametrize("body", [b"data: {not json}\n\n", b'data: {"choices": 5}\n\n', b"data: [1, 2]\n\n"])
def test_an_unreadable_chunk_is_a_protocol_error(body: bytes) -> None:
    with pytest.raises(EngineFailed) as failed:
        OpenAIStream(fallback_id="x").feed(body)
    assert failed.value.info.code == "upstream_protocol_error"


# --- the chunks make a valid stream of our contract -------------------------------------------------


@pytest.mark.parametrize("name", ["openai_text", "openai_tools", "vllm_tools", "sglang_reasoning_tools",
                                  "tgi_tools", "ollama_tools", "llamacpp_text", "no_ids"])
def test_every_fixture_is_a_stream_the_edge_reads_whole(name: str) -> None:
    translator = StreamTranslator(id="edge", model="m", created=1, include_usage=True)
    out = []
    for chunk in run(fixture(name)):
        out += translator.feed_frame(bytes(wire.write_chunk(chunk)))
    translator.finish()
    assert translator.done
    assert (out[-1].usage is not None) == (name != "no_ids")  # the one fixture whose engine counted nothing


# --- whole answers ---------------------------------------------------------------------------------


def test_a_whole_answer_tolerates_what_engines_omit_and_add() -> None:
    body = msgspec.json.encode({
        "object": "chat.completion", "model": "qwen3:4b", "extra_engine_field": {"x": 1},
        "choices": [{"index": 0, "finish_reason": "tool_calls", "stop_reason": 128008,
                     "message": {"role": "assistant", "content": None, "reasoning_content": "think",
                                 "tool_calls": [{"type": "function",
                                                 "function": {"name": "f", "arguments": {"a": [1, 2]}}}]}}],
    })
    call = DIALECT.build(chat_buffer(HELLO), TARGET)
    response = call.answer(body)
    assert (response.id, response.model, response.created, response.usage) == (
        "chatcmpl-req-7", "qwen3:4b", 1_700_000_000, None)
    choice = response.choices[0]
    assert (choice.content, choice.reasoning, choice.finish_reason) == (None, "think", "tool_calls")
    assert [(c.id, c.name, c.arguments) for c in choice.tool_calls] == [("call_chatcmpl-req-7_0_0", "f", '{"a":[1,2]}')]
    assert wire.decode_response(bytes(wire.write_response(response))) == response


def test_a_whole_openai_answer() -> None:
    body = msgspec.json.encode({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 5, "model": "gpt-4o",
        "system_fingerprint": "fp_1", "service_tier": "default",
        "choices": [{"index": 0, "finish_reason": "stop", "logprobs": {"content": [
            {"token": "Hi", "logprob": -0.5, "bytes": [72, 105], "top_logprobs": [{"token": "Hi", "logprob": -0.5}]}]},
            "message": {"role": "assistant", "content": "Hi", "refusal": None}}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10,
                  "prompt_tokens_details": {"cached_tokens": 4},
                  "completion_tokens_details": {"reasoning_tokens": 0}},
    })
    response = DIALECT.build(chat_buffer(HELLO), TARGET).answer(body)
    assert (response.id, response.created, response.system_fingerprint, response.service_tier) == (
        "chatcmpl-1", 5, "fp_1", "default")
    assert response.choices[0].content == "Hi"
    assert response.choices[0].logprobs is not None and response.choices[0].logprobs[0].bytes == [72, 105]
    assert response.usage is not None and (response.usage.total_tokens, response.usage.cached_tokens) == (10, 4)


def test_a_text_completion_answer_with_legacy_logprobs() -> None:
    request = decode_text_request(b'{"model": "m", "prompt": "Say", "logprobs": 1}')
    call = DIALECT.build(bytes(encode_text_request(request, "req-9", Passport())), TARGET)
    response = call.answer(msgspec.json.encode({
        "id": "cmpl-1", "object": "text_completion", "created": 3, "model": "m",
        "choices": [{"index": 0, "text": " hi", "finish_reason": "length",
                     "logprobs": {"tokens": [" hi"], "token_logprobs": [-0.25], "top_logprobs": [{" hi": -0.25}],
                                  "text_offset": [3]}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}))
    choice = response.choices[0]
    assert (choice.content, choice.finish_reason) == (" hi", "length")
    assert choice.logprobs == [wire.TokenLogprob(token=" hi", logprob=-0.25,
                                                 top_logprobs=[wire.TopLogprob(token=" hi", logprob=-0.25)])]


def test_a_text_completion_stream() -> None:
    body = (b'data: {"id":"cmpl-2","object":"text_completion","created":3,"model":"m",'
            b'"choices":[{"index":0,"text":" once","finish_reason":null}]}\n\n'
            b'data: {"id":"cmpl-2","choices":[{"index":0,"text":"","finish_reason":"stop"}]}\n\n'
            b'data: {"id":"cmpl-2","choices":[],"usage":{"prompt_tokens":2,"completion_tokens":1}}\n\n'
            b"data: [DONE]\n\n")
    chunks = run(body, text=True)
    assert [(c.content, c.role, c.finish_reason, c.done) for c in chunks] == [
        (" once", None, None, False), (None, None, "stop", True)]


@pytest.mark.parametrize("body", [
    b'{"error": {"message": "boom", "type": "server_error", "code": 500}}',
    b'{"object": "error", "message": "bad", "type": "BadRequestError", "param": null, "code": 400}',
])
def test_an_error_answered_with_200_is_engine_failed(body: bytes) -> None:
    with pytest.raises(EngineFailed):
        DIALECT.build(chat_buffer(HELLO), TARGET).answer(body)


def test_an_unreadable_answer_is_a_protocol_error() -> None:
    with pytest.raises(EngineFailed) as failed:
        DIALECT.build(chat_buffer(HELLO), TARGET).answer(b"<html>502</html>")
    assert failed.value.info.code == "upstream_protocol_error"


def test_the_chunks_before_an_error_in_the_same_data_travel_with_it() -> None:
    stream = OpenAIStream(fallback_id="x")
    with pytest.raises(EngineFailed) as failed:
        stream.feed(fixture("vllm_error_flat"))  # the chunks and the error event in one read
    assert text_of(failed.value.chunks) == "Once"  # the service sends them before the error frame


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


RESPONSE_EVENTS: list[dict[str, Any]] = [
    {"type": "response.created", "response": {"id": "resp_1", "created_at": 7, "model": "gpt-5", "output": []}},
    {"type": "response.output_item.added", "output_index": 0, "item": {"type": "reasoning", "id": "rs_1"}},
    {"type": "response.reasoning_summary_text.delta", "output_index": 0, "delta": "plan"},
    {"type": "response.output_item.done", "output_index": 0,
     "item": {"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAAA-sealed"}},
    {"type": "response.output_item.added", "output_index": 1,
     "item": {"type": "function_call", "call_id": "call_1", "name": "spawn_agent", "namespace": "multi_agent_v1",
              "arguments": ""}},
    {"type": "response.function_call_arguments.delta", "output_index": 1, "delta": '{"a":'},
    {"type": "response.function_call_arguments.delta", "output_index": 1, "delta": "1}"},
    {"type": "response.completed", "response": {
        "id": "resp_1", "status": "completed", "output": [],
        "usage": {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 64}, "output_tokens": 9,
                  "output_tokens_details": {"reasoning_tokens": 4}, "total_tokens": 109}}},
]
RESPONSES_SSE = b"".join(f"event: {e['type']}\ndata: {msgspec.json.encode(e).decode()}\n\n".encode()
                         for e in RESPONSE_EVENTS)


@pytest.mark.parametrize("size", [len(RESPONSES_SSE), 7])
def test_openais_responses_stream_becomes_our_chunks(size: int) -> None:
    stream = ResponsesStream(created=1)
    chunks = [c for i in range(0, len(RESPONSES_SSE), size) for c in stream.feed(RESPONSES_SSE[i:i + size])]
    chunks += stream.finish()
    assert [c.sequence for c in chunks] == list(range(len(chunks)))
    assert (chunks[0].id, chunks[0].model, chunks[0].role) == ("resp_1", "gpt-5", "assistant")
    assert text_of(chunks, "reasoning") == "plan" and [c.signature for c in chunks if c.signature] == ["gAAAA-sealed"]
    assert whole_calls(chunks) == {0: ("call_1", "multi_agent_v1__spawn_agent", '{"a":1}')}
    last = chunks[-1]
    assert last.done and last.finish_reason == "tool_calls" and last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.cached_tokens, last.usage.reasoning_tokens) == (100, 64, 4)


def test_openais_whole_response_and_its_failures() -> None:
    body = msgspec.json.encode({"id": "resp_2", "created_at": 7, "model": "gpt-5", "status": "completed", "output": [
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "why"}], "encrypted_content": "gAAAA"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
        {"type": "message", "content": [{"type": "output_text", "text": "Lisbon is sunny.", "annotations": [
            {"type": "url_citation", "start_index": 0, "end_index": 6, "title": "t", "url": "https://x"}]}]}],
        "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}})
    answer = ResponsesCall(EngineRequestStub, created=1).answer(body)
    [choice] = answer.choices
    assert (choice.content, choice.reasoning, choice.signature, choice.finish_reason) == (
        "Lisbon is sunny.", "why", "gAAAA", "stop")
    assert [(a.start_index, a.end_index, a.url) for a in choice.annotations] == [(0, 6, "https://x")]
    with pytest.raises(EngineFailed) as failed:
        ResponsesCall(EngineRequestStub, created=1).answer(msgspec.json.encode(
            {"status": "failed", "error": {"code": "server_error", "message": "boom"}}))
    assert failed.value.info.code == "server_error"
    cut = ResponsesStream(created=1)
    cut.feed(RESPONSES_SSE[:200])
    with pytest.raises(EngineFailed):
        cut.finish()
