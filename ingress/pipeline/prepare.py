"""prepare: decode → route → passport → encode, CPU only; bad input raises here, before anything is sent."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

import msgspec

from ingress.encoding.embeddings import encode_embedding_request
from ingress.encoding.passport import (
    RequestMeta,
    compute_embedding_passport,
    compute_passport,
    compute_prompts_passport,
)
from ingress.encoding.requests import encode_messages_request, encode_text_request
from ingress.errors import InvalidRequest, PromptBlocked
from ingress.exchange import Exchange, Routed
from ingress.oai.chat import ChatCompletionRequest
from ingress.oai.codec import decode_chat_request_forwarding
from ingress.oai.completions import TextCompletionRequest, decode_text_request_forwarding
from ingress.oai.embeddings import EmbeddingRequest, decode_embedding_request
from ingress.oai.responses import Call, Item
from ingress.oai.responses_codec import decode_responses_request_forwarding
from ingress.oai.responses_to_chat import as_chat, as_sent
from ingress.pipeline.gateway import Gateway, hop_headers
from ingress.pipeline.turns import FOLDED, fold_late_system, late_system, place_cache_breakpoints
from ingress.routing.affinity import SESSION_HEADERS, Prefix, key_hash
from ingress.routing.chain import Link, route_name, too_long
from ingress.routing.table import Match
from ingress.settings import Route, Timeouts
from ingress.tokens import TokenCounter, counter_for
from ingress.wire.passport import Passport

R = TypeVar("R")


@dataclass(frozen=True)
class Prepared(Generic[R]):
    """A request decoded, routed and encoded for one route: everything the internal hop needs. Never changed
    once made: the request prepared for another route of its chain is another Prepared (`rerouter`)."""

    request: R
    match: Match
    encoded: bytes | bytearray
    headers: dict[str, str]
    timeouts: Timeouts
    prompt_tokens: int  # the passport's count (exact only where a limit needs it), and what admission reserves
    max_output_tokens: int | None  # the most the request may generate (None: unbounded by the request)
    prefix: Prefix | None = None  # what a cache-affine group chooses by; None on a route without one
    # The request encoded for another route of its chain (that route, the model name it sends); None on a
    # route whose chain has no other route. InvalidRequest: what the request asks for, that route cannot serve.
    encode_for: Callable[[Route, str], bytes | bytearray] | None = None
    passport: Passport | None = None
    meta: RequestMeta | None = None
    cache_key: str | None = None

    def rerouter(self, gateway: Gateway, exchange: Exchange) -> Callable[[Link], Prepared[R]] | None:
        """What makes the request ready for another route of its chain (pipeline/send.py), when it has one: the
        request prepared for that route, as a new Prepared."""
        encode_for = self.encode_for
        if encode_for is None:
            return None

        def reroute(link: Link) -> Prepared[R]:
            route, model = link.route, link.model(exchange.routed.model or "")
            encoded = encode_for(route, model)
            headers = hop_headers(exchange.request_id, self.passport)
            if exchange.trace is not None:  # each attempt writes its span's id into the buffer it sends
                encoded = exchange.trace.hop(encoded, headers) or encoded
            if route.forward_authorization and self.meta is not None and self.meta.api_key is not None:
                headers["authorization"] = f"Bearer {self.meta.api_key}"
            return dataclasses.replace(self, match=Match(route, model), encoded=encoded, headers=headers,
                                       timeouts=route.timeouts or gateway.settings.timeouts,
                                       prefix=_prefix(gateway, route, self.passport, self.meta, self.cache_key))

        return reroute


def _prefix(gateway: Gateway, route: Route, passport: Passport | None, meta: RequestMeta | None,
            cache_key: str | None) -> Prefix | None:
    """What a cache-affine group of the route chooses by: the prompt's prefix chain, and the route's affinity
    header, else the request's own key (`prompt_cache_key`), else the agent's session header; None on a
    route whose groups balance by p2c."""
    if passport is None or not gateway.affine(route):
        return None
    key = (meta.header(route.affinity_header) if meta is not None else None) or cache_key
    if not key and meta is not None:
        key = next(filter(None, map(meta.header, SESSION_HEADERS)), None)
    return Prefix(passport.prefix_blocks or (), passport.conversation_block, key_hash(key) if key else None)


Completion = ChatCompletionRequest | TextCompletionRequest  # both answered by `complete` and `stream`


def route_decoded(gateway: Gateway, exchange: Exchange, model: str, stream: bool, meta: RequestMeta,
                  user: str | None = None, safety_identifier: str | None = None) -> tuple[Match, RequestMeta]:
    """The decoded request's route, for every endpoint (a model the key may not use is not found), and
    the request's meta as the passport carries it: with a key, the key's public id and its tenant. A split
    route's variant is chosen by the route's sticky key (the key, `user`, `safety_identifier` or a header).
    The exchange's record of the request begins here, before its route is known (a refusal names the model)."""
    routed = exchange.routed
    routed.model, routed.stream, routed.decoded = model, stream, time.perf_counter()
    match, asked = gateway.route(model, exchange, meta, user, safety_identifier)
    took(routed, asked, match)
    if exchange.principal is not None:
        meta = msgspec.structs.replace(meta, tenant_id=exchange.principal.tenant_name,
                                       key_id=exchange.principal.id)
    return match, meta


def took(routed: Routed, asked: Route, match: Match) -> None:
    """The route that took the request, on its record: as the configuration names the route its model
    selected (what a cost report groups by), the group and split variant that serve it, and the name its
    metrics carry (the model, on an exact route; else the route's pattern: bounded labels)."""
    routed.route = route_name(asked)
    routed.group = match.route.group
    routed.variant = match.variant
    routed.metric_model = (routed.model or "") if asked.model is not None else (asked.prefix or asked.glob or "other")


def prepared_for(gateway: Gateway, exchange: Exchange, request: R, match: Match, passport: Passport,
                 encoded: bytes | bytearray, meta: RequestMeta, max_output_tokens: int | None,
                 cache_key: str | None = None,
                 encode_for: Callable[[Route, str], bytes | bytearray] | None = None) -> Prepared[R]:
    """`cache_key`: the request's own affinity key (`prompt_cache_key`); the route's header comes first.
    `encode_for`: the request encoded for another route, kept only when the route's chain has one."""
    routed = exchange.routed
    routed.encoded = time.perf_counter()
    headers = hop_headers(exchange.request_id, passport)
    if exchange.trace is not None:  # each attempt writes its span's id where the hop carries its traceparent
        encoded = exchange.trace.hop(encoded, headers) or encoded
        exchange.trace.asked(request, match.route.provider, match.route.trace_content)
    if match.route.forward_authorization and meta.api_key is not None:
        headers["authorization"] = f"Bearer {meta.api_key}"  # the route passes the client's own key on
    routed.prompt_tokens = passport.prompt_tokens_estimate
    prefix = _prefix(gateway, match.route, passport, meta, cache_key)
    if len(match.chain) < 2 or all(link.route is match.route for link in match.chain):
        encode_for = None  # no other route to encode for: the common path keeps nothing more
    return Prepared(request, match, encoded, headers, gateway.timeouts(match), passport.prompt_tokens_estimate,
                    max_output_tokens, prefix, encode_for, passport, meta, cache_key)


def counter(gateway: Gateway, match: Match) -> TokenCounter:
    """The prompt's token counter: the route's tokenizer, else the one the model's name implies (cached)."""
    return counter_for(match.upstream_model, match.route.tokenizer, gateway.settings.max_exact_count_bytes)


def counted(gateway: Gateway, exchange: Exchange, match: Match, count: Callable[[bool], int]) -> int:
    """The prompt's count (`count(exact)`): exact where `counts_exactly` says, else the estimate, which is an
    upper bound; counted exactly after all when that bound is above the max_context of a fallback route of
    the chain, which it would skip (ingress/routing/chain.py): then only the exact count may skip it."""
    exact = counts_exactly(gateway, exchange)
    tokens = count(exact)
    if not exact and len(match.chain) > 1 and any(too_long(link, tokens) for link in match.chain[1:]):
        return count(True)
    return tokens


def counts_exactly(gateway: Gateway, exchange: Exchange) -> bool:
    """Whether the prompt is counted exactly: only when a limit charges its tokens or a guardrail bounds
    them (the key's plan says). Otherwise the estimate is its count, for the passport too."""
    principal, tenancy = exchange.principal, gateway.tenancy
    return principal is not None and tenancy is not None and tenancy.policy.counts_prompt(principal,
                                                                                         exchange.routed.model or "")


def guarded_chat(exchange: Exchange, request: ChatCompletionRequest, tokens: int, param: str) -> ChatCompletionRequest:
    """The key's and its tenant's guardrails on the prompt: the same request, a redacted copy, or a block
    (PromptBlocked, before admission: a blocked prompt consumes no quota)."""
    for guard in exchange.principal.guards if exchange.principal is not None else ():
        try:
            request = guard.chat(request, tokens)
        except PromptBlocked as exc:
            if param == exc.param:
                raise
            raise PromptBlocked(exc.rule, param=param, message=exc.message) from None  # the Responses API's `input`
    return request


def folded_turns(exchange: Exchange, request: ChatCompletionRequest, route: Route) -> ChatCompletionRequest:
    """The request as the route takes it (pipeline/turns.py): system and developer messages after the first
    turn folded into user turns (named in the exchange's hints), or as sent; to Anthropic, with prompt-cache
    breakpoints where the client placed none."""
    if late_system(route) == "fold":
        request, folded = fold_late_system(request)
        if folded:
            name_hints(exchange, [FOLDED])  # appended: Responses and Messages name their own hints
    if route.provider == "anthropic" and route.auto_cache_breakpoints:
        request, _ = place_cache_breakpoints(request)
    return request


def name_hints(exchange: Exchange, hints: Iterable[str]) -> None:
    """`hints`, not sent, named on the exchange (the access line's `dropped`), each once: a route of a chain
    may not take what the first one took whole."""
    named = exchange.routed.hints
    named.extend([hint for hint in dict.fromkeys(hints) if hint not in named])


P = TypeVar("P", TextCompletionRequest, EmbeddingRequest)


def _guarded_texts(exchange: Exchange, request: P, field: Literal["prompt", "input"], texts: list[str | list[int]],
                   tokens: int, param: str | None = None) -> P:
    """As guarded_chat, for the prompts of a legacy completion (`prompt`) or embeddings inputs (`input`); a
    refusal names `param` (by default the field)."""
    guarded = texts
    for guard in exchange.principal.guards if exchange.principal is not None else ():
        guarded = guard.texts(guarded, tokens, param=param or field)
    if all(a is b for a, b in zip(guarded, texts, strict=True)):
        return request  # nothing redacted
    original = getattr(request, field)
    return msgspec.structs.replace(request, **{field: guarded[0] if isinstance(original, str) else guarded})


def chat_output(request: ChatCompletionRequest) -> int | None:
    limit = request.max_completion_tokens if request.max_completion_tokens is not None else request.max_tokens
    return None if limit is None else limit * (request.n or 1)


def _text_output(request: TextCompletionRequest) -> int | None:
    if request.max_tokens is None:
        return None
    return request.max_tokens * max(request.n or 1, request.best_of or 1) * max(len(request.prompts), 1)


def prepare(gateway: Gateway, body: bytes, meta: RequestMeta, exchange: Exchange) -> Prepared[Completion]:
    """Decode, route, count, guard, passport, encode. Bad input raises here, before anything is sent."""
    request, extra_json = decode_chat_request_forwarding(body, gateway.forwards_extras)
    return _prepared_chat(gateway, exchange, request, extra_json, meta, "messages")


def _prepared_chat(gateway: Gateway, exchange: Exchange, request: ChatCompletionRequest, extra_json: str | None,
                   meta: RequestMeta, prompt_param: str, serves: Callable[[Route], None] | None = None,
                   whole: Callable[[Route], str | None] | None = None) -> Prepared[Completion]:
    """A decoded chat request (as sent, or what a Responses request amounts to): routed, counted, guarded,
    given its passport, encoded. `serves(route)` raises InvalidRequest for a route that cannot serve it;
    `whole(route)`: the request as its client sent it, for a route that takes it so (and is given it
    unless a guardrail redacted the prompt)."""
    match, meta = route_decoded(gateway, exchange, request.model, bool(request.stream), meta, request.user,
                                request.safety_identifier)
    if serves is not None:
        serves(match.route)
    tokens = counted(gateway, exchange, match, lambda exact: counter(gateway, match).chat(request, exact))
    guarded = guarded_chat(exchange, request, tokens, prompt_param)
    redacted = guarded is not request  # then only the (redacted) reading travels, never the request as sent
    request = folded_turns(exchange, guarded, match.route)
    passport = compute_passport(request, meta, prompt_tokens=tokens, blocks=gateway.affine(match.route))

    def encode(reading: ChatCompletionRequest, route: Route, model: str | None) -> bytes | bytearray:
        sent = whole(route) if whole is not None and not redacted else None
        if sent is None:
            return gateway.encode_request(reading, exchange.request_id, passport, route.provider, model, extra_json)
        return encode_messages_request(reading, exchange.request_id, passport, route.provider, model, extra_json,
                                       responses_json=sent)

    def encode_for(route: Route, model: str) -> bytes | bytearray:
        if serves is not None:
            serves(route)
        return encode(folded_turns(exchange, guarded, route), route, model)

    encoded = encode(request, match.route, match.upstream_model)

    return prepared_for(gateway, exchange, request, match, passport, encoded, meta, chat_output(request),
                        request.prompt_cache_key, encode_for)


def prepare_text(gateway: Gateway, body: bytes, meta: RequestMeta, exchange: Exchange) -> Prepared[Completion]:
    """As prepare, for a legacy text completion: it travels as a CompletionRequest with its prompts, and
    `complete` / `stream` answer it as text_completion objects."""
    request, extra_json = decode_text_request_forwarding(body, gateway.forwards_extras)
    match, meta = route_decoded(gateway, exchange, request.model, bool(request.stream), meta, request.user)
    tokens = counted(gateway, exchange, match, lambda exact: counter(gateway, match).texts(request.prompts, exact))
    request = _guarded_texts(exchange, request, "prompt", request.prompts, tokens)
    passport = compute_prompts_passport(request.prompts, meta, prompt_tokens=tokens, blocks=gateway.affine(match.route))
    encoded = encode_text_request(request, exchange.request_id, passport, match.route.provider, match.upstream_model,
                                  extra_json)
    guarded = request

    def encode_for(route: Route, model: str) -> bytes | bytearray:
        return encode_text_request(guarded, exchange.request_id, passport, route.provider, model, extra_json)

    return prepared_for(gateway, exchange, request, match, passport, encoded, meta, _text_output(request),
                        encode_for=encode_for)


def prepare_responses(gateway: Gateway, body: bytes, meta: RequestMeta, exchange: Exchange,
                      prior: list[Item] | None = None, kept: bool = False,
                      conversation: str | None = None) -> tuple[Call, Prepared[Completion]]:
    """As prepare, for a Responses request: decoded, then read as the chat request it amounts to, which
    travels; the decoded call is kept to answer it in its own shape. `prior`: the conversation of the
    response it continues, or the items of its `conversation` (pipeline/stored.py `recall`), before its
    own input; `kept`: its answer is stored."""
    call, extra_json = decode_responses_request_forwarding(body, gateway.forwards_extras, prior)
    if kept or conversation is not None:
        call = msgspec.structs.replace(call, kept=kept, conversation=conversation)

    def serves(route: Route) -> None:
        """OpenAI's built-in tools, on a route that refuses them rather than leave them out (a route that
        takes the request whole sends them on)."""
        if call.hosted and route.hosted_tools == "refuse" and whole(route) is None:
            tool = call.hosted[0]
            raise InvalidRequest(f"'{tool.param}.type': the built-in tool '{tool.type}' is run only by OpenAI's "
                                 "servers, not by the service behind this model.", param=f"{tool.param}.type",
                                 code="unsupported_parameter")

    as_came: list[tuple[str, bool]] = []  # the request as sent, made once, for the routes that take it whole

    def whole(route: Route) -> str | None:
        """The request as sent, for a route to OpenAI's own API; but a compaction, which the edge serves."""
        if route.responses != "whole" or call.compacting:
            return None
        if not as_came:
            as_came.append(as_sent(call, body, gateway.sealer.open))
        return as_came[0][0]

    reading = as_chat(call, gateway.sealer.open)
    prepared = _prepared_chat(gateway, exchange, reading, extra_json, meta, "input", serves, whole)
    if whole(prepared.match.route) is not None:
        hints = ["input.reasoning"] if as_came[0][1] else []  # all else goes on; the edge's reasoning stays
    else:
        hints = [*call.hints, *dict.fromkeys(f"tools.{tool.type}" for tool in call.hosted)]
    exchange.routed.hints.extend(hints)
    return call, prepared


def prepare_embeddings(gateway: Gateway, body: bytes, meta: RequestMeta,
                       exchange: Exchange) -> Prepared[EmbeddingRequest]:
    """Decode, then as prepare_embedding; bad input raises here."""
    return prepare_embedding(gateway, decode_embedding_request(body), meta, exchange)


def prepare_embedding(gateway: Gateway, request: EmbeddingRequest, meta: RequestMeta, exchange: Exchange,
                      param: str = "input", gemini_json: bytes | None = None) -> Prepared[EmbeddingRequest]:
    """Route (the same route table: a model name), count, guard (its refusals name `param`, where the
    client's API holds the inputs), passport, encode a decoded embeddings request. `gemini_json`, a Gemini
    client's body as sent, travels too to a route bound for Google, unless a guardrail redacted the inputs."""
    match, meta = route_decoded(gateway, exchange, request.model, False, meta, request.user)
    tokens = counted(gateway, exchange, match, lambda exact: counter(gateway, match).texts(request.inputs, exact))
    guarded = _guarded_texts(exchange, request, "input", request.inputs, tokens, param)
    as_sent = gemini_json if guarded is request else None
    passport = compute_embedding_passport(guarded, meta, prompt_tokens=tokens, blocks=gateway.affine(match.route))

    def encode_for(route: Route, model: str | None) -> bytes | bytearray:
        sent = as_sent.decode() if as_sent is not None and route.provider == "gemini" else None  # for Google only
        return encode_embedding_request(guarded, exchange.request_id, passport, route.provider, model, sent)

    encoded = encode_for(match.route, match.upstream_model)
    return prepared_for(gateway, exchange, guarded, match, passport, encoded, meta, 0, encode_for=encode_for)
