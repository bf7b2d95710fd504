"""Google's `google-genai` SDK, by its base URL alone, against a real edge on loopback: Google's Gemini API served
by the demo service (which records every buffer the edge sends it), or by the scripted fake upstream to see what
the service received and to make it fail on purpose. Every buffer the edge sends passes the C++ Verifier.

The demo echoes the last user message one word a token, calls an offered tool whose name the user mentions
(each string property gets the user's text, numbers 0), and answers a tool result with "Tool <id> returned:
<content>". Usage counts whitespace-delimited words.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import aiohttp
import msgspec
import pytest
from fakes import upstream as fu
from fakes.upstream import FakeUpstream
from google import genai
from google.genai import errors, types
from pydantic import BaseModel
from recording import recording_demo, recording_edge

from ingress import wire
from ingress.encoding.reading import decode_request
from ingress.exchange import Exchange
from ingress.gemini.contents_codec import decode_generate_content
from ingress.gemini.contents_to_chat import as_chat
from ingress.oai.chat import JsonSchemaResponseFormat
from ingress.serve.app import create_app, serve_app
from ingress.settings import Settings, Timeouts
from ingress.tenancy.keys import new_key
from ingress.tenancy.settings import Key, Limits, Tenancy, Tenant
from ingress.tokens import counter_for

# The SDK's async client subclasses aiohttp's ClientSession, which aiohttp warns of: its default transport, kept.
pytestmark = [pytest.mark.cxx,
              pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession:DeprecationWarning")]

MODEL = "gemini-2.5-flash"
ECHO = "Say hello to the edge"
ECHO_TOKENS = 5
SYSTEM = "Be brief."
WEATHER = types.FunctionDeclaration(
    name="get_weather", description="Current weather in a city.",
    parameters=types.Schema(type=types.Type.OBJECT, properties={"city": types.Schema(type=types.Type.STRING),
                                                                "days": types.Schema(type=types.Type.INTEGER)},
                            required=["city"]))
CLOCK = types.FunctionDeclaration(name="get_time", parameters_json_schema={
    "type": "object", "properties": {"zone": {"type": "string"}}})
ASK_WEATHER = "Use get_weather for Paris"
FAST = Timeouts(connect=1.0, first_byte=2.0, idle=0.5)

RATE_LIMITED = wire.ErrorInfo(status=429, type="rate_limit_error", code="rate_limit_exceeded",
                              message="Rate limit reached for requests.")
SERVICE_FAILED = wire.ErrorInfo(status=500, type="server_error", code="internal_error", message="The model crashed.")
SERVICE_OVERLOADED = wire.ErrorInfo(status=503, type="server_error", code="model_overloaded",
                                    message="The model is overloaded.")

StartEdge = Callable[[Settings], Awaitable[str]]


def _client(url: str, key: str = "gk-test") -> genai.Client:
    """The SDK in front of the edge at `url`: the base URL is all it changes (it retries nothing by default)."""
    return genai.Client(api_key=key, http_options=types.HttpOptions(base_url=url))


class Demo:
    def __init__(self, url: str, bodies: list[bytes], exchanges: list[Exchange]) -> None:
        self.url, self.bodies, self.exchanges = url, bodies, exchanges
        self.client = _client(url)


@pytest.fixture
async def demo(cxx_verifier: Any) -> AsyncIterator[Demo]:
    """The edge in front of a recording demo service; at the end, every buffer it sent through the C++ Verifier."""
    bodies: list[bytes] = []
    async with AsyncExitStack() as stack:
        upstream = await stack.enter_async_context(serve_app(recording_demo(bodies), "127.0.0.1", 0))
        url, _, exchanges = await recording_edge(stack, Settings(upstream=upstream))
        yield Demo(url, bodies, exchanges)
    assert all(cxx_verifier.verify("request", buf) for buf in bodies)


@pytest.fixture
async def gemini_edge(fake_upstream: FakeUpstream, cxx_verifier: Any) -> AsyncIterator[str]:
    """The edge in front of the scripted fake, FAST timeouts; every buffer the fake received verified at the end."""
    async with serve_app(create_app(Settings(upstream=fake_upstream.url, timeouts=FAST)), "127.0.0.1", 0) as url:
        yield url
    assert all(cxx_verifier.verify("request", received.body) for received in fake_upstream.received)


def _error(error: errors.APIError, code: int, status: str) -> dict[str, Any]:
    """Google's error envelope as the SDK surfaces it; returns its `error` object."""
    assert (error.code, error.status) == (code, status), error
    assert isinstance(error.details, dict) and set(error.details) == {"error"}, error.details
    body = error.details["error"]
    assert (body["code"], body["status"]) == (code, status) and body["message"] == error.message
    return body  # type: ignore[no-any-return]


def _violations(body: dict[str, Any]) -> list[str]:
    return [v["field"] for d in body.get("details", []) if d["@type"].endswith("BadRequest")
            for v in d["fieldViolations"]]


def _retry_delays(body: dict[str, Any]) -> list[str]:
    return [d["retryDelay"] for d in body.get("details", []) if d["@type"].endswith("RetryInfo")]


# --- generate, stream, count, models (the demo) ------------------------------------------------------


async def test_generate_answers_in_googles_shape(demo: Demo) -> None:
    response = await demo.client.aio.models.generate_content(
        model=MODEL, contents=ECHO, config=types.GenerateContentConfig(system_instruction=SYSTEM, temperature=0.2))

    assert response.text == ECHO
    [candidate] = response.candidates or []
    assert (candidate.finish_reason, candidate.index) == (types.FinishReason.STOP, 0)
    assert candidate.content is not None and candidate.content.role == "model"
    usage = response.usage_metadata
    assert usage is not None and usage.candidates_token_count == ECHO_TOKENS
    assert usage.total_token_count == (usage.prompt_token_count or 0) + ECHO_TOKENS
    assert response.model_version == MODEL and response.response_id == demo.exchanges[-1].request_id
    [buf] = demo.bodies
    request = decode_request(buf)
    assert (request.temperature, request.messages[0].content, request.stream) == (0.2, SYSTEM, None)
    assert [e.api for e in demo.exchanges] == ["gemini"]


async def test_stream_yields_partial_answers_then_usage(demo: Demo) -> None:
    chunks = [c async for c in await demo.client.aio.models.generate_content_stream(model=MODEL, contents=ECHO)]

    texts = [c.text for c in chunks if c.text]
    assert "".join(texts) == ECHO and len(texts) == ECHO_TOKENS  # a word an event
    last = chunks[-1]
    assert last.candidates and last.candidates[0].finish_reason == types.FinishReason.STOP
    assert last.usage_metadata is not None and last.usage_metadata.candidates_token_count == ECHO_TOKENS
    assert all(c.usage_metadata is None for c in chunks[:-1])  # usage on the last event only
    assert wire.read_request(demo.bodies[0]).Stream() is True


async def test_the_streams_on_the_wire_sse_and_a_json_array(demo: Demo) -> None:
    body = {"contents": [{"role": "user", "parts": [{"text": ECHO}]}]}
    async with aiohttp.ClientSession() as http:
        path = f"{demo.url}/v1beta/models/{MODEL}:streamGenerateContent"
        async with http.post(path, params={"alt": "sse"}, json=body, headers={"x-goog-api-key": "k"}) as sse:
            assert sse.status == 200 and sse.content_type == "text/event-stream"
            raw = await sse.read()
        async with http.post(path, json=body, headers={"x-goog-api-key": "k"}) as array:
            assert array.status == 200 and array.content_type == "application/json"
            elements = json.loads(await array.read())

    events = raw.split(b"\r\n\r\n")
    assert events[-1] == b"" and all(e.startswith(b"data: {") for e in events[:-1])
    decoded = [json.loads(e.removeprefix(b"data: ")) for e in events[:-1]]
    assert [{k: v for k, v in e.items() if k != "responseId"} for e in decoded] == [
        {k: v for k, v in e.items() if k != "responseId"} for e in elements]
    assert "usageMetadata" in elements[-1] and elements[-1]["candidates"][0]["finishReason"] == "STOP"


async def test_count_tokens_counts_the_chat_request_it_amounts_to(demo: Demo) -> None:
    counted = await demo.client.aio.models.count_tokens(model=MODEL, contents=ECHO)

    body = msgspec.json.encode({"contents": [{"role": "user", "parts": [{"text": ECHO}]}]})
    expected = counter_for(MODEL).chat(as_chat(decode_generate_content(body), MODEL).request, True)
    assert counted.total_tokens == expected > 0
    assert demo.bodies == [] and [e.api for e in demo.exchanges] == ["gemini_count_tokens"]  # counted by the edge


async def test_models_list_and_get(start_edge: StartEdge) -> None:
    url = await start_edge(Settings(models=(MODEL, "ingress-demo")))
    client = _client(url)

    listed = [m async for m in await client.aio.models.list()]
    got = await client.aio.models.get(model=MODEL)

    assert sorted(m.name or "" for m in listed) == sorted([f"models/{MODEL}", "models/ingress-demo"])
    assert got.name == f"models/{MODEL}" and "generateContent" in (got.supported_actions or [])
    with pytest.raises(errors.ClientError) as unknown:
        await client.aio.models.get(model="no-such-model")
    _error(unknown.value, 404, "NOT_FOUND")
    async with aiohttp.ClientSession() as http, http.get(f"{url}/v1/models") as openai_list:
        assert (await openai_list.json())["object"] == "list"  # OpenAI's clients still get OpenAI's shape


# --- function calling over two turns, structured output -----------------------------------------------


async def test_function_calling_over_two_turns(demo: Demo) -> None:
    config = types.GenerateContentConfig(tools=[types.Tool(function_declarations=[CLOCK, WEATHER])])
    first = await demo.client.aio.models.generate_content(model=MODEL, contents=ASK_WEATHER, config=config)

    [call] = first.function_calls or []
    assert (call.name, call.args) == ("get_weather", {"city": ASK_WEATHER, "days": 0})
    assert call.id and first.candidates and first.candidates[0].finish_reason == types.FinishReason.STOP
    assert first.candidates[0].content is not None
    history = [types.Content(role="user", parts=[types.Part(text=ASK_WEATHER)]), first.candidates[0].content,
               types.Content(role="user", parts=[types.Part.from_function_response(
                   name="get_weather", response={"result": "18C and sunny"})])]
    second = await demo.client.aio.models.generate_content(model=MODEL, contents=history, config=config)

    assert second.text is not None and second.text.startswith(f"Tool {call.id} returned: ")
    assert "18C and sunny" in second.text and not second.function_calls
    sent = decode_request(demo.bodies[1])
    assert [type(m).__name__ for m in sent.messages] == ["UserMessage", "AssistantMessage", "ToolMessage"]


async def test_a_streamed_function_call_comes_whole(demo: Demo) -> None:
    config = types.GenerateContentConfig(tools=[types.Tool(function_declarations=[WEATHER])])
    chunks = [c async for c in await demo.client.aio.models.generate_content_stream(
        model=MODEL, contents=ASK_WEATHER, config=config)]

    calls = [call for c in chunks for call in c.function_calls or []]
    assert [(c.name, c.args) for c in calls] == [("get_weather", {"city": ASK_WEATHER, "days": 0})]


class City(BaseModel):
    city: str
    days: int


async def test_structured_output_reaches_the_service_as_a_response_format(gemini_edge: str,
                                                                          fake_upstream: FakeUpstream) -> None:
    fake_upstream.play(fu.answer('{"city": "Paris", "days": 3}'))
    config = types.GenerateContentConfig(response_mime_type="application/json", response_schema=City)
    response = await _client(gemini_edge).aio.models.generate_content(model=MODEL, contents=ECHO, config=config)

    assert response.parsed == City(city="Paris", days=3)
    [received] = fake_upstream.received
    format_ = received.request.response_format
    assert isinstance(format_, JsonSchemaResponseFormat) and format_.json_schema.strict
    schema = json.loads(bytes(format_.json_schema.schema))
    assert schema["type"] == "object" and set(schema["properties"]) == {"city", "days"}
    assert schema["properties"]["days"]["type"] == "integer"


# --- errors: every class the SDK raises, in Google's envelope ------------------------------------------


@pytest.mark.parametrize(("config", "field"), [
    pytest.param(types.GenerateContentConfig(temperature=5), "generation_config.temperature", id="out-of-range"),
    pytest.param(types.GenerateContentConfig(cached_content="cachedContents/abc"), "cached_content",
                 id="only-google-serves"),
    pytest.param(types.GenerateContentConfig(tools=[types.Tool(google_search=types.GoogleSearch())]),
                 "tools[0].google_search", id="built-in-tool"),
])
async def test_a_bad_field_is_invalid_argument_naming_it(gemini_edge: str, fake_upstream: FakeUpstream,
                                                         config: types.GenerateContentConfig, field: str) -> None:
    with pytest.raises(errors.ClientError) as bad:
        await _client(gemini_edge).aio.models.generate_content(model=MODEL, contents=ECHO, config=config)

    assert _violations(_error(bad.value, 400, "INVALID_ARGUMENT")) == [field]
    assert fake_upstream.received == []  # refused before anything was sent


async def test_an_unknown_model_is_not_found(start_edge: StartEdge) -> None:
    client = _client(await start_edge(Settings(models=(MODEL,))))
    with pytest.raises(errors.ClientError) as whole:
        await client.aio.models.generate_content(model="no-such-model", contents=ECHO)
    with pytest.raises(errors.ClientError) as streamed:
        async for _ in await client.aio.models.generate_content_stream(model="no-such-model", contents=ECHO):
            pass
    with pytest.raises(errors.ClientError) as counted:
        await client.aio.models.count_tokens(model="no-such-model", contents=ECHO)
    for error in (whole.value, streamed.value, counted.value):
        assert "'no-such-model' does not exist" in _error(error, 404, "NOT_FOUND")["message"]


async def test_a_key_by_header_query_or_bearer_and_a_wrong_one(start_edge: StartEdge) -> None:
    key, key_id, key_hash = new_key()
    tenancy = Tenancy(keys=(Key(id=key_id, tenant="acme", hash=key_hash, models=(MODEL,),
                                limits=Limits(rpm=3)),), tenants={"acme": Tenant()})
    url = await start_edge(Settings(models=(MODEL, "hidden"), tenancy=tenancy, workers=1))

    with pytest.raises(errors.ClientError) as wrong:
        await _client(url, key[:-3] + "xyz").aio.models.generate_content(model=MODEL, contents=ECHO)
    assert key[:-3] not in _error(wrong.value, 401, "UNAUTHENTICATED")["message"]
    right = _client(url, key)
    assert (await right.aio.models.generate_content(model=MODEL, contents=ECHO)).text == ECHO  # x-goog-api-key
    assert [m.name async for m in await right.aio.models.list()] == [f"models/{MODEL}"]  # its models only
    body = {"contents": [{"parts": [{"text": ECHO}]}]}
    async with aiohttp.ClientSession() as http:
        generate = f"{url}/v1beta/models/{MODEL}:generateContent"
        async with http.post(generate, params={"key": key}, json=body) as by_query:
            assert by_query.status == 200
        async with http.post(f"{url}/v1beta/models/{MODEL}:countTokens", json=body) as none:
            assert none.status == 401
            error = (await none.json())["error"]
            assert error["status"] == "UNAUTHENTICATED" and "x-goog-api-key header" in error["message"]
        async with http.post(f"{url}/v1/models/{MODEL}:generateContent", json=body,
                             headers={"Authorization": f"Bearer {key}"}) as by_bearer:
            assert by_bearer.status == 200  # its third request this minute (rpm 3)
    with pytest.raises(errors.ClientError) as limited:
        await right.aio.models.generate_content(model=MODEL, contents=ECHO)
    [delay] = _retry_delays(_error(limited.value, 429, "RESOURCE_EXHAUSTED"))
    assert int(delay.removesuffix("s")) >= 1 and limited.value.response.headers["Retry-After"] == delay[:-1]


async def test_the_edges_own_refusals_in_googles_envelope(start_edge: StartEdge) -> None:
    url = await start_edge(Settings(models=(MODEL,), max_body_bytes=4096))

    with pytest.raises(errors.ClientError) as large:
        await _client(url).aio.models.generate_content(model=MODEL, contents="x" * 8192)
    assert "larger than 4096 bytes" in _error(large.value, 413, "INVALID_ARGUMENT")["message"]
    async with aiohttp.ClientSession() as http:
        for method, path, status, name in [
            ("GET", "/v1beta/nothing-here", 404, "NOT_FOUND"),
            ("POST", f"/v1beta/models/{MODEL}:predict", 404, "NOT_FOUND"),
            ("PUT", "/v1beta/models", 405, "INVALID_ARGUMENT"),
            ("GET", f"/v1beta/models/{MODEL}:generateContent", 404, "NOT_FOUND"),
        ]:
            async with http.request(method, f"{url}{path}", json={}) as answer:
                envelope = await answer.json()
                assert (answer.status, envelope["error"]["code"], envelope["error"]["status"]) == (
                    status, status, name), (method, path, envelope)


async def test_a_rate_limited_service_is_resource_exhausted_with_retry_info(gemini_edge: str,
                                                                            fake_upstream: FakeUpstream) -> None:
    fake_upstream.play(fu.error_answer_with_headers(RATE_LIMITED, {"Retry-After": "1"}))
    with pytest.raises(errors.ClientError) as limited:
        await _client(gemini_edge).aio.models.generate_content(model=MODEL, contents=ECHO)

    body = _error(limited.value, 429, "RESOURCE_EXHAUSTED")
    assert body["message"] == RATE_LIMITED.message and _retry_delays(body) == ["1s"]


@pytest.mark.parametrize(("behaviour", "code", "status"), [
    pytest.param(fu.error_answer(SERVICE_FAILED), 500, "INTERNAL", id="error-500"),
    pytest.param(fu.plain_status(500, "Traceback: worker died"), 502, "INTERNAL", id="plain-500"),  # broke the contract
    pytest.param(fu.drop_before_head(), 502, "UNAVAILABLE", id="dropped"),
    pytest.param(fu.slow_head(), 504, "DEADLINE_EXCEEDED", id="timeout"),
    pytest.param(fu.error_answer(SERVICE_OVERLOADED), 503, "UNAVAILABLE", id="overloaded"),
])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_a_failing_service_is_a_server_error(gemini_edge: str, fake_upstream: FakeUpstream,
                                                   behaviour: fu.Behaviour, code: int, status: str,
                                                   stream: bool) -> None:
    fake_upstream.play(behaviour)
    client = _client(gemini_edge)

    with pytest.raises(errors.ServerError) as failed:
        if stream:
            async for _ in await client.aio.models.generate_content_stream(model=MODEL, contents=ECHO):
                pass
        else:
            await client.aio.models.generate_content(model=MODEL, contents=ECHO)

    assert "worker died" not in _error(failed.value, code, status)["message"]
    assert len(fake_upstream.received) == 1


async def test_a_stream_cut_midway_makes_the_sdk_raise_after_what_came(gemini_edge: str,
                                                                       fake_upstream: FakeUpstream) -> None:
    fake_upstream.play(fu.drop_mid_stream(frames=3), pace=0.05)
    texts: list[str] = []

    with pytest.raises(errors.ServerError) as cut:
        async for chunk in await _client(gemini_edge).aio.models.generate_content_stream(
                model=MODEL, contents="Tell me a story about frames"):
            texts.append(chunk.text or "")

    assert "".join(texts) == "Tell me"  # the two words the service sent
    assert cut.value.code >= 500
    await fake_upstream.wait_idle()
