"""`/admin/v1/tenants`: tenants made, changed and deleted through the admin API (docs/admin.md).

A stored tenant is its limits (budget included), its allowed models and routes, its guardrails and its
metadata; it is seen by every replica as a stored key is (sync.py), and replaces, there, the configured tenant
of its name (whose guardrails stay unless the stored one sets its own). Deleting it is refused while keys
belong to it (409, naming them): a configured tenant of its name takes its place again, and a key of none
would be limited by nothing.
The credentials and errors are api.py's, whose middleware runs before any of these.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from ingress.admin import records
from ingress.admin.api import ACTOR, STORE, TENANCY, bad_guardrails, body_of, failure
from ingress.admin.keystore import FoundTenant, Owned


async def _found(request: web.Request) -> FoundTenant | web.Response:
    name = request.match_info["name"]
    found = await request.app[STORE].get_tenant(name)
    return found if found is not None else failure(404, "not_found", f"No stored tenant '{name}'.")


async def _change(request: web.Request, action: records.Action, before: FoundTenant | None,
                  after: records.StoredTenant | None) -> None:
    changed = after or (before.record if before else None)
    assert changed is not None
    entry = records.tenant_entry(action, request[ACTOR].id, request.remote, changed.name,
                                 before.record if before else None, after)
    await request.app[STORE].write_tenant(changed.name, before, after, entry)


def _shown(request: web.Request, record: records.StoredTenant) -> dict[str, Any]:
    """As stored, and whether it replaces a configured tenant of its name."""
    return {**record.shown(), "configured": record.name in request.app[TENANCY].policy.configured}


async def create_tenant(request: web.Request) -> web.Response:
    body = await body_of(request, records.NewTenant)
    if (refused := bad_guardrails(body.guardrails)) is not None:
        return refused
    if await request.app[STORE].get_tenant(body.name) is not None:
        return failure(409, "conflict", f"A tenant named '{body.name}' is stored already; change it with PATCH.")
    record = records.tenant_created(body, request[ACTOR].id)
    await _change(request, "create", None, record)
    return web.json_response(_shown(request, record), status=201)


async def list_tenants(request: web.Request) -> web.Response:
    found = sorted(await request.app[STORE].tenants(), key=lambda r: (r.created_at, r.name))
    return web.json_response({"data": [_shown(request, r) for r in found]})


async def get_tenant(request: web.Request) -> web.Response:
    found = await _found(request)
    return found if isinstance(found, web.Response) else web.json_response(_shown(request, found.record))


async def update_tenant(request: web.Request) -> web.Response:
    change = await body_of(request, records.TenantUpdate)
    if (refused := bad_guardrails(change.guardrails)) is not None:
        return refused
    before = await _found(request)
    if isinstance(before, web.Response):
        return before
    after = records.tenant_updated(before.record, change)
    await _change(request, "update", before, after)
    return web.json_response(_shown(request, after))


async def delete_tenant(request: web.Request) -> web.Response:
    before = await _found(request)
    if isinstance(before, web.Response):
        return before
    name = before.record.name
    policy = request.app[TENANCY].policy
    configured_keys = (*policy.settings.keys, *(policy.keys_file.keys if policy.keys_file else ()))
    owned = sorted(key.id for key in configured_keys if key.tenant == name) if name not in policy.configured else []
    try:  # the stored keys are checked by the store, in the change itself: no key is made meanwhile
        if not owned:
            await _change(request, "delete", before, None)
    except Owned as exc:
        owned = exc.args[0]
    if owned:
        return failure(409, "conflict", f"The tenant '{name}' still has keys: {', '.join(owned)}; revoke them first.")
    return web.json_response({"name": name, "deleted": True})


def add_routes(app: web.Application) -> None:
    app.router.add_post("/admin/v1/tenants", create_tenant)
    app.router.add_get("/admin/v1/tenants", list_tenants)
    app.router.add_get("/admin/v1/tenants/{name}", get_tenant)
    app.router.add_patch("/admin/v1/tenants/{name}", update_tenant)
    app.router.add_delete("/admin/v1/tenants/{name}", delete_tenant)
