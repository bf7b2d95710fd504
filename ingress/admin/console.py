"""The admin console: one page and its script and style (ingress/admin/console/, package data: no build step,
nothing fetched from elsewhere), served by the admin listener at `/admin/` (docs/admin.md, "Console").

The files are read once, when the app is made, and answered as they are, to anyone: they hold no secret,
and every call the page makes goes through the admin API's credentials (session.py's cookie and CSRF
token). Every answer of the admin listener carries the headers below: no script but these files' (no
inline script, no other origin), no framing, no referrer, no sniffing; the API's answers are not cached.
"""

from __future__ import annotations

from importlib import resources

from aiohttp import web

PREFIX = "/admin/"
FILES = {"": ("index.html", "text/html"), "console.js": ("console.js", "text/javascript"),
         "console.css": ("console.css", "text/css")}
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer",
           "X-Content-Type-Options": "nosniff", "Cross-Origin-Opener-Policy": "same-origin"}
PAGES = web.AppKey("console_pages", dict[str, bytes])


def read_files() -> dict[str, bytes]:
    """Each file's bytes, by the path after /admin/ it is served at."""
    folder = resources.files("ingress.admin") / "console"
    return {path: (folder / name).read_bytes() for path, (name, _) in FILES.items()}


def is_open(request: web.Request) -> bool:
    """The console's own files (and /admin, sent on to /admin/): answered without credentials."""
    return request.method in ("GET", "HEAD") and (
        request.path == PREFIX.rstrip("/") or (request.path.startswith(PREFIX)
                                               and request.path[len(PREFIX):] in FILES))


async def page(request: web.Request) -> web.Response:
    path = request.match_info.get("file", "")
    kind = FILES[path][1]
    # asked for again each time: a page and a script of two versions are never run together after an upgrade
    return web.Response(body=request.app[PAGES][path], content_type=kind, charset="utf-8",
                        headers={"Cache-Control": "no-cache"})


async def to_console(request: web.Request) -> web.Response:
    raise web.HTTPMovedPermanently(PREFIX)


async def _secured(request: web.Request, answer: web.StreamResponse) -> None:
    for name, value in HEADERS.items():
        answer.headers.setdefault(name, value)
    if request.path.startswith("/admin/v1/"):  # keys, sessions and their CSRF tokens: never kept by a cache
        answer.headers.setdefault("Cache-Control", "no-store")


def add_routes(app: web.Application, sso: bool = False) -> None:
    """`sso`: the page shows "Sign in with SSO" (sso.py's routes exist); it is told so in the page itself."""
    app[PAGES] = read_files()
    if sso:
        app[PAGES][""] = app[PAGES][""].replace(b"<body>", b'<body data-sso="on">', 1)
    app.router.add_get(PREFIX.rstrip("/"), to_console)
    app.router.add_get(PREFIX, page)
    for path in FILES:
        if path:
            app.router.add_get(PREFIX + "{file:" + path.replace(".", r"\.") + "}", page)
    app.on_response_prepare.append(_secured)
