"""The Conversations API: a conversation made, read, its metadata changed, deleted, and its items listed,
added, read and deleted, kept in the response store (ingress/state, conversation_stores.py) under the
caller's owner. Another owner's conversation or item is not found, exactly as an unknown id is (an
admin-scope key, `scope = "admin"`, reads, never changes, those of every key of its tenant); a store
that does not answer is a 503 with Retry-After; past `[responses] max_record_bytes` of items, a 413.

    POST   /v1/conversations                              made, with up to 20 items and metadata
    GET    /v1/conversations/{id}                         the conversation object
    POST   /v1/conversations/{id}                         its metadata replaced
    DELETE /v1/conversations/{id}                         {"object": "conversation.deleted", ...}
    GET    /v1/conversations/{id}/items                   a list object: after, limit, order, include
    POST   /v1/conversations/{id}/items                   up to 20 items appended: the list of them
    GET    /v1/conversations/{id}/items/{item_id}         the item
    DELETE /v1/conversations/{id}/items/{item_id}         the item removed: the conversation object
"""

from __future__ import annotations

import os
import time

from aiohttp import web

from ingress.edge.appkeys import EXCHANGE, GATEWAY
from ingress.edge.bodies import read_body
from ingress.errors import InvalidRequest, NotFound, PayloadTooLarge
from ingress.oai.responses import Item
from ingress.state import ResponseStore
from ingress.state import conversation as cv
from ingress.state.record import PageError, page_query


def _json(body: bytes) -> web.Response:
    return web.Response(body=body, content_type="application/json")


def _shown(some_id: str) -> str:
    return some_id[:64] if some_id.isascii() and some_id.isprintable() else "..."


def _not_found(conversation_id: str) -> NotFound:
    """The one answer for a conversation that is unknown, expired, deleted or another owner's."""
    return NotFound(f"Conversation with id '{_shown(conversation_id)}' not found.", param="conversation_id",
                    code="conversation_not_found")


def _store(request: web.Request) -> tuple[ResponseStore, str]:
    """The store and the caller's namespace in it; 404 when the edge keeps nothing."""
    exchange = request[EXCHANGE]
    exchange.api = "conversations"
    store = request.app[GATEWAY].responses
    if store is None:
        raise NotFound("This edge keeps no conversations ([responses] backend is off).", code="conversation_not_found")
    return store, store.owner(exchange.principal)


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"The conversation's items would be more than the {limit} bytes this edge keeps for one "
                           "conversation.", param="items", code="conversation_too_large")


async def _read(store: ResponseStore, owner: str, conversation_id: str) -> tuple[bytes, list[bytes]]:
    read = await store.read_conversation(owner, conversation_id) if cv.known_id(conversation_id) else None
    if read is None:
        raise _not_found(conversation_id)
    return read


async def _read_any(request: web.Request, store: ResponseStore, conversation_id: str) -> tuple[bytes, list[bytes]]:
    """What a GET reads: the caller's own conversation, or, for an admin-scope key, its tenant's."""
    owners = store.readers(request[EXCHANGE].principal, request.app[GATEWAY].tenancy)
    found = await store.first(owners, lambda o: store.read_conversation(o, conversation_id)) \
        if cv.known_id(conversation_id) else None
    if found is None:
        raise _not_found(conversation_id)
    return found[1]


def _includes(request: web.Request) -> None:
    cv.include_query([*request.query.getall("include", []), *request.query.getall("include[]", [])])


async def create(request: web.Request) -> web.Response:
    store, owner = _store(request)
    body = await read_body(request, request.app[GATEWAY].settings.max_body_bytes)
    metadata, items = cv.create_request(body, os.urandom(16).hex())
    kept = cv.encode_items(items)
    if sum(len(item) for item in kept) > store.settings.max_record_bytes:
        raise _too_large(store.settings.max_record_bytes)
    made = cv.ConversationObject(id=f"conv_{os.urandom(24).hex()}", created_at=int(time.time()), metadata=metadata)
    obj = cv.encode_object(made)
    await store.create_conversation(owner, made.id, obj, kept)
    return _json(obj)


async def conversation(request: web.Request) -> web.Response:
    """GET, POST (its metadata), DELETE."""
    if request.method not in ("GET", "POST", "DELETE"):
        raise web.HTTPMethodNotAllowed(request.method, ["GET", "POST", "DELETE"])
    store, owner = _store(request)
    conversation_id = request.match_info["conversation_id"]
    if request.method == "DELETE":
        if not (cv.known_id(conversation_id) and await store.delete_conversation(owner, conversation_id)):
            raise _not_found(conversation_id)
        return _json(cv.deleted(conversation_id))
    if request.method == "GET":
        return _json((await _read_any(request, store, conversation_id))[0])
    metadata = cv.update_request(await read_body(request, request.app[GATEWAY].settings.max_body_bytes))
    obj, _ = await _read(store, owner, conversation_id)
    changed = cv.encode_object(cv.ConversationObject(id=conversation_id, created_at=cv.decode_object(obj).created_at,
                                                     metadata=metadata))
    if not await store.update_conversation(owner, conversation_id, changed):
        raise _not_found(conversation_id)
    return _json(changed)


async def items(request: web.Request) -> web.Response:
    """GET (a page of them), POST (up to 20 added)."""
    if request.method not in ("GET", "POST"):
        raise web.HTTPMethodNotAllowed(request.method, ["GET", "POST"])
    store, owner = _store(request)
    conversation_id = request.match_info["conversation_id"]
    _includes(request)
    if request.method == "POST":
        added = cv.items_request(await read_body(request, request.app[GATEWAY].settings.max_body_bytes),
                                 os.urandom(16).hex())
        if not cv.known_id(conversation_id):
            raise _not_found(conversation_id)
        limit = store.settings.max_record_bytes
        appended = await store.append_items(owner, conversation_id, cv.encode_items(added), limit)
        if appended == "missing":
            raise _not_found(conversation_id)
        if appended == "full":
            raise _too_large(limit)
        return _json(cv.added_page(added))
    try:
        query = page_query(dict(request.query))
    except PageError as exc:
        raise InvalidRequest(str(exc), param=exc.param) from None
    _, kept = await _read_any(request, store, conversation_id)
    try:
        return _json(cv.items_page(cv.decode_items_kept(kept), query))
    except PageError as exc:
        raise InvalidRequest(str(exc), param=exc.param) from None


async def item(request: web.Request) -> web.Response:
    """GET (the item), DELETE (the item removed: the conversation)."""
    if request.method not in ("GET", "DELETE"):
        raise web.HTTPMethodNotAllowed(request.method, ["GET", "DELETE"])
    store, owner = _store(request)
    conversation_id, item_id = request.match_info["conversation_id"], request.match_info["item_id"]
    if request.method == "GET":
        _includes(request)
    obj, kept = await (_read_any(request, store, conversation_id) if request.method == "GET"
                       else _read(store, owner, conversation_id))
    found = _find(cv.decode_items_kept(kept), kept, item_id)
    if found is None:
        raise NotFound(f"Item with id '{_shown(item_id)}' not found.", param="item_id", code="item_not_found")
    one, raw = found
    if request.method == "GET":
        return _json(cv.item_json(one))
    removed = await store.remove_item(owner, conversation_id, raw)
    if removed is None:
        raise _not_found(conversation_id)
    if not removed:  # taken out by another call since it was read
        raise NotFound(f"Item with id '{_shown(item_id)}' not found.", param="item_id", code="item_not_found")
    return _json(obj)


def _find(decoded: list[Item], kept: list[bytes], item_id: str) -> tuple[Item, bytes] | None:
    """The first item with the id, and its JSON as kept (what the store removes it by)."""
    for one, raw in zip(decoded, kept, strict=True):
        if cv.item_id(one) == item_id:
            return one, raw
    return None


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/conversations", create)
    app.router.add_route("*", "/v1/conversations/{conversation_id}", conversation)
    app.router.add_route("*", "/v1/conversations/{conversation_id}/items", items)
    app.router.add_route("*", "/v1/conversations/{conversation_id}/items/{item_id}", item)
