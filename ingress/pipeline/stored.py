"""recall / kept_input / keep: stored responses and conversations (ingress/state) around the Responses stages.

    recall      before prepare: whether the answer is to be kept, and the conversation it continues (one
                read of the store): the response `previous_response_id` names, or the items of the
                conversation `conversation` names, for prepare to carry over before the request's input
    kept_input  after prepare, before admission: the conversation as it will be stored, each item with
                its id; past `[responses] max_record_bytes`, 413 before anything is sent or charged
    keep        once the answer is complete (whole, or the stream's last event not yet sent): the record
                written, and the request's input items and the answer's output items appended to its
                conversation, readable from every replica when this returns

A store that cannot answer is a 503 with Retry-After (StoreUnavailable) for these calls only: a request
with `store: false` and neither `previous_response_id` nor `conversation` never asks the store anything.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import msgspec

from ingress.errors import InvalidRequest, NotFound, PayloadTooLarge, StoreUnavailable
from ingress.exchange import Exchange
from ingress.oai.responses import Call, Item
from ingress.oai.responses_answers import ResponseObject
from ingress.pipeline.gateway import Gateway
from ingress.state import ResponseStore
from ingress.state import conversation as conversations
from ingress.state.record import OPEN, conversation, encode_input, encode_record, known_id, state, with_ids


class _Peek(msgspec.Struct):
    """What the store needs of a Responses body before it is decoded (prepare decodes and checks it all)."""

    store: Any = None
    previous_response_id: Any = None
    conversation: Any = None


_peek = msgspec.json.Decoder(_Peek)


@dataclass(frozen=True)
class Recalled:
    """What the store said of a Responses request: `prior`, the conversation it continues (None: none);
    `rid`, what the answer's ids are made of (a fresh one when it is kept or added to a conversation: a
    caller's request id never names a stored response or item); `conversation`, the id of the one it is
    added to, and `prior_bytes` the size of its items as kept."""

    store: ResponseStore | None
    owner: str
    keep: bool
    prior: list[Item] | None
    rid: str
    conversation: str | None = None
    prior_bytes: int = 0


@dataclass(frozen=True)
class Keeping:
    """What is kept of a request once it is answered: the record's conversation (None: the answer is not
    kept), and the request's own items as its conversation's items."""

    record: bytes | None
    appended: list[bytes]


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
    if peek.conversation is not None and previous is not None:
        raise InvalidRequest("Mutually exclusive parameters: send one of 'previous_response_id' or 'conversation'.",
                             param="conversation", code="mutually_exclusive_parameters")
    prior = None
    if store is not None and peek.conversation is not None:
        return await _recall_conversation(store, owner, keep, conversations.reference(peek.conversation))
    if store is not None and isinstance(previous, str) and previous:
        record = await store.get(owner, previous) if known_id(previous) else None
        if record is None:
            raise InvalidRequest(f"Previous response with id '{_shown(previous)}' not found.",
                                 param="previous_response_id", code="previous_response_not_found")
        if (status := state(record)[0]) in ("queued", "in_progress"):
            raise InvalidRequest(f"Previous response with id '{_shown(previous)}' is still {status}: continue from "
                                 "it once it has ended.", param="previous_response_id",
                                 code="previous_response_not_ended")
        prior = conversation(record)
    if keep and store is not None and not store.available():
        raise StoreUnavailable("The response store is not answering; try again shortly, or send store: false.")
    return Recalled(store, owner, keep, prior, os.urandom(16).hex() if keep else exchange.request_id)


async def _recall_conversation(store: ResponseStore, owner: str, keep: bool, conversation_id: str) -> Recalled:
    """The conversation's items, the prefix of the request's input; another owner's is not found, as an unknown id."""
    read = await store.read_conversation(owner, conversation_id) if conversations.known_id(conversation_id) else None
    if read is None:
        raise NotFound(f"Conversation with id '{_shown(conversation_id)}' not found.", param="conversation",
                       code="conversation_not_found")
    if not store.available():
        raise StoreUnavailable("The response store is not answering; try again shortly.")
    return Recalled(store, owner, keep, conversations.decode_items_kept(read[1]), os.urandom(16).hex(),
                    conversation_id, sum(len(item) for item in read[1]))


def _shown(response_id: str) -> str:
    return response_id[:64] if response_id.isascii() and response_id.isprintable() else "..."


def kept_input(recalled: Recalled, call: Call) -> Keeping | None:
    """What is kept of the request (None when nothing is), each item with an id: the carried items have
    theirs; the request's own get one unless the client gave it."""
    if call.request.background and not recalled.keep:
        raise InvalidRequest("A background response is run and kept by the edge for the client to poll: send it "
                             "with store true (or leave store out)." if recalled.store is not None else
                             "This edge keeps no responses ([responses] backend is off): send it without "
                             "background.", param="background", code="unsupported_parameter")
    if recalled.store is None or not (recalled.keep or recalled.conversation):
        return None
    own = with_ids(call.items[call.carried:], recalled.rid, call.carried)
    limit = recalled.store.settings.max_record_bytes
    appended = conversations.encode_items(own) if recalled.conversation else []
    if (size := recalled.prior_bytes + sum(len(item) for item in appended)) > limit:
        raise PayloadTooLarge(f"The conversation would be {size} bytes, more than the {limit} this edge keeps for "
                              "one: start a new conversation.", param="input", code="conversation_too_large")
    if not recalled.keep:
        return Keeping(None, appended)
    data = encode_input([*call.items[:call.carried], *own])
    if len(data) > limit:
        raise PayloadTooLarge(f"The conversation to store is {len(data)} bytes, more than the {limit} this edge "
                              "keeps for one response: send it with store: false (the whole conversation as input).",
                              param="input", code="response_too_large")
    return Keeping(data, appended)


async def keep(recalled: Recalled, keeping: Keeping | None, response: ResponseObject) -> None:
    """The completed response and its conversation, stored under its owner, and its turn (the request's
    items, then the answer's output items) appended to its conversation in one call; StoreUnavailable if
    not. A conversation deleted while it was answered is not made again."""
    if recalled.store is None or keeping is None:
        return
    if keeping.record is not None:
        await recalled.store.put(recalled.owner, response.id, encode_record(response, keeping.record))
    if recalled.conversation is not None:
        turn = [*keeping.appended, *conversations.encode_items(response.output)]
        await recalled.store.append_items(recalled.owner, recalled.conversation, turn, 0)
