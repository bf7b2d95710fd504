"""OpenAI-compatible engines' answers and streams made into our chunks (ingress/bridges/openai_answers.py):
each engine's quirks (fixtures in tests/fixtures/bridges/openai/, see its README), streams that fail, and
whole answers."""

from __future__ import annotations

import msgspec
import pytest

from ingress import wire
from ingress.bridges.dialect import EngineFailed
from ingress.bridges.openai_answers import OpenAIStream
from ingress.encoding.requests import encode_text_request
from ingress.oai.completions import decode_text_request
from ingress.translate.stream import StreamTranslator
from ingress.wire.passport import Passport
from unit.bridges.test_openai import DIALECT, HELLO, TARGET, calls, chat_buffer, fixture, run, text_of, whole_calls

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
