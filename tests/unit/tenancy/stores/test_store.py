"""tenancy/stores/store.py: LocalStore, the memory backend behind the Store protocol: a worker's share of
every limit, admission and settling through the protocol's awaitables, renewing that also sweeps, and
tombstones shorter than the Redis store's."""

from __future__ import annotations

import pytest

from ingress.tenancy.plan import Actual
from ingress.tenancy.stores.memory import LOCAL_TOMBSTONE_US, TOMBSTONE_US, MemoryStore
from ingress.tenancy.stores.store import LocalStore, Store
from unit.tenancy.stores.test_memory import SECOND, Clock, checks, plan


@pytest.fixture
def clock() -> Clock:
    return Clock()


async def test_a_local_store_admits_its_share_and_settling_frees_a_slot() -> None:
    store: Store = LocalStore(share=0.5)
    assert store.share == 0.5
    cs = checks(concurrency=4)  # two slots for this worker
    assert [(await store.admit(plan(cs, t))).admitted for t in ("a", "b", "c")] == [True, True, False]
    await store.settle("a", Actual(10, 1))
    assert (await store.admit(plan(cs, "c"))).admitted
    await store.close()


async def test_renewing_extends_leases_and_sweeps_what_expired() -> None:
    store, clock = LocalStore(), Clock()
    store.memory.clock = clock
    cs = checks(concurrency=1)
    assert (await store.admit(plan(cs, "a"))).admitted
    await store.settle("a", None)
    assert (await store.admit(plan(cs, "b"))).admitted
    clock.now += 20 * SECOND
    await store.renew(["b"])
    assert "a" in store.memory._settled  # its tombstone lives 30 s
    clock.now += 20 * SECOND
    await store.renew(["b"])
    assert store.memory._settled == {}  # swept on renewing
    assert not (await store.admit(plan(cs, "c"))).admitted  # b, renewed, still holds the slot
    assert store.memory.leases_expired == 0


def test_the_memory_backend_forgets_settled_tickets_within_a_minute(clock: Clock) -> None:
    """Its tombstones (LocalStore's) last 30 s, not the Redis store's 600: a worker serving 1,000 requests
    a second would otherwise hold ~600,000 of them. Within their life, settling twice still refunds once."""
    store, cs = MemoryStore(clock=clock, tombstone_us=LOCAL_TOMBSTONE_US), checks(tpm=1000)
    assert LocalStore().memory.tombstone_us == LOCAL_TOMBSTONE_US < TOMBSTONE_US
    for i in range(100):
        assert store.admit(plan(cs, f"t{i}", input_tokens=5)).admitted
        assert store.settle(f"t{i}", Actual(5, 0))
    assert not store.settle("t0", Actual(5, 0))  # settled before: nothing refunded twice
    clock.now += LOCAL_TOMBSTONE_US - SECOND
    store.sweep()
    assert len(store._settled) == 100
    clock.now += 2 * SECOND
    store.sweep()
    assert store._settled == {}
