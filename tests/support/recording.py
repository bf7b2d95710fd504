"""An in-process edge that records each request's Exchange, so a test sees what the edge decided."""

from __future__ import annotations

from contextlib import AsyncExitStack

from aiohttp import web

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
