"""The `[responses]` section: where the Responses API keeps what `store: true` (the default) asks it to keep.

    [responses]                              # optional; these are the defaults
    backend = "auto"                         # redis when [tenancy] names a Redis, else memory; "off": keep nothing
    retention = 2_592_000                    # seconds a stored response lives (30 days, as OpenAI's)
    scope = "key"                            # who may read one: the key that made it, or every key of its tenant
    memory_bytes = 67_108_864                # the memory backend's bound, per worker process (LRU past it)
    max_record_bytes = 16_777_216            # a conversation larger than this is refused (413) when stored
    timeout_ms = 500                         # one call to Redis; past it, 503 with Retry-After
    resume_poll_ms = 100                     # a resumed stream still running: how often its log is read again
    resume_idle = 600                        # ... and how long it may stay unchanged before the follower gives up
    seal_key_env = "INGRESS_STATE_SEAL_KEY"  # unset by default: what is kept is sealed with this key (seal.py)
    seal_old_keys_env = "INGRESS_STATE_SEAL_OLD_KEYS"  # former keys, which still open what they sealed
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

EnvName = Annotated[str, Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}\Z")]


class ResponsesSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    backend: Literal["auto", "memory", "redis", "off"] = "auto"
    retention: Annotated[float, Meta(ge=60, le=366 * 86_400)] = 30 * 86_400.0
    scope: Literal["key", "tenant"] = "key"
    memory_bytes: Annotated[int, Meta(ge=1024 * 1024, le=2**40)] = 64 * 1024 * 1024
    max_record_bytes: Annotated[int, Meta(ge=64 * 1024, le=512 * 1024 * 1024)] = 16 * 1024 * 1024
    timeout_ms: Annotated[int, Meta(ge=1, le=60_000)] = 500
    resume_poll_ms: Annotated[int, Meta(ge=10, le=10_000)] = 100
    resume_idle: Annotated[float, Meta(ge=1, le=86_400)] = 600.0
    # The environment variables of the keys that seal what is kept at rest (ingress/state/seal.py): 32
    # bytes in base64; the former keys, separated by commas. Unset: kept as JSON, readable where it lives.
    seal_key_env: EnvName | None = None
    seal_old_keys_env: EnvName | None = None

    def chosen(self, has_redis: bool) -> Literal["memory", "redis", "off"]:
        """The backend in use: `auto` is Redis when the tenancy names one (every replica reads what any
        stored), else this process's memory."""
        if self.backend == "auto":
            return "redis" if has_redis else "memory"
        return self.backend

    def __post_init__(self) -> None:
        if self.seal_old_keys_env is not None and self.seal_key_env is None:
            raise ValueError("seal_old_keys_env: former keys only open what a current key (seal_key_env) sealed")
