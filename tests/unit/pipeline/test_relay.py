"""ingress/pipeline/relay.py: a FlatBuffers request verified, routed on the fields read in place, and its
exact bytes forwarded; an invalid buffer refused as invalid_flatbuffer before anything else is read."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pytest
from gateways import keyed, new_exchange, new_gateway

from ingress.encoding.requests import encode_request
from ingress.errors import InvalidRequest, NotFound
from ingress.oai.codec import decode_chat_request
from ingress.pipeline.relay import relay
from ingress.settings import Route, Timeouts
from ingress.wire.passport import Passport

ROUTE = Route(model="m", group="a")
CHAT = decode_chat_request(b'{"model": "m", "stream": true, "max_tokens": 9, '
                           b'"messages": [{"role": "user", "content": "hi"}]}')
BUFFER = bytes(encode_request(CHAT, "client-id", Passport(prompt_tokens_estimate=4), "openai", "m"))


@pytest.mark.parametrize("body", [
    pytest.param(b"", id="empty"),
    pytest.param(b"not flatbuffers at all", id="garbage"),
    pytest.param(BUFFER[:-8], id="truncated"),
    pytest.param(b"\xff" * 64, id="offsets-out-of-bounds"),
])
async def test_an_invalid_buffer_is_refused_as_invalid_flatbuffer(body: bytes) -> None:
    exchange = new_exchange()
    with pytest.raises(InvalidRequest) as caught:
        await relay(new_gateway(ROUTE), body, exchange)
    assert (caught.value.status, caught.value.code) == (400, "invalid_flatbuffer")
    assert caught.value.message.startswith("The FlatBuffers request is invalid: ")
    assert exchange.routed.model is None  # refused before any field was read


async def test_a_buffer_naming_no_model_or_one_without_a_route_is_refused() -> None:
    nameless = bytes(encode_request(msgspec.structs.replace(CHAT, model=""), "r", Passport(), "openai", None))
    with pytest.raises(InvalidRequest) as caught:
        await relay(new_gateway(ROUTE), nameless, new_exchange())
    assert caught.value.param == "model_name"
    exchange = new_exchange()
    with pytest.raises(NotFound):
        await relay(new_gateway(Route(model="other", group="a")), BUFFER, exchange)
    assert (exchange.routed.model, exchange.routed.stream) == ("m", True)


@dataclass
class Answered:
    """What the endpoint's client was asked to forward, and the answer it gives."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=lambda: {"content-type": "application/x-flatbuffers",
                                                             "retry-after": "3", "x-other": "dropped"})
    forwarded: list[tuple[bytes, dict[str, str], Timeouts]] = field(default_factory=list)
    closed: bool = False

    async def forward(self, body: bytes, headers: dict[str, str], timeouts: Timeouts) -> tuple[Any, Any]:
        self.forwarded.append((body, headers, timeouts))

        async def reads() -> AsyncIterator[bytes]:
            yield b"one"
            yield b"two"

        return self, reads()

    def close(self) -> None:
        self.closed = True


async def test_the_exact_bytes_go_out_with_who_was_admitted_beside_them() -> None:
    tenancy, principal, _ = keyed()
    gateway = new_gateway(ROUTE, tenancy=tenancy)
    [(url, client)] = gateway.groups["a"].clients.items()
    answered = Answered()
    gateway.groups["a"].clients[url] = answered  # type: ignore[assignment]  # the endpoint's client, answering at once
    exchange = new_exchange(principal)

    relayed = await relay(gateway, BUFFER, exchange)

    [(body, headers, timeouts)] = answered.forwarded
    assert body == BUFFER and timeouts == gateway.settings.timeouts
    assert headers == {"x-request-id": exchange.request_id, "x-ingress-tenant": "t",
                       "x-ingress-key-id": principal.id}
    assert (relayed.status, relayed.headers) == (200, {"Content-Type": "application/x-flatbuffers",
                                                       "Retry-After": "3"})
    assert [data async for data in relayed.chunks] == [b"one", b"two"]
    relayed.close()
    assert answered.closed
    routed, answer = exchange.routed, exchange.answer
    assert (routed.model, routed.stream, routed.route, routed.group) == ("m", True, "m", "a")
    assert answer.upstream_ok is True and answer.first_byte is not None and answer.done is not None
    assert exchange.admitted.outcome == "admitted" and exchange.attempts.served_by == ("m", "m")
    await client.close()
