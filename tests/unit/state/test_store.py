"""The store the edge asks (ingress/state/store.py): the backend `[responses]` chooses, owners by principal."""

from __future__ import annotations

import asyncio

from metric_values import sample_value

from ingress.state.event_stores import MemoryEvents
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


def test_sealed_every_value_is_kept_sealed_and_read_as_it_was() -> None:
    """With a key, the backend holds no value in the clear; what does not open in its place is none (404)."""
    from ingress.state.seal import MAGIC, AtRest

    async def run() -> None:
        backend = MemoryEvents(1 << 20, 60)
        store = ResponseStore(ResponsesSettings(), backend, AtRest([bytes(32)]))
        await store.put("acme/k1", "resp_1", b'{"secret": "the prompt"}')
        await store.create_conversation("acme/k1", "conv_1", b'{"id": "conv_1"}', [b'"one"', b'"two"'])
        assert await store.append_items("acme/k1", "conv_1", [b'"three"'], 0) == "appended"
        await store.append_events("acme/k1", "resp_1", [b'{"n": 0}', b'{"n": 1}'])
        kept = [v for _, v in backend._records.values()]
        assert all(b"secret" not in v and v.startswith(MAGIC) for v in kept if isinstance(v, bytes))
        assert all(i.startswith(MAGIC) for v in kept if not isinstance(v, bytes) for i in v.items)
        assert await store.get("acme/k1", "resp_1") == b'{"secret": "the prompt"}'
        assert await store.read_conversation("acme/k1", "conv_1") == (b'{"id": "conv_1"}', [b'"one"', b'"two"',
                                                                                            b'"three"'])
        assert await store.read_events("acme/k1", "resp_1", 1) == [b'{"n": 1}']
        assert await store.remove_item("acme/k1", "conv_1", b'"two"') is True
        assert await store.remove_item("acme/k1", "conv_1", b'"two"') is False
        assert await store.remove_item("acme/k1", "conv_2", b'"two"') is None
        assert (await store.read_conversation("acme/k1", "conv_1") or (b"", []))[1] == [b'"one"', b'"three"']
        # a value copied under another owner's key does not open there: it is as unknown as none
        before = sample_value("ingress_response_store_errors_total", {"backend": "memory", "call": "open"}) or 0
        await backend.put("globex/k2", "resp_1", await backend.get("acme/k1", "resp_1") or b"")
        assert await store.get("globex/k2", "resp_1") is None
        await backend.put("acme/k1", "resp_2", b'{"kept": "before sealing"}')
        assert await store.get("acme/k1", "resp_2") is None
        assert sample_value("ingress_response_store_errors_total", {"backend": "memory", "call": "open"}) == before + 2

    asyncio.run(run())


def test_an_admin_scope_key_reads_its_tenant_s_keys_namespaces_after_its_own() -> None:
    from ingress.tenancy import Tenancy as Tenancies
    from ingress.tenancy import build
    from ingress.tenancy.keys import new_key
    from ingress.tenancy.settings import Key, Tenancy, Tenant

    made = {name: new_key() for name in ("a1", "a9", "b1")}
    keys = tuple(Key(id=made[n][1], tenant="globex" if n == "b1" else "acme", hash=made[n][2],
                     scope="admin" if n == "a9" else "own") for n in made)
    tenancy: Tenancies = build(Tenancy(keys=keys, tenants={"acme": Tenant(), "globex": Tenant()}), 1)
    a1, a9, b1 = (tenancy.policy.authenticate({"Authorization": f"Bearer {made[n][0]}"}) for n in made)
    store = ResponseStore.build(ResponsesSettings(), None)
    assert store is not None
    assert store.readers(a9, tenancy) == (f"acme/{made['a9'][1]}", f"acme/{made['a1'][1]}")
    assert store.readers(a1, tenancy) == (f"acme/{made['a1'][1]}",) and store.readers(None, None) == ("open",)
    assert store.readers(b1, tenancy) == (f"globex/{made['b1'][1]}",)
    shared = ResponseStore.build(ResponsesSettings(scope="tenant"), None)
    assert shared is not None and shared.readers(a9, tenancy) == ("acme",)  # one namespace already

    async def run() -> None:
        await store.put(f"acme/{made['a1'][1]}", "resp_1", b"r")
        owners = store.readers(a9, tenancy)
        assert await store.first(owners, lambda o: store.get(o, "resp_1")) == (owners[1], b"r")
        assert await store.first(owners, lambda o: store.get(o, "resp_2")) is None

    asyncio.run(run())
