"""recall / kept_input / keep: stored responses (ingress/state) around the Responses stages.

    recall      before prepare: whether the answer is to be kept, and the conversation of the response
                `previous_response_id` names (one read of the store), for prepare to carry over
    kept_input  after prepare, before admission: the conversation as it will be stored, each item with
                its id; past `[responses] max_record_bytes`, 413 before anything is sent or charged
    keep        once the answer is complete (whole, or the stream's last event not yet sent): the record
                written, readable from every replica when this returns

A store that cannot answer is a 503 with Retry-After (StoreUnavailable) for these calls only: a request
with `store: false` and no `previous_response_id` never asks the store anything.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import msgspec

from ingress.errors import InvalidRequest, PayloadTooLarge, StoreUnavailable
from ingress.exchange import Exchange
from ingress.oai.responses import Call, Item
from ingress.oai.responses_answers import ResponseObject
from ingress.pipeline.gateway import Gateway
from ingress.state import ResponseStore
from ingress.state.record import OPEN, conversation, encode_input, encode_record, known_id, with_ids


class _Peek(msgspec.Struct):
    """What the store needs of a Responses body before it is decoded (prepare decodes and checks it all)."""

    store: Any = None
    previous_response_id: Any = None


_peek = msgspec.json.Decoder(_Peek)


@dataclass(frozen=True)
class Recalled:
    """What the store said of a Responses request: `prior`, the conversation it continues (None: none);
    `rid`, what the answer's ids are made of (a fresh one when it is kept: a caller's request id never
    names a stored response)."""

    store: ResponseStore | None
    owner: str
    keep: bool
    prior: list[Item] | None
    rid: str


async def recall(gateway: Gateway, exchange: Exchange, body: bytes) -> Recalled:
    """Whether the answer is kept, and the previous response's conversation; a previous response that is
    not the caller's (another key's, or none) is not found, the same way."""
    try:
        peek = _peek.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        peek = _Peek()  # prepare refuses the body, naming what is wrong
    store = gateway.responses
    keep = store is not None and peek.store is not False
    owner = store.owner(exchange.principal) if store is not None else OPEN
    previous = peek.previous_response_id
    prior = None
    if store is not None and isinstance(previous, str) and previous:
        record = await store.get(owner, previous) if known_id(previous) else None
        if record is None:
            raise InvalidRequest(f"Previous response with id '{_shown(previous)}' not found.",
                                 param="previous_response_id", code="previous_response_not_found")
        prior = conversation(record)
    if keep and store is not None and not store.available():
        raise StoreUnavailable("The response store is not answering; try again shortly, or send store: false.")
    return Recalled(store, owner, keep, prior, os.urandom(16).hex() if keep else exchange.request_id)


def _shown(response_id: str) -> str:
    return response_id[:64] if response_id.isascii() and response_id.isprintable() else "..."


def kept_input(recalled: Recalled, call: Call) -> bytes | None:
    """The conversation as the record keeps it (None when the answer is not kept), each item with an id:
    the carried items have theirs; the request's own get one unless the client gave it."""
    if not recalled.keep or recalled.store is None:
        return None
    items = [*call.items[:call.carried], *with_ids(call.items[call.carried:], recalled.rid, call.carried)]
    data = encode_input(items)
    limit = recalled.store.settings.max_record_bytes
    if len(data) > limit:
        raise PayloadTooLarge(f"The conversation to store is {len(data)} bytes, more than the {limit} this edge "
                              "keeps for one response: send it with store: false (the whole conversation as input).",
                              param="input", code="response_too_large")
    return data


async def keep(recalled: Recalled, input_json: bytes | None, response: ResponseObject) -> None:
    """The completed response and its conversation, stored under its owner; StoreUnavailable if not."""
    if recalled.store is None or input_json is None:
        return
    await recalled.store.put(recalled.owner, response.id, encode_record(response, input_json))
