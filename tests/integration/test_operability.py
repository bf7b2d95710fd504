"""What an operator reads from a running edge: /metrics, each request's access line (its usage record),
/healthz, /readyz and Server-Timing.

Metrics are process-wide, and every edge a test suite starts in this process records into the same
registry, so each test compares a scrape taken before its requests with one taken after.
"""

from __future__ import annotations

import asyncio
import io
import json
import math
import platform
from collections.abc import Awaitable, Callable
from importlib import metadata
from typing import Any

import aiohttp
import anthropic
import openai
import pytest
from aiohttp import web
from fakes import upstream as fu
from fakes.upstream import FakeUpstream
from logcapture import lines
from prometheus_client.parser import text_string_to_metric_families

from ingress import __version__, wire
from ingress.settings import Ejection, Endpoint, Group, Route, Settings, Timeouts
from ingress.tenancy.keys import new_key
from ingress.tenancy.settings import Key, ModelPolicy, Price, Tenancy

CHAT = "/v1/chat/completions"
MODEL = "ingress-demo"
FAST = Timeouts(connect=1.0, first_byte=0.5, idle=0.5)

StartEdge = Callable[[Settings], Awaitable[str]]  # the `start_edge` fixture


class Scrape:
    """One /metrics exposition, parsed: sample values by name and labels (absent samples read as 0)."""

    def __init__(self, text: str) -> None:
        self.samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                self.samples[sample.name, frozenset(sample.labels.items())] = sample.value

    def value(self, name: str, **labels: str) -> float:
        return self.samples.get((name, frozenset(labels.items())), 0.0)

    def label_values(self) -> set[str]:
        return {value for _, labels in self.samples for _, value in labels}


async def scrape(http: aiohttp.ClientSession, url: str) -> Scrape:
    async with http.get(f"{url}/metrics") as response:
        assert response.status == 200
        assert response.content_type == "text/plain"
        return Scrape(await response.text())


def _chat(model: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}], **extra}


async def _sse_events(response: aiohttp.ClientResponse) -> list[str]:
    """The `data:` payloads of an SSE body, in order."""
    body = (await response.read()).decode()
    return [line[6:] for line in body.split("\n") if line.startswith("data: ")]


def _fake_settings(fake: FakeUpstream, **extra: Any) -> Settings:
    """An edge in front of the fake, serving "ingress-demo" exactly and any "gpt-" name by prefix."""
    return Settings(groups={"main": Group(endpoints=[Endpoint(url=fake.url)])},
                    routes=(Route(model=MODEL, group="main"), Route(prefix="gpt-", group="main")),
                    timeouts=FAST, **extra)


# --- /metrics -------------------------------------------------------------------------------------


async def test_metrics_count_requests_tokens_rejections_and_stream_timings(
        start_edge: StartEdge, fake_upstream: FakeUpstream, http: aiohttp.ClientSession) -> None:
    url = await start_edge(_fake_settings(fake_upstream))
    before = await scrape(http, url)

    async with http.post(url + CHAT, json=_chat(MODEL, "hello metrics world")) as r:
        assert r.status == 200
    async with http.post(url + CHAT, json={"model": MODEL}) as r:
        assert r.status == 400
        assert (await r.json())["error"]["code"] == "invalid_request"
    async with http.post(url + CHAT, json=_chat("attacker-controlled-xyz", "hi")) as r:
        assert r.status == 404
        assert (await r.json())["error"]["code"] == "model_not_found"
    async with http.post(url + CHAT, json=_chat(MODEL, "one two three four", stream=True,
                                                 stream_options={"include_usage": True})) as r:
        assert r.status == 200
        events = await _sse_events(r)
    assert events[-1] == "[DONE]" and json.loads(events[-2])["usage"]["completion_tokens"] == 4
    async with http.get(url + "/no/such/path") as r:
        assert r.status == 404

    after = await scrape(http, url)

    def delta(name: str, **labels: str) -> float:
        return after.value(name, **labels) - before.value(name, **labels)

    requests = "ingress_requests_total"
    assert delta(requests, route=CHAT, model=MODEL, status="200") == 2
    assert delta(requests, route=CHAT, model="other", status="400") == 1
    assert delta(requests, route=CHAT, model="other", status="404") == 1
    assert delta(requests, route="unmatched", model="other", status="404") == 1
    # The fake counts whitespace-delimited words: 3 + 4 prompt tokens, echoed as completion tokens.
    assert delta("ingress_tokens_total", model=MODEL, kind="prompt") == 7
    assert delta("ingress_tokens_total", model=MODEL, kind="completion") == 7
    for reason in ("invalid_request", "model_not_found", "unknown_url"):
        assert delta("ingress_rejections_total", reason=reason) == 1, reason
    assert delta("ingress_time_to_first_token_seconds_count", model=MODEL) == 1  # streams only
    # One gap between every two consecutive chunks of the stream ([DONE] is not a chunk).
    assert delta("ingress_inter_chunk_seconds_count", model=MODEL) == len(events) - 2
    assert delta("ingress_inter_chunk_seconds_sum", model=MODEL) > 0
    assert delta("ingress_overhead_seconds_count", route=CHAT) == 4
    assert delta("ingress_request_duration_seconds_count", route=CHAT) == 4
    assert delta("ingress_upstream_duration_seconds_count", group="main") == 2
    assert after.value("ingress_upstream_endpoint_healthy", group="main", endpoint=fake_upstream.url) == 1
    assert after.value("ingress_build_info", version=__version__, python=platform.python_version(),
                       flatbuffers=metadata.version("flatbuffers")) == 1
    assert "attacker-controlled-xyz" not in after.label_values()


async def test_the_model_label_is_a_served_name_never_the_name_asked_for(
        start_edge: StartEdge, fake_upstream: FakeUpstream, http: aiohttp.ClientSession) -> None:
    url = await start_edge(_fake_settings(fake_upstream))
    before = await scrape(http, url)
    async with http.post(url + CHAT, json=_chat("gpt-attacker-controlled-xyz", "hi", stream=True)) as r:
        assert r.status == 200
        await r.read()
    async with http.post(url + CHAT, json=_chat("attacker-controlled-xyz", "hi")) as r:
        assert r.status == 404
    after = await scrape(http, url)
    # A prefix route is labelled by its prefix, an unknown name as "other".
    for model, status in (("gpt-", "200"), ("other", "404")):
        assert (after.value("ingress_requests_total", route=CHAT, model=model, status=status)
                - before.value("ingress_requests_total", route=CHAT, model=model, status=status)) == 1
    assert not {v for v in after.label_values() if "attacker" in v}


async def test_a_failed_upstream_call_is_timed_as_upstream_not_as_overhead(
        start_edge: StartEdge, fake_upstream: FakeUpstream, http: aiohttp.ClientSession) -> None:
    url = await start_edge(_fake_settings(fake_upstream))
    fake_upstream.play(fu.slow_head(None))  # silent until the edge's 0.5 s first-byte timeout
    before = await scrape(http, url)
    async with http.post(url + CHAT, json=_chat(MODEL, "hello")) as r:
        assert r.status == 504
        timing = _server_timing(r.headers["Server-Timing"])
    after = await scrape(http, url)
    overhead = (after.value("ingress_overhead_seconds_sum", route=CHAT)
                - before.value("ingress_overhead_seconds_sum", route=CHAT))
    assert timing["total"] >= 500
    assert overhead < 0.25, f"{overhead:.3f} s of a 0.5 s upstream timeout counted as proxy overhead"
    assert timing.get("upstream", 0) >= 500


# --- the access line: each request's usage record ------------------------------------------------

KEY, KEY_ID, KEY_HASH = new_key()
PRICES = {"gpt-4o*": Price(input=2.5, output=10.0), "claude-*": Price(input=3.0, output=15.0)}  # USD per M tokens


async def _cached_answer(call: fu.Call) -> web.StreamResponse:
    """A whole answer whose prompt was mostly read from the service's cache, and that reasoned first."""
    usage = wire.Usage(prompt_tokens=40, completion_tokens=12, total_tokens=52, cached_tokens=32, reasoning_tokens=5)
    answer = wire.Response(id=call.answer_id, model=call.received.request.model, created=fu.CREATED, usage=usage,
                           choices=[wire.Choice(index=0, content="from the cache", finish_reason="stop")])
    return web.Response(body=bytes(wire.write_response(answer)), content_type=wire.CONTENT_TYPE)


async def test_the_access_lines_summed_are_the_token_metrics_and_cost_what_the_prices_say(
        start_edge: StartEdge, fake_upstream: FakeUpstream, http: aiohttp.ClientSession,
        log_stream: io.StringIO) -> None:
    tenancy = Tenancy(keys=(Key(id=KEY_ID, tenant="acme", hash=KEY_HASH),),
                      models={name: ModelPolicy(price=price) for name, price in PRICES.items()})
    url = await start_edge(Settings(
        groups={"main": Group(endpoints=[Endpoint(url=fake_upstream.url)])},
        routes=(Route(model="gpt-4o", upstream_model="gpt-4o-2024-08-06", group="main"),
                Route(prefix="claude-", group="main"), Route(model="text-embedding-3-small", group="main")),
        timeouts=FAST, tenancy=tenancy))
    fake_upstream.play(_cached_answer)
    before = await scrape(http, url)

    def named(request_id: str) -> dict[str, Any]:
        return {"extra_headers": {"x-request-id": request_id}}

    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0) as client:
        await client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}],
                                             **named("usage-whole"))
        stream = await client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "one two three four five"}], stream=True,
            stream_options={"include_usage": True}, **named("usage-stream"))
        assert [c.usage.completion_tokens async for c in stream if c.usage] == [5]
        embedded = await client.embeddings.create(model="text-embedding-3-small", input=["a", "b", "c"],
                                                  **named("usage-embed"))
        assert len(embedded.data) == 3
        with pytest.raises(openai.NotFoundError):
            await client.chat.completions.create(model="gpt-5-unrouted", messages=[{"role": "user", "content": "x"}],
                                                 **named("usage-refused"))
    async with anthropic.AsyncAnthropic(base_url=url, api_key=KEY, max_retries=0) as claude, \
            claude.messages.stream(model="claude-sonnet-4-5", max_tokens=64, **named("usage-messages"),
                                   messages=[{"role": "user", "content": "count these six words please"}]) as events:
        message = await events.get_final_message()
    assert (message.usage.input_tokens, message.usage.output_tokens) == (5, 5)
    after = await scrape(http, url)

    records = {line["request_id"]: line for line in lines(log_stream)
               if line["event"] == "request" and str(line["request_id"]).startswith("usage-")}
    assert set(records) == {"usage-whole", "usage-stream", "usage-embed", "usage-refused", "usage-messages"}
    keep = ("api", "route", "served_model", "prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens")
    assert {rid: tuple(line.get(k) for k in keep) for rid, line in records.items()} == {
        "usage-whole": ("chat", "gpt-4o", "gpt-4o-2024-08-06", 40, 12, 32, 5),
        "usage-stream": ("chat", "gpt-4o", "gpt-4o-2024-08-06", 5, 5, 0, 0),
        "usage-embed": ("embeddings", "text-embedding-3-small", "fake-embedder", 3, 0, 0, 0),
        "usage-refused": ("chat", None, None, None, None, None, None),
        "usage-messages": ("messages", "claude-", "claude-sonnet-4-5", 5, 5, 0, 0),
    }
    assert records["usage-stream"]["ttfb_ms"] <= records["usage-stream"]["duration_ms"]
    assert all((line["tenant"], line["key_id"]) == ("acme", KEY_ID) for line in records.values())

    # Summed by route (here each route's metric label), the lines are the token counters' increase.
    for label in ("gpt-4o", "claude-", "text-embedding-3-small"):
        for kind in ("prompt", "completion"):
            logged = sum(line[f"{kind}_tokens"] for line in records.values() if line.get("route") == label)
            counted = (after.value("ingress_tokens_total", model=label, kind=kind)
                       - before.value("ingress_tokens_total", model=label, kind=kind))
            assert logged == counted, (label, kind)
    # A cost where a price applies and usage came back: the tokens at the model's price (the cached ones as input).
    costs = {rid: line["cost_usd"] for rid, line in records.items() if "cost_usd" in line}
    assert set(costs) == {"usage-whole", "usage-stream", "usage-messages"}
    for rid, cost in costs.items():
        line = records[rid]
        price = PRICES["gpt-4o*" if line["model"].startswith("gpt-4o") else "claude-*"]
        expected = (line["prompt_tokens"] * price.input + line["completion_tokens"] * price.output) / 1e6
        assert cost == pytest.approx(expected, rel=1e-12), rid
    assert costs["usage-whole"] == pytest.approx((40 * 2.5 + 12 * 10.0) / 1e6, rel=1e-12)


# --- /healthz and /readyz -------------------------------------------------------------------------


async def test_health_and_readiness_of_a_serving_edge(demo_edge: str, http: aiohttp.ClientSession) -> None:
    async with http.get(demo_edge + "/healthz") as r:
        assert (r.status, await r.json()) == (200, {"status": "ok"})
    async with http.get(demo_edge + "/readyz") as r:
        assert r.status == 200
        assert await r.json() == {"status": "ready", "draining": False, "healthy_endpoints": {"demo": 1}}


async def test_not_ready_once_every_endpoint_is_ejected(start_edge: StartEdge, http: aiohttp.ClientSession) -> None:
    with fu.refusing_url() as refusing:
        url = await start_edge(Settings(
            groups={"main": Group(endpoints=[Endpoint(url=refusing)], ejection=Ejection(failures=1, base=60))},
            routes=(Route(model=MODEL, group="main"),), timeouts=FAST))
        async with http.get(url + "/readyz") as r:
            assert r.status == 200  # nothing is known against the endpoint yet
        async with http.post(url + CHAT, json=_chat(MODEL, "hi")) as r:
            assert r.status == 502
        async with http.get(url + "/readyz") as r:
            assert r.status == 503
            assert await r.json() == {"status": "not ready", "draining": False, "healthy_endpoints": {"main": 0}}
        async with http.get(url + "/healthz") as r:
            assert r.status == 200  # alive, only not ready
        assert (await scrape(http, url)).value("ingress_upstream_endpoint_healthy", group="main",
                                               endpoint=refusing) == 0


# --- Server-Timing --------------------------------------------------------------------------------


def _server_timing(header: str) -> dict[str, Any]:
    """`decode;dur=0.1, ..., request;desc="id"` → {"decode": 0.1, ..., "request": "id"}."""
    out: dict[str, Any] = {}
    for entry in header.split(", "):
        name, _, param = entry.partition(";")
        key, _, value = param.partition("=")
        if key == "dur":
            out[name] = float(value)
            assert math.isfinite(out[name]) and out[name] >= 0, entry
        else:
            assert key == "desc" and value.startswith('"') and value.endswith('"'), entry
            out[name] = value[1:-1]
    return out


async def test_server_timing_of_an_answer(demo_edge: str, http: aiohttp.ClientSession) -> None:
    async with http.post(demo_edge + CHAT, json=_chat(MODEL, "time me"), headers={"x-request-id": "trace-7.a"}) as r:
        assert r.status == 200
        timing = _server_timing(r.headers["Server-Timing"])
        assert r.headers["x-request-id"] == "trace-7.a"
    assert set(timing) == {"decode", "encode", "upstream", "translate", "total", "request"}
    assert timing["request"] == "trace-7.a"
    stages = timing["decode"] + timing["encode"] + timing["upstream"] + timing["translate"]
    assert stages <= timing["total"] + 0.005  # each is rounded to the microsecond


async def test_server_timing_of_a_stream(demo_edge: str, http: aiohttp.ClientSession) -> None:
    async with http.post(demo_edge + CHAT, json=_chat(MODEL, "time me", stream=True)) as r:
        assert r.status == 200
        timing = _server_timing(r.headers["Server-Timing"])
        request_id = r.headers["x-request-id"]
        assert (await _sse_events(r))[-1] == "[DONE]"
    # The head leaves before the stream is read: only the stages done by then.
    assert set(timing) == {"decode", "encode", "upstream", "request"}
    assert timing["request"] == request_id


async def test_a_burst_of_sdk_streams_with_starts_paced_is_answered_whole_and_shows_each_wait(
        start_edge: StartEdge) -> None:
    # A budget of 1 µs: in a burst, every start after a turn's first waits for a later turn.
    url = await start_edge(Settings(start_pacing_ms=0.001))
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0) as client:

        async def one(i: int) -> tuple[dict[str, Any], str, str | None]:
            raw = await client.chat.completions.with_raw_response.create(
                model=MODEL, messages=[{"role": "user", "content": f"burst {i}"}], stream=True)
            text, finish = "", None
            async for chunk in raw.parse():
                if chunk.choices:
                    text += chunk.choices[0].delta.content or ""
                    finish = chunk.choices[0].finish_reason or finish
            return _server_timing(raw.headers["Server-Timing"]), text, finish

        answers = await asyncio.gather(*(one(i) for i in range(32)))
    assert [(text, finish) for _, text, finish in answers] == [(f"burst {i}", "stop") for i in range(32)]
    waited = [timing for timing, _, _ in answers if "pacing" in timing]
    assert len(waited) >= 16, "the burst's starts were not paced"
    for timing in waited:  # the wait is its own entry, decode's time after it
        assert timing["pacing"] > 0 and "decode" in timing


@pytest.mark.parametrize(("path", "body", "status", "stages"), [
    (CHAT, b"{not json", 400, set()),
    (CHAT, json.dumps(_chat("no-such-model", "hi")).encode(), 404, {"decode"}),
    ("/no/such/path", b"", 404, set()),
], ids=["invalid-json", "unknown-model", "unknown-path"])
async def test_server_timing_of_an_error(demo_edge: str, http: aiohttp.ClientSession, path: str, body: bytes,
                                         status: int, stages: set[str]) -> None:
    async with http.post(demo_edge + path, data=body, headers={"Content-Type": "application/json"}) as r:
        assert r.status == status
        timing = _server_timing(r.headers["Server-Timing"])
        assert timing["request"] == r.headers["x-request-id"]
    assert set(timing) == stages | {"total", "request"}
