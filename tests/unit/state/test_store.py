"""The store the edge asks (ingress/state/store.py): the backend `[responses]` chooses, owners by principal."""

from __future__ import annotations

import asyncio

from metric_values import sample_value

from ingress.state.settings import ResponsesSettings
from ingress.state.store import ResponseStore
from ingress.state.stores import MemoryResponses, RedisResponses
from ingress.tenancy.settings import Redis


def test_the_backend_follows_the_settings() -> None:
    redis = Redis(url="redis://127.0.0.1:1/0")
    assert ResponseStore.build(ResponsesSettings(backend="off"), redis) is None
    memory = ResponseStore.build(ResponsesSettings(), None)
    assert memory is not None and isinstance(memory.backend, MemoryResponses)
    shared = ResponseStore.build(ResponsesSettings(), redis)
    assert shared is not None and isinstance(shared.backend, RedisResponses)
    assert shared.backend.prefix == "ingress:rs:" and shared.backend.retention_ms == 30 * 86_400_000
    asyncio.run(shared.close())


def test_an_open_edge_has_one_namespace_and_puts_are_counted() -> None:
    async def run() -> None:
        store = ResponseStore.build(ResponsesSettings(), None)
        assert store is not None and store.available()
        before = sample_value("ingress_responses_stored_total", {"backend": "memory"}) or 0
        await store.put(store.owner(None), "resp_1", b"r")
        assert await store.get(store.owner(None), "resp_1") == b"r"
        assert sample_value("ingress_responses_stored_total", {"backend": "memory"}) == before + 1
        assert await store.delete(store.owner(None), "resp_1")

    asyncio.run(run())
