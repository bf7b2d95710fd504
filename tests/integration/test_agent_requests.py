"""What coding agents send, through a real edge: Codex CLI's first request (its fixture, as it sent it)
served on every kind of route, with what only OpenAI's servers act on named in the access line; OpenAI's
built-in tools left out or refused as the route says. Gemini CLI's first two turns (its fixtures) served,
its `topK` as the engine extra it is where the route forwards them, and named as not sent where not."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from recording import recording_edge

from ingress.exchange import Exchange
from ingress.serve.app import serve_app
from ingress.settings import DEMO_MODEL, EMBEDDED, Bridge, Endpoint, Group, Route, Settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "codex"
CODEX_FIRST_TURN = json.loads((FIXTURES / "first_turn.json").read_text())
CODEX_HEADERS = json.loads((FIXTURES / "first_turn.headers.json").read_text())
# Gemini CLI 0.61.0 (`-m scripted-coder`), its first turn and the turn with its shell tool's result.
GEMINI_FIXTURES = FIXTURES.parent / "gemini_cli"
GEMINI_FIRST_TURN = json.loads((GEMINI_FIXTURES / "first_turn.json").read_text())
GEMINI_SECOND_TURN = json.loads((GEMINI_FIXTURES / "second_turn.json").read_text())
GEMINI_HEADERS = json.loads((GEMINI_FIXTURES / "first_turn.headers.json").read_text())


@pytest.fixture
async def edge() -> AsyncIterator[tuple[str, list[Exchange]]]:
    """A demo edge with two routes to the demo: one leaves built-in tools out (the default), one refuses them."""
    settings = Settings(groups={"demo": Group(endpoints=[Endpoint(url=EMBEDDED)])},
                        routes=(Route(model=DEMO_MODEL, group="demo"),
                                Route(model="strict", upstream_model=DEMO_MODEL, group="demo", hosted_tools="refuse")))
    async with AsyncExitStack() as stack:
        url, _, exchanges = await recording_edge(stack, settings)
        yield url, exchanges


async def _post(url: str, body: dict[str, object]) -> tuple[int, bytes]:
    async with aiohttp.ClientSession() as http, \
            http.post(f"{url}/v1/responses", json=body, headers=CODEX_HEADERS) as r:
        return r.status, await r.read()


async def test_codex_first_turn_streams_and_names_what_it_did_not_send(edge: tuple[str, list[Exchange]]) -> None:
    url, exchanges = edge
    status, body = await _post(url, {**CODEX_FIRST_TURN, "model": DEMO_MODEL})
    assert status == 200
    events = [json.loads(line[6:]) for line in body.decode().splitlines() if line.startswith("data: ")]
    assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["reasoning"] == {"effort": None, "summary": "auto"}
    [exchange] = exchanges
    assert exchange.routed.hints == ["client_metadata", "input.internal_chat_message_metadata_passthrough",
                                     "tools.web_search"]


async def test_a_route_that_refuses_built_in_tools_names_the_tool(edge: tuple[str, list[Exchange]]) -> None:
    url, _ = edge
    status, body = await _post(url, {**CODEX_FIRST_TURN, "model": "strict"})
    assert status == 400
    error = json.loads(body)["error"]
    assert (error["param"], error["code"]) == ("tools[8].type", "unsupported_parameter")
    assert "web_search" in error["message"]
    without = [t for t in CODEX_FIRST_TURN["tools"] if t["type"] != "web_search"]
    status, _ = await _post(url, {**CODEX_FIRST_TURN, "model": "strict", "tools": without})
    assert status == 200


async def test_a_websocket_upgrade_is_answered_426_so_that_codex_goes_on_over_http_at_once(
        edge: tuple[str, list[Exchange]]) -> None:
    """Codex CLI tries the Responses WebSocket first: 426 makes it take HTTP at once (a 404 or 405, it
    retries for ~12 s; a 400 ends its turn)."""
    url, _ = edge
    upgrade = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
               "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "openai-beta": "responses_websockets=2026-02-06"}
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{url}/v1/responses", headers=upgrade) as r:
            assert r.status == 426
            assert (await r.json())["error"]["code"] == "websocket_not_supported"
        async with http.get(f"{url}/v1/responses") as r:
            assert r.status == 405


# --- Gemini CLI's requests ------------------------------------------------------------------------------


@pytest.fixture
async def gemini_edge() -> AsyncIterator[tuple[str, list[Exchange]]]:
    """A demo edge: `extras` forwards engine extras (as a route to vLLM or llama.cpp may), the demo does not."""
    settings = Settings(groups={"demo": Group(endpoints=[Endpoint(url=EMBEDDED)])},
                        routes=(Route(model=DEMO_MODEL, group="demo"),
                                Route(model="extras", upstream_model=DEMO_MODEL, group="demo", extra_fields="forward")))
    async with AsyncExitStack() as stack:
        url, _, exchanges = await recording_edge(stack, settings)
        yield url, exchanges


async def _stream_gemini(url: str, model: str, body: dict[str, Any]) -> tuple[int, bytes]:
    async with aiohttp.ClientSession() as http, \
            http.post(f"{url}/v1beta/models/{model}:streamGenerateContent?alt=sse", json=body,
                      headers=GEMINI_HEADERS) as r:
        return r.status, await r.read()


async def test_gemini_cli_turns_stream_and_name_what_they_did_not_send(
        gemini_edge: tuple[str, list[Exchange]]) -> None:
    """Its first turn (15 functions declared in `parametersJsonSchema`, a system instruction, `thinkingConfig`
    with `includeThoughts`, `topK` 64) and its second (its model turn's call with a placeholder thought
    signature, the shell's function response) are served, each answer streamed in Google's shape; the
    signature, which only Gemini reads, is named as not sent."""
    url, exchanges = gemini_edge
    for body in (GEMINI_FIRST_TURN, GEMINI_SECOND_TURN):
        status, answer = await _stream_gemini(url, "extras", body)
        assert status == 200, answer
        events = _events(answer)
        parts = [p for e in events for c in e.get("candidates", ()) for p in c.get("content", {}).get("parts", ())]
        assert "".join(p.get("text", "") for p in parts), answer
        assert events[-1]["usageMetadata"]["promptTokenCount"] > 0
        assert events[-1]["candidates"][0]["finishReason"] == "STOP"
    first, second = exchanges
    assert (first.api, second.api) == ("gemini", "gemini")
    assert (first.routed.route, first.routed.stream) == ("extras", True)
    assert first.routed.prompt_tokens is not None and first.routed.prompt_tokens > 4000  # the tools' schemas, whole
    assert (first.routed.hints, second.routed.hints) == ([], ["thought_signature"])


async def test_gemini_cli_top_k_is_named_as_not_sent_on_a_route_that_forwards_no_extras(
        gemini_edge: tuple[str, list[Exchange]]) -> None:
    """It sends topK 64 with every request: a route without engine extras serves it all the same, and the
    access line says topK was not sent."""
    url, exchanges = gemini_edge
    status, _ = await _stream_gemini(url, DEMO_MODEL, GEMINI_FIRST_TURN)
    assert status == 200
    assert exchanges[-1].routed.hints == ["generation_config.top_k"]


# --- a reasoning model behind the OpenAI bridge, two turns of a tool loop ----------------------------


def _sse(*docs: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(d).encode() + b"\n\n" for d in docs) + b"data: [DONE]\n\n"


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "qwen3",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


THINKING_CALL = _sse(  # as vLLM streams a reasoning model's tool call: reasoning apart, then the call
    _chunk({"role": "assistant", "reasoning_content": "The user wants the files; "}),
    _chunk({"reasoning_content": "I will run ls."}),
    _chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                            "function": {"name": "exec_command", "arguments": '{"cmd":"ls"}'}}]}),
    _chunk({}, "tool_calls"),
    {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "qwen3", "choices": [],
     "usage": {"prompt_tokens": 50, "completion_tokens": 9, "total_tokens": 59}})
FINAL = _sse(_chunk({"role": "assistant", "content": "a.txt"}, "stop"),
             {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "qwen3", "choices": [],
              "usage": {"prompt_tokens": 70, "completion_tokens": 2, "total_tokens": 72}})


@pytest.fixture
async def engine_edge() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """An edge whose route `qwen3` is an in-process OpenAI bridge to a scripted engine that records what it got."""
    received: list[dict[str, Any]] = []
    script = [THINKING_CALL, FINAL]

    async def complete(request: web.Request) -> web.StreamResponse:
        received.append(await request.json())
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        await out.write(script.pop(0))
        await out.write_eof()
        return out

    engine = web.Application()
    engine.router.add_post("/v1/chat/completions", complete)
    async with AsyncExitStack() as stack:
        engine_url = await stack.enter_async_context(serve_app(engine, "127.0.0.1", 0))
        bridge = Bridge(dialect="openai", target=f"{engine_url}/v1")
        settings = Settings(groups={"engine": Group(endpoints=[Endpoint(bridge=bridge)])},
                            routes=(Route(model="qwen3", group="engine", provider="self_hosted"),))
        url, _, _ = await recording_edge(stack, settings)
        yield url, received


def _events(body: bytes) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in body.decode().splitlines() if line.startswith("data: ")]


async def test_sealed_reasoning_reaches_the_engine_again_on_the_next_turn(
        engine_edge: tuple[str, list[dict[str, Any]]]) -> None:
    url, received = engine_edge
    turn: list[dict[str, Any]] = [{"role": "user", "content": "which files are here?"}]
    first = {"model": "qwen3", "stream": True, "store": False, "include": ["reasoning.encrypted_content"],
             "reasoning": {"summary": "auto"}, "input": turn,
             "tools": [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}}]}
    status, body = await _post(url, first)
    assert status == 200
    items = [e["item"] for e in _events(body) if e["type"] == "response.output_item.done"]
    assert [i["type"] for i in items] == ["reasoning", "function_call"]
    reasoning = items[0]
    assert reasoning["summary"] == [{"type": "summary_text", "text": "The user wants the files; I will run ls."}]
    assert reasoning["encrypted_content"].startswith("ingress:1:")

    # Codex sends the reasoning back as it got it, with `content: null`, then the call and its output
    turn += [{**reasoning, "content": None}, items[1],
             {"type": "function_call_output", "call_id": "call_1", "output": "a.txt"}]
    status, body = await _post(url, {**first, "input": turn})
    assert status == 200 and _events(body)[-1]["type"] == "response.completed"
    assistant = received[1]["messages"][1]
    assert assistant["role"] == "assistant" and assistant["tool_calls"][0]["id"] == "call_1"
    assert assistant["reasoning_content"] == "The user wants the files; I will run ls."
    assert "reasoning_content" not in received[0]["messages"][0]

    blob = reasoning["encrypted_content"]
    turn[1] = {**turn[1], "encrypted_content": blob[:-8] + ("A" * 8 if not blob.endswith("A" * 8) else "B" * 8)}
    status, body = await _post(url, {**first, "input": turn})
    assert status == 400
    error = json.loads(body)["error"]
    assert (error["param"], error["code"]) == ("input[1].encrypted_content", "invalid_encrypted_content")
    assert len(received) == 2  # refused before anything was sent
