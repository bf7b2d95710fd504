"""ingress/pipeline/prepare.py: a chat body decoded, routed, counted, guarded and encoded into a Prepared,
with the exchange's `routed` part filled; late system messages folded and named in its hints; a new
Prepared for another route of the chain, the first left as it was; the key's guardrails redacting what
travels."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from gateways import REQUEST_ID, keyed, new_exchange, new_gateway
from guardrail_texts import CARD

from ingress import wire
from ingress.encoding import reading
from ingress.encoding.passport import RequestMeta
from ingress.errors import InvalidRequest, NotFound, PromptBlocked
from ingress.guardrails import Guardrails
from ingress.oai.chat import ChatCompletionRequest, SystemMessage, UserMessage
from ingress.pipeline.prepare import chat_output, prepare
from ingress.pipeline.turns import FOLDED
from ingress.settings import Route, Timeouts

MAIN = Route(model="gpt-4o", group="a", upstream_model="gpt-4o-2024-08-06", fallbacks=["backup"],
             timeouts=Timeouts(first_byte=7.0))
BACKUP = Route(name="backup", group="b", upstream_model="llama-3-8b", provider="self_hosted")
LOCAL = Route(prefix="local-", group="b", provider="self_hosted")


def body(*messages: dict[str, Any], **fields: Any) -> bytes:
    return msgspec.json.encode({"model": "gpt-4o", "messages": list(messages) or [USER], **fields})


USER = {"role": "user", "content": "What is the capital of Portugal? Answer in one word."}
LATE = [{"role": "system", "content": "Be brief."}, USER, {"role": "assistant", "content": "Lisbon."},
        {"role": "system", "content": "Now answer in French."}, {"role": "user", "content": "Again?"}]


def test_a_chat_body_is_prepared_for_its_route_and_its_record_begins() -> None:
    exchange = new_exchange()
    prepared = prepare(new_gateway(MAIN, BACKUP), body(stream=True, max_completion_tokens=50, n=2),
                       RequestMeta(traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), exchange)

    assert (prepared.match.route, prepared.match.upstream_model) == (MAIN, "gpt-4o-2024-08-06")
    assert prepared.timeouts == Timeouts(first_byte=7.0)
    assert prepared.max_output_tokens == 100  # 50 for each of 2 choices
    sent = wire.read_request_data(bytes(prepared.encoded))
    assert (sent.request_id, sent.model_name) == (REQUEST_ID, "gpt-4o-2024-08-06")
    assert sent.passport is not None and sent.passport.prompt_tokens_estimate == prepared.prompt_tokens > 0
    assert prepared.headers == {"x-request-id": REQUEST_ID,
                                "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
    routed = exchange.routed
    assert (routed.model, routed.stream, routed.route, routed.group, routed.variant, routed.metric_model) == (
        "gpt-4o", True, "gpt-4o", "a", None, "gpt-4o")
    assert routed.prompt_tokens == prepared.prompt_tokens and routed.hints == []
    assert routed.decoded is not None and routed.encoded is not None and routed.decoded <= routed.encoded


def test_a_prefix_routes_metrics_name_the_pattern_not_the_model() -> None:
    exchange = new_exchange()
    prepared = prepare(new_gateway(LOCAL), body(model="local-anything-at-all"), RequestMeta(), exchange)
    assert prepared.match.upstream_model == "local-anything-at-all"
    assert (exchange.routed.model, exchange.routed.route, exchange.routed.metric_model) == (
        "local-anything-at-all", "local-", "local-")
    # no chain: nothing kept
    assert prepared.encode_for is None and prepared.rerouter(new_gateway(LOCAL), exchange) is None


def test_late_system_messages_are_folded_on_a_route_that_folds_and_named_in_the_hints() -> None:
    exchange = new_exchange()
    folded = prepare(new_gateway(LOCAL), body(*LATE, model="local-x"), RequestMeta(), exchange)
    messages = reading.decode_request(bytes(folded.encoded)).messages
    assert isinstance(messages[0], SystemMessage)  # the first stays a system message
    assert [type(m).__name__ for m in messages] == ["SystemMessage", "UserMessage", "AssistantMessage", "UserMessage"]
    late = messages[3]  # the late system message, as user text in the next user turn
    assert isinstance(late, UserMessage) and "Now answer in French." in str(late.content)
    assert "Again?" in str(late.content)
    assert exchange.routed.hints == [FOLDED]

    kept = new_exchange()
    as_sent = prepare(new_gateway(MAIN, BACKUP), body(*LATE), RequestMeta(), kept)  # an "openai" route keeps them
    assert [type(m).__name__ for m in reading.decode_request(bytes(as_sent.encoded)).messages][3] == "SystemMessage"
    assert kept.routed.hints == []


def test_the_rerouter_makes_a_new_prepared_for_the_next_route_and_leaves_the_first_as_it_was() -> None:
    gateway, exchange = new_gateway(MAIN, BACKUP), new_exchange()
    first = prepare(gateway, body(*LATE), RequestMeta(api_key="sk-client"), exchange)
    encoded, headers = bytes(first.encoded), dict(first.headers)
    reroute = first.rerouter(gateway, exchange)
    assert reroute is not None
    main, backup = first.match.chain

    second = reroute(backup)

    assert second is not first
    assert (second.match.route, second.match.upstream_model) == (BACKUP, "llama-3-8b")
    assert second.timeouts == gateway.settings.timeouts  # the backup route's own: none, so the edge's
    again = reading.decode_request(bytes(second.encoded))
    assert again.model == "llama-3-8b"
    assert [type(m).__name__ for m in again.messages][3] == "UserMessage"  # folded for the self-hosted route
    assert FOLDED in exchange.routed.hints
    assert (first.match.route, bytes(first.encoded), first.headers) == (MAIN, encoded, headers)
    assert (second.prompt_tokens, second.passport) == (first.prompt_tokens, first.passport)
    assert reroute(main).match.route is MAIN


def test_a_model_without_a_route_is_refused_naming_it_before_anything_is_encoded() -> None:
    exchange = new_exchange()
    with pytest.raises(NotFound):
        prepare(new_gateway(MAIN, BACKUP), body(model="nowhere"), RequestMeta(), exchange)
    assert exchange.routed.model == "nowhere" and exchange.routed.route is None and exchange.routed.encoded is None
    with pytest.raises(InvalidRequest):
        prepare(new_gateway(MAIN, BACKUP), b'{"model": "gpt-4o"}', RequestMeta(), new_exchange())


def test_the_keys_guardrails_redact_what_travels_and_the_key_is_on_the_passport() -> None:
    tenancy, principal, _ = keyed(guardrails=msgspec.convert({"pii": {"card": "redact"}}, Guardrails))
    gateway = new_gateway(MAIN, BACKUP, tenancy=tenancy)
    card = {"role": "user", "content": f"My card is {CARD}, is it valid?"}
    prepared = prepare(gateway, body(card), RequestMeta(api_key="sk-client"), new_exchange(principal))

    sent = reading.decode_request(bytes(prepared.encoded))
    text = msgspec.json.encode(sent.messages).decode()
    assert CARD not in text and "[REDACTED:card]" in text
    passport = wire.read_request_data(bytes(prepared.encoded)).passport
    assert passport is not None and (passport.tenant_id, passport.key_id) == ("t", principal.id)

    blocking, blocked_by, _ = keyed(guardrails=msgspec.convert({"pii": {"card": "block"}}, Guardrails))
    with pytest.raises(PromptBlocked) as caught:
        prepare(new_gateway(MAIN, BACKUP, tenancy=blocking), body(card), RequestMeta(), new_exchange(blocked_by))
    assert caught.value.param == "messages"


@pytest.mark.parametrize(("fields", "limit"), [({}, None), ({"max_tokens": 10}, 10), ({"max_tokens": 10, "n": 3}, 30),
                                               ({"max_completion_tokens": 4, "max_tokens": 10}, 4)])
def test_the_most_a_chat_request_may_generate(fields: dict[str, Any], limit: int | None) -> None:
    request = msgspec.convert({"model": "m", "messages": [USER], **fields}, type=ChatCompletionRequest)
    assert chat_output(request) == limit
