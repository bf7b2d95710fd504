"""Stored responses: what `store: true` (the Responses API's default) keeps, and `previous_response_id`,
`GET`/`DELETE /v1/responses/{id}` and its `input_items` read.

    settings.py  the `[responses]` section: backend, retention, scope, bounds
    record.py    a response and the conversation that made it, as one record of bytes; ids, owners,
                 pages of input items (sans-I/O)
    stores.py    memory (an LRU bounded by bytes) and Redis/Valkey (the tenancy's server, a TTL on every key)
    seal.py      what is kept, sealed at rest (AES-256-GCM, bound to its owner and id) when a key is named
    store.py     the store the edge asks, by owner; an admin-scope key's readers (its tenant's keys)

Every response belongs to its owner: the key that made it (or its tenant, `scope = "tenant"`), or the
one namespace of an edge without tenancy. Another owner's id is looked up under the caller's own
namespace, so it is as unknown as an id never made. The stages: ingress/pipeline/stored.py.
"""

from __future__ import annotations

from ingress.state.settings import ResponsesSettings
from ingress.state.store import ResponseStore

__all__ = ["ResponseStore", "ResponsesSettings"]
