"""ingress/edge/conversations.py over HTTP on an edge of its own (no service behind it: no conversation call
reaches one): the methods each path takes, the 400s naming the field, the one 404 for an id that is
malformed, unknown or deleted, and the edge that keeps nothing. The SDK's calls, Redis and Valkey, and
isolation between keys: tests/integration/test_conversations.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import aiohttp
import pytest

from ingress.serve.app import create_app, serve_app
from ingress.settings import Settings
from ingress.state.settings import ResponsesSettings


async def _edge(stack: AsyncExitStack, settings: Settings) -> tuple[str, aiohttp.ClientSession]:
    url = await stack.enter_async_context(serve_app(create_app(settings), "127.0.0.1", 0))
    return url, await stack.enter_async_context(aiohttp.ClientSession())


@pytest.fixture
async def edge() -> AsyncIterator[tuple[str, aiohttp.ClientSession]]:
    async with AsyncExitStack() as stack:
        yield await _edge(stack, Settings(upstream="http://127.0.0.1:1"))


async def _call(edge: tuple[str, aiohttp.ClientSession], method: str, path: str,
                body: Any = None) -> tuple[int, Any]:
    url, session = edge
    async with session.request(method, f"{url}{path}", json=body) as r:
        return r.status, await r.json()


async def test_a_conversation_s_paths_take_their_methods(edge: tuple[str, aiohttp.ClientSession]) -> None:
    status, made = await _call(edge, "POST", "/v1/conversations", {"items": [{"role": "user", "content": "x"}]})
    assert status == 200 and made["object"] == "conversation" and made["metadata"] == {}
    base = f"/v1/conversations/{made['id']}"
    status, listed = await _call(edge, "GET", f"{base}/items")
    item = listed["data"][0]["id"]
    for method, path in (("PUT", base), ("DELETE", f"{base}/items"), ("POST", f"{base}/items/{item}"),
                         ("GET", "/v1/conversations")):
        assert (await _call(edge, method, path))[0] == 405, (method, path)
    status, got = await _call(edge, "GET", f"{base}/items/{item}")
    assert status == 200 and got["id"] == item and got["status"] == "completed"
    status, missing = await _call(edge, "GET", f"{base}/items/msg_nope")
    assert status == 404 and missing["error"]["code"] == "item_not_found" and missing["error"]["param"] == "item_id"
    assert (await _call(edge, "DELETE", f"{base}/items/{item}"))[1] == made
    assert (await _call(edge, "GET", f"{base}/items"))[1]["data"] == []


@pytest.mark.parametrize(("path", "body", "param"), [
    ("", {"metadata": {"k": 1}}, "metadata"),
    ("", {"items": [{"role": "robot", "content": "x"}]}, "items[0].role"),
    ("/{id}", {}, "metadata"),
    ("/{id}/items", {"items": []}, "items"),
    ("/{id}/items?include=everything", {"items": [{"role": "user", "content": "x"}]}, "include"),
])
async def test_a_bad_body_is_a_400_naming_the_field(edge: tuple[str, aiohttp.ClientSession], path: str,
                                                    body: Any, param: str) -> None:
    made = (await _call(edge, "POST", "/v1/conversations"))[1]
    status, refused = await _call(edge, "POST", "/v1/conversations" + path.replace("{id}", made["id"]), body)
    assert status == 400 and refused["error"]["param"] == param


@pytest.mark.parametrize("conversation_id", ["conv_" + "0" * 48, "nope", "conv_a%2Fb", "resp_" + "0" * 32])
async def test_an_id_that_names_no_conversation_is_one_404(edge: tuple[str, aiohttp.ClientSession],
                                                           conversation_id: str) -> None:
    one = {"items": [{"role": "user", "content": "x"}]}
    for method, path, body in (("GET", "", None), ("POST", "", {"metadata": {}}), ("DELETE", "", None),
                               ("GET", "/items", None), ("POST", "/items", one),
                               ("GET", "/items/msg_1", None), ("DELETE", "/items/msg_1", None)):
        status, answer = await _call(edge, method, f"/v1/conversations/{conversation_id}{path}", body)
        assert status == 404 and answer["error"]["code"] == "conversation_not_found", (method, path)


async def test_an_edge_that_keeps_nothing_has_no_conversations() -> None:
    async with AsyncExitStack() as stack:
        edge = await _edge(stack, Settings(upstream="http://127.0.0.1:1", responses=ResponsesSettings(backend="off")))
        for method, path in (("POST", ""), ("GET", "/conv_1"), ("GET", "/conv_1/items")):
            status, answer = await _call(edge, method, f"/v1/conversations{path}")
            assert status == 404 and "keeps no conversations" in answer["error"]["message"]
        status, refused = await _call(edge, "POST", "/v1/responses",
                                      {"model": "m", "input": "x", "conversation": "conv_1"})
        assert status == 400 and refused["error"]["param"] == "conversation"
