"""What the admin API's tests share: two edge processes on one real Redis (or Valkey), each with the admin
listener on a port of its own and one admin key; a chat request's status through the openai SDK; an admin
call; and the bound a change's propagation is held to (tests/integration/test_admin_keys.py and
test_admin_tenants.py)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import openai
from fakes.processes import EdgeProcess, free_port
from redis_servers import Server
from waiting import eventually

from ingress.tenancy.keys import new_key

ADMIN, ADMIN_ID, ADMIN_HASH = new_key()
PROPAGATION_S = 1.0  # what the issue promises: every replica sees a change within one second
SLACK_S = 1.0  # the test's own requests and a shared machine's scheduling, on top of the promise


class Edge:
    def __init__(self, process: EdgeProcess, admin_port: int) -> None:
        self.process = process
        self.admin = f"http://127.0.0.1:{admin_port}/admin/v1"

    def client(self, key: str) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.process.url}/v1", api_key=key, max_retries=0)

    async def status(self, key: str, model: str = "ingress-demo") -> int:
        """The status of one chat request with `key` (200 when answered), through the openai SDK."""
        client = self.client(key)
        try:
            answer = await client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=3)
            assert answer.choices
            return 200
        except openai.APIStatusError as exc:
            return exc.status_code
        finally:
            await client.close()

    async def works(self, key: str) -> bool:
        """Whether the edge serves a chat request with `key` (a 401 is False; any other refusal fails)."""
        status = await self.status(key)
        assert status in (200, 401), status
        return status == 200


@asynccontextmanager
async def two_edges(tmp_path: Path, store: Server, config: str, admin_keys: str = "",
                    admin_ports: tuple[int, int] | None = None) -> AsyncIterator[tuple[Edge, Edge]]:
    """Edges A and B with `config` (TOML, before the sections added here), the tenancy on `store` and the
    admin API on a listener of its own (on `admin_ports`, when a test must name them in `config`) with ADMIN's
    key (and `admin_keys`, `[[admin.keys]]` entries), stopped when the block ends."""
    made = []
    try:
        for i, name in enumerate(("a", "b")):
            admin_port = admin_ports[i] if admin_ports is not None else free_port()
            path = tmp_path / f"{name}.toml"
            path.write_text(f"""{config}
[tenancy]
backend = "redis"
redis = {{ url = "{store.url}", deadline_ms = 2000 }}

[admin]
listen = "127.0.0.1:{admin_port}"
[[admin.keys]]
id = "{ADMIN_ID}"
hash = "{ADMIN_HASH}"
role = "admin"
{admin_keys}""")
            process = EdgeProcess(tmp_path, f"edge-{name}", free_port(), ["--config", str(path)], 1, None)
            made.append(Edge(process, admin_port))
        for edge in made:
            await edge.process.started()
        yield made[0], made[1]
    finally:
        for edge in made:
            edge.process.kill()


async def admin(http: aiohttp.ClientSession, method: str, url: str, body: dict[str, Any] | None = None,
                status: int = 200) -> Any:
    """One admin call with ADMIN's key: its JSON, once its status is `status`."""
    async with http.request(method, url, json=body, headers={"Authorization": f"Bearer {ADMIN}"}) as r:
        assert r.status == status, await r.text()
        return await r.json()


async def within(condition: Any, what: str) -> float:
    """How long `condition` took to hold: the promise (workers poll the store every 0.25 s), with slack for
    the checking request itself on a busy machine; printed, so a run shows the figure."""
    start = time.monotonic()
    await eventually(condition, what, timeout=3 * PROPAGATION_S + SLACK_S, interval=0.02)
    took = time.monotonic() - start
    print(f"{what}: {took * 1000:.0f} ms")
    assert took < PROPAGATION_S + SLACK_S, f"{what}: {took:.2f} s"
    return took
