"""The whole way to an OpenAI-compatible engine with no extra process: the `openai` SDK → the edge,
whose endpoint is a `bridge` it runs in-process (the config's form) → a scripted engine that writes
the streams real engines write (tests/fixtures/bridges/openai/), in small pieces.

What the SDK must see: every engine's quirks absorbed (vLLM's second call on index 0, its usage on
every chunk, reasoning apart from content), usage although the client asked for none (the bridge always
asks the engine), the engine's refusals with their statuses, and a stream cut short as an error.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import stat
from array import array
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from aiohttp import web
from fakes.upstream import FakeUpstream

from ingress.edge.appkeys import GATEWAY
from ingress.serve.app import create_app, serve_app
from ingress.settings import DEMO_MODEL, EMBEDDED, Bridge, Endpoint, Group, Route, Settings, Timeouts

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "bridges" / "openai"
EMBEDDER = "Qwen/Qwen3-Embedding-0.6B"
GENEROUS = Timeouts(connect=5.0, first_byte=20.0, idle=20.0)
WHOLE = {"id": "chatcmpl-w", "object": "chat.completion", "created": 1741571000, "model": "served-model",
         "choices": [{"index": 0, "finish_reason": "stop",
                      "message": {"role": "assistant", "content": "Paris.", "reasoning_content": "It is Paris."}}],
         "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11,
                   "prompt_tokens_details": {"cached_tokens": 8}}}


# A legacy text completion's stream, as vLLM writes it (`text_completion` chunks, then usage).
TEXT_STREAM = b"".join(b"data: " + json.dumps(doc).encode() + b"\n\n" for doc in [
    {"id": "cmpl-t", "object": "text_completion", "created": 1, "model": "m",
     "choices": [{"index": 0, "text": " a time", "logprobs": None, "finish_reason": None}]},
    {"id": "cmpl-t", "object": "text_completion", "created": 1, "model": "m",
     "choices": [{"index": 0, "text": " there was", "logprobs": None, "finish_reason": "length"}]},
    {"id": "cmpl-t", "object": "text_completion", "created": 1, "model": "m", "choices": [],
     "usage": {"prompt_tokens": 2, "completion_tokens": 4, "total_tokens": 6}},
]) + b"data: [DONE]\n\n"


@dataclass
class Engine:
    """Answers each request with the next scripted answer: a fixture's name (streamed in 37-byte pieces),
    "whole", or "status N"; records each request's path, headers and JSON body."""

    script: list[str] = field(default_factory=list)
    received: list[tuple[str, dict[str, str], dict[str, Any]]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.received.append((request.path, dict(request.headers), await request.json()))
        answer = self.script.pop(0) if self.script else ("embeddings" if request.path.endswith("/embeddings")
                                                         else "whole")
        if answer == "whole":
            return web.json_response(WHOLE)
        if answer in ("embeddings", "floats", "whole vectors"):
            return web.json_response(_embeddings(self.received[-1][2], answer))
        if answer.startswith("status "):
            status = int(answer.split()[1])
            return web.json_response({"error": {"message": "Rate limit reached for sk-live-abcdefghijklmnop",
                                                "type": "requests", "code": "rate_limit_exceeded"}},
                                     status=status, headers={"Retry-After": "3"})
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        data = TEXT_STREAM if answer == "text" else (FIXTURES / f"{answer}.sse").read_bytes()
        for i in range(0, len(data), 37):
            await out.write(data[i:i + 37])
            await asyncio.sleep(0)
        await out.write_eof()
        return out


def _embeddings(asked: dict[str, Any], how: str) -> dict[str, Any]:
    """OpenAI's answer to `asked`: input i's vector is [i + 1, 1/2, 1/4, ...] (float32s exactly), of the
    `dimensions` asked for (`whole vectors`: 8, whatever was asked), in base64 as asked (`floats`: JSON numbers)."""
    size = 8 if how == "whole vectors" else asked.get("dimensions", 8)
    data = []
    for i in range(len(asked["input"])):
        vector = [float(i + 1)] + [2.0 ** -k for k in range(1, size)]
        encoded: Any = vector if how == "floats" else base64.b64encode(array("f", vector).tobytes()).decode()
        data.append({"object": "embedding", "index": i, "embedding": encoded})
    return {"object": "list", "data": data, "model": asked["model"], "usage": {"prompt_tokens": 6, "total_tokens": 6}}


@dataclass
class Served:
    engine: Engine
    client: openai.AsyncOpenAI


@pytest.fixture
async def served(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Served]:
    monkeypatch.setenv("ENGINE_KEY", "sk-engine-secret")
    engine = Engine()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", engine.handle)
    app.router.add_post("/v1/completions", engine.handle)
    app.router.add_post("/v1/embeddings", engine.handle)
    async with serve_app(app, "127.0.0.1", 0) as engine_url:
        bridge = Bridge(dialect="openai", target=f"{engine_url}/v1", api_key_env="ENGINE_KEY", timeouts=GENEROUS)
        settings = Settings(groups={"engine": Group(endpoints=[Endpoint(bridge=bridge)])},
                            routes=(Route(model="qwen", upstream_model="Qwen/Qwen3-8B", group="engine"),
                                    Route(model="embedder", upstream_model=EMBEDDER, group="engine")),
                            timeouts=GENEROUS)
        async with serve_app(create_app(settings), "127.0.0.1", 0) as edge, \
                openai.AsyncOpenAI(base_url=f"{edge}/v1", api_key="sk-client", max_retries=0) as client:
            yield Served(engine, client)


HELLO: Any = [{"role": "user", "content": "Where is the Eiffel tower?"}]


async def test_a_whole_answer_with_reasoning_and_cached_tokens(served: Served) -> None:
    answer = await served.client.chat.completions.create(model="qwen", messages=HELLO)
    message = answer.choices[0].message
    assert message.content == "Paris." and message.model_extra == {"reasoning_content": "It is Paris."}
    assert answer.usage is not None and answer.usage.prompt_tokens_details is not None
    assert answer.usage.prompt_tokens_details.cached_tokens == 8
    [(path, headers, body)] = served.engine.received
    assert path == "/v1/chat/completions" and body["model"] == "Qwen/Qwen3-8B"  # the route's upstream name
    assert headers["Authorization"] == "Bearer sk-engine-secret"  # the bridge's key, from its environment
    assert "sk-client" not in json.dumps(headers)


async def test_vllms_stream_of_two_calls_on_index_0_reaches_the_sdk_as_two_calls(served: Served) -> None:
    served.engine.script.append("vllm_tools")
    stream = await served.client.chat.completions.create(model="qwen", messages=HELLO, stream=True)
    calls: dict[int, dict[str, str]] = {}
    reasoning = ""
    async for chunk in stream:
        assert chunk.usage is None  # the client asked for none: the engine's usage stays at the edge
        for choice in chunk.choices:
            reasoning += (choice.delta.model_extra or {}).get("reasoning_content") or ""
            for call in choice.delta.tool_calls or ():
                entry = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                entry["id"] += call.id or ""
                entry["name"] += (call.function.name or "") if call.function else ""
                entry["arguments"] += (call.function.arguments or "") if call.function else ""
    assert reasoning == "The user wants the weather."
    assert calls == {0: {"id": "chatcmpl-tool-5c1e", "name": "get_weather", "arguments": '{"city": "Paris"}'},
                     1: {"id": "chatcmpl-tool-77aa", "name": "get_time", "arguments": '{"tz": "CET"}'}}
    [(_, _, body)] = served.engine.received
    assert body["stream_options"] == {"include_usage": True}  # asked of the engine whatever the client says


@pytest.mark.parametrize("fixture", ["openai_text", "tgi_tools", "ollama_tools", "sglang_reasoning_tools",
                                     "llamacpp_text"])
async def test_every_engines_stream_ends_with_its_usage_when_asked(served: Served, fixture: str) -> None:
    served.engine.script.append(fixture)
    stream = await served.client.chat.completions.create(model="qwen", messages=HELLO, stream=True,
                                                         stream_options={"include_usage": True})
    chunks = [c async for c in stream]
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] != []


@pytest.mark.parametrize(("fixture", "said"), [("openai_truncated", "ended before it was complete"),
                                               ("vllm_error_flat", "The decoder prompt")])
async def test_a_stream_cut_short_or_failing_is_an_error_in_band(served: Served, fixture: str, said: str) -> None:
    served.engine.script.append(fixture)
    stream = await served.client.chat.completions.create(model="qwen", messages=HELLO, stream=True)
    with pytest.raises(openai.APIError, match=said):
        async for _ in stream:
            pass


async def test_a_stream_failing_before_any_content_keeps_its_status(served: Served) -> None:
    """vLLM's role-only first chunk, then its error: nothing was said, so the head waits and the failure
    is an HTTP error the client's SDK (or the edge's fallback) can act on, not an in-band event."""
    served.engine.script.append("vllm_error")
    with pytest.raises(openai.APIStatusError, match="EngineCore encountered an issue") as caught:
        await served.client.chat.completions.create(model="qwen", messages=HELLO, stream=True)
    assert caught.value.status_code == 502


async def test_the_engines_rate_limit_is_the_clients_429_with_its_retry_after(served: Served) -> None:
    served.engine.script.append("status 429")
    with pytest.raises(openai.RateLimitError) as caught:
        await served.client.chat.completions.create(model="qwen", messages=HELLO)
    assert caught.value.response.headers["retry-after"] == "3"
    assert "sk-live" not in caught.value.message  # the provider's text is scrubbed of keys


async def test_our_key_refused_is_a_502_the_client_cannot_fix(served: Served) -> None:
    served.engine.script.append("status 401")
    with pytest.raises(openai.APIStatusError) as caught:
        await served.client.chat.completions.create(model="qwen", messages=HELLO)
    assert caught.value.status_code == 502 and caught.value.code == "upstream_auth_failed"


async def test_a_legacy_text_completion_goes_to_the_engines_completions(served: Served) -> None:
    served.engine.script.append("text")
    stream = await served.client.completions.create(model="qwen", prompt="Once upon", stream=True,
                                                    stream_options={"include_usage": True})
    chunks = [c async for c in stream]
    assert "".join(c.choices[0].text for c in chunks if c.choices) == " a time there was"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4
    [(path, _, body)] = served.engine.received
    assert path == "/v1/completions" and body["prompt"] == "Once upon"


# --- embeddings -------------------------------------------------------------------------------------


async def test_embeddings_reach_the_engines_embeddings_with_every_field(served: Served) -> None:
    result = await served.client.embeddings.create(model="embedder", input=["one", "two"], dimensions=4, user="u-7")
    assert [item.embedding for item in result.data] == [[1.0, 0.5, 0.25, 0.125], [2.0, 0.5, 0.25, 0.125]]
    assert (result.model, result.usage.prompt_tokens, result.usage.total_tokens) == (EMBEDDER, 6, 6)
    [(path, headers, body)] = served.engine.received
    assert path == "/v1/embeddings" and headers["Authorization"] == "Bearer sk-engine-secret"
    assert body == {"input": ["one", "two"], "encoding_format": "base64", "model": EMBEDDER, "dimensions": 4,
                    "user": "u-7"}


async def test_token_ids_go_as_ids_and_either_format_reads_the_same(served: Served) -> None:
    ids = [[1, 2, 3], [4]]
    as_base64 = await served.client.embeddings.create(model="embedder", input=ids, encoding_format="base64")
    served.engine.script.append("floats")  # an engine that answers floats whatever it was asked
    as_floats = await served.client.embeddings.create(model="embedder", input=ids, encoding_format="float")
    assert [i.embedding for i in as_floats.data] == [[1.0, *(2.0 ** -k for k in range(1, 8))],
                                                    [2.0, *(2.0 ** -k for k in range(1, 8))]]
    assert isinstance(as_base64.data[0].embedding, str)
    decoded = [array("f", base64.b64decode(i.embedding)).tolist() for i in as_base64.data]
    assert decoded == [i.embedding for i in as_floats.data]
    assert [body["input"] for _, _, body in served.engine.received] == [[[1, 2, 3], [4]]] * 2


async def test_dimensions_an_engine_does_not_honour_are_refused_naming_them(served: Served) -> None:
    served.engine.script.append("whole vectors")
    with pytest.raises(openai.BadRequestError) as caught:
        await served.client.embeddings.create(model="embedder", input="one", dimensions=4)
    assert (caught.value.code, caught.value.param) == ("unsupported_parameter", "dimensions")
    assert "vectors of 8 dimensions, not 4" in caught.value.message


async def test_the_engines_refusals_of_embeddings_are_mapped_as_for_chat(served: Served) -> None:
    served.engine.script += ["status 429", "status 401"]
    with pytest.raises(openai.RateLimitError) as limited:
        await served.client.embeddings.create(model="embedder", input="one")
    assert limited.value.response.headers["retry-after"] == "3" and "sk-live" not in limited.value.message
    with pytest.raises(openai.APIStatusError) as refused:
        await served.client.embeddings.create(model="embedder", input="one")
    assert (refused.value.status_code, refused.value.code) == (502, "upstream_auth_failed")


async def test_a_service_inside_the_edge_listens_on_a_unix_socket_only_this_user_can_reach(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The bridge holds the engine's key: on a loopback port, any local user could spend it through the
    bridge. It (and the embedded demo, the same way) listens in a directory of mode 0700 instead, gone
    once the edge stops."""
    monkeypatch.setenv("ENGINE_KEY", "sk-engine-secret")
    engine = Engine()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", engine.handle)
    async with serve_app(app, "127.0.0.1", 0) as engine_url:
        bridge = Bridge(dialect="openai", target=f"{engine_url}/v1", api_key_env="ENGINE_KEY", timeouts=GENEROUS)
        settings = Settings(groups={"engine": Group(endpoints=[Endpoint(bridge=bridge)]),
                                    "demo": Group(endpoints=[Endpoint(url=EMBEDDED)])},
                            routes=(Route(model="qwen", group="engine"), Route(model=DEMO_MODEL, group="demo")),
                            timeouts=GENEROUS)
        edge_app = create_app(settings)
        async with serve_app(edge_app, "127.0.0.1", 0) as edge, \
                openai.AsyncOpenAI(base_url=f"{edge}/v1", api_key="sk-client", max_retries=0) as client:
            groups = edge_app[GATEWAY].groups
            inside = [url for name in ("engine", "demo") for url in groups[name].clients]
            assert len(inside) == 2 and all(url.startswith("unix:/") for url in inside), inside
            places = [Path(url.removeprefix("unix:")).parent for url in inside]
            assert places[0] != places[1]
            for place in places:
                assert (stat.S_IMODE(place.stat().st_mode), place.stat().st_uid) == (0o700, os.getuid())
            answer = await client.chat.completions.create(model="qwen", messages=HELLO)
            assert answer.choices[0].message.content == "Paris."
            demo = await client.chat.completions.create(model=DEMO_MODEL, messages=HELLO, max_tokens=4)
            assert demo.choices[0].message.content
        assert [place.exists() for place in places] == [False, False]


# --- a key refused: the client's own, or the bridge's -----------------------------------------------

INVALID_KEY = {"error": {"message": "Incorrect API key provided: sk-wrong***************xyz. You can find your "
                                    "API key at https://platform.openai.com/account/api-keys.",
                         "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}}


@dataclass
class Refusing:
    """A provider that refuses every key (OpenAI's 401 invalid_api_key), and a backup route's service."""

    engine: list[str]
    backup: FakeUpstream
    edge: str


@pytest.fixture
async def refusing(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> AsyncIterator[Refusing]:
    """A route through the bridge (`forward_authorization` as the test's parameter) that falls back to
    `backup` on every class a route can name, 5xx included."""
    monkeypatch.setenv("ENGINE_KEY", "sk-engine-secret")
    seen: list[str] = []

    async def refuse(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        return web.json_response(INVALID_KEY, status=401)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", refuse)
    app.router.add_post("/v1/messages", refuse)
    backup = FakeUpstream()
    async with serve_app(app, "127.0.0.1", 0) as engine_url, backup.running():
        bridge = Bridge(dialect="openai", target=f"{engine_url}/v1", api_key_env="ENGINE_KEY", timeouts=GENEROUS)
        routes = (Route(model="gpt", upstream_model="gpt-4o", group="provider", forward_authorization=request.param,
                        fallbacks=["backup"], fallback_on=("unavailable", "5xx", "timeout", "rate_limited")),
                  Route(name="backup", group="backup", upstream_model="local-model"))
        settings = Settings(groups={"provider": Group(endpoints=[Endpoint(bridge=bridge)]),
                                    "backup": Group(endpoints=[Endpoint(url=backup.url)])},
                            routes=routes, timeouts=GENEROUS)
        async with serve_app(create_app(settings), "127.0.0.1", 0) as edge:
            yield Refusing(seen, backup, edge)


@pytest.mark.parametrize("refusing", [True], indirect=True)
async def test_a_clients_own_key_refused_is_its_401_and_never_moves_to_a_fallback(refusing: Refusing) -> None:
    """The key was the client's: the provider's 401 is the client's to fix, in its own dialect; another route
    serving it would spend the operator's credit on a caller the provider turned away."""
    async with openai.AsyncOpenAI(base_url=f"{refusing.edge}/v1", api_key="sk-wrong-key", max_retries=0) as client:
        with pytest.raises(openai.AuthenticationError) as caught:
            await client.chat.completions.create(model="gpt", messages=HELLO)
    assert caught.value.status_code == 401 and caught.value.code == "invalid_api_key"
    assert "Incorrect API key provided" in caught.value.message and "platform.openai.com" not in caught.value.message
    async with anthropic.AsyncAnthropic(base_url=refusing.edge, api_key="sk-wrong-key", max_retries=0) as messages:
        with pytest.raises(anthropic.AuthenticationError) as refused:
            await messages.messages.create(model="gpt", max_tokens=16, messages=HELLO)
    assert refused.value.status_code == 401 and refused.value.type == "authentication_error"
    assert refusing.engine == ["Bearer sk-wrong-key"] * 2 and refusing.backup.received == []


@pytest.mark.parametrize("refusing", [False], indirect=True)
async def test_the_bridges_own_key_refused_is_the_operators_502_and_moves_as_its_route_says(
    refusing: Refusing,
) -> None:
    async with openai.AsyncOpenAI(base_url=f"{refusing.edge}/v1", api_key="sk-client", max_retries=0) as client:
        answer = await client.chat.completions.with_raw_response.create(model="gpt", messages=HELLO)
    assert answer.headers["x-ingress-served-by"] == 'route="backup", model="local-model"'
    assert refusing.engine == ["Bearer sk-engine-secret"] and len(refusing.backup.received) == 1
