"""What a routing policy adds to a request that does not use it: the CPU of a non-streamed chat request's
path through the edge's own code on a plain route, beside the same request on a route with a fallback
chain (that does not fall back), with a chain whose fallbacks have a max_context, and on a split.

    nice -n 10 .venv/bin/python -m bench policy [--quick] [--rounds 9]   -> results/policy.json

The path timed is what a chain touches, in process, on the data the edge has there: `prepare` (decode,
route and split, count, passport, encode), `send` on a real EndpointGroup (its lease acquired and let
go) with an attempt that returns a decoded answer at once (made once, beside), the content-filter check,
and the answer's x-ingress-served-by header and usage record. The network, translation and the JSON
answer are left out: they are the same for every variant (bench/stages.py times them). The variants
are interleaved in a fresh random order each round, each timed timeit-style on the thread's CPU clock (GC
off inside the loop); the figure is each variant's median, and its difference from the plain route's
within each round (median and range over rounds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "policy.json"
MODEL = "gpt-4o"  # counted with o200k: its count is the exact one a chain with a max_context asks for
EVERY = ("unavailable", "5xx", "timeout", "rate_limited", "context_length", "content_filter")


def _routes(variant: str) -> tuple[Any, ...]:
    from ingress.settings import Route, Share

    spares = (Route(name="claude", group="b", provider="anthropic", upstream_model="claude-sonnet-4-5"),
              Route(name="long", group="c", upstream_model="gpt-4.1",
                    max_context=1_000_000 if variant == "chain + max_context" else None))
    if variant == "plain":
        return (Route(model=MODEL, group="a"), *spares)
    if variant.startswith("chain"):
        return (Route(model=MODEL, group="a", fallbacks=["claude", "long"], fallback_on=EVERY), *spares)
    assert variant == "split 99/1"
    return (Route(model=MODEL, group="a", split_by="user", split=[Share(route=MODEL, weight=99),
                                                                 Share(route="long", weight=1)]), *spares)


def paths(variants: list[str]) -> dict[str, Callable[[], object]]:
    """Each variant's path as one call: the request prepared, sent, checked, its header and record made."""
    from bench.lib.payloads import chat_request
    from ingress.edge.headers import served_by
    from ingress.encoding.passport import RequestMeta
    from ingress.exchange import Exchange
    from ingress.pipeline import Gateway, prepare
    from ingress.pipeline.answer import filtered
    from ingress.pipeline.send import send
    from ingress.routing.budget import RetryBudget
    from ingress.routing.table import RouteTable
    from ingress.settings import Endpoint, Group, Settings
    from ingress.upstream.client import UpstreamClient
    from ingress.upstream.group import EndpointGroup
    from ingress.usage import usage_record
    from ingress.wire.types import Choice, Response, Usage

    body = chat_request(16 * 1024, max_tokens=64, model=MODEL)
    meta = RequestMeta()
    made: dict[str, Callable[[], object]] = {}
    for variant in variants:
        routes = _routes(variant)
        groups = {name: Group(endpoints=[Endpoint(url=f"http://127.0.0.{i + 1}:9000")])
                  for i, name in enumerate("abc")}
        settings = Settings(groups=groups, routes=routes)
        pools = {name: EndpointGroup(name, g, [UpstreamClient(g.endpoints[0].url or "", settings.timeouts, 1 << 20)])
                 for name, g in groups.items()}
        gateway = Gateway(settings=settings, routes=RouteTable(routes), groups=pools, budget=RetryBudget(0.2, 10, 0.0))
        response = Response(id="chatcmpl-0", model=MODEL, created=1,
                            usage=Usage(prompt_tokens=4000, completion_tokens=64),
                            choices=[Choice(index=0, content="A short answer.", finish_reason="stop")])

        async def attempt(lease: object, ready: object, response: Any = response) -> Any:
            return response

        async def path(gateway: Gateway = gateway) -> object:
            exchange = Exchange("0123456789abcdef0123456789abcdef")
            prepared = prepare(gateway, body, meta, exchange)
            answer = await send(gateway, prepared, exchange, attempt, reroute=prepared.rerouter(gateway, exchange),
                                refused=filtered)
            lease = exchange.attempts.take()
            assert lease is not None
            lease.release(True)
            served_by(exchange)
            return usage_record(exchange, "POST", "/v1/chat/completions", 200, "ok", 0.0), answer

        made[variant] = lambda path=path: _drive(path())
    return made


def _drive(coro: Coroutine[Any, Any, object]) -> object:
    """A coroutine that never suspends (a lease with room, an attempt that answers at once), run in place."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    raise AssertionError("the path suspended")


async def _measure(args: argparse.Namespace) -> dict[str, Any]:
    from bench.lib.budget import cpu_us
    from bench.lib.rounds import Rounds

    variants = ["plain", "chain", "chain + max_context", "split 99/1"]
    cases = paths(variants)
    for fn in cases.values():
        fn()
    rounds, budget = (3, 0.05) if args.quick else (args.rounds, 0.2)
    timed = Rounds(variants, rounds, order="shuffle", baseline="plain").collect(
        lambda name: {"us": cpu_us(cases[name], budget, repeats=3)})
    return {name: {"us": timed.median(name, "us"), "runs": timed.values(name, "us"),
                   "added": None if name == "plain" else timed.added(name, "us")} for name in variants}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--quick", action="store_true", help="3 rounds of shorter loops")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    from bench.lib.provenance import code_version, describe
    from ingress import log

    log.configure("info", open(os.devnull, "w"))  # noqa: SIM115 - the process's log stream, for its lifetime
    table = asyncio.run(_measure(args))
    print(describe(code_version()))
    print(f"CPU µs per request path (thread time), 16 KB, 11-message chat request to {MODEL}, not falling back")
    print(f"{'route':<22}{'µs':>9}{'added to plain (range)':>34}")
    for name, row in table.items():
        added = row["added"]
        shown = "" if added is None else f"{added.median:+.1f}  ({added.range(1)})"
        print(f"{name:<22}{row['us']:>9.1f}{shown:>34}")
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps({"code": code_version(), "model": MODEL, "table": {
        name: {"us": row["us"], "runs": row["runs"],
               "added_us": None if row["added"] is None else row["added"].median} for name, row in table.items()}},
        indent=2))


if __name__ == "__main__":
    main()
