"""prepare, for Anthropic's Messages API: a Messages request (or a count_tokens one) decoded, routed, read as the
chat request it amounts to, guarded, and encoded, whole for Anthropic; CPU only, bad input raises here."""

from __future__ import annotations

import msgspec

from ingress.anthropic.messages import MessagesRequest
from ingress.anthropic.messages_codec import decode_messages
from ingress.anthropic.messages_to_chat import as_chat as messages_as_chat
from ingress.encoding.passport import RequestMeta, compute_passport
from ingress.encoding.requests import encode_messages_request
from ingress.errors import InvalidRequest
from ingress.exchange import Exchange
from ingress.pipeline.gateway import Gateway
from ingress.pipeline.prepare import (
    Completion,
    Prepared,
    chat_output,
    counted,
    counter,
    folded_turns,
    guarded_chat,
    name_hints,
    prepared_for,
    route_decoded,
)
from ingress.settings import Route


def prepare_messages(gateway: Gateway, body: bytes, meta: RequestMeta, exchange: Exchange, *, beta: list[str],
                     version: str | None) -> tuple[MessagesRequest, Prepared[Completion]]:
    """As prepare, for Anthropic's Messages API (`beta`: the client's `anthropic-beta` flags): decoded,
    then read as the chat request it amounts to, which travels; the decoded request is kept to answer it
    in its own shape. Bound for Anthropic (the route's provider), the request also travels whole, as the
    client sent it, for the Anthropic bridge to send on; elsewhere its processing hints are not sent (named
    on the exchange) and what only Anthropic serves is refused. A guardrail that redacts the prompt
    leaves the whole request behind: then only its (redacted) reading travels, as to any other service."""
    request, _ = decode_messages(body, beta=bool(beta))
    user = request.metadata.user_id if request.metadata is not None else None
    match, meta = route_decoded(gateway, exchange, request.model, bool(request.stream), meta, user)
    whole = match.route.provider == "anthropic"
    read = messages_as_chat(request, for_anthropic=whole)
    extra_json = None
    if read.top_k is not None and not whole:
        if match.route.extra_fields != "forward":
            raise InvalidRequest("top_k: not supported by the service behind this model (its route does not "
                                 "forward engine parameters).", param="top_k")
        extra_json = f'{{"top_k":{read.top_k}}}'
    tokens = counted(gateway, exchange, match, lambda exact: counter(gateway, match).chat(read.request, exact))
    chat = guarded_chat(exchange, read.request, tokens, "messages")
    redacted = chat is not read.request
    if whole and redacted:  # redacted: the request as sent may not travel
        read = messages_as_chat(request)  # what only Anthropic serves is refused, as off Anthropic
        whole = False
    exchange.routed.hints.extend(read.dropped)
    sent = chat if whole else folded_turns(exchange, chat, match.route)
    passport = compute_passport(sent, meta, prompt_tokens=tokens, blocks=gateway.affine(match.route))
    encoded = encode_messages_request(sent, exchange.request_id, passport, match.route.provider, match.upstream_model,
                                      extra_json, anthropic_json=body.decode() if whole else None,
                                      anthropic_beta=beta if whole else None,
                                      anthropic_version=version if whole else None)

    def encode_for(route: Route, model: str) -> bytes | bytearray:
        """As above, for another route: whole to Anthropic (unless redacted), else read as a chat request
        (InvalidRequest: the request asks for what only Anthropic serves, or for top_k the route refuses)."""
        to_anthropic = route.provider == "anthropic" and not redacted
        reading = chat
        if not redacted:
            read_here = messages_as_chat(request, for_anthropic=to_anthropic)
            reading = read_here.request
            name_hints(exchange, read_here.dropped)  # taken whole by the first route, not by this one
        if not to_anthropic:
            reading = folded_turns(exchange, reading, route)
        extra = None
        if read.top_k is not None and not to_anthropic:
            if route.extra_fields != "forward":
                raise InvalidRequest("top_k: not forwarded by this route.", param="top_k")
            extra = f'{{"top_k":{read.top_k}}}'
        return encode_messages_request(reading, exchange.request_id, passport, route.provider, model, extra,
                                       anthropic_json=body.decode() if to_anthropic else None,
                                       anthropic_beta=beta if to_anthropic else None,
                                       anthropic_version=version if to_anthropic else None)

    return request, prepared_for(gateway, exchange, sent, match, passport, encoded, meta, chat_output(sent),
                                 encode_for=encode_for)


def prepare_count(gateway: Gateway, body: bytes, meta: RequestMeta, exchange: Exchange, *, beta: list[str],
                  version: str | None) -> tuple[int, Prepared[Completion] | None]:
    """`count_tokens`: a Messages request's prompt (system, messages, tools; it has no `max_tokens`)
    counted exactly by the route's tokenizer (or the one its model's name implies); and, where the route
    asks its provider to count (`count_tokens = "provider"`), the request prepared for that."""
    request, _ = decode_messages(_with_max_tokens(body), beta=bool(beta))
    match, meta = route_decoded(gateway, exchange, request.model, False, meta,
                                request.metadata.user_id if request.metadata is not None else None)
    asks_provider = match.route.count_tokens == "provider" and match.route.provider == "anthropic"
    read = messages_as_chat(request, for_anthropic=asks_provider)
    tokens = counter(gateway, match).chat(read.request, True)
    if not asks_provider:
        return tokens, None
    passport = compute_passport(read.request, meta, prompt_tokens=tokens, blocks=gateway.affine(match.route))
    encoded = encode_messages_request(read.request, exchange.request_id, passport, match.route.provider,
                                      match.upstream_model, anthropic_json=body.decode(), anthropic_beta=beta,
                                      anthropic_version=version)
    return tokens, prepared_for(gateway, exchange, read.request, match, passport, encoded, meta, 0)


_fields = msgspec.json.Decoder(dict[str, msgspec.Raw])


def _with_max_tokens(body: bytes) -> bytes:
    """A count_tokens body as a Messages one, which requires max_tokens: the largest, so that no thinking
    budget is refused for it. A body that is not a JSON object is left for the decoder to refuse."""
    try:
        fields = _fields.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return body
    if "max_tokens" in fields:
        raise InvalidRequest("max_tokens: Extra inputs are not permitted", param="max_tokens")
    fields["max_tokens"] = msgspec.Raw(b"2147483647")
    return msgspec.json.encode(fields)
