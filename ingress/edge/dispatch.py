"""The edge's routes found in one lookup: aiohttp's `Application._handle`, remembered per method and path.

For every request `Application._handle` resolves the path through the router (a coroutine walking the
path's parts, a new match object), adds the application to that match, freezes it, and looks the
middleware-wrapped handler up in a cache keyed by the handler and the applications. For a route whose
path has no variables all of that gives the same answer every time. `FixedRoutes` asks aiohttp once for
each method and path it is sent, and keeps the frozen match and the wrapped handler of those whose
route has a plain path; later requests get them from one dict lookup (hot, 1.3 µs against 5.5).
Everything else (paths with variables, unknown paths and methods, `Expect` headers) is aiohttp's own path,
every time.
"""

from __future__ import annotations

from typing import cast

from aiohttp import hdrs, web
from aiohttp.web_app import _cached_build_middleware
from aiohttp.web_urldispatcher import PlainResource, UrlMappingMatchInfo

from ingress.edge.middleware import Handler

_Found = tuple[UrlMappingMatchInfo, Handler]


class FixedRoutes:
    """The server's request handler: the app's, with its plain routes remembered after their first request."""

    __slots__ = ("_app", "_found")

    def __init__(self, app: web.Application) -> None:
        self._app = app
        # (method, path) -> what aiohttp matched. Only the app's plain routes get in, so it stays as
        # small as the route table, whatever paths clients send.
        self._found: dict[tuple[str, str], _Found] = {}

    async def __call__(self, base: web.BaseRequest) -> web.StreamResponse:
        request = cast(web.Request, base)  # what the app's request factory makes
        key = (request.method, request.rel_url.path_safe)
        found = self._found.get(key)
        if found is None:
            await self._remember(request, key)
        elif not request.headers.get(hdrs.EXPECT):  # Application._handle answers those first
            request._match_info, handler = found  # frozen and never changed: one shared by every request
            return await handler(request)
        return await self._app._handle(request)

    async def _remember(self, request: web.Request, key: tuple[str, str]) -> None:
        app = self._app
        match = await app.router.resolve(request)
        # A plain route of this app's own router (not an error's match, not a sub-application's), made
        # ready as Application._handle (aiohttp 3.14) makes the match it resolves itself.
        if type(match) is UrlMappingMatchInfo and isinstance(match.route.resource, PlainResource) and not match.apps:
            match.add_app(app)
            match.freeze()
            self._found[key] = (match, _cached_build_middleware(match.handler, match.apps))


class EdgeRunner(web.AppRunner):
    """aiohttp's AppRunner, its server's requests handled by `FixedRoutes`."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.request_handler = FixedRoutes(self.app)
        return server
