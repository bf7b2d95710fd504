"""`/admin/v1/...`: the keys, the tenants (tenants.py) and the audit log, behind the admin credentials
(docs/admin.md).

Every request is authenticated first, whatever its path (but the console's files and its sign-in, console.py,
session.py and sso.py): no valid admin key, admin's sign-in token ([admin.oidc], oidc.py) nor console session, 401; a
token giving no role, and a `viewer` asking for anything but GET, 403. Every change is written with its audit
entry (keystore.py), by the admin key's id (a token's `oidc:<subject>`), from the client's address; an answer
never holds a hash, and a key only in the answer that made it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import msgspec
from aiohttp import web

from ingress.admin import console, records, session, sso  # session, sso: sign-in (they use this module's keys)
from ingress.admin.keystore import Conflict, Found, KeyStore, NoTenant, Unavailable
from ingress.admin.oidc import Actor, NoSignIn, SignIns
from ingress.admin.openapi import DESCRIPTION
from ingress.admin.settings import Admin, AdminKey
from ingress.log import get_logger
from ingress.tenancy import Tenancy
from ingress.tenancy.bearer import looks_like_jwt
from ingress.tenancy.keys import id_of, matches
from ingress.tenancy.ledger import Ledger
from ingress.tenancy.policy import presented_key

log = get_logger("ingress.admin")
STORE = web.AppKey("keystore", KeyStore)
TENANCY = web.AppKey("tenancy", Tenancy)
ADMIN_KEYS = web.AppKey("admin_keys", dict[str, AdminKey])
ACTOR = web.RequestKey("actor", Actor)
SIGNINS = web.AppKey("signins", SignIns)
READS = frozenset({"GET", "HEAD"})
MAX_PAGE = 500
RETRY_AFTER = "1"  # s, when the store did not answer: the next call dials it again
_NO_HASH = "sha256:" + "0" * 64
T = TypeVar("T")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def failure(status: int, kind: str, message: str, **headers: str) -> web.Response:
    return web.json_response({"error": {"type": kind, "message": message}}, status=status, headers=headers)


def admin_of(keys: dict[str, AdminKey], presented: str | None) -> AdminKey | None:
    """The admin key presented, checked in constant time (hashed and compared whether its id is known or not)."""
    key_id = id_of(presented) if presented else None
    key = keys.get(key_id) if key_id is not None else None
    ok = matches(presented or "", key.hash if key is not None else _NO_HASH)
    return key if key is not None and ok else None


def _unauthenticated() -> web.Response:
    return failure(401, "unauthenticated", "An admin key, or an admin's sign-in token, is required (Authorization: "
                   "Bearer <admin key or token>).", **{"WWW-Authenticate": 'Bearer realm="ingress-admin"'})


async def _actor(request: web.Request) -> Actor | web.Response:
    """Who is asking: an admin key's holder, or an admin signed in with the OIDC provider; else the refusal."""
    presented = presented_key(request.headers)
    if presented is None:  # no header: the console's session cookie, if any
        found = await session.actor(request)  # a Response: a session's change without its CSRF token, or no store
        return found if found is not None else _unauthenticated()
    signins = request.app.get(SIGNINS)
    if signins is not None and looks_like_jwt(presented):
        try:
            return await signins.actor(presented)
        except NoSignIn as exc:
            log.info("admin token refused", reason=str(exc), client=request.remote)
            if exc.status == 503:
                return failure(503, "issuer_unavailable", "The sign-in provider's keys could not be fetched; retry.",
                               **{"Retry-After": str(exc.retry_after or 1)})
            return _unauthenticated()
    key = admin_of(request.app[ADMIN_KEYS], presented)
    return Actor(key.id, key.role) if key is not None else _unauthenticated()


@web.middleware
async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
    if session.is_open(request) or sso.is_open(request) or console.is_open(request):  # signing in, the files
        return await handler(request)
    actor = await _actor(request)
    if isinstance(actor, web.Response):
        return actor
    if actor.role is None:
        claim = request.app[SIGNINS].oidc.role_claim
        return failure(403, "forbidden", f"'{actor.id}' has no admin role: its token's '{claim}' claim holds none of "
                       "the values configured for one.")
    if actor.role != "admin" and request.method not in READS:
        return failure(403, "forbidden", f"'{actor.id}' may only read (role viewer).")
    request[ACTOR] = actor
    try:
        answer = await handler(request)
        log.info("admin request", method=request.method, path=request.path, status=answer.status, actor=actor.id,
                 client=request.remote)
        return answer
    except Unavailable:
        return failure(503, "store_unavailable", "The key store did not answer; the change may not have been "
                       "made: read the key (or the audit log) to see.", **{"Retry-After": RETRY_AFTER})
    except Conflict:
        return failure(409, "conflict", "It changed while this request changed it; read it and try again.")
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        return failure(400, "invalid_request", str(exc))


async def body_of(request: web.Request, kind: type[T]) -> T:
    raw = await request.read()
    return msgspec.json.decode(raw or b"{}", type=kind)


async def _found(request: web.Request) -> Found:
    found = await request.app[STORE].get(request.match_info["key_id"])
    if found is None:
        raise web.HTTPNotFound(text=msgspec.json.encode({"error": {"type": "not_found", "message":
                               f"No stored key '{request.match_info['key_id']}'."}}).decode(),
                               content_type="application/json")
    return found


async def _change(request: web.Request, action: records.Action, before: Found | None,
                  after: records.StoredKey | None, tenant: str | None = None) -> None:
    changed = after or (before.record if before else None)
    assert changed is not None
    entry = records.entry(action, request[ACTOR].id, request.remote, changed.id, before.record if before else None,
                          after)
    await request.app[STORE].write(changed.id, before, after, entry, tenant=tenant)


def _past(expires_at: object) -> web.Response | None:
    """A 400 for an expiry already past (a key that would be refused from the start), else None."""
    if isinstance(expires_at, float | int) and expires_at <= time.time():
        return failure(400, "invalid_request", "expires_at: already past (it is a Unix time, in seconds)")
    return None


def bad_guardrails(guardrails: object) -> web.Response | None:
    """A 400 naming the rule of guardrails that do not compile (every replica would refuse them), else None."""
    problem = records.guardrails_problem(guardrails)
    return failure(400, "invalid_request", problem) if problem is not None else None


async def create_key(request: web.Request) -> web.Response:
    body = await body_of(request, records.NewKey)
    for refused in (_past(body.expires_at), bad_guardrails(body.guardrails)):
        if refused is not None:
            return refused
    secret, record = records.created(body, request[ACTOR].id)
    configured = body.tenant in request.app[TENANCY].policy.configured
    try:  # a tenant not configured must be stored when the key is (one made a moment ago may not be installed here)
        await _change(request, "create", None, record, tenant=None if configured else body.tenant)
    except NoTenant:
        return failure(400, "invalid_request", f"No tenant named '{body.tenant}' is configured or stored.")
    return web.json_response({"key": secret, **record.shown()}, status=201)


async def list_keys(request: web.Request) -> web.Response:
    tenant = request.query.get("tenant")
    found = sorted(await request.app[STORE].keys(), key=lambda r: (r.created_at, r.id))
    return web.json_response({"data": [r.shown() for r in found if tenant is None or r.tenant == tenant]})


async def get_key(request: web.Request) -> web.Response:
    return web.json_response((await _found(request)).record.shown())


async def update_key(request: web.Request) -> web.Response:
    change = await body_of(request, records.KeyUpdate)
    for refused in (_past(change.expires_at), bad_guardrails(change.guardrails)):
        if refused is not None:
            return refused
    before = await _found(request)
    after = records.updated(before.record, change)
    await _change(request, "update", before, after)
    return web.json_response(after.shown())


async def rotate_key(request: web.Request) -> web.Response:
    rotation = await body_of(request, records.Rotation)
    before = await _found(request)
    secret, after = records.rotated(before.record, rotation)
    await _change(request, "rotate", before, after)
    return web.json_response({"key": secret, **after.shown()})


async def revoke_key(request: web.Request) -> web.Response:
    before = await _found(request)
    await _change(request, "revoke", before, None)
    return web.json_response({"id": before.record.id, "revoked": True})


def _count(request: web.Request, name: str, default: int, most: int) -> int:
    try:
        value = int(request.query.get(name, default))
    except ValueError:
        raise msgspec.ValidationError(f"{name}: not an integer") from None
    if not 0 <= value <= most:
        raise msgspec.ValidationError(f"{name}: from 0 to {most}")
    return value


async def audit(request: web.Request) -> web.Response:
    """Oldest first, `limit` entries from `after` (the `seq` of the last one read; 0 for the start)."""
    after = _count(request, "after", 0, 2**62)
    limit = _count(request, "limit", 100, MAX_PAGE)
    entries, total = await request.app[STORE].audit(after, limit)
    data: list[dict[str, Any]] = [{"seq": after + i + 1, **msgspec.to_builtins(e)} for i, e in enumerate(entries)]
    more = after + len(entries) < total
    return web.json_response({"data": data, "total": total, "next": after + len(entries) if more else None})


async def openapi(request: web.Request) -> web.Response:
    return web.json_response(DESCRIPTION)


def create_admin_app(settings: Admin, store: KeyStore, tenancy: Tenancy,
                     ledger: Ledger | None = None) -> web.Application:
    app = web.Application(middlewares=[authenticate], client_max_size=64 * 1024)
    app[STORE] = store
    app[TENANCY] = tenancy
    app[ADMIN_KEYS] = {key.id: key for key in settings.keys}
    if settings.oidc is not None:
        signins = app[SIGNINS] = SignIns(settings.oidc)
        app.cleanup_ctx.append(signins.running)
    app.router.add_post("/admin/v1/keys", create_key)
    app.router.add_get("/admin/v1/keys", list_keys)
    app.router.add_get("/admin/v1/keys/{key_id}", get_key)
    app.router.add_patch("/admin/v1/keys/{key_id}", update_key)
    app.router.add_post("/admin/v1/keys/{key_id}/rotate", rotate_key)
    app.router.add_delete("/admin/v1/keys/{key_id}", revoke_key)
    from ingress.admin import imports, spend, tenants  # their handlers use this module's keys and helpers

    tenants.add_routes(app)
    imports.add_routes(app)
    spend.add_routes(app, ledger)
    app.router.add_get("/admin/v1/audit", audit)
    app.router.add_get("/admin/v1/openapi.json", openapi)
    session.add_routes(app, store)
    console.add_routes(app, sso=sso.add_routes(app, app.get(SIGNINS)))
    return app
