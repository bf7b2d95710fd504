"""What coding agents send, through a real edge: Codex CLI's first request (its fixture, as it sent it)
served on every kind of route, with what only OpenAI's servers act on named in the access line; OpenAI's
built-in tools left out or refused as the route says."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import aiohttp
import pytest
from recording import recording_edge

from ingress.exchange import Exchange
from ingress.settings import DEMO_MODEL, EMBEDDED, Endpoint, Group, Route, Settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "codex"
CODEX_FIRST_TURN = json.loads((FIXTURES / "first_turn.json").read_text())
CODEX_HEADERS = json.loads((FIXTURES / "first_turn.headers.json").read_text())


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
    [ex] = exchanges
    assert ex.dropped == ["client_metadata", "input.internal_chat_message_metadata_passthrough", "tools.web_search"]


async def test_a_route_that_refuses_built_in_tools_names_the_tool(edge: tuple[str, list[Exchange]]) -> None:
    url, _ = edge
    status, body = await _post(url, {**CODEX_FIRST_TURN, "model": "strict"})
    assert status == 400
    error = json.loads(body)["error"]
    assert (error["param"], error["code"]) == ("tools[8].type", "unsupported_parameter")
    assert "web_search" in error["message"]
    without = [t for t in CODEX_FIRST_TURN["tools"] if t["type"] != "web_search"]  # type: ignore[attr-defined]
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
