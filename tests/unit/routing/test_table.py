"""ingress/routing/table.py: which route a model takes (exact, alias, longest prefix, glob), its chain and its split."""

from __future__ import annotations

import pytest

from ingress.routing.table import RouteTable
from ingress.settings import Route, Share

ROUTES = (
    Route(glob="gpt-*", group="globbed"),
    Route(prefix="gpt-4", group="short-prefix"),
    Route(model="gpt-4o", aliases=["gpt-4o-latest", "four-oh"], group="exact", upstream_model="gpt-4o-2024-08-06"),
    Route(prefix="gpt-4o-", group="long-prefix"),
    Route(glob="*-mini", group="mini", upstream_model="small"),
    Route(model="llama-3", group="exact-llama"),
    Route(glob="*", group="anything"),
)


@pytest.mark.parametrize(("model", "group", "upstream_model"), [
    pytest.param("gpt-4o", "exact", "gpt-4o-2024-08-06", id="exact-beats-everything"),
    pytest.param("gpt-4o-latest", "exact", "gpt-4o-2024-08-06", id="alias-beats-prefix"),
    pytest.param("four-oh", "exact", "gpt-4o-2024-08-06", id="alias"),
    pytest.param("gpt-4o-mini", "long-prefix", "gpt-4o-mini", id="longest-prefix-beats-glob"),
    pytest.param("gpt-4-turbo", "short-prefix", "gpt-4-turbo", id="prefix-beats-glob"),
    pytest.param("gpt-3.5", "globbed", "gpt-3.5", id="globs-in-file-order"),
    pytest.param("o1-mini", "mini", "small", id="glob-rewrites-the-name"),
    pytest.param("llama-3", "exact-llama", "llama-3", id="exact-without-rewrite"),
    pytest.param("mistral", "anything", "mistral", id="catch-all-glob"),
])
def test_routes_match_exact_then_alias_then_longest_prefix_then_glob(
    model: str, group: str, upstream_model: str,
) -> None:
    match = RouteTable(ROUTES).match(model)

    assert match is not None
    assert (match.route.group, match.upstream_model) == (group, upstream_model)


def test_an_unmatched_model_has_no_route() -> None:
    table = RouteTable((Route(model="a", group="g"), Route(prefix="b-", group="g"), Route(glob="c?", group="g")))

    assert [table.match(m) for m in ("b", "cc2", "A", "", "a ")] == [None] * 5
    assert table.match("cx") is not None


def test_a_glob_matches_the_whole_name() -> None:
    table = RouteTable((Route(glob="*-mini", group="g"),))

    assert table.match("o1-mini") is not None
    assert table.match("o1-mini-2024") is None
    assert table.match("o1-MINI") is None  # case matters, as in model names


def test_the_prefix_rewrite_sends_the_configured_name() -> None:
    table = RouteTable((Route(prefix="local-", group="g", upstream_model="llama-3-8b"),))

    match = table.match("local-anything")

    assert match is not None and match.upstream_model == "llama-3-8b"


def test_listed_models_are_the_exact_names_and_aliases() -> None:
    assert RouteTable(ROUTES).listed_models() == ["four-oh", "gpt-4o", "gpt-4o-latest", "llama-3"]
    assert RouteTable((Route(glob="*", group="g"),)).listed_models() == []


def test_a_route_carries_its_chain_and_a_named_route_is_reached_only_from_others() -> None:
    gpt = Route(model="gpt", group="openai", fallbacks=["claude"], fallback_on=("rate_limited", "5xx"))
    claude = Route(name="claude", group="anthropic", upstream_model="claude-sonnet-4-5")
    table = RouteTable((gpt, claude))
    match = table.match("gpt")

    assert match is not None
    assert [(link.name, link.group, link.model("gpt")) for link in match.chain] == [
        ("gpt", "openai", "gpt"), ("claude", "anthropic", "claude-sonnet-4-5")]
    assert match.fallback_on == {"rate_limited", "5xx"} and match.variant is None
    assert table.match("claude") is None and table.listed_models() == ["gpt"]


def test_a_splits_variant_is_a_match_of_its_own_route() -> None:
    gpt = Route(model="gpt", group="openai", split=[Share(route="gpt", weight=9), Share(route="canary", weight=1)])
    canary = Route(name="canary", group="openai", upstream_model="gpt-5", fallbacks=["gpt"])
    table = RouteTable((gpt, canary))
    match = table.match("gpt")
    assert match is not None

    assert table.shares(match) == (("gpt", 9), ("canary", 1))
    variant = table.variant(match, "canary", "gpt")
    assert (variant.route, variant.upstream_model, variant.variant) == (canary, "gpt-5", "canary")
    assert [link.name for link in variant.chain] == ["canary", "gpt"]  # the variant's own chain
    assert table.shares(variant) == ()  # a variant is not split again
    itself = table.variant(match, "gpt", "gpt")
    assert (itself.route, itself.variant) == (gpt, "gpt")
