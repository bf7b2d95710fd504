"""ingress/pipeline/prepare_gemini.py: a GenerateContentRequest prepared for its route travels as the chat request
it amounts to (its hints named on the exchange, topK as an engine extra or refused), and to Google whole too
(`gemini_json`, what only Google serves going on as it came); a countTokens body, bare or wrapping its
generateContentRequest, is counted as that chat request is, or by Google where the route asks it."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from gateways import keyed, new_exchange, new_gateway
from guardrail_texts import CARD

from ingress import wire
from ingress.encoding.passport import RequestMeta
from ingress.encoding.reading import decode_request
from ingress.errors import InvalidRequest, NotFound
from ingress.exchange import Exchange
from ingress.gemini.contents_codec import decode_generate_content
from ingress.gemini.contents_to_chat import as_chat
from ingress.guardrails import Guardrails
from ingress.pipeline.gateway import Gateway
from ingress.pipeline.prepare_gemini import (
    count_request,
    prepare_gemini,
    prepare_gemini_count,
    prepare_gemini_embeddings,
)
from ingress.routing.budget import RetryBudget
from ingress.routing.table import RouteTable
from ingress.settings import Route, Settings
from ingress.tokens import counter_for

HELLO: dict[str, Any] = {"contents": [{"role": "user", "parts": [{"text": "Say hello to the edge"}]}]}
ROUTES = (Route(model="gemini-x", group="main", upstream_model="served-x"),
          Route(model="gemini-extras", group="main", extra_fields="forward"),
          Route(model="gemini-google", group="main", provider="gemini", upstream_model="gemini-2.5-pro"),
          Route(model="gemini-counted", group="main", provider="gemini", count_tokens="provider"))


def _gateway() -> Gateway:
    return Gateway(settings=Settings(routes=ROUTES), routes=RouteTable(ROUTES), groups={},
                   budget=RetryBudget(0.2, 1.0, 0.0))


def _body(**fields: Any) -> bytes:
    return msgspec.json.encode({**HELLO, **fields})


@pytest.mark.parametrize("stream", [False, True])
def test_the_chat_request_it_amounts_to_travels(stream: bool) -> None:
    body = _body(systemInstruction={"parts": [{"text": "Be brief."}]},
                 generationConfig={"temperature": 0.5, "maxOutputTokens": 9,
                                   "thinkingConfig": {"includeThoughts": True}},
                 safetySettings=[{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}])
    exchange = Exchange("req-1")
    read, prepared = prepare_gemini(_gateway(), body, RequestMeta(), exchange, model="gemini-x", stream=stream)

    expected = as_chat(decode_generate_content(body), "gemini-x", stream=stream).request
    assert msgspec.json.encode(decode_request(bytes(prepared.encoded))) == msgspec.json.encode(
        msgspec.structs.replace(expected, model="served-x"))
    view = wire.read_request(bytes(prepared.encoded))
    assert (view.ModelName(), view.Stream(), view.ExtraJson()) == (b"served-x", stream, None)
    assert read.include_thoughts and read.request.model == "gemini-x"
    assert prepared.max_output_tokens == 9
    assert exchange.routed.hints == ["safety_settings"]  # accepted, not sent, named
    assert (exchange.routed.model, exchange.routed.stream, exchange.routed.route) == ("gemini-x", stream, "gemini-x")


def test_top_k_travels_as_an_engine_extra_where_the_route_forwards_them_else_is_named_not_sent() -> None:
    body = _body(generationConfig={"topK": 40})
    _, prepared = prepare_gemini(_gateway(), body, RequestMeta(), Exchange("r"), model="gemini-extras", stream=False)
    assert wire.read_request(bytes(prepared.encoded)).ExtraJson() == b'{"top_k":40}'

    exchange = Exchange("r")  # a route that forwards no extras: not sent, and named
    _, prepared = prepare_gemini(_gateway(), body, RequestMeta(), exchange, model="gemini-x", stream=False)
    assert wire.read_request(bytes(prepared.encoded)).ExtraJson() is None
    assert exchange.routed.hints == ["generation_config.top_k"]


@pytest.mark.parametrize(("fields", "param"), [
    pytest.param({"cachedContent": "cachedContents/abc"}, "cached_content", id="only-google-serves"),
    pytest.param({"generationConfig": {"temperature": 9}}, "generation_config.temperature", id="out-of-range"),
    pytest.param({"contents": []}, "contents", id="no-contents"),
])
def test_a_bad_or_google_only_request_is_refused_naming_the_field(fields: dict[str, Any], param: str) -> None:
    exchange = Exchange("r")
    with pytest.raises(InvalidRequest) as refused:
        prepare_gemini(_gateway(), _body(**fields), RequestMeta(), exchange, model="gemini-x", stream=False)
    assert refused.value.param == param


def test_an_unknown_model_is_not_found() -> None:
    with pytest.raises(NotFound):
        prepare_gemini(_gateway(), _body(), RequestMeta(), Exchange("r"), model="no-such-model", stream=False)


def test_count_tokens_counts_the_chat_reading_of_either_form() -> None:
    tools = [{"functionDeclarations": [{"name": "get_weather", "parameters": {"type": "OBJECT"}}]}]
    whole = {**HELLO, "systemInstruction": {"parts": [{"text": "Be brief."}]}, "tools": tools}
    bare, none = prepare_gemini_count(_gateway(), _body(), RequestMeta(), Exchange("r"), model="gemini-x")
    wrapped, _ = prepare_gemini_count(_gateway(), msgspec.json.encode({"generateContentRequest": {
        "model": "models/gemini-x", **whole}}), RequestMeta(), Exchange("r"), model="gemini-x")
    assert none is None  # the edge counts: nothing to send

    counter = counter_for("served-x")
    assert bare == counter.chat(as_chat(decode_generate_content(_body()), "gemini-x").request, True) > 0
    assert wrapped == counter.chat(as_chat(decode_generate_content(msgspec.json.encode(whole)), "gemini-x").request,
                                   True) > bare


def test_a_count_body_is_contents_or_a_wrapped_request_never_both() -> None:
    assert count_request(_body()) == _body()
    assert count_request(b'{"generate_content_request": {"contents": []}}') == b'{"contents": []}'
    assert count_request(b"[1]") == b"[1]"  # left for the decoder to refuse
    with pytest.raises(InvalidRequest) as both:
        count_request(b'{"contents": [], "generateContentRequest": {}}')
    assert both.value.param == "contents"


# --- bound for Google: the request travels whole ------------------------------------------------------

GOOGLE_ONLY: dict[str, Any] = {
    "contents": [{"role": "user", "parts": [
                     {"text": "Search this"},
                     {"fileData": {"fileUri": "gs://bucket/a.pdf", "mimeType": "application/pdf"}}]},
                 {"role": "model", "parts": [{"text": "thinking", "thought": True},
                                             {"text": "Done", "thoughtSignature": "c2lnbmF0dXJl"}]},
                 {"role": "user", "parts": [{"text": "Again"}]}],
    "tools": [{"googleSearch": {}}, {"codeExecution": {}}],
    "cachedContent": "cachedContents/abc",
    "generationConfig": {"topK": 40, "thinkingConfig": {"includeThoughts": True, "thinkingBudget": 1024}},
    "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
}


@pytest.mark.parametrize("stream", [False, True])
def test_bound_for_google_the_request_travels_whole_and_nothing_is_refused_or_dropped(stream: bool) -> None:
    body = msgspec.json.encode(GOOGLE_ONLY)
    exchange = Exchange("r")
    read, prepared = prepare_gemini(_gateway(), body, RequestMeta(), exchange, model="gemini-google", stream=stream)
    view = wire.read_request(bytes(prepared.encoded))
    assert view.GeminiJson() == body  # byte for byte, as the client sent it
    assert view.Provider() == wire.PROVIDERS["gemini"] and view.ModelName() == b"gemini-2.5-pro"
    assert (view.Stream(), view.ExtraJson()) == (stream, None)  # topK is in the request as sent
    assert exchange.routed.hints == [] and read.include_thoughts
    assert {"cached_content", "tools[0].google_search", "tools[1].code_execution"} <= set(read.unread)


def test_off_google_the_same_request_is_refused_and_carries_nothing_whole() -> None:
    with pytest.raises(InvalidRequest):
        prepare_gemini(_gateway(), msgspec.json.encode(GOOGLE_ONLY), RequestMeta(), Exchange("r"),
                       model="gemini-extras", stream=False)
    _, prepared = prepare_gemini(_gateway(), _body(), RequestMeta(), Exchange("r"), model="gemini-x", stream=False)
    assert wire.read_request(bytes(prepared.encoded)).GeminiJson() is None


def test_count_tokens_asks_google_where_the_route_says_so() -> None:
    body = msgspec.json.encode({"generateContentRequest": {"model": "models/gemini-counted", **GOOGLE_ONLY}})
    tokens, prepared = prepare_gemini_count(_gateway(), body, RequestMeta(), Exchange("r"), model="gemini-counted")
    assert tokens > 0 and prepared is not None
    assert msgspec.json.decode(wire.read_request(bytes(prepared.encoded)).GeminiJson()) == {
        "model": "models/gemini-counted", **GOOGLE_ONLY}
    _, elsewhere = prepare_gemini_count(_gateway(), _body(), RequestMeta(), Exchange("r"), model="gemini-google")
    assert elsewhere is None  # a route to Google that counts at the edge


# --- embeddings -------------------------------------------------------------------------------------------

TO_GOOGLE = Route(name="to-google", group="main", provider="gemini", upstream_model="gemini-embedding-001")
EMBED_ROUTES = (Route(model="embed-local", group="main", fallbacks=["to-google"]), TO_GOOGLE,
                Route(model="embed-google", group="main", provider="gemini"))
ASKED = {"requests": [{"content": {"parts": [{"text": "a"}]}},
                      {"content": {"parts": [{"text": f"card {CARD}"}]}, "taskType": "RETRIEVAL_QUERY"}]}


def _embed(model: str, body: dict[str, Any], principal: Any = None, tenancy: Any = None) -> tuple[Exchange, Any]:
    exchange = new_exchange(principal) if principal is not None else Exchange("req-1")
    prepared = prepare_gemini_embeddings(new_gateway(*EMBED_ROUTES, tenancy=tenancy), msgspec.json.encode(body),
                                         RequestMeta(), exchange, model=model, batch=True)
    return exchange, prepared


def _sent(buf: bytes | bytearray) -> wire.EmbeddingRequestData:
    return wire.read_embedding_request(bytes(buf))


def test_to_google_the_body_travels_as_sent_and_elsewhere_its_task_type_is_named() -> None:
    exchange, google = _embed("embed-google", ASKED)
    sent = _sent(google.encoded)
    assert sent.gemini_json is not None and msgspec.json.decode(sent.gemini_json) == ASKED
    assert [i.text for i in sent.inputs or ()] == ["a", f"card {CARD}"] and exchange.routed.hints == []

    exchange, local = _embed("embed-local", ASKED)
    assert _sent(local.encoded).gemini_json is None and exchange.routed.hints == ["task_type"]
    chained = _sent(local.encode_for(TO_GOOGLE, "gemini-embedding-001"))  # the chain's route to Google
    assert chained.gemini_json is not None and chained.model_name == "gemini-embedding-001"


def test_texts_a_guardrail_redacted_never_travel_as_sent_and_a_task_type_is_then_refused_for_google() -> None:
    tenancy, principal, _ = keyed(guardrails=msgspec.convert({"pii": {"card": "redact"}}, Guardrails))
    exchange, local = _embed("embed-local", ASKED, principal, tenancy)
    assert CARD not in str(_sent(local.encoded)) and exchange.routed.hints == ["task_type"]
    with pytest.raises(InvalidRequest) as chained:  # the chain's route to Google would lose it
        local.encode_for(TO_GOOGLE, "gemini-embedding-001")
    assert chained.value.param == "requests[1].task_type"
    with pytest.raises(InvalidRequest) as first:
        _embed("embed-google", ASKED, principal, tenancy)
    assert first.value.param == "requests[1].task_type" and "redacted" in first.value.message
    plain = {"requests": [{"content": {"parts": [{"text": f"card {CARD}"}]}}]}
    _, redacted = _embed("embed-google", plain, principal, tenancy)
    sent = _sent(redacted.encoded)
    assert sent.gemini_json is None and CARD not in str(sent.inputs)


FIRST_GOOGLE = (Route(model="g", group="main", provider="gemini", fallbacks=["local"]),
                Route(name="local", group="main"))


def test_a_chains_hop_off_google_names_what_the_first_route_took_whole() -> None:
    body = _body(safetySettings=[{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
                 generationConfig={"topK": 40})
    exchange = Exchange("req-1")
    _, prepared = prepare_gemini(new_gateway(*FIRST_GOOGLE), body, RequestMeta(), exchange, model="g", stream=False)
    assert exchange.routed.hints == []  # to Google whole: sent as it came
    assert prepared.encode_for is not None
    for _ in range(2):  # named once, however many hops
        local = wire.read_request(bytes(prepared.encode_for(FIRST_GOOGLE[1], "m")))
        assert local.GeminiJson() is None
    assert exchange.routed.hints == ["safety_settings", "generation_config.top_k"]

    embeds = {"requests": [{"content": {"parts": [{"text": "a"}]}, "title": "T"}]}
    exchange = Exchange("req-2")
    google = prepare_gemini_embeddings(new_gateway(*FIRST_GOOGLE), msgspec.json.encode(embeds), RequestMeta(),
                                       exchange, model="g", batch=True)
    assert exchange.routed.hints == [] and google.encode_for is not None
    assert _sent(google.encode_for(FIRST_GOOGLE[1], "m")).gemini_json is None
    assert exchange.routed.hints == ["title"]
