"""The official openai SDK, blocking and async, against a real edge on loopback.

The demo service answers deterministically (see ingress/demo/answer.py): it echoes the last user
message one word a token, calls an offered tool whose name the user mentions, and reports a tool's
result as "Tool <id> returned: <content>". Usage counts whitespace-delimited words.
"""

from __future__ import annotations

import json

import openai
import pytest
from fakes.upstream import FakeUpstream
from openai.types.chat import (
    ChatCompletionChunk,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageFunctionToolCallParam,
    ChatCompletionMessageParam,
)

MODEL = "ingress-demo"
PROMPT: list[ChatCompletionMessageParam] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Say hello to the edge"},
]
ECHO = "Say hello to the edge"
PROMPT_TOKENS, ECHO_TOKENS = 7, 5  # "Be brief." + five words; the five words echoed

WEATHER: ChatCompletionFunctionToolParam = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer"},
                "metric": {"type": "boolean"},
                "extra": {"type": "object"},
            },
            "required": ["city", "days", "metric", "extra"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}
CLOCK: ChatCompletionFunctionToolParam = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"],
                       "additionalProperties": False},
        "strict": True,
    },
}
TOOLS = [CLOCK, WEATHER]
WEATHER_SCHEMA = WEATHER["function"].get("parameters")
ASK_WEATHER = "Use get_weather for Paris"
WEATHER_ARGS = {"city": ASK_WEATHER, "days": 0, "metric": False, "extra": None}
WEATHER_ARGS_TOKENS = 4  # '{"city":"Use', ' get_weather', ' for', ' Paris",...}'


def _tool_messages(call_id: str, result: str) -> list[ChatCompletionMessageParam]:
    """The second turn of a tool flow: the assistant's call and the tool's result."""
    call: ChatCompletionMessageFunctionToolCallParam = {
        "id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": json.dumps(WEATHER_ARGS)}}
    return [
        {"role": "user", "content": ASK_WEATHER},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": result},
    ]


# --- blocking client ------------------------------------------------------------------------------


def test_create_echoes_the_last_user_message(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(model=MODEL, messages=PROMPT)

    assert completion.object == "chat.completion"
    assert completion.model == MODEL
    assert completion.id.startswith("chatcmpl-")
    [choice] = completion.choices
    assert (choice.index, choice.finish_reason) == (0, "stop")
    assert choice.message.role == "assistant"
    assert choice.message.content == ECHO
    assert choice.message.tool_calls is None
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens, completion.usage.total_tokens) == (
        PROMPT_TOKENS, ECHO_TOKENS, PROMPT_TOKENS + ECHO_TOKENS)


def test_raw_response_echoes_the_callers_request_id(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=PROMPT, extra_headers={"x-request-id": "sdk-req-0001"})

    assert raw.status_code == 200
    assert raw.headers["x-request-id"] == "sdk-req-0001"
    assert raw.parse().id == "chatcmpl-sdk-req-0001"


def test_a_malformed_request_id_is_replaced(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=PROMPT, extra_headers={"x-request-id": "not a valid id!"})

    request_id = raw.headers["x-request-id"]
    assert request_id != "not a valid id!"
    assert len(request_id) == 32 and int(request_id, 16) >= 0
    assert raw.parse().id == f"chatcmpl-{request_id}"


def test_stream_with_usage(client: openai.OpenAI) -> None:
    with client.chat.completions.create(model=MODEL, messages=PROMPT, stream=True,
                                        stream_options={"include_usage": True}) as stream:
        chunks = list(stream)

    assert {c.id for c in chunks} == {chunks[0].id}
    assert chunks[0].id.startswith("chatcmpl-")
    assert {(c.object, c.model, c.created) for c in chunks} == {("chat.completion.chunk", MODEL, chunks[0].created)}
    *answer, last = chunks
    assert answer[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in answer) == ECHO
    assert [c.choices[0].finish_reason for c in answer] == [None] * (len(answer) - 1) + ["stop"]
    assert all(c.usage is None for c in answer)
    assert last.choices == []
    assert last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens) == (
        PROMPT_TOKENS, ECHO_TOKENS, PROMPT_TOKENS + ECHO_TOKENS)


def test_stream_without_usage_has_no_usage_chunk(client: openai.OpenAI) -> None:
    with client.chat.completions.create(model=MODEL, messages=PROMPT, stream=True) as stream:
        chunks = list(stream)

    assert all(c.usage is None and len(c.choices) == 1 for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == ECHO
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_tool_call(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": ASK_WEATHER}], tools=TOOLS,
        extra_headers={"x-request-id": "sdk-tools-0001"})

    [choice] = completion.choices
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    [call] = choice.message.tool_calls or []
    assert isinstance(call, ChatCompletionMessageFunctionToolCall)
    assert (call.id, call.type) == ("call_sdk-tools-0001", "function")
    assert call.function.name == "get_weather"  # the tool named in the message, not the first offered
    assert json.loads(call.function.arguments) == WEATHER_ARGS
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (4, WEATHER_ARGS_TOKENS)


def test_tool_choice_none_answers_in_text(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": ASK_WEATHER}], tools=TOOLS, tool_choice="none")

    assert completion.choices[0].message.content == ASK_WEATHER
    assert completion.choices[0].message.tool_calls is None
    assert completion.choices[0].finish_reason == "stop"


def test_named_tool_choice_forces_that_tool(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": ASK_WEATHER}], tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_time"}})

    [call] = completion.choices[0].message.tool_calls or []
    assert isinstance(call, ChatCompletionMessageFunctionToolCall)
    assert call.function.name == "get_time"
    assert json.loads(call.function.arguments) == {"zone": ASK_WEATHER}


def test_multi_turn_tool_flow(client: openai.OpenAI) -> None:
    first = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": ASK_WEATHER}],
                                           tools=TOOLS)
    [call] = first.choices[0].message.tool_calls or []

    second = client.chat.completions.create(model=MODEL, messages=_tool_messages(call.id, "18C and sunny"),
                                            tools=TOOLS)

    [choice] = second.choices
    assert choice.message.content == f"Tool {call.id} returned: 18C and sunny"
    assert choice.message.tool_calls is None
    assert choice.finish_reason == "stop"
    assert second.usage is not None
    assert (second.usage.prompt_tokens, second.usage.completion_tokens) == (4 + 3, 6)


def test_stream_helper_accumulates_a_strict_tool_call(client: openai.OpenAI) -> None:
    with client.chat.completions.stream(model=MODEL, messages=[{"role": "user", "content": ASK_WEATHER}],
                                        tools=TOOLS, extra_headers={"x-request-id": "sdk-tools-0002"}) as stream:
        arguments_done = [e for e in stream if e.type == "tool_calls.function.arguments.done"]
        final = stream.get_final_completion()

    [done] = arguments_done
    assert (done.name, done.parsed_arguments) == ("get_weather", WEATHER_ARGS)
    [choice] = final.choices
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls or []
    assert (call.id, call.function.name) == ("call_sdk-tools-0002", "get_weather")
    assert call.function.parsed_arguments == WEATHER_ARGS


def test_n_choices(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(model=MODEL, messages=PROMPT, n=2)

    assert [(c.index, c.message.content, c.finish_reason) for c in completion.choices] == [
        (0, ECHO, "stop"), (1, ECHO, "stop")]
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (PROMPT_TOKENS, 2 * ECHO_TOKENS)


def test_max_tokens_cuts_the_answer(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(model=MODEL, messages=PROMPT, max_tokens=2)

    assert completion.choices[0].message.content == "Say hello"
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage is not None and completion.usage.completion_tokens == 2


def test_models_list_and_retrieve(client: openai.OpenAI) -> None:
    models = list(client.models.list())
    model = client.models.retrieve(MODEL)

    assert [(m.id, m.object, m.owned_by) for m in models] == [(MODEL, "model", "ingress")]
    assert (model.id, model.object, model.owned_by, model.created) == (MODEL, "model", "ingress", models[0].created)


def test_unknown_model_is_not_found(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="gpt-nonexistent", messages=PROMPT)

    assert caught.value.status_code == 404
    assert (caught.value.code, caught.value.param, caught.value.type) == (
        "model_not_found", "model", "invalid_request_error")
    assert "gpt-nonexistent" in caught.value.message
    assert caught.value.response.headers["x-request-id"]


def test_retrieving_an_unknown_model_is_not_found(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client.models.retrieve("gpt-nonexistent")

    assert (caught.value.code, caught.value.param) == ("model_not_found", "model")


def test_out_of_range_temperature_is_a_bad_request(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=PROMPT, temperature=5)

    assert caught.value.status_code == 400
    assert (caught.value.param, caught.value.type) == ("temperature", "invalid_request_error")
    assert isinstance(caught.value.body, dict)
    assert set(caught.value.body) == {"message", "type", "param", "code"}
    assert "temperature" in caught.value.message


def test_unknown_parameter_is_a_bad_request(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=PROMPT,
                                       extra_body={"temperture": 0.5})

    assert caught.value.param == "temperture"


def test_models_responses_carry_a_request_id(client: openai.OpenAI) -> None:
    listed = client.models.with_raw_response.list(extra_headers={"x-request-id": "sdk-models-0001"})
    retrieved = client.models.with_raw_response.retrieve(MODEL, extra_headers={"x-request-id": "sdk-models-0002"})

    assert listed.headers.get("x-request-id") == "sdk-models-0001"
    assert retrieved.headers.get("x-request-id") == "sdk-models-0002"


# --- async client ---------------------------------------------------------------------------------


async def test_async_create(aclient: openai.AsyncOpenAI) -> None:
    completion = await aclient.chat.completions.create(model=MODEL, messages=PROMPT)

    assert completion.choices[0].message.content == ECHO
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.total_tokens == PROMPT_TOKENS + ECHO_TOKENS


async def test_async_stream_tool_call(aclient: openai.AsyncOpenAI) -> None:
    stream = await aclient.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": ASK_WEATHER}], tools=TOOLS, stream=True,
        stream_options={"include_usage": True}, extra_headers={"x-request-id": "sdk-tools-0003"})
    chunks = [c async for c in stream]

    assert {c.id for c in chunks} == {"chatcmpl-sdk-tools-0003"}
    deltas = [d for c in chunks for ch in c.choices for d in ch.delta.tool_calls or []]
    assert deltas[0].id == "call_sdk-tools-0003"
    assert deltas[0].type == "function"
    assert deltas[0].function is not None and deltas[0].function.name == "get_weather"
    assert {d.index for d in deltas} == {0}
    assert all(d.id is None for d in deltas[1:])
    arguments = "".join(d.function.arguments or "" for d in deltas if d.function is not None)
    assert json.loads(arguments) == WEATHER_ARGS
    assert [ch.finish_reason for c in chunks for ch in c.choices if ch.finish_reason] == ["tool_calls"]
    assert all(ch.delta.content in (None, "") for c in chunks for ch in c.choices)
    assert chunks[-1].usage is not None
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (4, WEATHER_ARGS_TOKENS)


async def test_async_stream_multi_turn_tool_flow(aclient: openai.AsyncOpenAI) -> None:
    stream = await aclient.chat.completions.create(model=MODEL, messages=_tool_messages("call_abc", "42"),
                                                   stream=True)
    chunks = [c async for c in stream]

    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Tool call_abc returned: 42"
    assert chunks[-1].choices[0].finish_reason == "stop"


async def test_async_stream_n_choices_with_usage(aclient: openai.AsyncOpenAI) -> None:
    stream = await aclient.chat.completions.create(model=MODEL, messages=PROMPT, n=2,
                                                   stream=True, stream_options={"include_usage": True})
    chunks: list[ChatCompletionChunk] = [c async for c in stream]

    texts: dict[int, str] = {}
    finishes: dict[int, str] = {}
    for chunk in chunks[:-1]:
        [choice] = chunk.choices
        texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
        if choice.finish_reason:
            finishes[choice.index] = choice.finish_reason
        assert chunk.usage is None
    assert texts == {0: ECHO, 1: ECHO}
    assert finishes == {0: "stop", 1: "stop"}
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens, chunks[-1].usage.total_tokens) == (
        PROMPT_TOKENS, 2 * ECHO_TOKENS, PROMPT_TOKENS + 2 * ECHO_TOKENS)


async def test_async_models(aclient: openai.AsyncOpenAI) -> None:
    models = [m.id async for m in aclient.models.list()]
    model = await aclient.models.retrieve(MODEL)

    assert models == [MODEL]
    assert model.id == MODEL


async def test_async_unknown_model_is_not_found(aclient: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        await aclient.chat.completions.create(model="gpt-nonexistent", messages=PROMPT,
                                              stream=True)

    assert caught.value.code == "model_not_found"


async def test_async_bad_parameter(aclient: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await aclient.chat.completions.create(model=MODEL, messages=PROMPT, temperature=5,
                                              stream=True)

    assert caught.value.param == "temperature"


# --- what reaches the internal service ------------------------------------------------------------


async def test_the_request_reaches_the_service_intact(edge: str, fake_upstream: FakeUpstream) -> None:
    async with openai.AsyncOpenAI(base_url=f"{edge}/v1", api_key="sk-secret-key", max_retries=0) as aclient:
        raw = await aclient.chat.completions.with_raw_response.create(
            model="any-model", messages=[{"role": "user", "content": ASK_WEATHER}], tools=TOOLS,
            tool_choice="auto", temperature=0.5, top_p=0.25, max_tokens=64, seed=7, stop=["\n\n"], user="u-1",
            extra_headers={"x-request-id": "sdk-fwd-0001",
                           "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
    completion = raw.parse()

    assert raw.headers["x-request-id"] == "sdk-fwd-0001"
    assert completion.choices[0].message.content == ASK_WEATHER  # the fake echoes
    assert completion.model == "any-model"
    [received] = fake_upstream.received
    assert received.request_id == "sdk-fwd-0001"
    assert received.headers["x-request-id"] == "sdk-fwd-0001"
    assert received.headers["traceparent"] == "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert received.headers["Content-Type"] == "application/x-flatbuffers"
    assert "sk-secret-key" not in received.body.decode("latin-1")
    assert "Authorization" not in received.headers
    request = received.request
    assert (request.model, request.temperature, request.top_p, request.max_tokens, request.seed) == (
        "any-model", 0.5, 0.25, 64, 7)
    assert (request.stop, request.user, request.tool_choice, request.stream) == (["\n\n"], "u-1", "auto", None)
    functions = [t.function for t in request.tools or [] if t.function is not None]
    assert [f.name for f in functions] == ["get_time", "get_weather"]
    assert json.loads(bytes(functions[1].parameters)) == WEATHER_SCHEMA
