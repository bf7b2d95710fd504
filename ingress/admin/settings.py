"""The `[admin]` section: the admin API's listener and credentials (docs/admin.md).

    [admin]
    listen = "127.0.0.1:9090"          # its own listener; never the public port
    [[admin.keys]]                     # what `ingress keys new --admin admin` prints
    id = "0c4f1e9a7b2d"
    hash = "sha256:..."
    role = "admin"                     # or "viewer": reads only
    [admin.ledger]                     # the spend ledger, read at /admin/v1/spend (on by default)
    enabled = true
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from ingress.tenancy.settings import KeyHash, KeyId, Tenancy

Listen = Annotated[str, Meta(pattern=r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]*):[0-9]{1,5}\Z")]


class _Config(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Unknown keys are errors, as everywhere in the configuration."""


class AdminKey(_Config, frozen=True):
    """An admin credential: `sk-ig-<id>-<secret>` as the API keys are, its SHA-256 only in the file."""

    id: KeyId
    hash: KeyHash
    role: Literal["admin", "viewer"] = "viewer"
    name: str | None = None  # for people; never used to decide


class Ledger(_Config, frozen=True):
    """The spend ledger (ingress/tenancy/ledger.py): every API request's usage, by hour and by day."""

    enabled: bool = True
    flush_interval: Annotated[float, Meta(ge=0.05, le=60.0)] = 1.0  # s between two flushes of a worker's rollups
    hour_days: Annotated[int, Meta(ge=1, le=366)] = 35  # days an hour's rollups are kept after it ends
    day_days: Annotated[int, Meta(ge=1, le=3660)] = 400  # days a day's rollups are kept after it ends


class Admin(_Config, frozen=True):
    listen: Listen  # host:port of the admin listener; config.py refuses the public port
    keys: tuple[AdminKey, ...] = ()
    poll_interval: Annotated[float, Meta(ge=0.05, le=1.0)] = 0.25  # s between two looks at the version counter
    deadline_ms: Annotated[int, Meta(ge=10, le=30_000)] = 2000  # per call to the store
    ledger: Ledger = Ledger()

    def address(self) -> tuple[str, int]:
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]") or "0.0.0.0", int(port)


def admin_problem(admin: Admin, tenancy: Tenancy | None, public: tuple[str, int] | None, workers: int) -> str | None:
    """What is wrong with `[admin]` (config.py's message), if anything: it needs the tenancy whose keys it
    keeps, a store every worker shares, a port of its own, and credentials."""
    if tenancy is None:
        return "admin: the admin API keeps the [tenancy] keys; configure [tenancy]"
    if tenancy.backend != "redis" and workers != 1:
        return ("admin: with tenancy.backend = \"memory\" each worker would keep keys of its own; use backend = "
                "\"redis\" (every replica sees a change), or workers = 1")
    port = admin.address()[1]
    if public is not None and port == public[1] and port != 0:
        return (f"admin.listen: port {port} is the public listener's; the admin API listens on a port of its own "
                "(keep it off the public network)")
    if not admin.keys:
        return "admin.keys: no admin key is configured: make one with `ingress keys new --admin admin`"
    seen: set[str] = set()
    for i, key in enumerate(admin.keys):
        if key.id in seen:
            return f"admin.keys[{i}].id: the key id {key.id!r} is used twice"
        seen.add(key.id)
    return None
