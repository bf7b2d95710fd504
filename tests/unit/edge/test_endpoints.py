"""ingress/edge/endpoints.py's helpers without a server: the passport's meta read from the headers (the key
only as a Bearer token, the project, priority and timeout bounded, the trace context kept only when
valid, the affinity headers the routes name) and the Cache-Control the cache reads. The endpoints
themselves answer over HTTP in tests/unit/test_edge.py."""

from __future__ import annotations

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from gateways import new_exchange, new_gateway

from ingress.edge.appkeys import EXCHANGE, GATEWAY
from ingress.edge.endpoints import _bounded_int, request_meta
from ingress.errors import InvalidRequest
from ingress.exchange import Exchange
from ingress.settings import Route

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def request(headers: dict[str, str], affinity: tuple[str, ...] = ()) -> tuple[web.Request, Exchange]:
    app = web.Application()
    gateway = new_gateway(Route(model="m", group="a"))
    gateway.affinity_headers = affinity
    app[GATEWAY] = gateway
    made = make_mocked_request("POST", "/v1/chat/completions", headers=headers, app=app)
    exchange = new_exchange()
    made[EXCHANGE] = exchange
    return made, exchange


@pytest.mark.parametrize(("raw", "value"), [(None, 0), ("0", 0), ("5", 5), ("127", 127)])
def test_a_bounded_header_reads_as_its_integer(raw: str | None, value: int) -> None:
    made, _ = request({} if raw is None else {"x-ingress-priority": raw})
    assert _bounded_int(made, "x-ingress-priority", 0, 127) == value


@pytest.mark.parametrize("raw", ["128", "-1", "1.5", "", " 5", "٣", "0x10", "5e2"])
def test_anything_else_is_refused_naming_the_header(raw: str) -> None:
    made, _ = request({"x-ingress-priority": raw})
    with pytest.raises(InvalidRequest) as caught:
        _bounded_int(made, "x-ingress-priority", 0, 127)
    assert caught.value.param == "x-ingress-priority"
    assert caught.value.message == "Header 'x-ingress-priority' must be an integer from 0 to 127."


def test_the_meta_holds_what_the_passport_needs_from_the_headers() -> None:
    made, exchange = request({"Authorization": "Bearer  sk-client ", "OpenAI-Project": "proj_1",
                        "OpenAI-Organization": "org_1", "x-ingress-priority": "3", "x-ingress-timeout-ms": "2500",
                        "traceparent": TRACEPARENT, "tracestate": "k=v", "Cache-Control": "no-cache, max-age=0",
                        "X-Session-Id": "s-1"}, affinity=("x-session-id", "x-absent"))
    meta = request_meta(made)
    assert (meta.api_key, meta.tenant_id, meta.priority, meta.timeout_ms) == ("sk-client", "proj_1", 3, 2500)
    assert (meta.traceparent, meta.tracestate) == (TRACEPARENT, "k=v")
    assert meta.affinity_headers == (("x-session-id", "s-1"),)
    assert exchange.cache_control == "no-cache"


@pytest.mark.parametrize(("headers", "api_key", "tenant"), [
    ({}, None, None),
    ({"Authorization": "Basic dXNlcjpwYXNz"}, None, None),  # a key only as a Bearer token
    ({"Authorization": "bearer sk-lower"}, "sk-lower", None),
    ({"Authorization": "Bearer "}, None, None),
    ({"OpenAI-Organization": "org_1"}, None, "org_1"),
])
def test_the_key_and_the_tenant_as_sent(headers: dict[str, str], api_key: str | None, tenant: str | None) -> None:
    meta = request_meta(request(headers)[0])
    assert (meta.api_key, meta.tenant_id, meta.priority, meta.timeout_ms) == (api_key, tenant, 0, 0)


def test_an_invalid_trace_context_is_not_carried() -> None:
    meta = request_meta(request({"traceparent": "00-not-a-trace", "tracestate": "k=v"})[0])
    assert (meta.traceparent, meta.tracestate) == (None, None)
    meta = request_meta(request({"traceparent": TRACEPARENT, "tracestate": "k=v\x01"})[0])
    assert (meta.traceparent, meta.tracestate) == (TRACEPARENT, None)


@pytest.mark.parametrize("name", ["x-ingress-priority", "x-ingress-timeout-ms"])
def test_an_out_of_range_header_is_refused_while_reading_the_meta(name: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        request_meta(request({name: "999999999999"})[0])
    assert caught.value.param == name
