"""`POST /admin/v1/keys:import`: the keys file's tenants and keys copied into the store, each once (docs/admin.md).

The keys file stays the embedded default and what a fleet starts with; imported, its keys are the admin API's
to change, rotate and revoke on every replica. What is copied is what the file holds: a key's id and hash (its
secret was never known, and goes on working), its models, limits, guardrails, name, expiry and a rotation's
former hash; a tenant's limits, models, routes and guardrails.
The file is read when asked (what is on disk now, as SIGHUP reads it); one that does not load is a 400.

Idempotent: a tenant or key stored already is left as it is (the API may have changed it since) and answered
as `stored`; the others are written one at a time, each with its audit entry (action `import`), tenants first.
A tenant or key whose guardrails do not compile (every replica would refuse them), and a key whose tenant is
then neither configured nor stored, are refused, named, with the reason: nothing is dropped without a word.
The credentials and errors are api.py's, whose middleware runs before this.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aiohttp import web

from ingress.admin import records
from ingress.admin.api import ACTOR, STORE, TENANCY, body_of, failure
from ingress.admin.keystore import Conflict, NoTenant
from ingress.tenancy.policy import read_keys_file
from ingress.tenancy.settings import Key, KeysFile, Tenant

PATH = "/admin/v1/keys:import"


@dataclass
class Outcome:
    """What became of each tenant and key of the file: its answer's body."""

    imported: dict[str, list[str]] = field(default_factory=lambda: {"tenants": [], "keys": []})
    stored: dict[str, list[str]] = field(default_factory=lambda: {"tenants": [], "keys": []})
    refused: list[dict[str, str]] = field(default_factory=list)


def chosen(file: KeysFile, stored_tenants: set[str], stored_keys: set[str],
           outcome: Outcome) -> tuple[list[tuple[str, Tenant]], list[Key]]:
    """The tenants and keys to write (the stored and those whose guardrails do not compile left out, each said
    in `outcome`)."""
    tenants: list[tuple[str, Tenant]] = []
    for name, tenant in sorted(file.tenants.items()):
        if name in stored_tenants:
            outcome.stored["tenants"].append(name)
        elif (problem := records.guardrails_problem(tenant.guardrails)) is not None:
            outcome.refused.append({"tenant": name, "reason": problem})
        else:
            tenants.append((name, tenant))
    keys: list[Key] = []
    for key in file.keys:
        if key.id in stored_keys:
            outcome.stored["keys"].append(key.id)
        elif (problem := records.guardrails_problem(key.guardrails)) is not None:
            outcome.refused.append({"key_id": key.id, "reason": problem})
        else:
            keys.append(key)
    return tenants, keys


async def import_keys(request: web.Request) -> web.Response:
    await body_of(request, records.KeysImport)
    policy = request.app[TENANCY].policy
    path = policy.settings.keys_file
    if path is None:
        return failure(400, "invalid_request", "tenancy.keys_file is not configured: there is no keys file to import.")
    try:
        file = read_keys_file(path)
    except ValueError as exc:
        return failure(400, "invalid_request", f"tenancy.keys_file: {exc}")
    store, actor, client = request.app[STORE], request[ACTOR].id, request.remote
    outcome = Outcome()
    tenants, keys = chosen(file, {t.name for t in await store.tenants()}, {k.id for k in await store.keys()}, outcome)
    for name, tenant in tenants:
        record = records.tenant_imported(name, tenant, actor)
        try:
            await store.write_tenant(name, None, record, records.tenant_entry("import", actor, client, name, None,
                                                                               record))
            outcome.imported["tenants"].append(name)
        except Conflict:  # stored meanwhile, by another admin
            outcome.stored["tenants"].append(name)
    for key in keys:
        stored = records.key_imported(key, actor)
        needs = None if key.tenant in policy.settings.tenants else key.tenant  # else it must be stored
        try:
            await store.write(key.id, None, stored, records.entry("import", actor, client, key.id, None, stored),
                              tenant=needs)
            outcome.imported["keys"].append(key.id)
        except Conflict:
            outcome.stored["keys"].append(key.id)
        except NoTenant:
            outcome.refused.append({"key_id": key.id, "reason": f"tenant: '{key.tenant}' is neither configured "
                                    "nor stored"})
    return web.json_response({"source": path, "imported": outcome.imported, "stored": outcome.stored,
                              "refused": outcome.refused})


def add_routes(app: web.Application) -> None:
    app.router.add_post(PATH, import_keys)
