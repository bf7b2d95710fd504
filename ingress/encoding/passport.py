"""A request's passport computed from what the client sent: its prompt's prefix hashes, its token
estimate and what the edge took from the headers (the passport's layout and readers: ingress/wire/passport.py)."""

from __future__ import annotations

import time

import msgspec

from ingress.encoding import prefix as canonical
from ingress.encoding.requests import message_text
from ingress.oai.chat import ChatCompletionRequest
from ingress.oai.embeddings import EmbeddingRequest
from ingress.tokens import TokenCounter
from ingress.wire import prefix
from ingress.wire.passport import Passport, key_id_of, new_traceparent
from ingress.wire.prefix import PREFIX_BYTES

CHARS_PER_TOKEN = 4  # the usual estimate for English text with BPE tokenizers, when no counter is given


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
    return prefix_facts(*canonical.chat_text(request, limit, blocks), blocks)


def _chars(request: ChatCompletionRequest) -> int:
    return sum(len(message_text(m)) for m in request.messages)


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
    text = canonical.prompts_text(prompts, prefix.LIMIT_BYTES if blocks else PREFIX_BYTES)
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
