"""The stages of stored responses (ingress/pipeline/stored.py) on a memory store: what recall finds, whose
it is, what kept_input sizes and refuses, that a store: false request never asks the store, and a
conversation's items carried before a request's own and each turn appended when it is kept."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import msgspec
import pytest

from ingress.errors import InvalidRequest, NotFound, PayloadTooLarge, StoreUnavailable
from ingress.exchange import Exchange
from ingress.oai.responses import MessageItem, OutputText
from ingress.oai.responses_answers import MessageOut, OutputItem, OutputTextOut
from ingress.oai.responses_codec import decode_responses_request_forwarding
from ingress.pipeline.gateway import Gateway
from ingress.pipeline.stored import Recalled, keep, kept_input, recall
from ingress.state import ResponsesSettings, ResponseStore
from ingress.state import conversation as cv
from ingress.state.record import encode_record, input_items, response_json
from ingress.translate.responses import response_object


def _gateway(store: ResponseStore | None) -> Gateway:
    return cast(Gateway, SimpleNamespace(responses=store))


def _store(**settings: Any) -> ResponseStore:
    store = ResponseStore.build(ResponsesSettings(backend="memory", **settings), None)
    assert store is not None
    return store


def _body(**fields: Any) -> bytes:
    return msgspec.json.encode({"model": "m", "input": "hi", **fields})


def test_a_kept_answer_gets_fresh_ids_and_a_store_false_one_the_request_s() -> None:
    async def run() -> None:
        gateway = _gateway(_store())
        kept = await recall(gateway, Exchange("client-chosen-id"), _body())
        assert kept.keep and kept.prior is None and kept.rid != "client-chosen-id" and len(kept.rid) == 32
        unkept = await recall(gateway, Exchange("client-chosen-id"), _body(store=False))
        assert not unkept.keep and unkept.rid == "client-chosen-id"
        off = await recall(_gateway(None), Exchange("r"), _body())
        assert not off.keep and off.store is None

    asyncio.run(run())


def test_a_store_false_request_never_asks_a_store_that_is_down() -> None:
    class Down:
        settings = ResponsesSettings()

        def owner(self, principal: object) -> str:
            return "open"

        def available(self) -> bool:
            raise AssertionError("asked")

        async def get(self, owner: str, response_id: str) -> bytes | None:
            raise AssertionError("asked")

    recalled = asyncio.run(recall(_gateway(cast(ResponseStore, Down())), Exchange("r"), _body(store=False)))
    assert not recalled.keep


def test_an_open_breaker_refuses_a_kept_request_before_it_is_sent() -> None:
    store = _store()
    store.backend.available = lambda: False  # type: ignore[method-assign]
    with pytest.raises(StoreUnavailable):
        asyncio.run(recall(_gateway(store), Exchange("r"), _body()))


def _keep_one(store: ResponseStore, body: bytes, exchange: Exchange) -> str:
    """A request recalled, decoded, kept with a one-message answer: its response id."""

    async def run() -> str:
        recalled = await recall(_gateway(store), exchange, body)
        call = decode_responses_request_forwarding(body, lambda m: False, recalled.prior)[0]
        call = msgspec.structs.replace(call, kept=recalled.keep)
        data = kept_input(recalled, call)
        answer = response_object(call, id=f"resp_{recalled.rid}", created_at=1, model="m", status="completed",
                                 output=[])
        await keep(recalled, data, answer)
        return answer.id

    return asyncio.run(run())


def test_a_continuation_carries_the_conversation_and_another_owner_finds_nothing() -> None:
    store = _store()
    first = _keep_one(store, _body(input="one"), Exchange("a"))
    second = _keep_one(store, _body(input="two", previous_response_id=first), Exchange("b"))
    record = asyncio.run(store.get("open", second))
    assert record is not None
    texts = [i.content for i in input_items(record) if isinstance(i, MessageItem)]
    assert texts == ["one", "two"]  # the first's output was empty here: its input, then the new input
    assert msgspec.json.decode(response_json(record))["previous_response_id"] == first
    store.settings = ResponsesSettings(backend="memory", scope="key")
    other = SimpleNamespace(tenant_name="t", id="k2")
    exchange = Exchange("c")
    exchange.principal = other  # type: ignore[assignment]
    with pytest.raises(InvalidRequest) as raised:
        asyncio.run(recall(_gateway(store), exchange, _body(previous_response_id=first)))
    assert raised.value.param == "previous_response_id" and raised.value.code == "previous_response_not_found"
    with pytest.raises(InvalidRequest) as unknown:
        asyncio.run(recall(_gateway(store), Exchange("d"), _body(previous_response_id="resp_nothing")))
    assert unknown.value.message.replace("resp_nothing", first) == raised.value.message


def test_a_conversation_past_the_bound_is_refused_before_it_is_sent() -> None:
    store = _store(max_record_bytes=64 * 1024)
    body = _body(input="x" * 70_000)
    recalled = asyncio.run(recall(_gateway(store), Exchange("r"), body))
    call = decode_responses_request_forwarding(body, lambda m: False)[0]
    with pytest.raises(PayloadTooLarge) as raised:
        kept_input(recalled, call)
    assert raised.value.status == 413 and raised.value.code == "response_too_large" and raised.value.param == "input"


def _in_conversation(store: ResponseStore, body: bytes, exchange: Exchange, said: str) -> Recalled:
    """A request in a conversation recalled, decoded and kept with an answer of one message saying `said`."""

    async def run() -> Recalled:
        recalled = await recall(_gateway(store), exchange, body)
        call = decode_responses_request_forwarding(body, lambda m: False, recalled.prior)[0]
        call = msgspec.structs.replace(call, kept=recalled.keep, conversation=recalled.conversation)
        output: list[OutputItem] = [MessageOut(id=f"msg_{recalled.rid}_0", status="completed",
                                               content=[OutputTextOut(text=said, annotations=[])])]
        answer = response_object(call, id=f"resp_{recalled.rid}", created_at=1, model="m", status="completed",
                                 output=output)
        await keep(recalled, kept_input(recalled, call), answer)
        return recalled

    return asyncio.run(run())


def test_a_conversation_s_items_come_first_and_each_turn_is_appended() -> None:
    store = _store()
    asyncio.run(store.create_conversation("open", "conv_1", b"{}", []))
    first = _in_conversation(store, _body(input="one", conversation="conv_1"), Exchange("same"), "ONE")
    assert first.prior == [] and first.conversation == "conv_1" and first.rid != "same"
    second = _in_conversation(store, _body(input="two", conversation={"id": "conv_1"}, store=False),
                              Exchange("same"), "TWO")
    assert not second.keep and second.rid != "same"  # not kept, yet its items have ids of their own
    assert [getattr(i, "content", None) for i in second.prior or []] == [
        "one", [OutputText(text="ONE", annotations=[], logprobs=[])]]
    read = asyncio.run(store.read_conversation("open", "conv_1"))
    assert read is not None and len(read[1]) == 4
    assert len({cv.item_id(i) for i in cv.decode_items_kept(read[1])}) == 4  # no two items share an id


def test_a_conversation_is_found_only_by_its_owner_and_never_beside_previous_response_id() -> None:
    store = _store()
    asyncio.run(store.create_conversation("t/k1", "conv_1", b"{}", []))
    for conversation in ("conv_1", "conv_2", "not-an-id"):
        with pytest.raises(NotFound) as missing:
            asyncio.run(recall(_gateway(store), Exchange("r"), _body(conversation=conversation)))
        assert missing.value.param == "conversation" and missing.value.code == "conversation_not_found"
    with pytest.raises(InvalidRequest) as both:
        asyncio.run(recall(_gateway(store), Exchange("r"), _body(conversation="conv_1", previous_response_id="resp_1")))
    assert both.value.param == "conversation" and both.value.status == 400


def test_a_turn_that_would_grow_its_conversation_past_the_bound_is_refused_before_it_is_sent() -> None:
    store = _store(max_record_bytes=64 * 1024)
    said = cv.encode_items([MessageItem(role="user", content="x" * 40_000, id="msg_1")])
    asyncio.run(store.create_conversation("open", "conv_1", b"{}", said))
    body = _body(input="y" * 30_000, conversation="conv_1", store=False)
    recalled = asyncio.run(recall(_gateway(store), Exchange("r"), body))
    call = decode_responses_request_forwarding(body, lambda m: False, recalled.prior)[0]
    with pytest.raises(PayloadTooLarge) as raised:
        kept_input(recalled, call)
    assert raised.value.code == "conversation_too_large"


def test_a_background_response_must_be_kept() -> None:
    store = _store()
    for gateway, body in ((_gateway(store), _body(background=True, store=False)),
                          (_gateway(None), _body(background=True))):
        recalled = asyncio.run(recall(gateway, Exchange("r"), body))
        call = decode_responses_request_forwarding(body, lambda m: False)[0]
        with pytest.raises(InvalidRequest) as raised:
            kept_input(recalled, call)
        assert raised.value.param == "background" and raised.value.status == 400
    body = _body(background=True)
    kept = kept_input(asyncio.run(recall(_gateway(store), Exchange("r"), body)),
                      decode_responses_request_forwarding(body, lambda m: False)[0])
    assert kept is not None and kept.record is not None


def test_a_background_response_still_running_is_not_continued() -> None:
    store = _store()
    body = _body(background=True)
    recalled = asyncio.run(recall(_gateway(store), Exchange("r"), body))
    call = decode_responses_request_forwarding(body, lambda m: False)[0]
    kept = kept_input(recalled, call)
    assert kept is not None and kept.record is not None
    running = response_object(call, id=f"resp_{recalled.rid}", created_at=1, model="m", status="in_progress",
                              output=[])
    asyncio.run(store.put(recalled.owner, running.id, encode_record(running, kept.record)))
    with pytest.raises(InvalidRequest) as raised:
        asyncio.run(recall(_gateway(store), Exchange("r2"), _body(previous_response_id=running.id)))
    assert raised.value.code == "previous_response_not_ended"
