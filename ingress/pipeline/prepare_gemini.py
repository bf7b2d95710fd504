"""prepare, for Google's Gemini API: a GenerateContentRequest (or a countTokens one) decoded, routed, read as
the chat request it amounts to, counted, guarded, and encoded; an embedContent or batchEmbedContents request
read as the embeddings request it amounts to; CPU only, bad input raises here.

The chat reading is what travels, to every route. Bound for Google (a route with `provider = "gemini"`, its
group a Gemini bridge), the request also travels whole, as the client sent it (`gemini_json`), for the bridge
to send on: what only Google serves (its built-in tools, cachedContent, files it holds, thought signatures)
goes on as it came. Elsewhere what only Google serves is refused (contents_to_chat.py) and its processing
hints are not sent, each named on the exchange. A guardrail that redacts the prompt leaves the request as
sent behind: then only its (redacted) reading travels, as to any other service."""

from __future__ import annotations

import dataclasses

import msgspec

from ingress.encoding.passport import RequestMeta, compute_passport
from ingress.encoding.requests import encode_messages_request
from ingress.errors import InvalidRequest
from ingress.exchange import Exchange
from ingress.gemini.contents_codec import decode_generate_content
from ingress.gemini.contents_to_chat import Read, as_chat
from ingress.gemini.embeddings import read_embed, request_type
from ingress.oai.embeddings import EmbeddingRequest
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
    prepare_embedding,
    prepared_for,
    route_decoded,
)
from ingress.settings import Route

TOP_K = "generation_config.top_k"


def prepare_gemini(gateway: Gateway, body: bytes, meta: RequestMeta, exchange: Exchange, *, model: str,
                   stream: bool) -> tuple[Read, Prepared[Completion]]:
    """As prepare, for `generateContent` (`stream`: `streamGenerateContent`) of `model`, the URL's: decoded,
    then read as the chat request it amounts to, which travels (whole too, to Google); the reading is kept to
    answer in Google's shape (whether the answer shows the thoughts). Off Google, `topK` travels as an engine
    extra where the route forwards them, and is named as not sent elsewhere."""
    request = decode_generate_content(body)
    match, meta = route_decoded(gateway, exchange, model, stream, meta)
    whole = match.route.provider == "gemini"
    read = as_chat(request, model, stream=stream, for_gemini=whole)
    extra_json = None if whole else _top_k(read, match.route)
    tokens = counted(gateway, exchange, match, lambda exact: counter(gateway, match).chat(read.request, exact))
    chat = guarded_chat(exchange, read.request, tokens, "contents")
    redacted = chat is not read.request
    if whole and redacted:  # redacted: the request as sent may not travel
        read = as_chat(request, model, stream=stream)  # what only Google serves is refused, as off Google
        whole = False
        extra_json = _top_k(read, match.route)
    exchange.routed.hints.extend(read.dropped)
    if read.top_k is not None and extra_json is None and not whole:
        # Not refused, though it narrows the sampling: Gemini CLI sends topK 64 with every request, and a
        # route to a service without top_k (OpenAI's) could never serve it. Named as not sent.
        exchange.routed.hints.append(TOP_K)
    sent = chat if whole else folded_turns(exchange, chat, match.route)
    passport = compute_passport(sent, meta, prompt_tokens=tokens, blocks=gateway.affine(match.route))
    sent_json = body.decode() if whole else None
    encoded = encode_messages_request(sent, exchange.request_id, passport, match.route.provider, match.upstream_model,
                                      extra_json, gemini_json=sent_json)

    def encode_for(route: Route, model: str) -> bytes | bytearray:
        """As above, for another route of the chain: whole to Google (unless redacted), else read as a chat
        request (InvalidRequest: what only Google serves; topK as its extra where it forwards them)."""
        to_gemini = route.provider == "gemini" and not redacted
        reading = chat
        if not redacted:
            read_here = as_chat(request, read.request.model, stream=stream, for_gemini=to_gemini)
            reading = read_here.request
            name_hints(exchange, read_here.dropped)  # taken whole by the first route, not by this one
        if not to_gemini:
            reading = folded_turns(exchange, reading, route)
            if read.top_k is not None and route.extra_fields != "forward":
                name_hints(exchange, [TOP_K])
        return encode_messages_request(reading, exchange.request_id, passport, route.provider, model,
                                       None if to_gemini else _top_k(read, route),
                                       gemini_json=body.decode() if to_gemini else None)

    return read, prepared_for(gateway, exchange, sent, match, passport, encoded, meta, chat_output(sent),
                              encode_for=encode_for)


def _top_k(read: Read, route: Route) -> str | None:
    """`topK` as the engine extra it travels as, where the route forwards extras; None elsewhere (not asked,
    or not sent: prepare names it)."""
    if read.top_k is None or route.extra_fields != "forward":
        return None
    return f'{{"top_k":{read.top_k}}}'


def prepare_gemini_count(gateway: Gateway, body: bytes, meta: RequestMeta, exchange: Exchange, *,
                         model: str) -> tuple[int, Prepared[Completion] | None]:
    """`countTokens` of `model`: the prompt of its `contents`, or of its `generateContentRequest` (system
    instruction and tools too), read as a chat request and counted exactly by the route's tokenizer (or the
    one its model's name implies), as a Messages count is; and, on a route to Google that asks its provider to
    count (`count_tokens = "provider"`), the request prepared for that: as the client sent it, for the Gemini
    bridge to send on to countTokens."""
    counted_body = count_request(body)
    request = decode_generate_content(counted_body)
    match, meta = route_decoded(gateway, exchange, model, False, meta)
    asks_provider = match.route.count_tokens == "provider" and match.route.provider == "gemini"
    read = as_chat(request, model, for_gemini=asks_provider)
    tokens = counter(gateway, match).chat(read.request, True)
    if not asks_provider:
        return tokens, None
    passport = compute_passport(read.request, meta, prompt_tokens=tokens, blocks=gateway.affine(match.route))
    encoded = encode_messages_request(read.request, exchange.request_id, passport, match.route.provider,
                                      match.upstream_model, gemini_json=counted_body.decode())
    return tokens, prepared_for(gateway, exchange, read.request, match, passport, encoded, meta, 0)


def prepare_gemini_embeddings(gateway: Gateway, body: bytes, meta: RequestMeta, exchange: Exchange, *, model: str,
                              batch: bool) -> Prepared[EmbeddingRequest]:
    """`embedContent` (`batch`: `batchEmbedContents`) of `model`, the URL's: read as the embeddings request it
    amounts to (gemini/embeddings.py), then as any embeddings request; bound for Google, the body also travels
    as sent (`gemini_json`), so that what only Google's models read (taskType, title) reaches them. Elsewhere
    that is named on the exchange as not sent. A guardrail that redacted the texts leaves the body as sent
    behind: then, on a route to Google (the first, or one its chain moves to), where they would change the
    vectors, they are refused."""
    request, dropped = read_embed(body, model, batch=batch)
    prepared = prepare_embedding(gateway, request, meta, exchange, "requests" if batch else "content",
                                 gemini_json=body)
    if not dropped:
        return prepared
    redacted = prepared.request is not request

    def to(route: Route) -> None:
        """What is not sent, named for a route off Google; refused for one to Google when the body as sent cannot
        go (redacted), since its models read it."""
        if route.provider != "gemini":
            name_hints(exchange, dropped)
        elif redacted:
            name, where = next(iter(dropped.items()))
            raise InvalidRequest(f"* {request_type(batch)}.{where}: a guardrail redacted the texts, so the request "
                                 f"as sent cannot go to Google, and {name} would be lost there; send the request "
                                 "without it.", param=where)

    to(prepared.match.route)
    encode_for = prepared.encode_for
    if encode_for is None:
        return prepared

    def checked_encode_for(route: Route, model: str) -> bytes | bytearray:
        to(route)  # a route of the chain
        return encode_for(route, model)

    return dataclasses.replace(prepared, encode_for=checked_encode_for)


_fields = msgspec.json.Decoder(dict[str, msgspec.Raw])
_WRAPPED = "generateContentRequest"


def count_request(body: bytes) -> bytes:
    """A countTokens body as the GenerateContentRequest it counts: `{contents}` as it is, or the request in
    `generateContentRequest` (never both: Google's oneof). A body that is not a JSON object, or a
    `generateContentRequest` that is not one, is left for the decoder to refuse."""
    try:
        fields = _fields.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return body
    wrapped = fields.get(_WRAPPED, fields.get("generate_content_request"))
    if wrapped is None:
        return body
    if len(fields) > 1:
        other = next(name for name in fields if name not in (_WRAPPED, "generate_content_request"))
        raise InvalidRequest(f"Invalid JSON payload received. Oneof field 'request' is already set. Cannot set "
                             f"'{other}'", param=other)
    return bytes(wrapped)
