"""The bridge service (ingress/bridges/service.py) between a real edge and a scripted engine, with a
small dialect of this file's own ("words": one word per line, END at the end), so that what is tested is
the service's I/O — statuses, frames, in-band errors, deadlines, cancellation — whatever the dialect.

    openai SDK ─▶ edge ─FlatBuffers─▶ bridge service ─"words"─▶ scripted engine
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import openai
import pytest
from aiohttp import web

from ingress import wire
from ingress.bridges import load_dialect
from ingress.bridges.dialect import EngineFailed, EngineRequest, Target, Unsupported
from ingress.bridges.service import create_bridge_app
from ingress.encoding.reading import decode_request
from ingress.encoding.requests import encode_request
from ingress.oai.codec import decode_chat_request
from ingress.serve.app import create_app, serve_app
from ingress.settings import Endpoint, Group, Route, Settings, Timeouts
from ingress.wire.passport import Passport


class WordsCall:
    def __init__(self, request: EngineRequest, model: str) -> None:
        self.request = request
        self._model = model

    def answer(self, body: bytes) -> wire.Response:
        text = json.loads(body)["text"]
        return wire.Response(id="w-1", model=self._model, created=1,
                             choices=[wire.Choice(content=text, finish_reason="stop")],
                             usage=wire.Usage(prompt_tokens=1, completion_tokens=len(text.split())))

    def stream(self) -> WordsDecoder:
        return WordsDecoder(self._model)


class WordsDecoder:
    """One word per line; END closes the stream; ERR <text> is an error event."""

    def __init__(self, model: str) -> None:
        self._model = model
        self._buffer = b""
        self._sequence = 0
        self._done = False

    def _chunk(self, **fields: Any) -> wire.Chunk:
        chunk = wire.Chunk(sequence=self._sequence, id="w-1", model=self._model, **fields)
        self._sequence += 1
        return chunk

    def feed(self, data: bytes) -> list[wire.Chunk]:
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        chunks = []
        for line in lines:
            if line == b"END":
                self._done = True
                chunks.append(self._chunk(finish_reason="stop", done=True,
                                          usage=wire.Usage(prompt_tokens=1, completion_tokens=self._sequence)))
                break
            if line.startswith(b"ERR "):
                raise EngineFailed(wire.ErrorInfo(status=500, code="engine_error", message=line[4:].decode()),
                                   chunks)
            chunks.append(self._chunk(content=("" if self._sequence == 0 else " ") + line.decode()))
        return chunks

    def finish(self) -> list[wire.Chunk]:
        if not self._done:
            raise EngineFailed(wire.ErrorInfo(status=502, code="upstream_protocol_error",
                                              message="The engine's stream ended before it was complete."))
        return []


class Words:
    name = "words"

    def build(self, buf: bytes, target: Target) -> WordsCall:
        request = decode_request(buf)
        if (request.n or 1) > 1:
            raise Unsupported("n", "The words engine answers one choice.")
        text = request.messages[-1].content
        model = target.model or request.model
        body = json.dumps({"model": model, "text": text, "stream": bool(request.stream)}).encode()
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {target.api_key}"}
                                                           if target.api_key else {})}
        path = urlsplit(target.url).path.rstrip("/") + "/v1/words"  # under the target's own path, as dialects do
        return WordsCall(EngineRequest(path=path, headers=headers, body=body, stream=bool(request.stream)), model)

    def error(self, status: int, headers: Mapping[str, str], body: bytes, *,
              clients_key: bool = False) -> wire.ErrorInfo:
        return wire.ErrorInfo(status=status if 400 <= status < 500 and status not in (401, 403) else 502,
                              code="engine_refused", message=body.decode(errors="replace")[:200])


@dataclass
class Engine:
    """A scripted engine: each request pops the next behaviour; it records what it saw and how it ended."""

    script: list[str] = field(default_factory=list)
    seen: list[tuple[str, dict[str, Any], Mapping[str, str]]] = field(default_factory=list)
    outcomes: list[str] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        doc = await request.json()
        self.seen.append((request.path, doc, dict(request.headers)))
        behaviour = self.script.pop(0) if self.script else "answer"
        try:
            if behaviour.startswith("status "):
                _, status, retry = [*behaviour.split(), ""][:3]
                return web.Response(status=int(status), text="slow down, sk-secret",
                                    headers={"Retry-After": retry} if retry else None)
            if not doc["stream"]:
                return web.json_response({"text": doc["text"]})
            out = web.StreamResponse()
            await out.prepare(request)
            paced = behaviour.startswith("paced ")  # each event a read of its own at the bridge
            behaviour = behaviour.removeprefix("paced ")
            for word in doc["text"].split():
                await out.write(word.encode() + b"\n")
                if paced:
                    await asyncio.sleep(0.005)
            if behaviour == "answer":
                await out.write(b"END\n")
            elif behaviour == "error":
                await out.write(b"ERR the engine fell over\n")
            elif behaviour == "hang":
                await asyncio.sleep(3600)
            await out.write_eof()  # "cut": the body ends without END
            return out
        except asyncio.CancelledError:
            self.outcomes.append("cancelled")
            raise
        finally:
            if not self.outcomes or self.outcomes[-1] != "cancelled":
                self.outcomes.append("ended")


@dataclass
class Stack:
    engine: Engine
    edge: str
    bridge: str


async def _stack(stack: AsyncExitStack, *, prefix: str = "", api_key: str | None = None) -> Stack:
    engine = Engine()
    app = web.Application()
    app.router.add_post(f"{prefix}/v1/words", engine.handle)
    engine_url = await stack.enter_async_context(serve_app(app, "127.0.0.1", 0))
    bridge_app = create_bridge_app(Words(), Target(url=engine_url + prefix, api_key=api_key),
                                   Timeouts(connect=1.0, first_byte=2.0, idle=0.5))
    bridge = await stack.enter_async_context(serve_app(bridge_app, "127.0.0.1", 0))
    edge = await stack.enter_async_context(serve_app(create_app(Settings(upstream=bridge)), "127.0.0.1", 0))
    return Stack(engine, edge, bridge)


@pytest.fixture
async def served() -> AsyncIterator[Stack]:
    async with AsyncExitStack() as stack:
        yield await _stack(stack)


@pytest.fixture
async def client(served: Stack) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=f"{served.edge}/v1", api_key="sk-client", max_retries=0) as c:
        yield c


def _say(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


async def test_a_whole_answer_goes_through(served: Stack, client: openai.AsyncOpenAI) -> None:
    answer = await client.chat.completions.create(model="m", messages=_say("one two three"))
    assert answer.choices[0].message.content == "one two three" and answer.choices[0].finish_reason == "stop"
    assert answer.usage is not None and answer.usage.completion_tokens == 3
    [(path, doc, headers)] = served.engine.seen
    assert (path, doc) == ("/v1/words", {"model": "m", "text": "one two three", "stream": False})
    assert "sk-client" not in json.dumps(headers)  # the client's key is never passed on
    assert {k.lower(): v for k, v in headers.items()}["x-request-id"]  # the edge's id, for the engine's logs


async def test_a_stream_goes_through_as_frames(served: Stack, client: openai.AsyncOpenAI) -> None:
    stream = await client.chat.completions.create(model="m", messages=_say("one two three"), stream=True,
                                                  stream_options={"include_usage": True})
    chunks = [c async for c in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "one two three"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 3


@pytest.mark.parametrize("ending", ["answer", "error"])
async def test_paced_events_become_frames_in_the_engine_connections_callback(
        served: Stack, client: openai.AsyncOpenAI, monkeypatch: pytest.MonkeyPatch, ending: str) -> None:
    in_callback: list[bool] = []
    write_chunk = wire.write_chunk

    def spied(chunk: wire.Chunk) -> bytearray:
        in_callback.append(asyncio.current_task() is None)
        return write_chunk(chunk)

    monkeypatch.setattr(wire, "write_chunk", spied)  # as the service calls it
    words = " ".join(f"w{i}" for i in range(20))
    served.engine.script.append(f"paced {ending}")
    stream = await client.chat.completions.create(model="m", messages=_say(words), stream=True,
                                                  stream_options={"include_usage": True})
    seen: list[str] = []
    if ending == "answer":
        chunks = [c async for c in stream]
        seen = [c.choices[0].delta.content or "" for c in chunks if c.choices]
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 20
    else:
        with pytest.raises(openai.APIError, match="the engine fell over"):
            async for chunk in stream:
                seen.append(chunk.choices[0].delta.content or "")
    assert "".join(seen) == words
    assert sum(in_callback) >= 15  # the words after the first few: no task step for them


async def test_an_engine_refusal_keeps_its_status_and_retry_after_and_is_scrubbed_by_the_dialect(
        served: Stack, client: openai.AsyncOpenAI) -> None:
    served.engine.script.append("status 429 7")
    with pytest.raises(openai.RateLimitError) as caught:
        await client.chat.completions.create(model="m", messages=_say("x"))
    assert caught.value.response.headers["retry-after"] == "7"
    assert caught.value.code == "engine_refused"


async def test_our_credentials_refused_are_a_502_not_the_clients_401(served: Stack,
                                                                    client: openai.AsyncOpenAI) -> None:
    served.engine.script.append("status 401")
    with pytest.raises(openai.APIStatusError) as caught:
        await client.chat.completions.create(model="m", messages=_say("x"))
    assert caught.value.status_code == 502


async def test_an_error_event_mid_stream_reaches_the_sdk_in_band(served: Stack, client: openai.AsyncOpenAI) -> None:
    served.engine.script.append("error")
    stream = await client.chat.completions.create(model="m", messages=_say("one two"), stream=True)
    seen: list[str] = []
    with pytest.raises(openai.APIError, match="the engine fell over"):
        async for chunk in stream:
            seen.append(chunk.choices[0].delta.content or "")
    assert "".join(seen) == "one two"


async def test_a_stream_cut_short_is_an_error_never_a_success(served: Stack, http: aiohttp.ClientSession) -> None:
    served.engine.script.append("cut")
    body = {"model": "m", "messages": _say("one two"), "stream": True}
    async with http.post(f"{served.edge}/v1/chat/completions", json=body) as r:
        text = (await r.read()).decode()
    assert "ended before it was complete" in text and "[DONE]" not in text


async def test_an_engine_that_stalls_mid_stream_is_cut_by_the_bridge_deadline(
        served: Stack, http: aiohttp.ClientSession) -> None:
    served.engine.script.append("hang")
    body = {"model": "m", "messages": _say("one two"), "stream": True}
    async with http.post(f"{served.edge}/v1/chat/completions", json=body) as r:
        text = (await r.read()).decode()
    assert "upstream_timeout" in text and "[DONE]" not in text
    await _settled(served.engine)
    assert served.engine.outcomes == ["cancelled"]  # the engine's request was ended with the stream


async def test_a_client_that_goes_away_ends_the_engine_request(served: Stack, http: aiohttp.ClientSession) -> None:
    served.engine.script.append("hang")
    body = {"model": "m", "messages": _say("one two"), "stream": True}
    async with http.post(f"{served.edge}/v1/chat/completions", json=body) as r:
        await r.content.readline()  # the stream has begun
    await _settled(served.engine)
    assert served.engine.outcomes == ["cancelled"]


async def _settled(engine: Engine) -> None:
    for _ in range(200):
        if engine.outcomes:
            return
        await asyncio.sleep(0.02)


async def test_unsupported_parameters_are_refused_before_anything_is_sent(served: Stack,
                                                                          client: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(model="m", messages=_say("x"), n=2)
    assert (caught.value.param, caught.value.code) == ("n", "unsupported_parameter")
    assert served.engine.seen == []


async def test_an_unreachable_engine_is_a_502(http: aiohttp.ClientSession) -> None:
    async with AsyncExitStack() as stack:
        bridge_app = create_bridge_app(Words(), Target(url="http://127.0.0.1:9"),
                                       Timeouts(connect=1.0))
        bridge = await stack.enter_async_context(serve_app(bridge_app, "127.0.0.1", 0))
        edge = await stack.enter_async_context(serve_app(create_app(Settings(upstream=bridge)), "127.0.0.1", 0))
        async with http.post(f"{edge}/v1/chat/completions", json={"model": "m", "messages": _say("x")}) as r:
            assert r.status == 502
            assert (await r.json())["error"]["message"] == "The engine is unavailable."


async def test_a_bad_buffer_sent_to_the_bridge_is_a_400(served: Stack, http: aiohttp.ClientSession) -> None:
    async with http.post(f"{served.bridge}{wire.COMPLETE_PATH}", data=b"not a buffer",
                         headers={"Content-Type": wire.CONTENT_TYPE}) as r:
        assert r.status == 400
        error = wire.decode_error(await r.read())
        assert r.headers.getall("Server") == ["ingress"]  # the software, never its version
    assert error.code == "invalid_flatbuffer"
    async with http.get(f"{served.bridge}/healthz") as r:
        assert r.headers.getall("Server") == ["ingress"]


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
async def test_invalid_json_inside_a_verified_buffer_is_a_400_not_a_crash(http: aiohttp.ClientSession,
                                                                          dialect: str) -> None:
    request = decode_chat_request(b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}')
    buf = bytes(encode_request(request, "req-1", Passport(), "openai", None, "{not json"))  # extra_json
    bridge_app = create_bridge_app(load_dialect(dialect), Target(url="http://127.0.0.1:9"), Timeouts(connect=1.0))
    async with serve_app(bridge_app, "127.0.0.1", 0) as bridge, \
            http.post(f"{bridge}{wire.COMPLETE_PATH}", data=buf, headers={"Content-Type": wire.CONTENT_TYPE}) as r:
        assert r.status == 400
        error = wire.decode_error(await r.read())
    assert error.code == "invalid_json" and "JSON field" in error.message


async def test_the_targets_path_and_credentials_are_used(http: aiohttp.ClientSession) -> None:
    async with AsyncExitStack() as stack:
        served = await _stack(stack, prefix="/openai", api_key="sk-engine")
        async with openai.AsyncOpenAI(base_url=f"{served.edge}/v1", api_key="sk-client", max_retries=0) as c:
            await c.chat.completions.create(model="m", messages=_say("x"))
        [(path, _, headers)] = served.engine.seen
        assert path == "/openai/v1/words" and headers["Authorization"] == "Bearer sk-engine"


@pytest.mark.parametrize("forward", [False, True])
async def test_the_clients_key_reaches_the_engine_only_when_its_route_forwards_it(forward: bool) -> None:
    async with AsyncExitStack() as stack:
        served = await _stack(stack, api_key="sk-bridge")
        settings = Settings(groups={"g": Group(endpoints=[Endpoint(url=served.bridge)])},
                            routes=(Route(glob="*", group="g", forward_authorization=forward),))
        edge = await stack.enter_async_context(serve_app(create_app(settings), "127.0.0.1", 0))
        async with openai.AsyncOpenAI(base_url=f"{edge}/v1", api_key="sk-client-own", max_retries=0) as c:
            await c.chat.completions.create(model="m", messages=_say("x"))
        [(_, _, headers)] = served.engine.seen
        assert headers["Authorization"] == ("Bearer sk-client-own" if forward else "Bearer sk-bridge")


async def test_embeddings_through_a_bridge_are_refused_clearly(served: Stack, client: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await client.embeddings.create(model="m", input="x")
    assert caught.value.code == "unsupported_endpoint" and "not served through the words bridge" in caught.value.message
    assert served.engine.seen == []
