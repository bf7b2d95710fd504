"""Build the edge application and own its lifecycle: the shared ClientSession, the embedded demo."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
from aiohttp import web

from ingress import gctune
from ingress.demo.service import create_demo_app
from ingress.edge import handlers
from ingress.edge.middleware import edge_middleware
from ingress.pipeline import Gateway
from ingress.settings import Settings
from ingress.upstream.client import UpstreamClient
from ingress.wire.pool import BuilderPool

SETTINGS = web.AppKey("settings", Settings)


@asynccontextmanager
async def serve_app(app: web.Application, host: str, port: int) -> AsyncIterator[str]:
    """Run `app` on host:port (0: any free port) until the block ends; yields its base URL."""
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        sock = site._server.sockets[0]  # type: ignore[union-attr]  # started sites have a server
        bound_host, bound_port = sock.getsockname()[:2]
        yield f"http://{bound_host}:{bound_port}"
    finally:
        await runner.cleanup()


async def _gateway(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    async with _upstream_url(settings) as base_url:
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=60)
        async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:
            app[handlers.GATEWAY] = Gateway(
                settings=settings,
                builders=BuilderPool(size=settings.builder_pool_size),
                upstream=UpstreamClient(session, base_url, settings.timeouts, settings.max_answer_bytes),
                served=frozenset(settings.served_models()),
            )
            yield


@asynccontextmanager
async def _upstream_url(settings: Settings) -> AsyncIterator[str]:
    """The configured internal service, or the demo service started beside the edge on loopback."""
    if settings.upstream is not None:
        yield settings.upstream
        return
    async with serve_app(create_demo_app(), "127.0.0.1", 0) as url:
        yield url


async def tune_gc(app: web.Application) -> None:
    """An on_startup hook for a serving process (tests leave their own interpreter alone)."""
    settings = app[SETTINGS]
    gctune.tune(settings.gc_threshold0, freeze=settings.gc_freeze)


def create_app(settings: Settings) -> web.Application:
    app = web.Application(middlewares=[edge_middleware], client_max_size=settings.max_body_bytes)
    app[SETTINGS] = settings
    app.cleanup_ctx.append(_gateway)
    handlers.add_routes(app)
    return app
