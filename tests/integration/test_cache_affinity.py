"""Cache-affine routing end to end: three edges in front of four fake endpoints on loopback, as three
replicas sharing nothing. A conversation keeps its endpoint across turns and edges, moves (on every edge
alike) when that endpoint goes down, and conversations behind one long system prompt still spread. And an
edge in front of four demo services with their simulated prefix caches on: what the choice buys, as the
services report it and as an operator reads it (the access line, /metrics)."""

from __future__ import annotations

import io
import itertools
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import aiohttp
import msgspec
import openai
import pytest
from fakes.upstream import FakeUpstream
from logcapture import lines
from openai.types import CompletionUsage
from openai.types.chat import ChatCompletionMessageParam
from prometheus_client.parser import text_string_to_metric_families
from recording import recording_edge

from ingress import wire
from ingress.demo.cache import KvCacheSettings
from ingress.demo.service import create_demo_app
from ingress.encoding.passport import RequestMeta, compute_passport
from ingress.encoding.requests import encode_request
from ingress.exchange import Exchange
from ingress.oai.codec import decode_chat_request
from ingress.routing.affinity import Way
from ingress.serve.app import serve_app
from ingress.settings import Affinity, Ejection, Endpoint, Group, Retry, Route, Settings, Timeouts

SYSTEM = "You are the support agent of a travel company. Follow every rule below. " * 80  # ~5.8 KB
QUICK = Timeouts(connect=1.0, first_byte=5.0, idle=5.0)


@dataclass
class Fleet:
    edges: list[tuple[str, list[Exchange]]]  # each edge's URL and the Exchanges of its requests, in order
    fakes: list[FakeUpstream]
    stops: list[AsyncExitStack]  # closing one stops its fake: its port then refuses connections


@pytest.fixture
async def fleet() -> AsyncIterator[Fleet]:
    async with AsyncExitStack() as stack:
        fakes, stops = [], []
        for _ in range(4):
            fake, stop = FakeUpstream(), AsyncExitStack()
            await stop.enter_async_context(fake.running())
            stack.push_async_callback(stop.aclose)
            fakes.append(fake)
            stops.append(stop)
        group = Group(endpoints=[Endpoint(url=f.url) for f in fakes], balance="cache_affine",
                      affinity=Affinity(load_slack=0.25), ejection=Ejection(failures=1, base=30.0))
        settings = Settings(groups={"main": group}, timeouts=QUICK,
                            routes=(Route(model="chat", group="main", affinity_header="x-session-id"),),
                            # retries not earned by traffic: each request deposits one
                            retry=Retry(attempts=2, budget_ratio=1.0, budget_min_per_s=1000.0))
        edges = []
        for _ in range(3):
            url, _, exchanges = await recording_edge(stack, settings)
            edges.append((url, exchanges))
        yield Fleet(edges, fakes, stops)


async def _turn(http: aiohttp.ClientSession, fleet: Fleet, edge: int, messages: list[dict[str, Any]],
                **extra: Any) -> tuple[str, Exchange]:
    """Send the conversation so far to one edge: the answer's text, and what that edge decided."""
    url, exchanges = fleet.edges[edge]
    headers = extra.pop("headers", {})
    async with http.post(f"{url}/v1/chat/completions", headers=headers,
                         json={"model": "chat", "messages": messages, **extra}) as response:
        assert response.status == 200, await response.text()
        body = await response.json()
    return body["choices"][0]["message"]["content"], exchanges[-1]


def _way(exchange: Exchange) -> Way:
    assert exchange.attempts.choice is not None
    return exchange.attempts.choice.way


async def test_a_conversation_keeps_its_endpoint_across_turns_and_edges_and_moves_when_it_goes_down(
        fleet: Fleet) -> None:
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                      {"role": "user", "content": "My flight to Lyon was cancelled."}]
    served: list[str] = []
    ways: list[Way] = []
    async with aiohttp.ClientSession() as http:
        for turn in range(6):
            answer, exchange = await _turn(http, fleet, turn % 3, messages)
            assert exchange.attempts.upstream is not None and exchange.attempts.count == 1
            served.append(exchange.attempts.upstream)
            ways.append(_way(exchange))
            messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": f"And then {turn}?"}]

        assert len(set(served)) == 1  # every turn, on every edge, where the first one went
        assert ways[:3] == [Way.HASHED] * 3  # each edge met the conversation first: the hash agreed
        assert ways[3:] == [Way.HIT] * 3  # then each found where it had served it
        down = served[0]
        await fleet.stops[[f.url for f in fleet.fakes].index(down)].aclose()

        moved: list[str] = []
        for turn in range(6, 12):
            answer, exchange = await _turn(http, fleet, turn % 3, messages)
            assert exchange.attempts.upstream is not None
            moved.append(exchange.attempts.upstream)
            if turn < 9:  # each edge learns it is down from its own attempt, and retries elsewhere
                assert exchange.attempts.count == 2
            messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": f"And then {turn}?"}]

    assert down not in moved and len(set(moved)) == 1  # every edge moved it to the same next endpoint
    assert sum(len(f.received) for f in fleet.fakes) == 12


async def test_conversations_behind_one_system_prompt_spread_and_each_keeps_its_endpoint(fleet: Fleet) -> None:
    firsts: dict[int, str] = {}
    async with aiohttp.ClientSession() as http:
        for i in range(24):  # one at a time: no load bound moves any of them
            messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Booking {i} please."}]
            answer, exchange = await _turn(http, fleet, i % 3, messages)
            assert exchange.attempts.upstream is not None and _way(exchange) is Way.HASHED
            firsts[i] = exchange.attempts.upstream
            messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": "Thanks."}]
            _, again = await _turn(http, fleet, (i + 1) % 3, messages)  # the next turn, on another edge
            assert again.attempts.upstream == exchange.attempts.upstream

    # Spread by hash over every endpoint (prefix_spread is 0 by default; the fakes' ports, in the endpoints'
    # identities, differ from run to run): not all behind the system prompt's endpoint. Bounds a uniform
    # spread of 24 over 4 misses about once in a million runs.
    assert len(set(firsts.values())) >= 3
    assert max(Counter(firsts.values()).values()) <= 16


async def test_a_prefix_spread_gathers_them_on_a_few_endpoints(fleet: Fleet) -> None:
    """With `prefix_spread = 2`, conversations behind one long system prompt (~5.8 KB, past the 4 KiB where
    the spread applies) are hashed over the first two endpoints of its order, both used (all 24 on one: once
    in 8 million runs), so that it is prefilled on two, not four."""
    group = Group(endpoints=[Endpoint(url=f.url) for f in fleet.fakes], balance="cache_affine",
                  affinity=Affinity(prefix_spread=2))
    settings = Settings(groups={"main": group}, timeouts=QUICK, routes=(Route(model="chat", group="main"),))
    firsts: dict[int, str] = {}
    async with AsyncExitStack() as stack, aiohttp.ClientSession() as http:
        url, _, exchanges = await recording_edge(stack, settings)
        alone = Fleet([(url, exchanges)], fleet.fakes, fleet.stops)
        for i in range(24):  # one at a time: no load bound moves any of them
            messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Booking {i} please."}]
            _, exchange = await _turn(http, alone, 0, messages)
            assert exchange.attempts.upstream is not None and _way(exchange) is Way.HASHED
            firsts[i] = exchange.attempts.upstream

    assert len(set(firsts.values())) == 2
    assert max(Counter(firsts.values()).values()) <= 23


async def test_an_affinity_key_keeps_a_session_together_whatever_its_prompts(fleet: Fleet) -> None:
    async with aiohttp.ClientSession() as http:
        by_header = [await _turn(http, fleet, i % 3, [{"role": "user", "content": f"Unrelated question {i}"}],
                                 headers={"x-session-id": "session-42"}) for i in range(6)]
        by_field = [await _turn(http, fleet, i % 3, [{"role": "user", "content": f"Another question {i}"}],
                                prompt_cache_key="tenant-7") for i in range(6)]

    for turns in (by_header, by_field):
        assert len({exchange.attempts.upstream for _, exchange in turns}) == 1
        assert {_way(exchange) for _, exchange in turns} <= {Way.AFFINITY_KEY, Way.HIT}


@pytest.mark.parametrize("header", ["session-id", "x-session-affinity"])
async def test_an_agents_session_header_keeps_its_session_together_with_no_route_setting(
        fleet: Fleet, header: str) -> None:
    """Codex CLI names its session in `session-id`, opencode in `x-session-affinity`: with neither the
    route's header nor a prompt_cache_key sent, the session is the key."""
    async with aiohttp.ClientSession() as http:
        turns = [await _turn(http, fleet, i % 3, [{"role": "user", "content": f"Question {i} of a session"}],
                             headers={header: "agent-session-9"}) for i in range(6)]
    assert len({exchange.attempts.upstream for _, exchange in turns}) == 1
    assert {_way(exchange) for _, exchange in turns} <= {Way.AFFINITY_KEY, Way.HIT}


async def test_a_binary_clients_own_passport_chain_is_what_the_choice_reads(fleet: Fleet) -> None:
    """An internal client that computes its passport with the chain is routed by it, as JSON clients are."""
    turn_one = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Seat upgrade?"}]
    turn_two = [*turn_one, {"role": "assistant", "content": "Which flight?"}, {"role": "user", "content": "LY42"}]
    served = []
    async with aiohttp.ClientSession() as http:
        for i, messages in enumerate((turn_one, turn_two)):
            request = decode_chat_request(msgspec.json.encode({"model": "chat", "messages": messages}))
            passport = compute_passport(request, RequestMeta(), blocks=True)
            url, exchanges = fleet.edges[i]
            body = bytes(encode_request(request, f"bin-{i}", passport))
            async with http.post(f"{url}/v1/chat/completions", data=body,
                                 headers={"Content-Type": wire.CONTENT_TYPE}) as response:
                assert response.status == 200
                await response.read()
            served.append((exchanges[-1].attempts.upstream, _way(exchanges[-1])))
        # and the JSON form of the same conversation goes there too
        _, exchange = await _turn(http, fleet, 2, turn_two)

    assert served[0][0] == served[1][0] == exchange.attempts.upstream
    assert [way for _, way in served] == [Way.HASHED, Way.HASHED]


async def _samples(http: aiohttp.ClientSession, url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    async with http.get(f"{url}/metrics") as response:
        text = await response.text()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


async def test_with_the_demos_caches_on_a_conversations_later_turns_are_read_from_its_endpoints_cache(
        http: aiohttp.ClientSession, log_stream: io.StringIO) -> None:
    async with AsyncExitStack() as stack:
        caches = KvCacheSettings(blocks=512, prefill_s_per_token=0.00001)
        demos = [await stack.enter_async_context(serve_app(create_demo_app(kv_cache=caches), "127.0.0.1", 0))
                 for _ in range(4)]
        group = Group(endpoints=[Endpoint(url=u) for u in demos], balance="cache_affine")
        url, _, exchanges = await recording_edge(stack, Settings(
            groups={"cached": group}, routes=(Route(model="chat", group="cached"),), timeouts=QUICK))
        before = await _samples(http, url)

        messages: list[ChatCompletionMessageParam] = [
            {"role": "system", "content": SYSTEM}, {"role": "user", "content": "My flight to Lyon was cancelled."}]
        usages: list[tuple[int, int]] = []  # each turn's (prompt tokens, cached tokens), as the client read them
        async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="-", max_retries=0) as client:
            for turn in range(5):
                named = {"x-request-id": f"kv-{turn}"}
                if turn % 2:  # streamed: the usage comes in the last chunk
                    stream = await client.chat.completions.create(
                        model="chat", messages=messages, stream=True, stream_options={"include_usage": True},
                        extra_headers=named)
                    chunks = [chunk async for chunk in stream]
                    answer = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
                    usage: CompletionUsage | None = next(c.usage for c in chunks if c.usage is not None)
                else:
                    whole = await client.chat.completions.create(model="chat", messages=messages, extra_headers=named)
                    answer, usage = whole.choices[0].message.content or "", whole.usage
                assert usage is not None
                details = usage.prompt_tokens_details
                usages.append((usage.prompt_tokens, details.cached_tokens or 0 if details is not None else 0))
                messages.append({"role": "assistant", "content": answer})
                messages.append({"role": "user", "content": f"And then {turn}? " + "Tell me more. " * 20})
        after = await _samples(http, url)

    cached = [c for _, c in usages]
    assert cached[0] == 0  # the first turn: a cold cache
    # then most of the turns before: what their full blocks held (a prompt's last block is partial)
    assert all(0.8 * previous < c <= previous for (previous, _), (_, c) in itertools.pairwise(usages))
    assert len({exchange.attempts.upstream for exchange in exchanges if exchange.api == "chat"}) == 1  # (not /metrics)

    records = [line for line in lines(log_stream) if line["event"] == "request"
               and str(line["request_id"]).startswith("kv-")]
    assert [line["affinity"] for line in records] == ["hashed"] + ["hit"] * 4
    assert records[0]["matched_blocks"] == 0 and all(line["matched_blocks"] > 0 for line in records[1:])
    assert [line["cached_tokens"] for line in records] == cached

    def grew(name: str, **labels: str) -> float:
        key = (name, frozenset(labels.items()))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert grew("ingress_affinity_choices_total", group="cached", way="hit") == 4
    assert grew("ingress_affinity_choices_total", group="cached", way="hashed") == 1
    assert grew("ingress_affinity_matched_blocks_count", group="cached") == 5
    assert grew("ingress_affinity_matched_blocks_bucket", group="cached", le="0.0") == 1
    assert grew("ingress_upstream_tokens_total", group="cached", kind="cached") == sum(cached)
    assert grew("ingress_upstream_tokens_total", group="cached", kind="prompt") == sum(p for p, _ in usages)
