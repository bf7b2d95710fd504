"""A conversation as bytes, and back (sans-I/O): its object, its items one by one, the requests that make
and change it, and the pages its items are listed in.

A conversation is kept as two things under its owner (record.py `owner`): its object,

    {"id": "conv_<48 hex>", "object": "conversation", "created_at": <seconds>, "metadata": {...}}

and its items in order, each one JSON value with its id (the client's own, else one the edge made, as a
stored response's input items have). Items are only ever appended (by `POST .../items`, or by a response
made with `conversation`: its input items then its output items) or removed one by one, never rewritten.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Any, get_args

import msgspec
from msgspec import Meta, Raw

from ingress.errors import InvalidRequest
from ingress.oai.chat import MetadataKey, MetadataValue
from ingress.oai.codec import refusal, unreadable
from ingress.oai.responses import Include, Item, MessageItem
from ingress.oai.responses_codec import decode_items
from ingress.state.record import PageQuery, as_listed, encode_page, page, with_ids

# What a conversation's id may be (conv_<hex>, as the edge makes them): anything else is unknown, never looked up.
CONVERSATION_ID = re.compile(r"^conv_[A-Za-z0-9]{1,64}\Z")
MAX_ADDED = 20  # items one call may add (OpenAI's bound, for `POST /v1/conversations` and `.../items`)
INCLUDES = frozenset(get_args(Include))

Metadata = Annotated[dict[MetadataKey, MetadataValue], Meta(max_length=16)]
Added = Annotated[list[Raw], Meta(max_length=MAX_ADDED)]


class ConversationObject(msgspec.Struct, frozen=True):
    id: str
    created_at: int
    metadata: dict[str, str]
    object: str = "conversation"


class _Create(msgspec.Struct, forbid_unknown_fields=True):
    items: Added | None = None
    metadata: Metadata | None = None
    safety_identifier: Annotated[str, Meta(max_length=128)] | None = None  # OpenAI's abuse monitoring: unused here


class _Update(msgspec.Struct, forbid_unknown_fields=True):
    metadata: Metadata


class _AddItems(msgspec.Struct, forbid_unknown_fields=True):
    items: Annotated[list[Raw], Meta(min_length=1, max_length=MAX_ADDED)]


_encoder = msgspec.json.Encoder()
_object = msgspec.json.Decoder(ConversationObject)
_item: msgspec.json.Decoder[Item] = msgspec.json.Decoder(Item)


def known_id(conversation_id: str) -> bool:
    return CONVERSATION_ID.match(conversation_id) is not None


def _decode(body: bytes, kind: type[Any]) -> Any:
    try:
        return msgspec.json.decode(body or b"{}", type=kind)
    except msgspec.ValidationError as exc:
        raise refusal(exc) from None
    except (msgspec.DecodeError, RecursionError) as exc:
        raise unreadable(exc) from None


def create_request(body: bytes, rid: str) -> tuple[dict[str, str], list[Item]]:
    """`POST /v1/conversations`: its metadata and its first items (each with an id made of `rid`)."""
    made: _Create = _decode(body, _Create)
    return made.metadata or {}, with_ids(decode_items(made.items or [], "items"), rid)


def update_request(body: bytes) -> dict[str, str]:
    """`POST /v1/conversations/{id}`: the metadata that replaces the conversation's."""
    return dict(_decode(body, _Update).metadata)


def items_request(body: bytes, rid: str) -> list[Item]:
    """`POST /v1/conversations/{id}/items`: the items to append, each with an id made of `rid`."""
    return with_ids(decode_items(_decode(body, _AddItems).items, "items"), rid)


def reference(value: object) -> str:
    """The id `conversation` names on a Responses request: the id itself, or an object with its `id`."""
    if isinstance(value, dict) and set(value) == {"id"}:
        value = value["id"]
    if not isinstance(value, str) or not value:
        raise InvalidRequest("Invalid value for 'conversation': an id string, or an object with its 'id'.",
                             param="conversation")
    return value


def encode_object(conversation: ConversationObject) -> bytes:
    return _encoder.encode(conversation)


def decode_object(data: bytes) -> ConversationObject:
    return _object.decode(data)


def encode_items(items: Sequence[Any]) -> list[bytes]:
    """Each item (an input item, or a response's output item) as the one value the store keeps of it."""
    return [_encoder.encode(item) for item in items]


def decode_items_kept(kept: Sequence[bytes]) -> list[Item]:
    return [_item.decode(data) for data in kept]


def item_id(item: Item) -> str | None:
    return getattr(item, "id", None)


def listed(item: Item) -> Item:
    """An item as a conversation shows it: as a response's input items list it, and a message always with
    its status (OpenAI's `Message` has one)."""
    item = as_listed(item)
    if isinstance(item, MessageItem) and item.status is None:
        return msgspec.structs.replace(item, status="completed")
    return item


def include_query(values: list[str]) -> None:
    """The `include` values of a list or an add (what a conversation's items show of their hosted tool
    calls and logprobs: nothing more here); a value OpenAI does not name is a 400."""
    for value in values:
        if value not in INCLUDES:
            raise InvalidRequest(f"Invalid value for 'include': '{value[:64]}' is not one of "
                                 f"{', '.join(sorted(INCLUDES))}.", param="include")


def items_page(items: list[Item], query: PageQuery) -> bytes:
    """A page of a conversation's items, as OpenAI's list object (PageError names a bad `after`)."""
    return encode_page(page([listed(item) for item in items], query, "conversation"))


def added_page(items: list[Item]) -> bytes:
    """What adding items answers: the items added, as a list object in the order given."""
    return encode_page(page([listed(item) for item in items], PageQuery(limit=max(len(items), 1), order="asc"),
                            "conversation"))


def item_json(item: Item) -> bytes:
    return _encoder.encode(listed(item))


def deleted(conversation_id: str) -> bytes:
    """OpenAI's answer to a conversation's delete."""
    return _encoder.encode({"id": conversation_id, "object": "conversation.deleted", "deleted": True})
