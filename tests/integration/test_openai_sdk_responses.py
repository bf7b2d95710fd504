"""`POST /v1/responses` (the Responses API) through the official openai SDK, blocking and async, stream
and not: its own event accumulator (`responses.stream`) must build the final response.

With the embedded demo the answers are known in advance (ingress/demo/answer.py): the last user message
echoed, a call to a tool the message names, "Tool <id> returned: <output>" after a tool's output. In
front of the scripted fake upstream, the fake shows the chat request the Responses request became.
"""

from __future__ import annotations

import json
import typing
from typing import Any

import aiohttp
import openai
import pytest
from bad_requests import Bad
from bad_responses import BAD_RESPONSES
from fakes import upstream as fu
from fakes.upstream import FakeUpstream
from openai.types.responses import response_create_params

from ingress import wire
from ingress.oai.responses import ResponsesRequest

MODEL = "ingress-demo"
WEATHER: Any = {  # a dict, as users write it (the SDK types it as one TypedDict of a large union)

    "type": "function", "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def _tag(struct: Any) -> str:
    """A decoded chat message's role, or a part's type: the tag msgspec decoded it by."""
    return str(type(struct).__struct_config__.tag)


# --- the blocking client ----------------------------------------------------------------------------


def test_a_string_input_is_answered_as_a_response_object(client: openai.OpenAI) -> None:
    raw = client.responses.with_raw_response.create(model=MODEL, input="the quick brown fox", instructions="Be brief.")
    doc = raw.http_response.json()
    assert doc["object"] == "response" and doc["store"] is True and doc["previous_response_id"] is None
    response = raw.parse()
    assert response.id.startswith("resp_") and response.status == "completed" and response.error is None
    assert response.output_text == "the quick brown fox" and response.instructions == "Be brief."
    [message] = response.output
    assert message.type == "message" and message.role == "assistant" and message.status == "completed"
    assert response.usage is not None and response.usage.output_tokens == 4
    assert response.usage.total_tokens == response.usage.input_tokens + 4


def test_a_tool_call_and_its_output_make_a_conversation(client: openai.OpenAI) -> None:
    conversation: list[Any] = [{"role": "user", "content": "what does get_weather say for Paris"}]
    first = client.responses.create(model=MODEL, input=conversation, tools=[WEATHER])
    [call] = first.output
    assert call.type == "function_call" and call.name == "get_weather" and call.status == "completed"
    assert call.arguments == '{"city":"what does get_weather say for Paris"}'
    conversation += first.output
    conversation.append({"type": "function_call_output", "call_id": call.call_id, "output": "22 C, sunny"})
    second = client.responses.create(model=MODEL, input=conversation, tools=[WEATHER])
    assert second.output_text == f"Tool {call.call_id} returned: 22 C, sunny"
    assert second.tools[0].name == "get_weather"  # type: ignore[union-attr]  # the request's tools, echoed


def test_the_stream_builds_the_final_response_in_the_sdk(client: openai.OpenAI) -> None:
    with client.responses.stream(model=MODEL, input="one two three") as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [e.type for e in events] == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.completed"]
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "one two three"
    assert final.output_text == "one two three" and final.status == "completed"
    assert final.usage is not None and final.usage.output_tokens == 3  # usage although the client asked for none


def test_a_streamed_tool_call_is_a_function_call_item(client: openai.OpenAI) -> None:
    with client.responses.stream(model=MODEL, input="call get_weather", tools=[WEATHER],
                                 tool_choice={"type": "function", "name": "get_weather"}) as stream:
        types = [e.type for e in stream]
        final = stream.get_final_response()
    assert "response.function_call_arguments.delta" in types and "response.function_call_arguments.done" in types
    [call] = final.output
    assert call.type == "function_call" and call.arguments == '{"city":"call get_weather"}'


def test_logprobs_are_answered_when_included(client: openai.OpenAI) -> None:
    response: Any = client.responses.create(model=MODEL, input="alpha beta",
                                            include=["message.output_text.logprobs"], top_logprobs=2)
    [part] = response.output[0].content
    assert part.type == "output_text" and part.logprobs is not None
    assert "".join(t.token for t in part.logprobs) == "alpha beta"
    assert all(len(t.top_logprobs) == 2 and t.top_logprobs[0].token == t.token for t in part.logprobs)
    plain: Any = client.responses.create(model=MODEL, input="alpha beta")
    assert plain.output[0].content[0].logprobs == []  # not asked: OpenAI sends an empty list, never none
    with client.responses.stream(model=MODEL, input="alpha beta", include=["message.output_text.logprobs"]) as stream:
        deltas = [e for e in stream if e.type == "response.output_text.delta"]
    assert [[t.token for t in e.logprobs] for e in deltas] == [["alpha"], [" beta"]]


def _text_parts(response: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for item in response["output"] if item["type"] == "message" for p in item["content"]
            if p["type"] == "output_text"]


def test_answers_carry_every_field_openai_s_reference_requires(client: openai.OpenAI) -> None:
    """An output_text part's `logprobs` and usage's `cache_write_tokens` are required by OpenAI's published
    reference, whole and streamed, even when empty or 0 (the SDK tolerates them missing; typed clients not)."""
    doc = client.responses.with_raw_response.create(model=MODEL, input="alpha beta").http_response.json()
    assert [p["logprobs"] for p in _text_parts(doc)] == [[]]
    assert doc["usage"]["input_tokens_details"]["cache_write_tokens"] == 0
    with client.responses.with_streaming_response.create(model=MODEL, input="alpha beta", stream=True) as raw:
        events = [json.loads(line[len("data: "):]) for line in raw.iter_lines() if line.startswith("data: ")]
    parts = [e["part"] for e in events if e["type"].startswith("response.content_part.")]
    parts += [p for e in events if e["type"].startswith("response.output_item.") for p in e["item"].get("content", ())]
    completed = events[-1]["response"]
    parts += _text_parts(completed)
    assert len(parts) == 4 and all(p["logprobs"] == [] for p in parts), parts
    assert completed["usage"]["input_tokens_details"]["cache_write_tokens"] == 0


def test_max_output_tokens_makes_an_incomplete_response(client: openai.OpenAI) -> None:
    response = client.responses.create(model=MODEL, input="a b c d e", max_output_tokens=2)
    assert response.status == "incomplete" and response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens" and response.output_text == "a b"
    events = list(client.responses.create(model=MODEL, input="a b c d e", max_output_tokens=2, stream=True))
    assert events[-1].type == "response.incomplete" and events[-1].response.output_text == "a b"


def test_unknown_responses_are_not_found_and_answers_are_kept_by_default(client: openai.OpenAI) -> None:
    for call in (lambda: client.responses.retrieve("resp_abc"), lambda: client.responses.delete("resp_abc"),
                 lambda: client.responses.cancel("resp_abc"), lambda: client.responses.input_items.list("resp_abc")):
        with pytest.raises(openai.NotFoundError) as caught:
            call()
        assert caught.value.code == "response_not_found"
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=MODEL, input="x", previous_response_id="resp_abc")
    assert refused.value.param == "previous_response_id" and refused.value.code == "previous_response_not_found"
    stored = client.responses.create(model=MODEL, input="keep this")
    assert stored.model_extra is not None and stored.model_extra["store"] is True  # OpenAI's default
    assert client.responses.retrieve(stored.id).output_text == "keep this"
    unstored = client.responses.create(model=MODEL, input="not this", store=False)
    assert unstored.model_extra is not None and unstored.model_extra["store"] is False


# --- the async client -------------------------------------------------------------------------------


async def test_async_create_and_stream(aclient: openai.AsyncOpenAI) -> None:
    response = await aclient.responses.create(model=MODEL, input=[
        {"role": "developer", "content": "Answer plainly."},
        {"role": "user", "content": [{"type": "input_text", "text": "first part "},
                                     {"type": "input_text", "text": "second part"}]}])
    assert response.output_text == "first part second part"
    async with aclient.responses.stream(model=MODEL, input="four five") as stream:
        deltas = [e.delta async for e in stream if e.type == "response.output_text.delta"]
        final = await stream.get_final_response()
    assert "".join(deltas) == final.output_text == "four five"


# --- what travels -----------------------------------------------------------------------------------


async def test_every_parameter_travels_as_its_chat_field(edge: str, fake_upstream: FakeUpstream) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    async with openai.AsyncOpenAI(base_url=f"{edge}/v1", api_key="k", max_retries=0) as c:
        params: Any = dict(
            model="m", instructions="Be brief.", input=[
                {"role": "user", "content": [
                    {"type": "input_text", "text": "look"},
                    {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "low"},
                    {"type": "input_file", "file_data": "data:application/pdf;base64,JVBERi0=", "filename": "a.pdf"}]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "seen",
                                                                       "annotations": []}]},
                {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
                {"type": "function_call", "call_id": "c2", "name": "get_weather", "arguments": "{\"x\":1}"},
                {"type": "function_call_output", "call_id": "c1", "output": "one"},
                {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "two"}]},
            ],
            tools=[WEATHER], tool_choice="required", parallel_tool_calls=False, max_output_tokens=50,
            temperature=0.5, top_p=0.9, metadata={"k": "v"}, user="u1", safety_identifier="s1",
            prompt_cache_key="pk", prompt_cache_retention="24h", service_tier="flex", reasoning={"effort": "low"},
            text={"format": {"type": "json_schema", "name": "out", "schema": schema, "strict": True},
                  "verbosity": "low"},
            store=False, truncation="disabled", include=["reasoning.encrypted_content"], max_tool_calls=3)
        await c.responses.create(**params)
    sent = fake_upstream.received[-1].request
    assert [_tag(m) for m in sent.messages] == ["system", "user", "assistant", "tool", "tool"]
    system, user, assistant, one, two = sent.messages
    assert system.content == "Be brief."
    assert [_tag(p) for p in user.content] == ["text", "image_url", "file"]  # type: ignore[union-attr]
    assert assistant.content == "seen" and [t.id for t in assistant.tool_calls] == ["c1", "c2"]  # type: ignore[union-attr]
    assert (one.tool_call_id, one.content, two.tool_call_id) == ("c1", "one", "c2")  # type: ignore[union-attr]
    assert (sent.max_completion_tokens, sent.temperature, sent.top_p, sent.parallel_tool_calls) == (50, 0.5, 0.9, False)
    assert (sent.tool_choice, sent.metadata, sent.user, sent.safety_identifier) == ("required", {"k": "v"}, "u1", "s1")
    assert (sent.prompt_cache_key, sent.prompt_cache_retention, sent.service_tier) == ("pk", "24h", "flex")
    assert (sent.reasoning_effort, sent.verbosity, sent.store) == ("low", "low", None)
    assert sent.response_format is not None and sent.response_format.json_schema.name == "out"  # type: ignore[union-attr]
    assert sent.tools is not None and sent.tools[0].function is not None
    assert sent.tools[0].function.name == "get_weather" and sent.logprobs is None


async def test_a_service_error_mid_stream_ends_with_error_and_response_failed(
        edge: str, fake_upstream: FakeUpstream) -> None:
    fake_upstream.play(fu.error_frame(wire.ErrorInfo(status=500, message="engine fell over", code="engine"), after=2))
    async with openai.AsyncOpenAI(base_url=f"{edge}/v1", api_key="k", max_retries=0) as c:
        events = [e async for e in await c.responses.create(model="m", input="one two three", stream=True)]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [e.type for e in events][-2:] == ["error", "response.failed"]
    assert "response.completed" not in [e.type for e in events]
    error, failed = events[-2:]
    assert error.code == "engine" and error.message == "engine fell over"  # type: ignore[union-attr]
    assert failed.response.status == "failed" and failed.response.error is not None  # type: ignore[union-attr]
    assert failed.response.error.message == "engine fell over"  # type: ignore[union-attr]


async def test_a_stream_cut_short_is_never_a_completed_response(edge: str, fake_upstream: FakeUpstream,
                                                                http: aiohttp.ClientSession) -> None:
    fake_upstream.play(fu.end_without_done(frames=2))
    async with http.post(f"{edge}/v1/responses", json={"model": "m", "input": "one two three", "stream": True}) as r:
        assert r.status == 200
        text = (await r.read()).decode()
    kinds = [line.removeprefix("event: ") for line in text.splitlines() if line.startswith("event: ")]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-2:] == ["error", "response.failed"]
    assert "[DONE]" not in text and "response.completed" not in kinds


# --- refused before anything is sent ---------------------------------------------------------------


@pytest.mark.parametrize("bad", BAD_RESPONSES[::7])  # every refusal's status and param: tests/unit
async def test_a_bad_request_is_refused_before_anything_is_sent(
        edge: str, fake_upstream: FakeUpstream, http: aiohttp.ClientSession, bad: Bad) -> None:
    async with http.post(f"{edge}/v1/responses", data=bad.body, headers={"Content-Type": "application/json"}) as r:
        assert r.status == 400
        error = (await r.json())["error"]
    assert (error["param"], error["code"], error["type"]) == (bad.param, bad.code, "invalid_request_error")
    assert fake_upstream.received == []


# --- the SDK's parameters, every one ----------------------------------------------------------------


def test_every_parameter_of_the_installed_sdk_is_carried_or_refused_by_name() -> None:
    """A parameter the SDK sends that the edge does not declare would be refused as a typo: the next SDK
    release that adds one fails here until it is carried, or refused with its reason."""
    sdk = set(typing.get_type_hints(response_create_params.ResponseCreateParamsBase)) | {"stream"}
    assert sdk - set(ResponsesRequest.__struct_fields__) == set()
