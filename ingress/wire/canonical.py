"""A request's canonical bytes: the encoded request without what only this one exchange carries.

The response cache keys an answer by what the service is asked (ingress/cache): an encoded
`CompletionRequest` or `EmbeddingRequest` read back, every field, and serialized again without its request
id, its passport (estimates, trace context, who asked: the cache scopes by that itself) and the flags that
shape only how the answer travels: `stream`, `include_usage` and `include_obfuscation` of a completion,
`base64` of embeddings, and the `stream` member of a Messages request carried whole for Anthropic
(`anthropic_json`). Two requests that differ only in those have the same canonical bytes, and so the
same answer; any other difference, down to a byte of a prompt or a tool's schema, is kept.

The fields read back are serialized as MessagePack (the schema's data classes, their fields in schema
order: deterministic), not as FlatBuffers again: the same fields, for a tenth of the generated encoder's
cost; reading the buffer back is most of what a key costs (bench/response_cache.py). Cutting the passport
out of the sent bytes in place cannot work: its size, and the request id's, shift the offsets of the
fields written after them.
"""

from __future__ import annotations

from typing import NamedTuple

import msgspec

from ingress.wire import identifiers
from ingress.wire._generated import readers
from ingress.wire.decode import read_request

_members = msgspec.json.Decoder(dict[str, msgspec.Raw])
_json = msgspec.json.Encoder()
_canonical = msgspec.msgpack.Encoder()


class Canonical(NamedTuple):
    """The canonical bytes, and whether the request asks for a deterministic answer: greedy decoding
    (temperature 0, sent by the client) or a fixed seed; embeddings always are."""

    data: bytes
    deterministic: bool


def canonical(encoded: bytes | bytearray) -> Canonical:
    """The canonical form of an encoded CompletionRequest or EmbeddingRequest (one the edge encoded:
    it is not verified again). ValueError for any other buffer."""
    buf = bytes(encoded)
    kind = identifiers.identifier_of(buf)
    if kind == identifiers.REQUEST:
        request = readers.read_CompletionRequest(buf)
        deterministic = (request.temperature_set and request.temperature == 0) or request.seed is not None
        anthropic = request.anthropic_json
        request = msgspec.structs.replace(request, request_id=None, passport=None, stream=False,
                                          include_usage=False, include_obfuscation=None,
                                          anthropic_json=_without_stream(anthropic) if anthropic else anthropic)
        return Canonical(_canonical.encode(request), deterministic)
    if kind == identifiers.EMBEDDING_REQUEST:
        embedding = readers.read_EmbeddingRequest(buf)
        embedding = msgspec.structs.replace(embedding, request_id=None, passport=None, base64=False)
        return Canonical(_canonical.encode(embedding), True)
    raise ValueError(f"not a request buffer (identifier {kind!r})")


def deterministic(encoded: bytes | bytearray) -> bool:
    """As `canonical(encoded).deterministic`, for a fraction of its cost: three fields read in place (a
    route that caches only deterministic requests asks this first)."""
    buf = bytes(encoded)
    kind = identifiers.identifier_of(buf)
    if kind == identifiers.EMBEDDING_REQUEST:
        return True
    if kind != identifiers.REQUEST:
        raise ValueError(f"not a request buffer (identifier {kind!r})")
    view = read_request(buf)
    return (view.TemperatureSet() and view.Temperature() == 0) or view.Seed() is not None


def _without_stream(anthropic_json: str) -> str:
    """A Messages request as sent, without its `stream` member, re-encoded: its other members, their order
    and their values as sent, kept (only the whitespace between top-level members goes)."""
    try:
        members = _members.decode(anthropic_json)
    except msgspec.DecodeError:
        return anthropic_json  # the edge decoded it already; kept whole if it ever were not an object
    members.pop("stream", None)
    return _json.encode(members).decode()
