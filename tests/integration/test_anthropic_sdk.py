"""The official `anthropic` SDK, blocking and async, against a real edge on loopback: Anthropic's Messages
API served by the demo service, or by the scripted fake upstream to see what the service received and to
make it fail on purpose.

The demo echoes the last user message one word a token, calls an offered tool whose name the user
mentions (each string property gets the user's text, numbers 0), and answers a tool result with "Tool
<id> returned: <content>". Usage counts whitespace-delimited words.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import aiohttp
import anthropic
import pytest
from agent_turn import BETAS, agent_turn
from anthropic.types import MessageParam, RawMessageStreamEvent, TextBlock, ToolParam, ToolUseBlock
from anthropic.types.beta import BetaMessageParam
from fakes import upstream as fu
from fakes.upstream import FakeUpstream
from logcapture import lines
from prometheus_client.parser import text_string_to_metric_families
from waiting import eventually

from ingress import wire
from ingress.oai.chat import ChatCompletionRequest, FilePart, ImagePart, SystemMessage, TextPart, UserMessage
from ingress.settings import Endpoint, Group, Route, Settings, Timeouts
from ingress.tenancy.keys import new_key
from ingress.tenancy.settings import Key, Tenancy, Tenant
from ingress.tokens import counter_for

MODEL = "ingress-demo"
AGENT_MODEL = "claude-sonnet-4-6"  # the fixture's model: the demo edge serves it too
SYSTEM = "Be brief."
ECHO = "Say hello to the edge"
HELLO: list[MessageParam] = [{"role": "user", "content": ECHO}]
BETA_HELLO: list[BetaMessageParam] = [{"role": "user", "content": ECHO}]  # the same, for the beta client
PROMPT_TOKENS, ECHO_TOKENS = 7, 5  # "Be brief." and the five words; the five words echoed

WEATHER: ToolParam = {
    "name": "get_weather", "description": "Current weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                     "required": ["city"]},
}
CLOCK: ToolParam = {"name": "get_time", "input_schema": {"type": "object", "properties": {"zone": {"type": "string"}}}}
ASK_WEATHER = "Use get_weather for Paris"
WEATHER_INPUT = {"city": ASK_WEATHER, "days": 0}

TEXT = "Tell me a story about frames"  # what the fake echoes, a frame a word
SETTLE = 0.05  # the fake's pause after each write, so the edge reads every frame on its own
SLOW = Timeouts(connect=1.0, first_byte=30.0, idle=30.0)  # only the test ends a held request

RATE_LIMITED = wire.ErrorInfo(status=429, type="rate_limit_error", code="rate_limit_exceeded",
                              message="Rate limit reached for requests.")
SERVICE_FAILED = wire.ErrorInfo(status=500, type="server_error", code="internal_error",
                                message="The model crashed.")
SERVICE_OVERLOADED = wire.ErrorInfo(status=503, type="server_error", code="model_overloaded",
                                    message="The model is overloaded.")

StartEdge = Callable[[Settings], Awaitable[str]]  # the `start_edge` fixture


@pytest.fixture
def claude(threaded_demo_edge: str) -> Iterator[anthropic.Anthropic]:
    """The blocking SDK in front of the demo edge; `base_url` is all it changes."""
    with anthropic.Anthropic(base_url=threaded_demo_edge, api_key="sk-ant-test", max_retries=0) as client:
        yield client


@pytest.fixture
async def aclaude(start_edge: StartEdge) -> AsyncIterator[anthropic.AsyncAnthropic]:
    """The async SDK in front of a demo edge that also serves the agent fixture's model."""
    url = await start_edge(Settings(models=(MODEL, AGENT_MODEL)))
    async with anthropic.AsyncAnthropic(base_url=url, api_key="sk-ant-test", max_retries=0) as client:
        yield client


def _client(url: str, *, api_key: str = "sk-ant-test", max_retries: int = 0) -> anthropic.AsyncAnthropic:
    """The async SDK in front of the edge at `url`."""
    return anthropic.AsyncAnthropic(base_url=url, api_key=api_key, max_retries=max_retries)


def _envelope(error: anthropic.APIStatusError, type_: str) -> str:
    """Anthropic's error envelope, with the request id the edge answered under; returns its message."""
    body = error.body
    assert isinstance(body, dict) and set(body) == {"type", "error", "request_id"}, body
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
    assert body["error"]["type"] == error.type == type_
    assert body["request_id"] == error.response.headers["x-request-id"] == error.request_id
    message = body["error"]["message"]
    assert isinstance(message, str) and message
    return message


def _tool_turn(call: ToolUseBlock, result: str) -> list[MessageParam]:
    """The second turn of a tool flow: the question, the assistant's call, and the tool's result."""
    return [{"role": "user", "content": ASK_WEATHER},
            {"role": "assistant", "content": [{"type": "tool_use", "id": call.id, "name": call.name,
                                               "input": call.input}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": result}]}]


# --- answers, streams, counts and models (the demo) -----------------------------------------------


def test_create_answers_a_message(claude: anthropic.Anthropic) -> None:
    raw = claude.messages.with_raw_response.create(model=MODEL, max_tokens=64, system=SYSTEM, messages=HELLO,
                                                   extra_headers={"x-request-id": "sdk-msg-0001"})
    message = raw.parse()

    assert raw.status_code == 200 and raw.headers["x-request-id"] == message._request_id == "sdk-msg-0001"
    assert (message.id, message.type, message.role, message.model) == ("msg_sdk-msg-0001", "message", "assistant",
                                                                       MODEL)
    assert [(b.type, b.text) for b in message.content if isinstance(b, TextBlock)] == [("text", ECHO)]
    assert len(message.content) == 1
    assert (message.stop_reason, message.stop_sequence) == ("end_turn", None)
    usage = message.usage
    assert (usage.input_tokens, usage.output_tokens) == (PROMPT_TOKENS, ECHO_TOKENS)
    assert (usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (0, 0)


def test_max_tokens_cuts_the_answer(claude: anthropic.Anthropic) -> None:
    message = claude.messages.create(model=MODEL, max_tokens=2, messages=HELLO)

    assert [b.text for b in message.content if isinstance(b, TextBlock)] == ["Say hello"]
    assert (message.stop_reason, message.usage.output_tokens) == ("max_tokens", 2)


def test_the_stream_helper_gives_text_and_the_final_message(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(model=MODEL, max_tokens=64, system=SYSTEM, messages=HELLO,
                                extra_headers={"x-request-id": "sdk-msg-0002"}) as stream:
        text = list(stream.text_stream)
        final = stream.get_final_message()

    assert "".join(text) == ECHO and len(text) == ECHO_TOKENS  # a word a delta
    assert final.id == "msg_sdk-msg-0002" and final.model == MODEL
    assert [b.text for b in final.content if isinstance(b, TextBlock)] == [ECHO]
    assert (final.stop_reason, final.stop_sequence) == ("end_turn", None)
    assert (final.usage.input_tokens, final.usage.output_tokens) == (PROMPT_TOKENS, ECHO_TOKENS)


async def test_the_raw_events_follow_anthropics_grammar(aclaude: anthropic.AsyncAnthropic) -> None:
    stream = await aclaude.messages.create(model=MODEL, max_tokens=64, system=SYSTEM, messages=HELLO, stream=True,
                                           extra_headers={"x-request-id": "sdk-msg-0003"})
    events: list[RawMessageStreamEvent] = [e async for e in stream]

    assert [e.type for e in events] == ["message_start", "content_block_start", *["content_block_delta"] * ECHO_TOKENS,
                                        "content_block_stop", "message_delta", "message_stop"]
    start, block, *deltas, stop, delta, _ = events
    assert start.type == "message_start"
    assert (start.message.id, start.message.model, start.message.content) == ("msg_sdk-msg-0003", MODEL, [])
    assert (start.message.stop_reason, start.message.usage.output_tokens) == (None, 0)
    assert block.type == "content_block_start" and block.index == 0
    assert block.content_block.type == "text" and block.content_block.text == ""
    assert {d.index for d in deltas if d.type == "content_block_delta"} == {0}
    assert "".join(d.delta.text for d in deltas if d.type == "content_block_delta" and d.delta.type == "text_delta") \
        == ECHO
    assert stop.type == "content_block_stop" and stop.index == 0
    assert delta.type == "message_delta"
    assert (delta.delta.stop_reason, delta.delta.stop_sequence) == ("end_turn", None)
    assert (delta.usage.input_tokens, delta.usage.output_tokens) == (PROMPT_TOKENS, ECHO_TOKENS)


async def test_count_tokens_counts_the_chat_request_it_amounts_to(aclaude: anthropic.AsyncAnthropic) -> None:
    hello = await aclaude.messages.count_tokens(model=MODEL, messages=HELLO)
    with_system = await aclaude.messages.count_tokens(model=MODEL, system=SYSTEM, messages=HELLO)
    with_tools = await aclaude.messages.count_tokens(model=MODEL, system=SYSTEM, messages=HELLO,
                                                     tools=[WEATHER, CLOCK])

    counter = counter_for(MODEL)  # what the route counts with: the model names no tokenizer, so an estimate
    user = UserMessage(content=ECHO)
    assert hello.input_tokens == counter.chat(ChatCompletionRequest(model=MODEL, messages=[user]), True) > 0
    assert with_system.input_tokens == counter.chat(ChatCompletionRequest(
        model=MODEL, messages=[SystemMessage(content=SYSTEM), user]), True) > hello.input_tokens
    assert with_tools.input_tokens > with_system.input_tokens  # the tools' schemas are part of the prompt
    with pytest.raises(anthropic.NotFoundError) as unknown:
        await aclaude.messages.count_tokens(model="no-such-model", messages=HELLO)
    _envelope(unknown.value, "not_found_error")


async def test_models_list_and_retrieve_in_anthropics_shape(aclaude: anthropic.AsyncAnthropic) -> None:
    page = await aclaude.models.list()
    model = await aclaude.models.retrieve(MODEL)

    assert [(m.type, m.id, m.display_name) for m in page.data] == [("model", AGENT_MODEL, AGENT_MODEL),
                                                                    ("model", MODEL, MODEL)]
    assert (page.has_more, page.first_id, page.last_id) == (False, AGENT_MODEL, MODEL)
    assert (model.type, model.id, model.created_at) == ("model", MODEL, page.data[1].created_at)
    assert model.created_at.tzinfo is not None and model.created_at.year >= 2024
    with pytest.raises(anthropic.NotFoundError) as unknown:
        await aclaude.models.retrieve("no-such-model")
    assert "no-such-model" in _envelope(unknown.value, "not_found_error")


# --- tools, images and documents ------------------------------------------------------------------


async def test_tool_use_over_two_turns(aclaude: anthropic.AsyncAnthropic) -> None:
    first = await aclaude.messages.create(model=MODEL, max_tokens=64, tools=[CLOCK, WEATHER],
                                          messages=[{"role": "user", "content": ASK_WEATHER}])

    assert first.stop_reason == "tool_use"
    [call] = first.content
    assert isinstance(call, ToolUseBlock)
    assert (call.name, call.input) == ("get_weather", WEATHER_INPUT)  # the tool named, not the first offered
    assert first.usage.output_tokens > 0

    second = await aclaude.messages.create(model=MODEL, max_tokens=64, tools=[CLOCK, WEATHER],
                                           messages=_tool_turn(call, "18C and sunny"))

    assert [b.text for b in second.content if isinstance(b, TextBlock)] == [f"Tool {call.id} returned: 18C and sunny"]
    assert (second.stop_reason, len(second.content)) == ("end_turn", 1)


async def test_a_streamed_tool_use_accumulates_its_input(aclaude: anthropic.AsyncAnthropic) -> None:
    async with aclaude.messages.stream(model=MODEL, max_tokens=64, tools=[WEATHER],
                                       messages=[{"role": "user", "content": ASK_WEATHER}]) as stream:
        events = [e async for e in stream]
        final = await stream.get_final_message()

    json_deltas = [e for e in events if e.type == "content_block_delta" and e.delta.type == "input_json_delta"]
    assert json_deltas and "".join(e.delta.partial_json for e in json_deltas if e.delta.type == "input_json_delta") \
        == json.dumps(WEATHER_INPUT, separators=(",", ":"))
    [call] = final.content
    assert isinstance(call, ToolUseBlock) and (call.name, call.input) == ("get_weather", WEATHER_INPUT)
    assert final.stop_reason == "tool_use"


async def test_a_named_tool_choice_forces_that_tool(aclaude: anthropic.AsyncAnthropic) -> None:
    message = await aclaude.messages.create(model=MODEL, max_tokens=64, tools=[CLOCK, WEATHER],
                                            tool_choice={"type": "tool", "name": "get_time"},
                                            messages=[{"role": "user", "content": ASK_WEATHER}])

    [call] = message.content
    assert isinstance(call, ToolUseBlock) and (call.name, call.input) == ("get_time", {"zone": ASK_WEATHER})


PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n not really a picture").decode()
PDF = base64.b64encode(b"%PDF-1.4 not really a document").decode()


async def test_an_image_and_documents_reach_the_service_as_parts(edge: str, fake_upstream: FakeUpstream) -> None:
    async with _client(edge) as client:
        message = await client.messages.create(model="any-model", max_tokens=64, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF},
             "title": "Spec"},
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "Plain notes."}},
            {"type": "text", "text": "Compare them."},
        ]}])

    assert message.stop_reason == "end_turn" and message.content  # the fake echoes the texts
    [received] = fake_upstream.received
    [user] = received.request.messages
    assert isinstance(user, UserMessage) and isinstance(user.content, list)
    image, title, pdf, notes, text = user.content
    assert isinstance(image, ImagePart) and image.image_url.url == f"data:image/png;base64,{PNG}"
    assert isinstance(title, TextPart) and title.text == "Spec"
    assert isinstance(pdf, FilePart) and (pdf.file.file_data, pdf.file.filename) == (
        f"data:application/pdf;base64,{PDF}", "Spec")
    assert [(p.text if isinstance(p, TextPart) else None) for p in (notes, text)] == ["Plain notes.", "Compare them."]


# --- errors: every class the SDK raises, in Anthropic's envelope ------------------------------------


@pytest.mark.parametrize(("body", "param"), [
    pytest.param({"temperature": 5}, "temperature", id="out-of-range"),
    pytest.param({"temperture": 0.5}, "temperture", id="unknown-field"),
    pytest.param({"messages": [{"role": "robot", "content": "hi"}]}, "messages.0", id="unknown-role"),
    pytest.param({"messages": []}, "messages", id="no-messages"),
])
async def test_a_bad_field_is_a_bad_request_naming_it(aclaude: anthropic.AsyncAnthropic, body: dict[str, Any],
                                                      param: str) -> None:
    with pytest.raises(anthropic.BadRequestError) as bad:
        await aclaude.messages.create(model=MODEL, max_tokens=64, messages=HELLO, extra_body=body)

    assert bad.value.status_code == 400
    assert _envelope(bad.value, "invalid_request_error").startswith(f"{param}")


async def test_a_missing_or_wrong_key_is_an_authentication_error(start_edge: StartEdge, http: aiohttp.ClientSession,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    key, key_id, key_hash = new_key()
    tenancy = Tenancy(keys=(Key(id=key_id, tenant="acme", hash=key_hash, models=(MODEL,)),), tenants={"acme": Tenant()})
    url = await start_edge(Settings(tenancy=tenancy, workers=1))
    body = {"model": MODEL, "max_tokens": 64, "messages": HELLO}

    async with _client(url, api_key=key[:-3] + "xyz") as wrong:
        with pytest.raises(anthropic.AuthenticationError) as refused:
            await wrong.messages.create(model=MODEL, max_tokens=64, messages=HELLO)
    assert refused.value.status_code == 401
    assert key[:-3] not in _envelope(refused.value, "authentication_error")
    async with http.post(f"{url}/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"}) as response:
        assert response.status == 401  # no key at all
        assert (await response.json())["error"]["type"] == "authentication_error"
    async with http.post(f"{url}/v1/messages", json=body, headers={"x-api-key": key}) as response:
        assert response.status == 200 and (await response.json())["content"] == [{"type": "text", "text": ECHO}]

    async with _client(url, api_key=key) as right:  # this SDK sends its key as Authorization: Bearer
        message = await right.messages.create(model=MODEL, max_tokens=64, messages=HELLO)
        assert [b.text for b in message.content if isinstance(b, TextBlock)] == [ECHO]
        assert [m.id async for m in right.models.list()] == [MODEL]
    # and as x-api-key, as its earlier versions and the coding CLIs send it (no key from the environment)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    async with anthropic.AsyncAnthropic(base_url=url, default_headers={"x-api-key": key}, max_retries=0) as own:
        raw = await own.messages.with_raw_response.create(model=MODEL, max_tokens=64, messages=HELLO)
        assert raw.http_request.headers["x-api-key"] == key and "authorization" not in raw.http_request.headers
        assert [b.text for b in (await raw.parse()).content if isinstance(b, TextBlock)] == [ECHO]


async def test_a_body_too_large_is_request_too_large(start_edge: StartEdge) -> None:
    url = await start_edge(Settings(max_body_bytes=4096))

    async with _client(url) as client:
        with pytest.raises(anthropic.ContentTooLargeError) as large:
            await client.messages.create(model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "x" * 8192}])

    assert large.value.status_code == 413
    assert "larger than 4096 bytes" in _envelope(large.value, "request_too_large")


async def test_an_unknown_model_is_not_found(aclaude: anthropic.AsyncAnthropic) -> None:
    for stream in (False, True):
        with pytest.raises(anthropic.NotFoundError) as unknown:
            await aclaude.messages.create(model="no-such-model", max_tokens=64, messages=HELLO, stream=stream)
        assert unknown.value.status_code == 404
        assert "'no-such-model' does not exist" in _envelope(unknown.value, "not_found_error")


async def test_a_rate_limit_is_retried_by_the_sdk_after_its_retry_after(edge: str,
                                                                       fake_upstream: FakeUpstream) -> None:
    limited = fu.error_answer_with_headers(RATE_LIMITED, {"Retry-After": "1"})
    fake_upstream.play(limited)
    async with _client(edge) as once:
        with pytest.raises(anthropic.RateLimitError) as refused:
            await once.messages.create(model="any-model", max_tokens=64, messages=HELLO)
    assert refused.value.status_code == 429 and refused.value.response.headers["retry-after"] == "1"
    assert _envelope(refused.value, "rate_limit_error") == RATE_LIMITED.message

    fake_upstream.play(limited)
    started = time.monotonic()
    async with _client(edge, max_retries=2) as retrying:
        message = await retrying.messages.create(model="any-model", max_tokens=64, messages=HELLO)
    waited = time.monotonic() - started

    assert [b.text for b in message.content if isinstance(b, TextBlock)] == [ECHO]
    assert len(fake_upstream.received) == 3  # the refusal above, then this request's two attempts
    assert 1.0 <= waited < 5  # the Retry-After, not a backoff of its own


@pytest.mark.parametrize(("behaviour", "status", "error_class", "type_"), [
    pytest.param(fu.error_answer(SERVICE_FAILED), 500, anthropic.InternalServerError, "api_error", id="error-500"),
    pytest.param(fu.plain_status(500, "Traceback: worker died"), 502, anthropic.InternalServerError, "api_error",
                 id="plain-500"),
    pytest.param(fu.drop_before_head(), 502, anthropic.InternalServerError, "api_error", id="dropped"),
    pytest.param(fu.slow_head(), 504, anthropic.GatewayTimeoutError, "timeout_error", id="timeout"),
    pytest.param(fu.error_answer(SERVICE_OVERLOADED), 529, anthropic.OverloadedError, "overloaded_error",
                 id="overloaded"),
])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_a_failing_service_is_a_server_error(edge: str, fake_upstream: FakeUpstream, behaviour: fu.Behaviour,
                                                   status: int, error_class: type[anthropic.APIStatusError],
                                                   type_: str, stream: bool) -> None:
    fake_upstream.play(behaviour)

    async with _client(edge) as client:
        with pytest.raises(anthropic.APIStatusError) as failed:
            await client.messages.create(model="any-model", max_tokens=64, messages=HELLO, stream=stream)

    assert type(failed.value) is error_class and failed.value.status_code == status
    assert "worker died" not in _envelope(failed.value, type_)
    assert len(fake_upstream.received) == 1


async def test_the_edges_own_full_queue_is_overloaded(start_edge: StartEdge, fake_upstream: FakeUpstream) -> None:
    group = Group(endpoints=[Endpoint(url=fake_upstream.url)], max_in_flight=1)
    url = await start_edge(Settings(groups={"main": group}, routes=(Route(glob="*", group="main"),), timeouts=SLOW))
    fake_upstream.play(fu.slow_head())  # holds the group's one slot until cancelled

    async with _client(url) as client:
        held = asyncio.ensure_future(client.messages.create(model="any-model", max_tokens=64, messages=HELLO))
        try:
            await eventually(lambda: fake_upstream.active == 1, "the first request held at the fake")
            with pytest.raises(anthropic.OverloadedError) as overloaded:
                await client.messages.create(model="any-model", max_tokens=64, messages=HELLO, stream=True)
        finally:
            held.cancel()
            await asyncio.gather(held, return_exceptions=True)

    assert overloaded.value.status_code == 529 and overloaded.value.response.headers["retry-after"] == "1"
    assert "at capacity" in _envelope(overloaded.value, "overloaded_error")
    assert len(fake_upstream.received) == 1  # refused by the edge, never sent


# --- a stream cut midway ---------------------------------------------------------------------------


@pytest.mark.parametrize(("behaviour", "type_"), [
    pytest.param(fu.drop_mid_stream(frames=3), "api_error", id="connection-reset"),
    pytest.param(fu.error_frame(SERVICE_OVERLOADED, after=3), "overloaded_error", id="error-frame"),
    pytest.param(fu.stall_mid_stream(frames=3), "timeout_error", id="stalled"),
])
async def test_a_stream_cut_midway_makes_the_sdk_raise_without_message_stop(
        edge: str, fake_upstream: FakeUpstream, behaviour: fu.Behaviour, type_: str) -> None:
    fake_upstream.play(behaviour, pace=SETTLE)
    events: list[RawMessageStreamEvent] = []

    async with _client(edge) as client:
        stream = await client.messages.create(model="any-model", max_tokens=64, stream=True,
                                              messages=[{"role": "user", "content": TEXT}])
        with pytest.raises(anthropic.APIStatusError) as cut:
            async for event in stream:
                events.append(event)

    types = [e.type for e in events]
    assert types == ["message_start", "content_block_start", "content_block_delta", "content_block_delta"]
    assert "".join(e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta") \
        == "Tell me"  # the two words the service sent
    assert cut.value.status_code == 200  # in-band: the stream had begun
    _envelope(cut.value, type_)
    await fake_upstream.wait_idle()


async def test_the_stream_helper_raises_on_a_cut_stream(edge: str, fake_upstream: FakeUpstream) -> None:
    fake_upstream.play(fu.drop_mid_stream(frames=3), pace=SETTLE)
    text: list[str] = []

    async with _client(edge) as client:
        with pytest.raises(anthropic.APIStatusError) as cut:
            async with client.messages.stream(model="any-model", max_tokens=64,
                                              messages=[{"role": "user", "content": TEXT}]) as stream:
                async for piece in stream.text_stream:
                    text.append(piece)

    assert "".join(text) == "Tell me"
    _envelope(cut.value, "api_error")


# --- features only Anthropic serves, and processing hints -----------------------------------------


@pytest.mark.parametrize(("body", "param"), [
    pytest.param({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools.0.type",
                 id="server-tool"),
    pytest.param({"mcp_servers": [{"type": "url", "url": "https://mcp.example.com/sse", "name": "docs"}]},
                 "mcp_servers", id="mcp-servers"),
    pytest.param({"container": "container_011"}, "container", id="container"),
    pytest.param({"messages": [{"role": "user", "content": [
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "The sky is blue."},
         "citations": {"enabled": True}}]}]}, "messages.0.content.0.citations", id="citations"),
])
async def test_a_feature_only_anthropic_serves_is_refused_naming_it(edge: str, fake_upstream: FakeUpstream,
                                                                    body: dict[str, Any], param: str) -> None:
    async with _client(edge) as client:
        with pytest.raises(anthropic.BadRequestError) as refused:
            await client.beta.messages.create(model="any-model", max_tokens=64, messages=BETA_HELLO, extra_body=body,
                                              betas=["mcp-client-2025-04-04"])

    message = _envelope(refused.value, "invalid_request_error")
    assert message.startswith(f"{param}: ") and "served only by Anthropic's API" in message
    assert fake_upstream.received == []  # refused before anything was sent


async def test_a_processing_hint_is_accepted_and_not_sent(edge: str, fake_upstream: FakeUpstream,
                                                          log_stream: io.StringIO,
                                                          http: aiohttp.ClientSession) -> None:
    before = await _scrape(http, edge)
    async with _client(edge) as client:
        message = await client.beta.messages.create(
            model="any-model", max_tokens=64, messages=BETA_HELLO, betas=["context-management-2025-06-27"],
            context_management={"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
            extra_headers={"x-request-id": "sdk-hint-0001"})
    after = await _scrape(http, edge)

    assert [b.text for b in message.content if b.type == "text"] == [ECHO]
    [received] = fake_upstream.received
    assert b"clear_thinking" not in received.body and b"context_management" not in received.body
    [access] = [line for line in lines(log_stream) if line.get("request_id") == "sdk-hint-0001"]
    assert (access["path"], access["api"], access["status"], access["dropped"]) == (
        "/v1/messages", "messages", 200, ["context_management"])
    hint = 'ingress_hints_not_sent_total{hint="context_management"}'
    assert after.get(hint, 0) - before.get(hint, 0) == 1


async def _scrape(http: aiohttp.ClientSession, url: str) -> dict[str, float]:
    """/metrics, as `name{label="value",...}` → value."""
    async with http.get(f"{url}/metrics") as response:
        text = await response.text()
    return {sample.name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items())) + "}": sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


# --- an agentic coding CLI's first turn ------------------------------------------------------------


async def test_an_agentic_clis_first_turn_is_streamed_and_answered(aclaude: anthropic.AsyncAnthropic) -> None:
    turn = agent_turn()
    assert len(turn["tools"]) >= 12 and turn["model"] == AGENT_MODEL

    async with aclaude.beta.messages.stream(**turn, betas=BETAS, extra_query={"beta": "true"}) as stream:
        events = [e async for e in stream]
        final = await stream.get_final_message()

    assert stream.response.url.params["beta"] == "true"
    assert stream.response.request.headers["anthropic-beta"] == ",".join(BETAS)
    assert [e.type for e in events if e.type in ("message_start", "message_delta", "message_stop")] == [
        "message_start", "message_delta", "message_stop"]
    assert final.model == AGENT_MODEL and final.stop_reason == "end_turn"
    assert [b.text for b in final.content if b.type == "text"] == ["Start with src/export/csv.py."]


async def test_what_the_service_receives_for_an_agentic_clis_first_turn(
        edge: str, fake_upstream: FakeUpstream, log_stream: io.StringIO) -> None:
    turn = agent_turn()

    async with _client(edge) as client, client.beta.messages.stream(
            **turn, betas=BETAS, extra_query={"beta": "true"},
            extra_headers={"x-request-id": "sdk-agent-0001"}) as stream:
        final = await stream.get_final_message()

    assert [b.text for b in final.content if b.type == "text"] == ["Start with src/export/csv.py."]
    [received] = fake_upstream.received
    request = received.request
    assert (request.model, request.max_tokens, request.stream, request.reasoning_effort) == (
        AGENT_MODEL, 32000, True, "high")
    assert request.user == turn["metadata"]["user_id"]
    functions = [t.function for t in request.tools or [] if t.function is not None]
    assert [f.name for f in functions] == [t["name"] for t in turn["tools"]]
    assert [json.loads(bytes(f.parameters)) for f in functions] == [t["input_schema"] for t in turn["tools"]]
    roles = [type(m).__name__ for m in request.messages]
    assert roles == ["SystemMessage", "UserMessage", "SystemMessage", "UserMessage"]
    system, _, mid, _ = request.messages
    assert isinstance(system, SystemMessage) and isinstance(system.content, list)
    assert [p.text for p in system.content] == [b["text"] for b in turn["system"]]
    assert all(p.prompt_cache_breakpoint is not None for p in system.content)
    assert isinstance(mid, SystemMessage) and mid.content == turn["messages"][1]["content"]
    [access] = [line for line in lines(log_stream) if line.get("request_id") == "sdk-agent-0001"]
    assert access["api"] == "messages" and access["stream"] is True
    # the 1h TTL of a system block, the cache_control of a tool, context_management
    assert sorted(access["dropped"]) == ["cache_control", "cache_control.ttl", "context_management"]


# --- on the wire: raw HTTP --------------------------------------------------------------------------


async def _events(response: aiohttp.ClientResponse) -> list[tuple[str, dict[str, Any]]]:
    """An SSE body read to its end as (event, data) pairs; every event names its type twice, alike."""
    pairs = []
    for block in (await response.read()).decode().split("\n\n"):
        if not block:
            continue
        event, data = block.split("\n")
        assert event.startswith("event: ") and data.startswith("data: "), block
        payload = json.loads(data[len("data: "):])
        assert payload["type"] == event[len("event: "):]
        pairs.append((payload["type"], payload))
    return pairs


async def test_the_wire_format_of_a_stream_and_an_answer(demo_edge: str, http: aiohttp.ClientSession) -> None:
    headers = {"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01", "x-request-id": "raw-msg-0001"}
    body = {"model": MODEL, "max_tokens": 64, "messages": HELLO, "stream": True}
    async with http.post(f"{demo_edge}/v1/messages?beta=true", json=body,
                         headers={**headers, "anthropic-beta": "fine-grained-tool-streaming-2025-05-14"}) as response:
        assert response.status == 200
        assert response.headers["Content-Type"] == "text/event-stream"
        assert response.headers["Cache-Control"] == "no-cache"
        assert response.headers["x-request-id"] == response.headers["request-id"] == "raw-msg-0001"
        events = await _events(response)

    assert [t for t, _ in events] == ["message_start", "content_block_start", *["content_block_delta"] * ECHO_TOKENS,
                                      "content_block_stop", "message_delta", "message_stop"]
    assert events[0][1]["message"]["id"] == "msg_raw-msg-0001"
    del body["stream"]
    async with http.post(f"{demo_edge}/v1/messages", json=body, headers=headers) as response:
        assert response.status == 200 and response.content_type == "application/json"
        assert (await response.json())["content"] == [{"type": "text", "text": ECHO}]
        assert response.headers["request-id"] == "raw-msg-0001"
    async with http.post(f"{demo_edge}/v1/chat/completions", json={"model": MODEL, "messages": HELLO}) as response:
        assert response.status == 200 and "request-id" not in response.headers  # OpenAI's answers: as they were


async def test_a_ping_while_the_service_is_silent(start_edge: StartEdge, fake_upstream: FakeUpstream,
                                                  http: aiohttp.ClientSession) -> None:
    beating = Timeouts(connect=1.0, first_byte=5.0, idle=5.0, heartbeat=0.05)
    url = await start_edge(Settings(upstream=fake_upstream.url, timeouts=beating))
    fake_upstream.play(fu.slow_first_frame(0.5))

    async with http.post(f"{url}/v1/messages", json={"model": "any-model", "max_tokens": 64, "stream": True,
                                                      "messages": [{"role": "user", "content": TEXT}]}) as response:
        assert response.status == 200
        events = await _events(response)

    types = [t for t, _ in events]
    pings = [data for t, data in events if t == "ping"]
    assert len(pings) >= 3 and all(data == {"type": "ping"} for data in pings)
    first_text = types.index("content_block_delta")
    assert "ping" in types[:first_text]  # while the service was silent
    assert types[0] == "message_start" and types.count("message_start") == 1  # first, as Anthropic's own
    assert types[-1] == "message_stop"
    assert "".join(d["delta"]["text"] for t, d in events if t == "content_block_delta") == TEXT
