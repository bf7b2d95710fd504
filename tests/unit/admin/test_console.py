"""The console's files: served at /admin/ without credentials, with a policy that allows no script but
their own (none inline, nothing from another origin), no framing and no referrer; shipped as package data.
(In a real browser: tests/integration/test_admin_console.py.)"""

from __future__ import annotations

import tomllib
from collections.abc import AsyncIterator
from fnmatch import fnmatch
from html.parser import HTMLParser
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from ingress.admin.api import create_admin_app
from ingress.admin.console import FILES, read_files
from ingress.admin.keystore import MemoryKeyStore
from ingress.admin.settings import Admin, AdminKey
from ingress.tenancy import build
from ingress.tenancy.keys import new_key
from ingress.tenancy.settings import Tenancy as TenancySettings

ADMIN, ADMIN_ID, ADMIN_HASH = new_key()
ROOT = Path(__file__).resolve().parents[3]
Client = TestClient[web.Request, web.Application]


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    settings = Admin(listen="127.0.0.1:0", keys=(AdminKey(id=ADMIN_ID, hash=ADMIN_HASH, role="admin"),))
    app = create_admin_app(settings, MemoryKeyStore(), build(TenancySettings()))
    async with TestClient[web.Request, web.Application](TestServer(app)) as c:
        yield c


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[dict[str, str | None]] = []
        self.inline: list[str] = []  # what a strict policy would refuse: inline code and styles
        self.urls: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "script":
            self.scripts.append(found)
            self._in_script = True
        self.inline += [name for name in found if name.startswith("on") or name == "style"]
        self.urls += [value for name, value in found.items() if name in ("src", "href") and value]
        if tag == "style":
            self.inline.append("<style>")

    def handle_endtag(self, tag: str) -> None:
        self._in_script = self._in_script and tag != "script"

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.inline.append(data)


@pytest.mark.parametrize(("path", "kind"), [("/admin/", "text/html"), ("/admin/console.js", "text/javascript"),
                                            ("/admin/console.css", "text/css")])
async def test_each_file_is_served_without_credentials_under_a_strict_policy(client: Client, path: str,
                                                                             kind: str) -> None:
    async with client.get(path) as r:
        assert r.status == 200 and r.content_type == kind
        assert await r.read() == read_files()[path.removeprefix("/admin/")]
        csp = r.headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "default-src 'none'" in csp
        assert "unsafe" not in csp
        assert r.headers["X-Frame-Options"] == "DENY" and r.headers["Referrer-Policy"] == "no-referrer"
        assert r.headers["X-Content-Type-Options"] == "nosniff"


async def test_admin_is_sent_on_to_the_page_and_nothing_else_is_open(client: Client) -> None:
    async with client.get("/admin", allow_redirects=False) as r:
        assert r.status == 301 and r.headers["Location"] == "/admin/"
    for path in ("/admin/other.js", "/admin/v1/keys", "/admin/console.js/x"):
        async with client.get(path) as r:
            assert r.status == 401, path
            assert r.headers["X-Frame-Options"] == "DENY"  # the API's answers carry the headers too
    async with client.post("/admin/", json={}) as r:
        assert r.status == 401


def test_the_page_runs_no_inline_code_and_loads_nothing_from_elsewhere() -> None:
    page = _Page()
    page.feed(read_files()[""].decode())
    assert page.scripts == [{"src": "console.js", "defer": None}]
    assert page.inline == []
    assert page.urls and all("//" not in url and ":" not in url for url in page.urls)
    script = read_files()["console.js"].decode()
    assert "innerHTML" not in script and "eval(" not in script and "http" not in script.replace("http://www.w3.org", "")


def test_the_files_are_package_data_of_the_wheel() -> None:
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["ingress.admin"]
    for name, _ in FILES.values():
        assert any(fnmatch(f"console/{name}", pattern) for pattern in globs), name
        assert (ROOT / "ingress" / "admin" / "console" / name).is_file()
