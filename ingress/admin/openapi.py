"""The admin API's OpenAPI 3.1 description, served at /admin/v1/openapi.json: the bodies' schemas are
msgspec's own of records.py's structs, so the description cannot drift from what the API decodes."""

from __future__ import annotations

from typing import Any

import msgspec

from ingress.admin.records import AuditEntry, KeyUpdate, NewKey, NewTenant, Rotation, SignIn, StoredTenant, TenantUpdate

_schemas, _components = msgspec.json.schema_components(
    [NewKey, KeyUpdate, Rotation, AuditEntry, NewTenant, TenantUpdate, StoredTenant, SignIn],
    ref_template="#/components/schemas/{name}")
_KEY_SHOWN: dict[str, Any] = {
    "type": "object", "description": "A stored key as shown: never its hash; `key` only when made or rotated.",
    "properties": {"id": {"type": "string"}, "tenant": {"type": "string"}, "models": {"type": "array"},
                   "limits": {"type": "object"}, "metadata": {"type": "object"},
                   "guardrails": {"type": ["object", "null"]},
                   "name": {"type": ["string", "null"]}, "expires_at": {"type": ["number", "null"]},
                   "rotating_until": {"type": ["number", "null"]}, "created_at": {"type": "number"},
                   "updated_at": {"type": "number"}, "created_by": {"type": "string"},
                   "key": {"type": "string", "description": "The secret: shown once, kept nowhere."}}}
_components["KeyShown"] = _KEY_SHOWN
_ERROR = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
_ERRORS = {str(code): {"description": text, "content": _ERROR}
           for code, text in ((401, "No valid admin key"), (403, "A viewer's key asked for a change"))}
_components["Error"] = {"type": "object", "properties": {"error": {"type": "object", "properties": {
    "type": {"type": "string"}, "message": {"type": "string"},
    "param": {"type": "string", "description": "the query parameter refused, when one was"}}}}}


def _op(summary: str, answer: str, status: int = 200, body: dict[str, Any] | None = None,
        params: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "security": [{"adminKey": []}], "responses": {
        str(status): {"description": summary, "content": {"application/json": {"schema": {
            "$ref": f"#/components/schemas/{answer}"}}}}, **_ERRORS}}
    if body is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    if params:
        op["parameters"] = params
    return op


def _query(name: str, text: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "description": text, "schema": {"type": "integer"}}


_ID = [{"name": "key_id", "in": "path", "required": True, "schema": {"type": "string"}}]
_NAME = [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}]
_components["TenantShown"] = {"allOf": [{"$ref": "#/components/schemas/StoredTenant"}, {
    "type": "object", "properties": {"configured": {
        "type": "boolean", "description": "Whether it replaces a configured tenant of its name"}}}]}
_components["TenantList"] = {"type": "object", "properties": {"data": {"type": "array", "items": {
    "$ref": "#/components/schemas/TenantShown"}}}}
_components["KeyList"] = {"type": "object", "properties": {"data": {"type": "array", "items": {
    "$ref": "#/components/schemas/KeyShown"}}}}
_components["AuditPage"] = {"type": "object", "properties": {
    "data": {"type": "array", "items": {"$ref": "#/components/schemas/AuditEntry"}},
    "total": {"type": "integer"}, "next": {"type": ["integer", "null"]}}}

_components["Session"] = {"type": "object", "description": "Who is signed in, and the CSRF token its changes send.",
                          "properties": {"actor": {"type": "string"}, "role": {"enum": ["admin", "viewer"]},
                                         "csrf_token": {"type": ["string", "null"], "description":
                                                        "Sent back as X-CSRF-Token with every change"},
                                         "expires_at": {"type": ["number", "null"]}}}
_SESSION_COOKIE = {"sessionCookie": {"type": "apiKey", "in": "cookie", "name": "ingress_admin_session",
                                     "description": "The console's session; a change also sends X-CSRF-Token"}}
_OPEN: dict[str, Any] = {"security": []}
_MEASURES: dict[str, Any] = {
    **{name: {"type": "integer"} for name in ("requests", "input_tokens", "output_tokens", "cached_tokens",
                                              "cost_nanos", "errors", "cache_hits", "reasoning_tokens",
                                              "cache_write_tokens")},
    "cost_usd": {"type": "string", "description": "cost_nanos as a decimal with nine places, e.g. 0.000123000"}}
_components["SpendRow"] = {"type": "object", "description": "A period's measures for one value of each dimension "
                           "grouped by (only those are present; null where a request had none).", "properties": {
    "period": {"type": "string", "description": "2026-12-06, or 2026-12-06T17 by hour (UTC)"},
    **{name: {"type": ["string", "null"]} for name in ("tenant", "key", "model", "route", "variant")},
    **_MEASURES}}
_components["SpendList"] = {"type": "object", "properties": {
    "object": {"const": "list"}, "granularity": {"enum": ["day", "hour"]}, "from": {"type": "string"},
    "to": {"type": "string"}, "data": {"type": "array", "items": {"$ref": "#/components/schemas/SpendRow"}},
    "total": {"type": "object", "properties": _MEASURES}}}
_SPEND = [{"name": name, "in": "query", "required": False, "description": text, "schema": schema}
          for name, text, schema in (
              ("from", "the first UTC day (YYYY-MM-DD), today by default", {"type": "string", "format": "date"}),
              ("to", "the last UTC day, included: from by default", {"type": "string", "format": "date"}),
              ("granularity", "a row a day or an hour", {"enum": ["day", "hour"], "default": "day"}),
              ("group_by", "a comma list of tenant, key, model, route, variant; empty: one row a period",
               {"type": "string", "default": "tenant"}),
              ("tenant", "only this tenant's", {"type": "string"}),
              ("key", "only this key id's (or JWT subject's, `<issuer>:<sub>`)", {"type": "string"}),
              ("model", "only this model's (as asked)", {"type": "string"}),
              ("format", "json, or csv (a header line, then the rows)", {"enum": ["json", "csv"], "default": "json"}))]

DESCRIPTION: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "ingress admin API", "version": "1",
             "description": "Keys made, changed, rotated and revoked, tenants made, changed and deleted while the "
                            "edge serves; the audit log; the spend ledger. "
                            "Every change is seen by every replica within a second (docs/admin.md)."},
    "components": {"schemas": _components, "securitySchemes": {"adminKey": {"type": "http", "scheme": "bearer"},
                                                                   **_SESSION_COOKIE}},
    "paths": {
        "/admin/v1/keys": {
            "post": _op("Make a key (its secret shown once)", "KeyShown", 201, _schemas[0]),
            "get": _op("The stored keys", "KeyList", params=[{"name": "tenant", "in": "query", "required": False,
                                                               "schema": {"type": "string"}}]),
        },
        "/admin/v1/keys/{key_id}": {
            "get": {**_op("A stored key", "KeyShown"), "parameters": _ID},
            "patch": {**_op("Change a key's limits, models, budget, guardrails, metadata or expiry", "KeyShown",
                            body=_schemas[1]), "parameters": _ID},
            "delete": {**_op("Revoke a key", "KeyShown"), "parameters": _ID},
        },
        "/admin/v1/keys/{key_id}/rotate": {
            "post": {**_op("A new secret; the former one works for grace_seconds more", "KeyShown",
                           body=_schemas[2]), "parameters": _ID},
        },
        "/admin/v1/keys:import": {
            "post": {"summary": "Copy the keys file's tenants and keys (their hashes) into the store; idempotent",
                     "security": [{"adminKey": []}], "requestBody": {"required": False, "content": {
                         "application/json": {"schema": {"type": "object", "additionalProperties": False}}}},
                     "responses": {"200": {"description": "What was imported, what was stored already, what "
                                                          "was refused and why"}, **_ERRORS}},
        },
        "/admin/v1/tenants": {
            "post": {**_op("Make a tenant (over a configured one of its name)", "TenantShown", 201, _schemas[4]),
                     "description": "409 when a tenant of that name is stored already."},
            "get": _op("The stored tenants", "TenantList"),
        },
        "/admin/v1/tenants/{name}": {
            "get": {**_op("A stored tenant", "TenantShown"), "parameters": _NAME},
            "patch": {**_op("Change a tenant's limits, budget, models, routes, guardrails or metadata", "TenantShown",
                            body=_schemas[5]), "parameters": _NAME},
            "delete": {**_op("Delete a stored tenant; 409, naming them, while keys belong to it", "TenantShown"),
                       "parameters": _NAME},
        },
        "/admin/v1/audit": {
            "get": _op("The audit log, oldest first", "AuditPage",
                       params=[_query("after", "the seq of the last entry read (0: from the start)"),
                               _query("limit", "entries a page, at most 500")]),
        },
        "/admin/v1/session": {
            "post": {**_op("Sign in to the console: a session cookie (HttpOnly, SameSite=Strict) for an admin key",
                           "Session", body=_schemas[7]), **_OPEN,
                     "description": "401 for no admin key; 429 with Retry-After after 5 failures from an address "
                                    "within a minute."},
            "get": {**_op("Who is signed in, and the session's CSRF token", "Session"),
                    "security": [{"adminKey": []}, {"sessionCookie": []}]},
            "delete": {**_op("Sign out: the session deleted, the cookie cleared", "Session"), **_OPEN,
                       "description": "With a session, its X-CSRF-Token is needed (403 without)."},
        },
        "/admin/v1/session/oidc": {
            "get": {"summary": "Sign in to the console with the OIDC provider: a redirect (302) to its authorization "
                               "endpoint (the authorization-code flow with PKCE, S256); only with [admin.oidc] "
                               "redirect_uri", **_OPEN,
                    "responses": {"302": {"description": "To the provider, with a one-use state bound to this "
                                                         "browser by the cookie ingress_admin_oidc; or to "
                                                         "/admin/#signin-error=unavailable"}}},
        },
        "/admin/v1/session/oidc/callback": {
            "get": {"summary": "Where the provider sends the browser back: the code exchanged, the ID token verified, "
                               "and the console's session cookie for `oidc:<subject>`", **_OPEN,
                    "parameters": [{"name": name, "in": "query", "required": False, "description": text,
                                    "schema": {"type": "string"}} for name, text in (
                        ("code", "the authorization code"), ("state", "the flow's state"),
                        ("error", "the provider's refusal, if any"))],
                    "responses": {"302": {"description": "To /admin/ signed in, or to /admin/#signin-error=<reason> "
                                                         "(state, denied, exchange, token, no_role, rate_limited, "
                                                         "unavailable): never a session then"}}},
        },
        "/admin/v1/spend": {
            "get": {**_op("The spend ledger by day or hour, grouped and filtered; JSON or CSV", "SpendList",
                          params=_SPEND),
                    "description": "400, naming the parameter (`error.param`), for one unknown or not valid; 404 "
                                   "when the ledger is off; 503 with Retry-After when its store did not answer."},
        },
        "/admin/v1/openapi.json": {"get": {"summary": "This description", "security": [{"adminKey": []}],
                                           "responses": {"200": {"description": "OpenAPI 3.1"}, **_ERRORS}}},
    },
}
