"""A stored response as bytes, and back (sans-I/O): what the stores keep and what the endpoints read of it.

A record is one JSON object, written once when its response completes and never changed:

    {"v": 1, "response": {...the response object as answered...}, "input": [...items...]}

`input` is the whole conversation that made the response: the input items of the response it continued
(`previous_response_id`), that response's output items, then the request's own input, each with an id.
So continuing from a record is one read, whatever the length of the chain, and its input items list
(`GET /v1/responses/{id}/input_items`) shows every item the model was given (as OpenAI's does). The
`instructions` are the response's own (a field of its object), never an item: they are not carried over.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

import msgspec
from msgspec import Raw

from ingress.oai.responses import (
    InputText,
    Item,
    MessageItem,
    OutputText,
)
from ingress.oai.responses_answers import ResponseObject

VERSION = 1
# What a response's id may be (resp_<hex>, as the edge makes them): anything else is unknown, never looked up.
RESPONSE_ID = re.compile(r"^resp_[A-Za-z0-9]{1,64}\Z")
OPEN = "open"  # the owner of every response of an edge without tenancy: one shared namespace
# The id prefix of an input item the client sent without one, by its type.
_ID_PREFIX = {
    "message": "msg", "function_call": "fc", "function_call_output": "fco", "custom_tool_call": "ctc",
    "custom_tool_call_output": "ctco", "reasoning": "rs", "compaction": "cmp", "compaction_trigger": "cmpt",
    "additional_tools": "at", "configuration_update": "cu",
}
MAX_PAGE = 100
DEFAULT_PAGE = 20


def owner(tenant: str | None, key_id: str | None, scope: Literal["key", "tenant"]) -> str:
    """The namespace a response belongs to: its key's or token subject's (`<tenant>/<principal id>`) or its
    tenant's; OPEN without tenancy. Tenant names have no '/', and a key's id ([0-9a-z]) never holds the ':'
    of a subject's (`<issuer>:<sub>`): no two owners share one."""
    if tenant is None:
        return OPEN
    return tenant if scope == "tenant" or key_id is None else f"{tenant}/{key_id}"


def known_id(response_id: str) -> bool:
    return RESPONSE_ID.match(response_id) is not None


def with_ids(items: list[Item], rid: str, start: int = 0) -> list[Item]:
    """The items, each with an id: the client's own, else `<prefix>_<rid>_in<n>` (`n` its place in the conversation)."""
    out: list[Item] = []
    for n, item in enumerate(items, start):
        if getattr(item, "id", None) is None:
            prefix = _ID_PREFIX[str(item.__struct_config__.tag)]
            item = msgspec.structs.replace(item, id=f"{prefix}_{rid}_in{n}")
        out.append(item)
    return out


_encoder = msgspec.json.Encoder()


def encode_input(items: list[Item]) -> bytes:
    return _encoder.encode(items)


class _Record(msgspec.Struct, frozen=True):
    v: int
    response: ResponseObject
    input: Raw


def encode_record(response: ResponseObject, input_json: bytes) -> bytes:
    """A completed response and the conversation that made it (`encode_input`'s bytes), as one record."""
    return _encoder.encode(_Record(VERSION, response, Raw(input_json)))


class _Response(msgspec.Struct):
    response: Raw


class _Output(msgspec.Struct):
    output: list[Item] = []


class _Conversation(msgspec.Struct):
    input: list[Item]
    response: _Output


class _Input(msgspec.Struct):
    input: list[Item]


_response = msgspec.json.Decoder(_Response)
_conversation = msgspec.json.Decoder(_Conversation)
_input = msgspec.json.Decoder(_Input)


def response_json(record: bytes) -> bytes:
    """The response object as it was answered."""
    return bytes(_response.decode(record).response)


class _State(msgspec.Struct):
    status: str = "completed"
    background: bool = False


class _Stated(msgspec.Struct):
    response: _State


_stated = msgspec.json.Decoder(_Stated)


def state(record: bytes) -> tuple[str, bool]:
    """The response's status (queued, in_progress while a background response runs) and whether it is one."""
    view = _stated.decode(record).response
    return view.status, view.background


def conversation(record: bytes) -> list[Item]:
    """What a request continuing from this response begins with: its input items, then its output items
    (an output item is a valid input item: the same fields, as OpenAI's are)."""
    view = _conversation.decode(record)
    return [*view.input, *view.response.output]


def input_items(record: bytes) -> list[Item]:
    return _input.decode(record).input


# --- the input items, as OpenAI's list object --------------------------------------------------------


class PageQuery(msgspec.Struct, frozen=True):
    after: str | None = None
    limit: int = DEFAULT_PAGE
    order: Literal["asc", "desc"] = "desc"


class Page(msgspec.Struct, frozen=True):
    data: list[Item]
    first_id: str | None
    last_id: str | None
    has_more: bool
    object: Literal["list"] = "list"


class PageError(ValueError):
    """A query parameter that is not valid: its name and why."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


def page_query(query: dict[str, str]) -> PageQuery:
    """`after`, `limit` (1 to 100, default 20) and `order` (asc, desc: the default, as OpenAI's) of a query;
    PageError names the one that is wrong. Other parameters (`include`) change nothing here."""
    raw_limit = query.get("limit")
    limit = DEFAULT_PAGE
    if raw_limit is not None:
        if not (raw_limit.isascii() and raw_limit.isdigit()) or not 1 <= int(raw_limit) <= MAX_PAGE:
            raise PageError("limit", f"'limit' must be an integer from 1 to {MAX_PAGE}.")
        limit = int(raw_limit)
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise PageError("order", "'order' must be 'asc' or 'desc'.")
    after = query.get("after")
    if after is not None and not after:
        raise PageError("after", "'after' must be an item id.")
    return PageQuery(after, limit, order)  # type: ignore[arg-type]  # checked above


def page(items: Sequence[Item], query: PageQuery, where: str = "response") -> Page:
    """One page of the items, in `query.order`, beginning after the item `query.after` names (PageError if
    none has that id in this `where`)."""
    ordered = list(items) if query.order == "asc" else list(items)[::-1]
    start = 0
    if query.after is not None:
        ids = [getattr(item, "id", None) for item in ordered]
        if query.after not in ids:
            raise PageError("after", f"No item with id '{query.after[:64]}' in this {where}.")
        start = ids.index(query.after) + 1
    chosen = [as_listed(item) for item in ordered[start:start + query.limit]]
    first = getattr(chosen[0], "id", None) if chosen else None
    last = getattr(chosen[-1], "id", None) if chosen else None
    return Page(chosen, first, last, start + query.limit < len(ordered))


def as_listed(item: Item) -> Item:
    """An item as the list shows it: a message's text as one part (as OpenAI lists it), whatever the client sent."""
    if isinstance(item, MessageItem) and isinstance(item.content, str):
        part = (OutputText(text=item.content, annotations=[]) if item.role == "assistant"
                else InputText(text=item.content))
        return msgspec.structs.replace(item, content=[part])
    return item


def encode_page(p: Page) -> bytes:
    return _encoder.encode(p)


def deleted(response_id: str) -> bytes:
    """OpenAI's answer to a delete."""
    return _encoder.encode({"id": response_id, "object": "response.deleted", "deleted": True})
