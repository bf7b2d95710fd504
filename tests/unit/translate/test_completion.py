"""ingress/translate/completion.py: a whole FlatBuffers answer into OpenAI's chat.completion: tool calls, logprobs,
annotations, usage details, finish reasons, reasoning, and what only Anthropic's shape carries left out."""

from __future__ import annotations

import msgspec
import pytest
from openai.types import completion_usage as sdk_usage
from openai.types.completion_usage import CompletionUsage

from ingress import wire
from ingress.errors import UpstreamAnswered, UpstreamProtocolError
from ingress.oai import chat_answers
from ingress.translate.completion import translate_response
from ingress.translate.stream import StreamTranslator
from ingress.wire import Chunk, ErrorInfo, Usage
from ingress.wire.answer import decode_answer
from unit.translate.test_stream import COUNTED, TOKEN, TOKEN_OUT, as_json, run, translator


def test_response_is_translated() -> None:
    response = wire.Response(
        id="chatcmpl-1", model="m", created=5, system_fingerprint="fp",
        choices=[wire.Choice(index=0, content="hi", finish_reason="stop"),
                 wire.Choice(index=1, tool_calls=[wire.FunctionCall(id="c", name="f", arguments="{}")],
                             finish_reason="tool_calls")],
        usage=Usage(prompt_tokens=2, completion_tokens=3),
    )
    doc = as_json([translate_response(decode_answer(bytes(wire.write_response(response))))])[0]
    assert doc["choices"][0]["message"] == {"role": "assistant", "content": "hi", "refusal": None}
    assert doc["choices"][1]["message"]["tool_calls"] == [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    assert doc["usage"]["total_tokens"] == 5  # filled in when the service left it 0
    assert (doc["id"], doc["system_fingerprint"], doc["object"]) == ("chatcmpl-1", "fp", "chat.completion")


def test_response_to_a_legacy_request_has_function_call() -> None:
    response = wire.Response(id="chatcmpl-1", model="m", created=5, choices=[
        wire.Choice(index=0, tool_calls=[wire.FunctionCall(id="c", name="f", arguments="{}"),
                                         wire.FunctionCall(id="d", name="g", arguments="[]")],
                    finish_reason="tool_calls"),
        wire.Choice(index=1, content="hi", finish_reason="stop")])
    doc = as_json([translate_response(response, legacy_functions=True)])[0]
    assert doc["choices"][0]["message"] == {"role": "assistant", "content": None, "refusal": None,
                                            "function_call": {"name": "f", "arguments": "{}"}}
    assert doc["choices"][0]["finish_reason"] == "function_call"
    assert doc["choices"][1]["message"] == {"role": "assistant", "content": "hi", "refusal": None}
    assert doc["choices"][1]["finish_reason"] == "stop"


def test_logprobs_annotations_service_tier_and_usage_details_are_translated() -> None:
    cite = wire.Annotation(type="url_citation", url="https://example.com/a", title="A", start_index=0, end_index=3)
    response = wire.Response(
        id="chatcmpl-1", model="m", created=5, service_tier="flex",
        choices=[wire.Choice(index=0, content=" hi", finish_reason="stop", logprobs=[TOKEN], annotations=[cite]),
                 wire.Choice(index=1, refusal="no", finish_reason="stop",
                             refusal_logprobs=[wire.TokenLogprob(token="no", logprob=-2.5)]),
                 wire.Choice(index=2, content="x", finish_reason="stop")],
        usage=Usage(prompt_tokens=9, completion_tokens=8, total_tokens=17, cached_tokens=1, prompt_audio_tokens=2,
                    reasoning_tokens=3, completion_audio_tokens=4, accepted_prediction_tokens=5,
                    rejected_prediction_tokens=6),
    )
    doc = as_json([translate_response(decode_answer(bytes(wire.write_response(response))))])[0]
    first, second, third = doc["choices"]
    # Each logprob went through a float32 and comes out as the decimal it was: -0.1, not -0.10000000149.
    assert first["logprobs"] == {"content": [TOKEN_OUT], "refusal": None}
    assert first["message"]["annotations"] == [{"type": "url_citation", "url_citation": {
        "start_index": 0, "end_index": 3, "title": "A", "url": "https://example.com/a"}}]
    assert second["logprobs"] == {"content": None, "refusal": [
        {"token": "no", "logprob": -2.5, "bytes": None, "top_logprobs": []}]}
    assert third["logprobs"] is None and "annotations" not in third["message"]  # none sent: null, as OpenAI
    assert doc["service_tier"] == "flex"
    assert doc["usage"]["prompt_tokens_details"] == {"cached_tokens": 1, "audio_tokens": 2}
    assert doc["usage"]["completion_tokens_details"] == {
        "reasoning_tokens": 3, "audio_tokens": 4, "accepted_prediction_tokens": 5, "rejected_prediction_tokens": 6}


def test_the_newer_usage_details_are_written_when_counted() -> None:
    response = wire.Response(id="chatcmpl-1", model="m", created=5, choices=[], usage=COUNTED)
    doc = as_json([translate_response(decode_answer(bytes(wire.write_response(response))))])[0]
    assert doc["usage"]["prompt_tokens_details"] == {"cached_tokens": 1, "audio_tokens": 0, "cache_write_tokens": 5,
                                                     "image_tokens": 3, "text_tokens": 6}
    assert doc["usage"]["completion_tokens_details"] == {
        "reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0,
        "text_tokens": 8}
    usage = CompletionUsage.model_validate(doc["usage"], strict=True)
    assert usage.prompt_tokens_details is not None and usage.completion_tokens_details is not None
    assert (usage.prompt_tokens_details.cache_write_tokens, usage.prompt_tokens_details.image_tokens,
            usage.prompt_tokens_details.text_tokens, usage.completion_tokens_details.text_tokens) == (5, 3, 6, 8)


def test_every_usage_detail_of_the_sdk_can_be_written() -> None:
    # The installed SDK's usage details: the next release that adds one fails here until it is carried.
    assert set(sdk_usage.PromptTokensDetails.model_fields) <= set(chat_answers.PromptTokensDetails.__struct_fields__)
    completion_fields = chat_answers.CompletionTokensDetails.__struct_fields__
    assert set(sdk_usage.CompletionTokensDetails.model_fields) <= set(completion_fields)
    [doc] = as_json([translate_response(wire.Response(id="r", model="m", created=1, choices=[], usage=COUNTED))])
    assert set(doc["usage"]) == set(sdk_usage.CompletionUsage.model_fields)


def test_an_empty_logprobs_list_is_an_empty_content_list() -> None:
    response = wire.Response(id="r", model="m", created=5, choices=[
        wire.Choice(index=0, tool_calls=[wire.FunctionCall(id="c", name="f", arguments="{}")],
                    finish_reason="tool_calls", logprobs=[])])
    doc = as_json([translate_response(decode_answer(bytes(wire.write_response(response))))])[0]
    assert doc["choices"][0]["logprobs"] == {"content": [], "refusal": None}


def test_error_answer_raises() -> None:
    error = ErrorInfo(status=404, type="invalid_request_error", message="no such model")
    with pytest.raises(UpstreamAnswered) as info:
        decode_answer(bytes(wire.write_error(error)))
    assert info.value.status == 404


@pytest.mark.parametrize("body", [b"", b"garbage!", b"\x04\x00\x00\x00LGRS"], ids=["empty", "garbage", "truncated"])
def test_unreadable_answer_is_a_protocol_error(body: bytes) -> None:
    with pytest.raises(UpstreamProtocolError):
        decode_answer(body)


def test_a_custom_tool_call_is_answered_in_openais_custom_shape() -> None:
    from openai.types.chat import ChatCompletion

    from ingress.wire import types as wire_types
    calls = [wire_types.FunctionCall(id="c1", name="grep", arguments="free text", type="custom"),
             wire_types.FunctionCall(id="c2", name="f", arguments="{}")]
    response = wire_types.Response(id="x", model="m", created=1,
                                   choices=[wire_types.Choice(finish_reason="tool_calls", tool_calls=calls)])
    doc = msgspec.json.decode(msgspec.json.encode(translate_response(response)))
    custom, function = doc["choices"][0]["message"]["tool_calls"]
    assert custom == {"id": "c1", "type": "custom", "custom": {"name": "grep", "input": "free text"}}
    assert function == {"id": "c2", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    parsed = ChatCompletion.model_validate(doc).choices[0].message.tool_calls
    assert parsed is not None and parsed[0].type == "custom" and parsed[0].custom.input == "free text"


@pytest.mark.parametrize(("finish", "openai"), [("refusal", "content_filter"), ("pause_turn", "stop")])
def test_finish_reasons_openai_has_no_name_for_are_its_nearest(finish: str, openai: str) -> None:
    from ingress.translate.text import translate_text_response
    response = wire.Response(id="x", model="m", created=1, choices=[wire.Choice(content="a", finish_reason=finish)])
    assert translate_response(response).choices[0].finish_reason == openai
    assert translate_response(response, legacy_functions=True).choices[0].finish_reason == openai
    assert translate_text_response(response).choices[0].finish_reason == openai
    [chunk] = translator().feed(Chunk(sequence=0, finish_reason=finish, done=True))
    assert chunk.choices[0].finish_reason == openai


def test_what_only_anthropics_shape_carries_changes_no_openai_answer() -> None:
    plain = wire.Choice(content="42", reasoning="six times seven", finish_reason="stop")
    full = msgspec.structs.replace(plain, signature="sig", redacted_thinking=["opaque"], stop_sequence="END")
    answers = [as_json([translate_response(wire.Response(id="x", model="m", created=1, choices=[c]))])
               for c in (plain, full)]
    assert answers[0] == answers[1]
    chunk = Chunk(sequence=0, content="42", reasoning="six", finish_reason="stop")
    chunks = [run(translator(), c) for c in (chunk, msgspec.structs.replace(
        chunk, signature="sig", redacted_thinking=["opaque"], stop_sequence="END"))]
    assert chunks[0] == chunks[1]


def test_reasoning_is_answered_apart_from_content_as_reasoning_content() -> None:
    from ingress.wire import types as wire_types
    choice = wire_types.Choice(content="42", reasoning="six times seven", finish_reason="stop")
    response = wire_types.Response(id="x", model="m", created=1, choices=[choice])
    message = msgspec.json.decode(msgspec.json.encode(translate_response(response)))["choices"][0]["message"]
    assert (message["content"], message["reasoning_content"]) == ("42", "six times seven")
    translator = StreamTranslator(id="c", model="m", created=1, include_usage=False)
    [chunk] = translator.feed(Chunk(sequence=0, reasoning="thinking"))
    delta = msgspec.json.decode(msgspec.json.encode(chunk))["choices"][0]["delta"]
    assert delta == {"reasoning_content": "thinking"}  # never in content
    plain = msgspec.json.decode(msgspec.json.encode(translate_response(wire_types.Response(
        id="x", model="m", created=1, choices=[wire_types.Choice(content="42")]))))["choices"][0]["message"]
    assert "reasoning_content" not in plain
