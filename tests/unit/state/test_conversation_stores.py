"""Conversation stores (ingress/state/conversation_stores.py): in memory, each call on a fake clock, in the
same byte bound as the stored responses; the Redis backend's failures are 503s (its script runs against
real Redis and Valkey servers in tests/integration/test_conversations.py)."""

from __future__ import annotations

import asyncio

import pytest
from metric_values import sample_value

from ingress.errors import StoreUnavailable
from ingress.state.conversation_stores import MemoryConversations, RedisConversations
from ingress.tenancy.stores.breaker import Breaker


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_conversation_is_made_read_changed_appended_to_and_deleted_under_its_owner() -> None:
    async def run() -> None:
        store = MemoryConversations(100_000, retention=60, clock=Clock())
        await store.create_conversation("o", "conv_1", b'{"o":1}', [b"a", b"b"])
        assert await store.read_conversation("o", "conv_1") == (b'{"o":1}', [b"a", b"b"])
        assert await store.read_conversation("p", "conv_1") is None  # another owner's: unknown
        assert await store.get("o", "conv_1") is None  # not a stored response
        assert await store.update_conversation("o", "conv_1", b'{"o":2}')
        assert not await store.update_conversation("p", "conv_1", b"{}")
        assert await store.append_items("o", "conv_1", [b"c", b"d"], 0) == "appended"
        assert await store.append_items("p", "conv_1", [b"x"], 0) == "missing"
        assert await store.read_conversation("o", "conv_1") == (b'{"o":2}', [b"a", b"b", b"c", b"d"])
        assert await store.remove_item("o", "conv_1", b"b")
        assert await store.remove_item("o", "conv_1", b"b") is False
        assert await store.remove_item("p", "conv_1", b"a") is None
        assert await store.read_conversation("o", "conv_1") == (b'{"o":2}', [b"a", b"c", b"d"])
        assert not await store.delete_conversation("p", "conv_1")
        assert await store.delete_conversation("o", "conv_1")
        assert await store.append_items("o", "conv_1", [b"e"], 0) == "missing"  # never made again
        assert store.size == 0

    asyncio.run(run())


def test_items_past_the_limit_are_refused_all_or_none() -> None:
    async def run() -> None:
        store = MemoryConversations(100_000, retention=60, clock=Clock())
        await store.create_conversation("o", "conv_1", b"{}", [b"x" * 60])
        assert await store.append_items("o", "conv_1", [b"y" * 30, b"z" * 20], 100) == "full"
        assert await store.append_items("o", "conv_1", [b"y" * 30], 100) == "appended"
        assert await store.read_conversation("o", "conv_1") == (b"{}", [b"x" * 60, b"y" * 30])
        assert await store.append_items("o", "conv_1", [b"z" * 20], 0) == "appended"  # 0: no limit

    asyncio.run(run())


def test_a_conversation_lives_its_retention_from_its_last_change() -> None:
    async def run() -> None:
        clock = Clock()
        store = MemoryConversations(100_000, retention=60, clock=clock)
        await store.create_conversation("o", "conv_1", b"{}", [])
        clock.now += 50
        assert await store.append_items("o", "conv_1", [b"a"], 0) == "appended"
        clock.now += 50
        assert await store.read_conversation("o", "conv_1") == (b"{}", [b"a"])
        clock.now += 10
        assert await store.read_conversation("o", "conv_1") is None

    asyncio.run(run())


def test_conversations_and_responses_share_one_bound() -> None:
    async def run() -> None:
        store = MemoryConversations(2_000, retention=60, clock=Clock())
        await store.put("o", "resp_1", b"r" * 500)
        await store.create_conversation("o", "conv_1", b"{}", [b"a" * 500])
        before = store.size
        await store.append_items("o", "conv_1", [b"b" * 600], 0)  # the least recently used response makes room
        assert await store.get("o", "resp_1") is None and store.size <= 2_000 and store.size > before - 1000
        with pytest.raises(StoreUnavailable):  # larger than the whole bound: not kept, and the old one stays
            await store.append_items("o", "conv_1", [b"c" * 2_000], 0)
        assert await store.read_conversation("o", "conv_1") == (b"{}", [b"a" * 500, b"b" * 600])

    asyncio.run(run())


def test_a_redis_that_cannot_be_reached_is_a_503_for_every_call() -> None:
    async def run() -> None:
        store = RedisConversations("redis://127.0.0.1:1/0", "t", retention=60, timeout=0.5, breaker=Breaker(9, 60.0))
        before = sample_value("ingress_response_store_errors_total", {"backend": "redis", "call": "read"}) or 0
        try:
            for call in (store.create_conversation("o", "conv_1", b"{}", []), store.read_conversation("o", "conv_1"),
                         store.update_conversation("o", "conv_1", b"{}"),
                         store.append_items("o", "conv_1", [b"a"], 0), store.remove_item("o", "conv_1", b"a"),
                         store.delete_conversation("o", "conv_1")):
                with pytest.raises(StoreUnavailable) as raised:
                    await call
                assert raised.value.status == 503 and raised.value.retry_after == 1
            labels = {"backend": "redis", "call": "read"}
            assert sample_value("ingress_response_store_errors_total", labels) == before + 1
        finally:
            await store.close()

    asyncio.run(run())
