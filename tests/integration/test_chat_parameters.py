"""The official openai SDK sends every chat-completions parameter through a real edge: what reaches the
internal service (the scripted fake records it), and the legacy `functions` shape of the answers."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

import openai
import pytest
from fakes.upstream import FakeUpstream
from openai.types.chat import ChatCompletionMessageParam
from openai.types.chat.completion_create_params import Function

from ingress.oai import chat
from ingress.settings import Endpoint, Group, Route, Settings, Timeouts
from ingress.wire import read_request

StartEdge = Callable[[Settings], Awaitable[str]]  # the `start_edge` fixture
FAST = Timeouts(connect=1.0, first_byte=0.5, idle=0.5)
MODEL = "ingress-demo"
WEATHER: Function = {"name": "get_weather", "description": "Current weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
ASK = "Use get_weather for Paris"


async def test_every_new_parameter_reaches_the_service(edge: str, fake_upstream: FakeUpstream) -> None:
    messages: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": [
            {"type": "text", "text": "hello there", "prompt_cache_breakpoint": {"mode": "explicit", "ttl": "12h"}},
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "original"}},
            {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "mp3"}},
            {"type": "file", "file": {"file_id": "file-1", "filename": "a.pdf"}},
        ]},
        {"role": "assistant", "audio": {"id": "audio_1"},
         "tool_calls": [{"id": "call_1", "type": "custom", "custom": {"name": "sql", "input": "SELECT 1"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "1"},
        {"role": "user", "content": "hello there"},
    ]
    async with openai.AsyncOpenAI(base_url=f"{edge}/v1", api_key="sk-test", max_retries=0) as client:
        completion = await client.chat.completions.create(
            model="any-model", messages=messages,
            audio={"format": "wav", "voice": "alloy"}, modalities=["text", "audio"],
            moderation={"model": "omni-moderation-latest", "policy": {"input": {"mode": "block"}}},
            prediction={"type": "content", "content": "hello there"},
            prompt_cache_key="conversation-42", prompt_cache_options={"mode": "explicit", "ttl": "30m"},
            prompt_cache_retention="24h", safety_identifier="user-hash-1", store=False, verbosity="low",
            web_search_options={"search_context_size": "low", "user_location": {
                "type": "approximate", "approximate": {"country": "FR", "city": "Paris"}}},
            tools=[{"type": "custom", "custom": {"name": "sql", "format": {
                "type": "grammar", "grammar": {"definition": "start: /SELECT .*/", "syntax": "lark"}}}}],
            tool_choice={"type": "allowed_tools", "allowed_tools": {
                "mode": "auto", "tools": [{"type": "custom", "custom": {"name": "sql"}}]}},
        )
    assert completion.choices[0].message.content == "hello there"  # the fake echoes

    [received] = fake_upstream.received
    r = received.request
    assert r.audio == chat.AudioOutput(format="wav", voice="alloy")
    assert r.modalities == ["text", "audio"]
    assert r.moderation == chat.Moderation(model="omni-moderation-latest", policy=chat.ModerationPolicy(
        input=chat.ModerationMode(mode="block")))
    assert r.prediction == chat.Prediction(content="hello there")
    assert (r.prompt_cache_key, r.prompt_cache_retention, r.safety_identifier, r.store, r.verbosity) == (
        "conversation-42", "24h", "user-hash-1", False, "low")
    assert r.prompt_cache_options == chat.PromptCacheOptions(mode="explicit", ttl="30m")
    assert r.web_search_options == chat.WebSearchOptions(search_context_size="low", user_location=chat.UserLocation(
        approximate=chat.ApproximateLocation(country="FR", city="Paris")))
    assert r.tools == [chat.Tool(type="custom", custom=chat.CustomDef(name="sql", format=chat.CustomGrammarFormat(
        grammar=chat.Grammar(definition="start: /SELECT .*/", syntax="lark"))))]
    assert isinstance(r.tool_choice, chat.NamedToolChoice) and r.tool_choice.allowed_tools is not None
    assert [json.loads(bytes(t)) for t in r.tool_choice.allowed_tools.tools] == [
        {"type": "custom", "custom": {"name": "sql"}}]
    user, assistant = r.messages[0], r.messages[1]
    assert isinstance(user, chat.UserMessage) and isinstance(user.content, list)
    text, image = user.content[0], user.content[1]
    assert isinstance(text, chat.TextPart) and text.prompt_cache_breakpoint == chat.PromptCacheBreakpoint(
        mode="explicit", ttl="12h")
    assert isinstance(image, chat.ImagePart) and image.image_url.detail == "original"
    assert isinstance(assistant, chat.AssistantMessage) and assistant.audio == chat.AudioRef(id="audio_1")
    assert assistant.tool_calls == [chat.ToolCallIn(id="call_1", type="custom",
                                                    custom=chat.CustomCallIn(name="sql", input="SELECT 1"))]
    assert not read_request(received.body).LegacyFunctions()


async def test_legacy_functions_travel_as_tools(edge: str, fake_upstream: FakeUpstream) -> None:
    async with openai.AsyncOpenAI(base_url=f"{edge}/v1", api_key="sk-test", max_retries=0) as client:
        await client.chat.completions.create(model="any-model", messages=[{"role": "user", "content": ASK}],
                                             functions=[WEATHER], function_call={"name": "get_weather"})
    [received] = fake_upstream.received
    assert [t.function.name for t in received.request.tools or [] if t.function is not None] == ["get_weather"]
    assert received.request.tool_choice == chat.NamedToolChoice(function=chat.NamedFunction(name="get_weather"))
    assert received.request.functions is None
    assert read_request(received.body).LegacyFunctions()


async def test_legacy_functions_are_answered_with_function_call(aclient: openai.AsyncOpenAI) -> None:
    completion = await aclient.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": ASK}], functions=[WEATHER],
        function_call={"name": "get_weather"})
    [choice] = completion.choices
    assert choice.finish_reason == "function_call"
    assert choice.message.tool_calls is None
    assert choice.message.function_call is not None and choice.message.function_call.name == "get_weather"
    assert json.loads(choice.message.function_call.arguments) == {"city": ASK}

    # The next turn, in the legacy shape too: the assistant's function_call and the function's result.
    second = await aclient.chat.completions.create(model=MODEL, functions=[WEATHER], function_call="none", messages=[
        {"role": "user", "content": ASK},
        {"role": "assistant", "content": None, "function_call": {"name": "get_weather", "arguments": "{}"}},
        {"role": "function", "name": "get_weather", "content": "14 C"},
    ])
    assert (second.choices[0].finish_reason, second.choices[0].message.content) == ("stop", ASK)


async def test_legacy_functions_stream_function_call_deltas(aclient: openai.AsyncOpenAI) -> None:
    stream = await aclient.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": ASK}], functions=[WEATHER], function_call="auto",
        stream=True)
    name, arguments, finishes = "", "", []
    async for chunk in stream:
        for choice in chunk.choices:
            assert choice.delta.tool_calls is None
            if choice.delta.function_call is not None:
                name += choice.delta.function_call.name or ""
                arguments += choice.delta.function_call.arguments or ""
            finishes.append(choice.finish_reason)
    assert name == "get_weather"
    assert json.loads(arguments) == {"city": ASK}
    assert finishes[-1] == "function_call"


async def test_legacy_and_new_forms_together_are_refused(aclient: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await aclient.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": ASK}], functions=[WEATHER],
            tools=[{"type": "function", "function": WEATHER}])  # type: ignore[typeddict-item]  # same keys, other TypedDict
    assert caught.value.param == "functions"


async def test_a_misspelt_parameter_is_still_refused(aclient: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await aclient.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                              extra_body={"prompt_cache_kee": "k"})
    assert caught.value.param == "prompt_cache_kee"
    assert caught.value.status_code == 400


# --- engine extras: a route that forwards the fields that are not OpenAI's ------------------------


EXTRAS = {"top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1, "guided_json": {"type": "object"},
          "chat_template_kwargs": {"enable_thinking": False}}


@pytest.fixture
async def extras_edge(start_edge: StartEdge, fake_upstream: FakeUpstream) -> str:
    """Models named vllm-* forward extras; every other model refuses them."""
    group = {"engine": Group(endpoints=[Endpoint(url=fake_upstream.url)])}
    routes = (Route(prefix="vllm-", group="engine", extra_fields="forward"), Route(glob="*", group="engine"))
    return await start_edge(Settings(groups=group, routes=routes, timeouts=FAST))


async def test_a_forwarding_route_sends_the_extras_as_one_object(extras_edge: str, fake_upstream: FakeUpstream) -> None:
    async with openai.AsyncOpenAI(base_url=f"{extras_edge}/v1", api_key="sk-test", max_retries=0) as client:
        completion = await client.chat.completions.create(
            model="vllm-llama", messages=[{"role": "user", "content": "hello there"}], temperature=0.5,
            extra_body=EXTRAS)
        stream = await client.chat.completions.create(
            model="vllm-llama", messages=[{"role": "user", "content": "hello there"}], stream=True,
            extra_body={"top_k": 1})
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert completion.choices[0].message.content == text == "hello there"
    first, second = fake_upstream.received
    assert json.loads(read_request(first.body).ExtraJson() or b"") == EXTRAS
    assert first.request.temperature == 0.5  # the OpenAI fields travel as ever
    assert json.loads(read_request(second.body).ExtraJson() or b"") == {"top_k": 1}


async def test_a_forwarding_route_still_checks_the_openai_fields(extras_edge: str, fake_upstream: FakeUpstream) -> None:
    async with openai.AsyncOpenAI(base_url=f"{extras_edge}/v1", api_key="sk-test", max_retries=0) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(model="vllm-llama", messages=[{"role": "user", "content": "hi"}],
                                                 temperature=5, extra_body={"top_k": 40})
        assert caught.value.param == "temperature"
        with pytest.raises(openai.BadRequestError) as nested:  # only top-level fields are an engine's
            await client.chat.completions.create(model="vllm-llama", messages=[
                {"role": "user", "content": "hi", "top_k": 1}])  # type: ignore[list-item]  # an unknown key, on purpose
        assert nested.value.param == "messages[0].top_k"
        plain = await client.chat.completions.create(model="vllm-llama", messages=[{"role": "user", "content": "hi"}])
    assert plain.choices[0].message.content == "hi"
    [received] = fake_upstream.received
    assert read_request(received.body).ExtraJson() is None  # no extras: none travel


async def test_a_refusing_route_refuses_the_extras_naming_one(extras_edge: str, fake_upstream: FakeUpstream) -> None:
    async with openai.AsyncOpenAI(base_url=f"{extras_edge}/v1", api_key="sk-test", max_retries=0) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}],
                                                 extra_body={"top_k": 40})
    assert (caught.value.status_code, caught.value.param) == (400, "top_k")
    assert fake_upstream.received == []
