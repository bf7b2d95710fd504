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

from ingress.oai.chat import ChatCompletionRequest
from ingress.oai.embeddings import EmbeddingRequest
from ingress.tokens import TokenCounter
from ingress.wire import identifiers, prefix
from ingress.wire._generated.LLMGateway.CompletionRequest import CompletionRequest as CompletionTable
from ingress.wire._generated.LLMGateway.EmbeddingRequest import EmbeddingRequest as EmbeddingTable
from ingress.wire.encode import message_text
from ingress.wire.prefix import PREFIX_BYTES
from ingress.wire.types import PassportData

CHARS_PER_TOKEN = 4  # the usual estimate for English text with BPE tokenizers, when no counter is given

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
    affinity_headers: tuple[tuple[str, str], ...] = ()  # the values of the headers routes key affinity by

    def header(self, name: str | None) -> str | None:
        """A header a route keys affinity by, as sent (None: not sent, or no name)."""
        if name is not None:
            name = name.lower()
            for sent, value in self.affinity_headers:
                if sent == name:
                    return value
        return None


class PrefixFacts(msgspec.Struct, frozen=True, gc=False):
    """What the passport says of the prompt's prefix (ingress/wire/prefix.py)."""

    prefix_hash: int
    blocks: list[int] | None = None  # the chain, when asked for
    conversation_block: int = 0


def prefix_facts(text: bytes, first_turn_end: int, blocks: bool) -> PrefixFacts:
    """The prefix hash of canonical text, and with `blocks` its chain (the text then runs to LIMIT_BYTES)."""
    if not blocks:
        return PrefixFacts(prefix.prefix_hash(text))
    return PrefixFacts(*prefix.chain(text, first_turn_end))


def _prompt_facts(request: ChatCompletionRequest, blocks: bool) -> PrefixFacts:
    """The prompt's prefix hash, and with `blocks` its chain of block hashes: only the text they cover is
    built, however long the prompt."""
    limit = prefix.LIMIT_BYTES if blocks else PREFIX_BYTES
    return prefix_facts(*prefix.chat_text(request, limit, blocks), blocks)


def _chars(request: ChatCompletionRequest) -> int:
    return sum(len(message_text(m)) for m in request.messages)


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


MAX_READ_BLOCKS = 1024  # of a client's own chain, read for routing (the edge's own has at most ~50)


def prefix_at(buf: bytes | bytearray) -> tuple[tuple[int, ...], int]:
    """A request buffer's prefix hash chain (at most MAX_READ_BLOCKS of it) and conversation block, read in
    place from its passport: what a cache-affine group chooses a client's own buffer by. ((), 0): none."""
    root = _ROOTS.get(identifiers.identifier_of(buf))
    passport = root.GetRootAs(buf, 0).Passport() if root is not None else None
    if passport is None:
        return (), 0
    tab = passport._tab
    slot = tab.Offset(20)  # Passport.prefix_blocks: field 8, vtable slot 4 + 2 * 8
    if not slot:
        return (), 0
    at = tab.Vector(slot)
    count = min(tab.VectorLen(slot), MAX_READ_BLOCKS)
    return struct.unpack_from(f"<{count}Q", buf, at), passport.ConversationBlock()


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


def model_name(buf: bytes | bytearray) -> str:
    """A request buffer's model name, read in place (a CompletionRequest's or an EmbeddingRequest's)."""
    root = _ROOTS.get(identifiers.identifier_of(buf))
    name = root.GetRootAs(buf, 0).ModelName() if root is not None else None
    return (name or b"").decode("utf-8", "replace")


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
                     counter: TokenCounter | None = None, prompt_tokens: int | None = None,
                     blocks: bool = False) -> Passport:
    """`counter` (the route's, ingress/tokens) makes prompt_tokens_estimate the prompt's token count, as
    `prompt_tokens` does when it was counted already; without either it is the prompt's characters /
    CHARS_PER_TOKEN. `blocks`: the passport carries the prompt's prefix hash chain (for a cache-affine
    group; it costs tens of µs, so it is computed only where a choice reads it)."""
    facts = _prompt_facts(request, blocks)
    if prompt_tokens is not None:
        tokens = prompt_tokens
    else:
        tokens = counter.chat(request) if counter is not None else -(-_chars(request) // CHARS_PER_TOKEN)
    return _passport(facts, tokens, meta, now)


def compute_embedding_passport(request: EmbeddingRequest, meta: RequestMeta, now: float | None = None, *,
                               counter: TokenCounter | None = None, prompt_tokens: int | None = None,
                               blocks: bool = False) -> Passport:
    """The passport of an embeddings request: its texts (or token ids, counted exactly) stand for the prompt."""
    return compute_prompts_passport(request.inputs, meta, now, counter=counter, prompt_tokens=prompt_tokens,
                                    blocks=blocks)


def compute_prompts_passport(prompts: list[str | list[int]], meta: RequestMeta, now: float | None = None, *,
                             counter: TokenCounter | None = None, prompt_tokens: int | None = None,
                             blocks: bool = False) -> Passport:
    """The passport of texts or token-id lists (embeddings inputs, text-completion prompts); ids count exactly,
    texts by `counter` when given. They have no user message: the first block stands for the conversation."""
    text = prefix.prompts_text(prompts, prefix.LIMIT_BYTES if blocks else PREFIX_BYTES)
    facts = prefix_facts(text, 0, blocks)
    if prompt_tokens is not None:
        tokens = prompt_tokens
    elif counter is not None:
        tokens = counter.texts(prompts)
    else:
        chars = sum(len(v) for v in prompts if isinstance(v, str))
        tokens = sum(len(v) for v in prompts if isinstance(v, list)) + -(-chars // CHARS_PER_TOKEN)
    return _passport(facts, tokens, meta, now)


def _passport(facts: PrefixFacts, tokens_estimate: int, meta: RequestMeta, now: float | None) -> Passport:
    now = time.time() if now is None else now
    return Passport(
        tenant_id=meta.tenant_id,
        key_id=meta.key_id or key_id_of(meta.api_key),
        prompt_tokens_estimate=min(tokens_estimate, 2**32 - 1),
        prefix_hash=facts.prefix_hash,
        priority=meta.priority,
        deadline_unix_ms=int(now * 1000) + meta.timeout_ms if meta.timeout_ms else 0,
        traceparent=meta.traceparent or new_traceparent(),
        tracestate=meta.tracestate,
        prefix_blocks=facts.blocks,
        conversation_block=facts.conversation_block,
    )
