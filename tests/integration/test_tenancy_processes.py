"""Tenancy in real `ingress serve` processes: the keys file re-read on SIGHUP while traffic goes on, and
the memory backend's share of each limit per worker."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import aiohttp
from fakes.processes import EdgeProcess, free_port
from waiting import eventually

from ingress.tenancy.keys import new_key

CHAT = "/v1/chat/completions"
BODY = {"model": "ingress-demo", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


def _entry(key_id: str, digest: str) -> str:
    return f'[[keys]]\nid = "{key_id}"\ntenant = "acme"\nhash = "{digest}"\n'




async def _status(http: aiohttp.ClientSession, url: str, key: str) -> int:
    async with http.post(url + CHAT, json=BODY, headers={"Authorization": f"Bearer {key}"}) as r:
        await r.read()
        return r.status


async def test_sighup_rereads_the_keys_file_without_dropping_traffic(tmp_path: Path) -> None:
    old, old_id, old_hash = new_key()
    added, added_id, added_hash = new_key()
    keys, config = tmp_path / "keys.toml", tmp_path / "ingress.toml"
    keys.write_text(_entry(old_id, old_hash))
    config.write_text(f'[tenancy]\nkeys_file = "{keys}"\n[tenancy.tenants.acme]\nlimits = {{ rpm = 100000 }}\n')
    edge = EdgeProcess(tmp_path, "edge", free_port(), ["--config", str(config)], 2, tmp_path / "metrics")
    try:
        await edge.started()
        statuses: list[int] = []
        stop = asyncio.Event()
        async with aiohttp.ClientSession() as http:

            async def traffic() -> None:  # the old key, all along
                while not stop.is_set():
                    statuses.append(await _status(http, edge.url, old))

            running = asyncio.create_task(traffic())
            assert await _status(http, edge.url, added) == 401
            keys.write_text(_entry(old_id, old_hash) + _entry(added_id, added_hash))
            edge.proc.send_signal(signal.SIGHUP)  # the supervisor passes it to every worker

            async def both_workers_know_it() -> bool:
                return all([await _status(http, edge.url, added) == 200 for _ in range(6)])

            await eventually(both_workers_know_it, "the added key accepted", timeout=15)
            keys.write_text("[[keys]]\nid = 'broken")  # a bad file: the keys in use stay
            edge.proc.send_signal(signal.SIGHUP)
            await eventually(lambda: len(edge.events("keys file not reloaded; the keys in use stay")) == 2,
                             "both workers refused the bad file", timeout=15)
            assert await _status(http, edge.url, added) == 200
            stop.set()
            await running
        assert statuses and set(statuses) == {200}  # no request of the old key failed meanwhile
        assert len(edge.events("keys reloaded")) == 2
        assert old not in edge.log.read_text() and added not in edge.log.read_text()
    finally:
        edge.kill()
