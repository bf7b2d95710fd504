"""ingress/pipeline/gateway.py: the route a model takes for a request (exact, prefix, glob), the same 404
for a model that has no route and for one the key may not use, a split's variant kept by its sticky key,
and the internal hop's headers."""

from __future__ import annotations

import pytest
from gateways import keyed, new_exchange, new_gateway

from ingress.encoding.passport import RequestMeta
from ingress.errors import NotFound
from ingress.pipeline.gateway import _split_key, hop_headers
from ingress.routing.split import choose
from ingress.settings import Route, Share, Timeouts
from ingress.tenancy import build
from ingress.tenancy.keys import new_key
from ingress.tenancy.settings import Key, Tenant
from ingress.tenancy.settings import Tenancy as TenancySettings
from ingress.wire.passport import Passport

EXACT = Route(model="gpt-4o", group="a", upstream_model="gpt-4o-2024-08-06")
PREFIX = Route(prefix="local-", group="b", upstream_model="llama-3-8b")
GLOB = Route(glob="*-mini", group="c", extra_fields="forward", timeouts=Timeouts(first_byte=9.0))
SPLIT = Route(model="split", group="a", split_by="user", split=[Share(route="split", weight=1),
                                                                 Share(route="canary", weight=1)])
CANARY = Route(name="canary", group="b", upstream_model="canary-model")


@pytest.mark.parametrize(("model", "route", "upstream_model"), [
    ("gpt-4o", EXACT, "gpt-4o-2024-08-06"),
    ("local-anything", PREFIX, "llama-3-8b"),
    ("o1-mini", GLOB, "o1-mini"),
])
def test_a_model_takes_its_route_exact_prefix_or_glob(model: str, route: Route, upstream_model: str) -> None:
    match, asked = new_gateway(EXACT, PREFIX, GLOB).route(model, new_exchange())
    assert (match.route, asked, match.upstream_model, match.variant) == (route, route, upstream_model, None)


def test_a_model_without_a_route_and_one_the_key_may_not_use_are_the_same_404() -> None:
    tenancy, principal, _ = keyed(models=("gpt-*",))
    gateway = new_gateway(EXACT, PREFIX, tenancy=tenancy)
    errors = []
    for model, who in (("nothing-routes-this", None), ("local-x", principal)):
        with pytest.raises(NotFound) as caught:
            gateway.route(model, new_exchange(who))
        errors.append((caught.value.status, caught.value.code, caught.value.param,
                       caught.value.message.replace(model, "M")))
    assert errors[0] == errors[1] == (404, "model_not_found", "model",
                                      "The model 'M' does not exist or you do not have access to it.")
    assert gateway.route("gpt-4o", new_exchange(principal))[0].route is EXACT  # what the key may use it reaches


def test_a_route_the_key_s_tenant_does_not_allow_is_the_same_404_as_a_model_without_one() -> None:
    secret, key_id, key_hash = new_key()
    tenancy = build(TenancySettings(keys=(Key(id=key_id, tenant="t", hash=key_hash),),
                                    tenants={"t": Tenant(routes=("gpt-4o", "cheap-*"))}))
    principal = tenancy.policy.authenticate({"Authorization": f"Bearer {secret}"})
    cheap = Route(name="cheap-mini", glob="*-mini", group="c")
    gateway = new_gateway(EXACT, PREFIX, cheap, tenancy=tenancy)
    with pytest.raises(NotFound) as refused:
        gateway.route("local-x", new_exchange(principal))  # PREFIX's name is "local-": not the tenant's
    with pytest.raises(NotFound) as unknown:
        gateway.route("nothing-routes-this", new_exchange(principal))
    assert (refused.value.status, refused.value.code, refused.value.param) == (404, "model_not_found", "model")
    assert refused.value.message.replace("local-x", "M") == unknown.value.message.replace("nothing-routes-this", "M")
    assert gateway.route("gpt-4o", new_exchange(principal))[0].route is EXACT  # by its name
    assert gateway.route("o1-mini", new_exchange(principal))[0].route is cheap  # by a glob of names
    assert gateway.route("local-x", new_exchange())[0].route is PREFIX  # an open edge: every route


def test_a_split_route_serves_the_variant_its_sticky_key_falls_on_every_time() -> None:
    gateway = new_gateway(SPLIT, CANARY)
    shares = (("split", 1), ("canary", 1))
    seen = set()
    for user in ("ann", "bob", "cy", "dee", "eve", "fay"):
        picks = [gateway.route("split", new_exchange(request_id=f"r{i}"), None, user)[0] for i in range(3)]
        assert len({m.variant for m in picks}) == 1  # sticky: the user's requests all take one variant
        match = picks[0]
        assert match.variant == choose(f"user:{user}".encode(), shares)
        assert match.route is (CANARY if match.variant == "canary" else SPLIT)
        assert gateway.route("split", new_exchange(), None, user)[1] is SPLIT  # the route asked is the split's
        seen.add(match.variant)
    assert seen == {"split", "canary"}  # six users over two even shares fall on both
    matches = (gateway.route("split", new_exchange(), None, u)[0] for u in "abcdefgh")
    canary = next(m for m in matches if m.variant == "canary")
    assert canary.upstream_model == "canary-model"


def test_the_split_key_is_the_one_the_route_names_else_the_request_id() -> None:
    _, principal, _ = keyed()
    with_key = new_exchange(principal, request_id="req-1")
    by_key = Route(model="m", group="a", split_by="key")
    meta = RequestMeta(api_key="sk-raw", affinity_headers=(("x-cohort", "blue"),))
    by_header = Route(model="m", group="a", split_by="header", split_header="X-Cohort")
    assert _split_key(by_key, with_key, meta, "u", "s") == f"key:{principal.id}"  # the key's id, never the key
    assert _split_key(by_key, new_exchange(), meta, None, None) == "key:sk-raw"  # no tenancy: the key as sent
    assert _split_key(Route(model="m", group="a", split_by="user"), with_key, meta, "u", "s") == "user:u"
    assert _split_key(Route(model="m", group="a", split_by="safety_identifier"), with_key, meta, "u", "s") == \
        "safety_identifier:s"
    assert _split_key(by_header, with_key, meta, None, None) == "header:blue"
    # Nothing to stick by: the request's own id, a weighted draw
    assert _split_key(Route(model="m", group="a", split_by="user"), with_key, meta, None, "s") == "req-1"
    assert _split_key(by_header, with_key, RequestMeta(), None, None) == "req-1"
    assert _split_key(by_key, new_exchange(request_id="r2"), None, None, None) == "r2"


def test_extras_are_forwarded_only_on_a_route_that_says_so_and_timeouts_are_the_routes() -> None:
    gateway = new_gateway(EXACT, GLOB)
    assert gateway.forwards_extras("o1-mini") and not gateway.forwards_extras("gpt-4o")
    assert not gateway.forwards_extras("unrouted")
    assert gateway.timeouts(gateway.route("o1-mini", new_exchange())[0]) == Timeouts(first_byte=9.0)
    assert gateway.timeouts(gateway.route("gpt-4o", new_exchange())[0]) == gateway.settings.timeouts


def test_the_hop_carries_the_request_id_and_the_trace_context() -> None:
    assert hop_headers("r1", None) == {"x-request-id": "r1"}
    assert hop_headers("r1", Passport()) == {"x-request-id": "r1"}
    assert hop_headers("r1", Passport(traceparent="00-ab-cd-01", tracestate="k=v")) == {
        "x-request-id": "r1", "traceparent": "00-ab-cd-01", "tracestate": "k=v"}
    assert hop_headers("r1", Passport(tracestate="k=v")) == {"x-request-id": "r1"}  # no parent, no state
