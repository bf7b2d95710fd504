"""The `[admin]` section: the admin API's listener and credentials (docs/admin.md).

    [admin]
    listen = "127.0.0.1:9090"          # its own listener; never the public port
    [[admin.keys]]                     # what `ingress keys new --admin admin` prints
    id = "0c4f1e9a7b2d"
    hash = "sha256:..."
    role = "admin"                     # or "viewer": reads only
    [admin.oidc]                       # and/or people signed in with an OIDC provider (docs/admin.md)
    issuer = "https://sso.example.com/realms/ops"
    audience = ["ingress-admin"]       # a client id of its own: no data-plane token is an admin's
    role_claim = "groups"
    admin_values = ["ingress-admins"]
    viewer_values = ["ingress-viewers"]
    redirect_uri = "https://admin.example.com/admin/v1/session/oidc/callback"  # the console's "Sign in with SSO"
    [admin.ledger]                     # the spend ledger, read at /admin/v1/spend (on by default)
    enabled = true
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from ingress.tenancy.settings import Algorithm, ClaimPath, Issuer, KeyHash, KeyId, Seconds, Tenancy

Listen = Annotated[str, Meta(pattern=r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]*):[0-9]{1,5}\Z")]


class _Config(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Unknown keys are errors, as everywhere in the configuration."""


class AdminKey(_Config, frozen=True):
    """An admin credential: `sk-ig-<id>-<secret>` as the API keys are, its SHA-256 only in the file."""

    id: KeyId
    hash: KeyHash
    role: Literal["admin", "viewer"] = "viewer"
    name: str | None = None  # for people; never used to decide


Value = Annotated[str, Meta(min_length=1, max_length=256)]
EnvName = Annotated[str, Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_]*\Z")]  # as ingress/settings.py's


class AdminOidc(_Config, frozen=True):
    """Admins signed in with an OIDC provider: its JWTs as `Authorization: Bearer`, verified as the data plane's
    callers' are (ingress/tenancy/bearer.py, jwks.py), the role read from `role_claim` (a string or a list of
    them): any of `admin_values` makes an admin, else any of `viewer_values` a viewer, else none (403)."""

    issuer: Annotated[str, Meta(pattern=r"^https?://[^\s/?#]+(/[^\s?#]*)?\Z", max_length=500)]
    audience: Annotated[tuple[Value, ...], Meta(min_length=1)]
    role_claim: ClaimPath = "groups"
    admin_values: tuple[Value, ...] = ()
    viewer_values: tuple[Value, ...] = ()
    subject_claim: ClaimPath = "sub"  # who the audit log says did it (`oidc:<subject>`)
    algorithms: Annotated[tuple[Algorithm, ...], Meta(min_length=1)] = ("RS256",)
    leeway: Annotated[float, Meta(ge=0, le=300)] = 30.0
    refresh_every: Seconds = 900.0
    min_refresh_interval: Annotated[float, Meta(ge=0.1, le=3600)] = 10.0
    fetch_timeout: Annotated[float, Meta(gt=0, le=60)] = 5.0
    jwks_uri: Annotated[str, Meta(pattern=r"^https?://\S+\Z")] | None = None
    # the console's sign-in by the authorization-code flow with PKCE (sso.py): the edge is the client
    redirect_uri: Annotated[str, Meta(pattern=r"^https?://[^\s?#]+\Z", max_length=500)] | None = None
    client_id: Value | None = None  # the first audience by default; one of them
    client_secret_env: EnvName | None = None  # a confidential client's secret, from this variable; none: public
    scopes: Annotated[tuple[Annotated[str, Meta(pattern=r"^[!#-\[\]-~]+\Z", max_length=100)], ...],
                      Meta(min_length=1, max_length=20)] = ("openid", "profile", "email")
    session_max: Annotated[float, Meta(ge=60, le=8 * 3600)] = 8 * 3600.0  # s a console session signed in so lasts

    @property
    def client(self) -> str:
        """The client id the console signs in as: `client_id`, else the first audience."""
        return self.client_id or self.audience[0]

    def issuer_settings(self) -> Issuer:
        """As the data plane's verifier takes an issuer (its tenant and limits unused here)."""
        return Issuer(issuer=self.issuer, audience=self.audience, name="admin", algorithms=self.algorithms,
                      leeway=self.leeway, refresh_every=self.refresh_every,
                      min_refresh_interval=self.min_refresh_interval, fetch_timeout=self.fetch_timeout,
                      jwks_uri=self.jwks_uri)


class Ledger(_Config, frozen=True):
    """The spend ledger (ingress/tenancy/ledger.py): every API request's usage, by hour and by day."""

    enabled: bool = True
    flush_interval: Annotated[float, Meta(ge=0.05, le=60.0)] = 1.0  # s between two flushes of a worker's rollups
    hour_days: Annotated[int, Meta(ge=1, le=366)] = 35  # days an hour's rollups are kept after it ends
    day_days: Annotated[int, Meta(ge=1, le=3660)] = 400  # days a day's rollups are kept after it ends


class Admin(_Config, frozen=True):
    listen: Listen  # host:port of the admin listener; config.py refuses the public port
    keys: tuple[AdminKey, ...] = ()
    oidc: AdminOidc | None = None  # admins signed in with an OIDC provider, beside (or instead of) the keys
    poll_interval: Annotated[float, Meta(ge=0.05, le=1.0)] = 0.25  # s between two looks at the version counter
    deadline_ms: Annotated[int, Meta(ge=10, le=30_000)] = 2000  # per call to the store
    ledger: Ledger = Ledger()

    def address(self) -> tuple[str, int]:
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]") or "0.0.0.0", int(port)


def admin_problem(admin: Admin, tenancy: Tenancy | None, public: tuple[str, int] | None, workers: int,
                  environ: Mapping[str, str] = os.environ) -> str | None:
    """What is wrong with `[admin]` (config.py's message), if anything: it needs the tenancy whose keys it
    keeps, a store every worker shares, a port of its own, and credentials (a client secret's variable set)."""
    if tenancy is None:
        return "admin: the admin API keeps the [tenancy] keys; configure [tenancy]"
    if tenancy.backend != "redis" and workers != 1:
        return ("admin: with tenancy.backend = \"memory\" each worker would keep keys of its own; use backend = "
                "\"redis\" (every replica sees a change), or workers = 1")
    port = admin.address()[1]
    if public is not None and port == public[1] and port != 0:
        return (f"admin.listen: port {port} is the public listener's; the admin API listens on a port of its own "
                "(keep it off the public network)")
    if not admin.keys and admin.oidc is None:
        return ("admin.keys: no admin key is configured: make one with `ingress keys new --admin admin` (or "
                "configure [admin.oidc])")
    if (problem := _oidc_problem(admin.oidc, tenancy)) is not None:
        return problem
    if admin.oidc is not None and (env := admin.oidc.client_secret_env) is not None and not environ.get(env):
        return (f"admin.oidc.client_secret_env: the environment variable {env} is not set (a public client, "
                "signing in with PKCE alone, names none)")
    seen: set[str] = set()
    for i, key in enumerate(admin.keys):
        if key.id in seen:
            return f"admin.keys[{i}].id: the key id {key.id!r} is used twice"
        seen.add(key.id)
    return None


def _oidc_problem(oidc: AdminOidc | None, tenancy: Tenancy) -> str | None:
    """Some value makes a role; no token the data plane accepts from the same issuer is an admin's."""
    if oidc is None:
        return None
    if not oidc.admin_values and not oidc.viewer_values:
        return "admin.oidc: set admin_values and/or viewer_values (the role claim's values that make each role)"
    for i, issuer in enumerate(tenancy.issuers):
        if issuer.issuer == oidc.issuer and (shared := set(issuer.audience) & set(oidc.audience)):
            return (f"admin.oidc.audience: {sorted(shared)[0]!r} is tenancy.issuers[{i}]'s too: a caller's token "
                    "would be an admin's; give the admin API a client id (audience) of its own")
    if oidc.client_id is not None and oidc.client_id not in oidc.audience:
        return (f"admin.oidc.client_id: {oidc.client_id!r} is not one of audience: the ID tokens the console's "
                "sign-in gets are for it (their `aud`); add it to audience")
    if oidc.redirect_uri is not None and "openid" not in oidc.scopes:
        return "admin.oidc.scopes: the console's sign-in needs the scope \"openid\" (for an ID token)"
    return None
