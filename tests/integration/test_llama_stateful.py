"""Stored responses with a real engine: llama.cpp's llama-server serving SmolLM2-135M (tests/support/llama_engine.py;
greedy, one slot) answers, through two edges on one real Redis (then Valkey) and the OpenAI dialect's
in-process bridge, a second turn that is right only with the first: the first made on edge A, the
second continued on edge B by `previous_response_id`, with the official `openai` SDK.

Between the bridges and llama-server a relay passes every request on unchanged and records its body: what
the engine itself was asked, so the test sees the first turn in the second request, not only its effect.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from redis_servers import Server
from stored_edges import sdk, serving

from ingress.serve.app import serve_app
from ingress.settings import Bridge, Endpoint, Group, Route, Settings, Timeouts
from ingress.tenancy.keys import new_key
from ingress.tenancy.settings import Key, Tenancy, Tenant
from ingress.tenancy.settings import Redis as RedisSettings

PATIENT = Timeouts(connect=5.0, first_byte=60.0, idle=60.0)  # a tiny model on a shared core
NAME = "Zorbulon"  # made up: SmolLM2-135M knows no such name, and answers another without the first turn
FIRST = f"My name is {NAME}. Remember it."
SECOND = "What is my name?"
_prefixes = itertools.count()


@dataclass
class Relay:
    """Every chat completion the bridges sent the engine, as the JSON bodies it received."""

    target: str
    received: list[dict[str, Any]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if request.path.endswith("/chat/completions"):
            self.received.append(json.loads(body))
        async with aiohttp.ClientSession() as http, \
                http.request(request.method, self.target + request.path_qs, data=body,
                             headers={"Content-Type": request.content_type}) as answered:
            out = web.StreamResponse(status=answered.status,
                                     headers={"Content-Type": answered.headers.get("Content-Type", "")})
            await out.prepare(request)
            async for chunk in answered.content.iter_any():
                await out.write(chunk)
            await out.write_eof()
            return out


@pytest.fixture
async def relay(llama_server: str) -> AsyncIterator[tuple[str, Relay]]:
    recorder = Relay(llama_server)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", recorder.handle)
    async with serve_app(app, "127.0.0.1", 0) as url:
        yield url, recorder


def _user_texts(body: dict[str, Any]) -> list[str]:
    return [m["content"] if isinstance(m["content"], str) else "".join(p.get("text", "") for p in m["content"])
            for m in body["messages"] if m["role"] == "user"]


@pytest.mark.redis
async def test_llama_server_answers_a_second_turn_continued_on_another_edge_from_the_first(
        stack: AsyncExitStack, relay: tuple[str, Relay], limit_server: Server) -> None:
    url, recorder = relay
    secret, key_id, key_hash = new_key()
    tenancy = Tenancy(backend="redis", redis=RedisSettings(url=limit_server.url, prefix=f"llama-{next(_prefixes)}",
                                                           deadline_ms=2000),
                      keys=(Key(id=key_id, tenant="acme", hash=key_hash),), tenants={"acme": Tenant()})
    engine = Endpoint(bridge=Bridge(dialect="openai", target=url, timeouts=PATIENT))
    settings = Settings(groups={"llama": Group(endpoints=[engine])}, routes=(Route(glob="*", group="llama"),),
                        timeouts=PATIENT, tenancy=tenancy)
    edge_a, edge_b = await serving(stack, settings), await serving(stack, settings)
    on_a, on_b = await sdk(stack, edge_a, secret), await sdk(stack, edge_b, secret)

    first = await on_a.responses.create(model="smollm2", input=FIRST, temperature=0, max_output_tokens=40)
    assert first.status in ("completed", "incomplete") and first.output_text
    second = await on_b.responses.create(model="smollm2", input=SECOND, previous_response_id=first.id,
                                         temperature=0, max_output_tokens=40)
    assert NAME in second.output_text, second.output_text  # right only with the first turn
    asked = recorder.received[-1]  # what llama-server was asked for the second turn: the whole conversation
    assert _user_texts(asked) == [FIRST, SECOND]
    assert [m["role"] for m in asked["messages"]] == ["user", "assistant", "user"]
    assert asked["messages"][1]["content"] == first.output_text
    assert asked["temperature"] == 0

    alone = await on_b.responses.create(model="smollm2", input=SECOND, temperature=0, max_output_tokens=40)
    assert NAME not in alone.output_text, alone.output_text  # the same question without it: not known
    assert _user_texts(recorder.received[-1]) == [SECOND]
