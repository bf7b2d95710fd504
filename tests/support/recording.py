"""An in-process edge that records each request's Exchange, so a test sees what the edge decided; and a demo
service that records each buffer it receives, so a test sees what the edge sent."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack

from aiohttp import web

from ingress.demo.service import create_demo_app
from ingress.edge.appkeys import EXCHANGE
from ingress.exchange import Exchange
from ingress.serve.app import create_app, serve_app
from ingress.settings import Settings


async def recording_edge(stack: AsyncExitStack, settings: Settings) -> tuple[str, web.Application, list[Exchange]]:
    """Serve an edge on a free loopback port until `stack` closes: its URL, its app, and every request's
    Exchange in the order their responses started."""
    app = create_app(settings)
    exchanges: list[Exchange] = []

    async def record(request: web.Request, response: web.StreamResponse) -> None:
        exchanges.append(request[EXCHANGE])

    app.on_response_prepare.append(record)
    url: str = await stack.enter_async_context(serve_app(app, "127.0.0.1", 0))
    return url, app, exchanges


def recording_demo(bodies: list[bytes]) -> web.Application:
    """The demo service, keeping every request body it receives in `bodies`."""

    @web.middleware
    async def record(request: web.Request,
                     handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        bodies.append(await request.read())
        return await handler(request)

    demo = create_demo_app()
    demo.middlewares.append(record)
    return demo
