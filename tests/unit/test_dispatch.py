"""FixedRoutes: a plain route is resolved once and remembered; everything else is aiohttp's own path."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from ingress.app import create_app, serve_app
from ingress.edge.dispatch import EdgeRunner, FixedRoutes
from ingress.settings import DEMO_MODEL, Settings

CHAT = "/v1/chat/completions"
GREETING = web.AppKey("greeting", str)
BODY = {"model": DEMO_MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


class Edge:
    def __init__(self, app: web.Application, url: str, session: aiohttp.ClientSession) -> None:
        self.app, self.url, self.session = app, url, session
        self.resolved: list[str] = []  # the paths the router was asked to resolve, in order
        self.dispatchers: list[FixedRoutes] = []  # the server's

    async def metric(self, name: str, route: str) -> float:
        async with self.session.get(self.url + "/metrics") as r:
            text = await r.text()
        found = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                 if line.startswith(name + "{") and f'route="{route}"' in line]
        return sum(found)


@pytest.fixture
async def edge(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Edge]:
    app = create_app(Settings())
    router = app.router
    resolve = router.resolve
    made: list[FixedRoutes] = []
    init = FixedRoutes.__init__

    def record(self: FixedRoutes, app: web.Application) -> None:
        init(self, app)
        made.append(self)

    monkeypatch.setattr(FixedRoutes, "__init__", record)
    async with serve_app(app, "127.0.0.1", 0) as url, aiohttp.ClientSession() as session:
        found = Edge(app, url, session)
        found.dispatchers = made

        async def counted(request: web.Request) -> Any:
            found.resolved.append(request.rel_url.path)
            return await resolve(request)

        monkeypatch.setattr(router, "resolve", counted)
        yield found


async def test_a_plain_route_is_resolved_once_and_then_served_from_what_was_remembered(edge: Edge) -> None:
    for _ in range(5):
        async with edge.session.post(edge.url + CHAT, json=BODY) as r:
            assert r.status == 200
            assert (await r.json())["object"] == "chat.completion"
    # The first request: FixedRoutes' own resolve, then aiohttp's in Application._handle. None after it.
    assert edge.resolved == [CHAT, CHAT]
    # The remembered route is still the route: the metrics name it, as for a request aiohttp resolved.
    assert await edge.metric("ingress_requests_total", CHAT) == 5


async def test_routes_with_variables_are_resolved_every_time(edge: Edge) -> None:
    for _ in range(3):
        async with edge.session.get(edge.url + f"/v1/models/{DEMO_MODEL}") as r:
            assert r.status == 200
            assert (await r.json())["id"] == DEMO_MODEL
    async with edge.session.get(edge.url + "/v1/models/no-such-model") as r:
        assert r.status == 404
        assert (await r.json())["error"]["code"] == "model_not_found"
    assert edge.resolved.count(f"/v1/models/{DEMO_MODEL}") == 6  # twice each: never remembered


async def test_unknown_paths_and_methods_keep_their_errors_and_are_never_remembered(edge: Edge) -> None:
    for attempt in range(2):
        async with edge.session.get(edge.url + CHAT) as r:  # a known path, the wrong method
            assert r.status == 405, attempt
            assert (await r.json())["error"]["type"] == "invalid_request_error"
        async with edge.session.post(edge.url + "/v1/nothing-here") as r:
            assert r.status == 404, attempt
            assert (await r.json())["error"]["code"] == "unknown_url"
    for i in range(200):  # any number of distinct paths a client makes up
        async with edge.session.get(edge.url + f"/v1/made-up/{i}") as r:
            assert r.status == 404
    plain = sum(1 for resource in edge.app.router.resources() if "{" not in resource.canonical)
    [dispatcher] = [d for d in edge.dispatchers if d._app is edge.app]  # the demo service has its own
    remembered = set(dispatcher._found)
    assert ("GET", CHAT) not in remembered and ("POST", "/v1/nothing-here") not in remembered
    assert len(remembered) <= plain
    assert all("{" not in path and "made-up" not in path for _, path in remembered)


async def test_a_request_that_expects_100_continue_takes_aiohttps_path(edge: Edge) -> None:
    async with edge.session.post(edge.url + CHAT, json=BODY) as r:  # remembered now
        assert r.status == 200
    before = len(edge.resolved)
    async with edge.session.post(edge.url + CHAT, json=BODY, expect100=True) as r:
        assert r.status == 200
        assert (await r.json())["object"] == "chat.completion"
    assert len(edge.resolved) == before + 1  # Application._handle's own resolve, for its Expect handling


async def test_the_runner_serves_any_app_through_fixed_routes() -> None:
    seen: list[str] = []

    async def hello(request: web.Request) -> web.Response:
        seen.append(request.match_info.route.resource.canonical if request.match_info.route.resource else "-")
        return web.Response(text=request.app[GREETING])

    app = web.Application()
    app[GREETING] = "hello"
    app.router.add_get("/hello", hello)
    runner = EdgeRunner(app)
    await runner.setup()
    try:
        assert isinstance(runner.server.request_handler, FixedRoutes)  # type: ignore[union-attr]
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        async with aiohttp.ClientSession() as session:
            for _ in range(3):
                async with session.get(f"http://127.0.0.1:{port}/hello") as r:
                    assert await r.text() == "hello"
    finally:
        await runner.cleanup()
    assert seen == ["/hello"] * 3
