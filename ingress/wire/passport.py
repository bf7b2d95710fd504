"""The request passport: facts computed once at the edge and carried on every internal hop."""

from __future__ import annotations

import hashlib
import random
import re
import struct
import time
from collections.abc import Mapping
from typing import Any

import msgspec

from ingress.oai.chat import ROLES, ChatCompletionRequest
from ingress.oai.embeddings import EmbeddingRequest
from ingress.tokens import TokenCounter
from ingress.wire import identifiers
from ingress.wire._generated.LLMGateway.CompletionRequest import CompletionRequest as CompletionTable
from ingress.wire._generated.LLMGateway.EmbeddingRequest import EmbeddingRequest as EmbeddingTable
from ingress.wire.encode import message_text
from ingress.wire.types import PassportData

PREFIX_BYTES = 4096  # how much of the prompt the cache-affinity hash (SHA-256, first 64 bits) covers
CHARS_PER_TOKEN = 4  # the usual estimate for English text with BPE tokenizers, when no counter is given

TRACEPARENT_LENGTH = 55  # "00-" trace id (32 hex) "-" span id (16 hex) "-" flags (2 hex)
_ROOTS: dict[bytes, type[CompletionTable] | type[EmbeddingTable]] = {
    identifiers.REQUEST: CompletionTable, identifiers.EMBEDDING_REQUEST: EmbeddingTable}
_TRACEPARENT = re.compile(r"^00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$")
_TRACESTATE = re.compile(r"[\x20-\x7e]{1,512}")


# The schema's Passport table as plain data, generated from it: a field added there is carried here.
Passport = PassportData


class RequestMeta(msgspec.Struct, kw_only=True, frozen=True):
    """What the edge takes from HTTP headers, already parsed."""

    api_key: str | None = None
    tenant_id: str | None = None
    key_id: str | None = None  # a tenancy key's public id (else the passport carries a hash of the api_key)
    priority: int = 0
    timeout_ms: int = 0
    traceparent: str | None = None
    tracestate: str | None = None


def _prompt_facts(request: ChatCompletionRequest) -> tuple[bytes, int]:
    """The leading PREFIX_BYTES of the prompt (role and text of each message, separated), and its length
    in characters. Only the prefix is encoded, however long the prompt."""
    parts: list[bytes] = []
    size = chars = 0
    for m in request.messages:
        text = message_text(m)
        chars += len(text)
        if size < PREFIX_BYTES:
            piece = f"{ROLES[type(m)]}\x1f{text[:PREFIX_BYTES]}\x1e".encode()
            parts.append(piece)
            size += len(piece)
    return b"".join(parts)[:PREFIX_BYTES], chars


def key_id_of(api_key: str | None) -> str | None:
    """A stable, non-reversible id of the API key; the key itself never leaves the edge."""
    if not api_key:
        return None
    return hashlib.blake2b(api_key.encode(), digest_size=8).hexdigest()


def new_traceparent(sampled: bool = True) -> str:
    # Trace ids need to be unique, not secret: OpenTelemetry's SDK also uses random.getrandbits.
    return f"00-{random.getrandbits(128) or 1:032x}-{random.getrandbits(64) or 1:016x}-{'01' if sampled else '00'}"


def valid_traceparent(value: str | None) -> str | None:
    return value if value is not None and _TRACEPARENT.fullmatch(value) else None


def valid_tracestate(value: str | None) -> str | None:
    """W3C tracestate is at most 512 printable ASCII characters; anything else is not forwarded."""
    return value if value is not None and _TRACESTATE.fullmatch(value) else None


def traceparent_at(buf: bytes | bytearray) -> int | None:
    """Where a request buffer's passport (a CompletionRequest's or an EmbeddingRequest's) holds its
    traceparent's characters, so a span id can be written over its own in place; None when it holds none."""
    root = _ROOTS.get(identifiers.identifier_of(buf))
    passport = root.GetRootAs(buf, 0).Passport() if root is not None else None
    if passport is None:
        return None
    slot = passport._tab.Offset(16)  # Passport.traceparent: field 6, vtable slot 4 + 2 * 6
    if not slot:
        return None
    at = passport._tab.Pos + slot
    at += struct.unpack_from("<I", buf, at)[0]
    return at + 4 if struct.unpack_from("<I", buf, at)[0] == TRACEPARENT_LENGTH else None


def trace_context(buf: bytes | bytearray) -> tuple[str | None, str | None]:
    """A request buffer's traceparent and tracestate, read in place from its passport (well-formed ones
    only): the context a service continues the trace from, with no header to parse."""
    root = _ROOTS.get(identifiers.identifier_of(buf))
    passport = root.GetRootAs(buf, 0).Passport() if root is not None else None
    if passport is None:
        return None, None
    traceparent = valid_traceparent((passport.Traceparent() or b"").decode("ascii", "replace") or None)
    tracestate = valid_tracestate((passport.Tracestate() or b"").decode("ascii", "replace") or None)
    return traceparent, tracestate if traceparent else None


def start_span(tracer: Any, buf: bytes | bytearray, name: str, *, kind: Any = None,
               attributes: Mapping[str, Any] | None = None) -> Any:
    """For a Python service behind the edge: its span for a request buffer, the child of the span that sent
    it (the edge's attempt), from the passport's trace context. `tracer` is an OpenTelemetry Tracer; the
    span is started, not made current, and ends when the caller ends it."""
    from opentelemetry.trace import SpanKind
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    traceparent, tracestate = trace_context(buf)
    carrier = {"traceparent": traceparent, "tracestate": tracestate or ""} if traceparent else {}
    parent = TraceContextTextMapPropagator().extract(carrier) if carrier else None
    return tracer.start_span(name, context=parent, kind=SpanKind.SERVER if kind is None else kind,
                             attributes=attributes)


def compute_passport(request: ChatCompletionRequest, meta: RequestMeta, now: float | None = None, *,
                     counter: TokenCounter | None = None, prompt_tokens: int | None = None) -> Passport:
    """`counter` (the route's, ingress/tokens) makes prompt_tokens_estimate the prompt's token count, as
    `prompt_tokens` does when it was counted already; without either it is the prompt's characters /
    CHARS_PER_TOKEN."""
    prefix_bytes, chars = _prompt_facts(request)
    if prompt_tokens is not None:
        tokens = prompt_tokens
    else:
        tokens = counter.chat(request) if counter is not None else -(-chars // CHARS_PER_TOKEN)
    return _passport(prefix_bytes, tokens, meta, now)


def compute_embedding_passport(request: EmbeddingRequest, meta: RequestMeta, now: float | None = None, *,
                               counter: TokenCounter | None = None, prompt_tokens: int | None = None) -> Passport:
    """The passport of an embeddings request: its texts (or token ids, counted exactly) stand for the prompt."""
    return compute_prompts_passport(request.inputs, meta, now, counter=counter, prompt_tokens=prompt_tokens)


def compute_prompts_passport(prompts: list[str | list[int]], meta: RequestMeta, now: float | None = None, *,
                             counter: TokenCounter | None = None, prompt_tokens: int | None = None) -> Passport:
    """The passport of texts or token-id lists (embeddings inputs, text-completion prompts); ids count exactly,
    texts by `counter` when given."""
    parts: list[bytes] = []
    size = chars = tokens = 0
    for value in prompts:
        if isinstance(value, str):
            chars += len(value)
            piece = value[:PREFIX_BYTES].encode() + b"\x1e"
        else:
            tokens += len(value)
            piece = " ".join(map(str, value[:PREFIX_BYTES])).encode() + b"\x1e"
        if size < PREFIX_BYTES:
            parts.append(piece)
            size += len(piece)
    if prompt_tokens is not None:
        tokens = prompt_tokens
    elif counter is not None:
        tokens = counter.texts(prompts)
    else:
        tokens += -(-chars // CHARS_PER_TOKEN)
    return _passport(b"".join(parts)[:PREFIX_BYTES], tokens, meta, now)


def _passport(prefix_bytes: bytes, tokens_estimate: int, meta: RequestMeta, now: float | None) -> Passport:
    prefix = int.from_bytes(hashlib.sha256(prefix_bytes).digest()[:8], "little")  # SHA-NI: ~1 GB/s here
    now = time.time() if now is None else now
    return Passport(
        tenant_id=meta.tenant_id,
        key_id=meta.key_id or key_id_of(meta.api_key),
        prompt_tokens_estimate=min(tokens_estimate, 2**32 - 1),
        prefix_hash=prefix,
        priority=meta.priority,
        deadline_unix_ms=int(now * 1000) + meta.timeout_ms if meta.timeout_ms else 0,
        traceparent=meta.traceparent or new_traceparent(),
        tracestate=meta.tracestate,
    )
