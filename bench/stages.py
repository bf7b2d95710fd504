"""The CPU each stage of a non-streamed chat request costs the edge, one stage at a time, in process; and
each stage of a streamed token's path (`chunk:`), from the upstream's HTTP chunk to the client's.

    .venv/bin/python -m bench stages [--quick] [--rounds 7] [--model NAME]   -> results/stages.json

The edge's whole CPU per request (`bench/floor.py`) is the sum of its stages and of what every proxy made of
the same parts spends (aiohttp's server, our HTTP/1.1 client, the event loop: floor.py's bare proxy). This
bench times each of the edge's own stages on the same 16 KB, 11-message request, with the functions the
edge calls and the data they get there: the request decoded, routed, counted, guarded, given its passport,
encoded; admitted and settled with a key and three limits (memory store); the demo service's answer
verified and read, translated, encoded as JSON; the exchange's bookkeeping (request id, Server-Timing,
metrics, the access line). Each stage is timed timeit-style on the thread's CPU clock (a calibrated loop,
GC off inside it, as bench/micro.py does), the stages interleaved in a fresh random order each round; the
figure is the median over rounds. `--model` names the model (ingress-demo by default: the estimate counts
its prompt; gpt-4o's is counted with o200k, as the key's tpm limit asks, each text once: the stage then
shows the cost of finding the texts' counts, the same request every time). (`budget.py` times a few of
these stages for `e2e.py`, beside the stock encoder; this is the whole path as it runs now, tenancy
included, with budget.py's timer.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "stages.json"


def _demo_answer(encoded: bytes) -> bytes:
    """The demo service's answer to `encoded`, as the edge receives it."""
    import aiohttp

    from ingress.demo.service import create_demo_app
    from ingress.serve.app import serve_app
    from ingress.wire import COMPLETE_PATH, CONTENT_TYPE

    async def ask() -> bytes:
        async with (serve_app(create_demo_app(), "127.0.0.1", 0) as url, aiohttp.ClientSession() as session,
                    session.post(url + COMPLETE_PATH, data=encoded, headers={"Content-Type": CONTENT_TYPE}) as r):
            return await r.read()

    return asyncio.run(ask())


def stages(model: str) -> dict[str, Callable[[], object]]:
    """Each stage as a call on the data it gets in the edge, for a request to `model`."""
    from multidict import CIMultiDict

    from bench.lib.payloads import chat_request
    from ingress import log
    from ingress.edge.headers import request_id_of, server_timing
    from ingress.edge.middleware import _record
    from ingress.edge.writers import json_response
    from ingress.encoding.passport import RequestMeta, compute_passport
    from ingress.encoding.requests import encode_request
    from ingress.exchange import Answer, Attempts, Exchange, Routed
    from ingress.oai.codec import decode_chat_request_forwarding
    from ingress.pipeline import Gateway
    from ingress.pipeline.prepare import counter, prepared_for, route_decoded
    from ingress.pipeline.prepare import guarded_chat as _guarded_chat
    from ingress.routing.budget import RetryBudget
    from ingress.routing.table import RouteTable
    from ingress.settings import Settings
    from ingress.tenancy import build
    from ingress.tenancy.keys import new_key
    from ingress.tenancy.plan import Actual
    from ingress.tenancy.settings import Key, Limits, Tenancy, Tenant
    from ingress.translate.completion import translate_response
    from ingress.wire.answer import decode_answer

    log.configure("info", open(os.devnull, "w"))  # noqa: SIM115 - the access line's stream, for the process
    settings = Settings(models=(model,), upstream="http://127.0.0.1:1")
    _, routes = settings.resolved()
    gateway = Gateway(settings=settings, routes=RouteTable(routes), groups={}, budget=RetryBudget(0.2, 10, 0.0))
    body = chat_request(16 * 1024, max_tokens=64, model=model)
    meta = RequestMeta()
    exchange = Exchange("0123456789abcdef0123456789abcdef")
    request, extra = decode_chat_request_forwarding(body, gateway.forwards_extras)
    match, _ = route_decoded(gateway, exchange, request.model, False, meta)
    tokens = counter(gateway, match).chat(request)
    passport = compute_passport(request, meta, prompt_tokens=tokens)
    encoded = bytes(encode_request(request, exchange.request_id, passport, match.route.provider, match.upstream_model,
                                   extra))
    answer = _demo_answer(encoded)
    response = decode_answer(answer)
    completion = translate_response(response)

    secret, key_id, key_hash = new_key()  # as bench/tenancy.py: rpm and tpm on the key, tpm on its tenant
    key = Key(id=key_id, tenant="t", hash=key_hash, limits=Limits(rpm=10**9, tpm=10**12))
    tenancy = build(Tenancy(keys=(key,), tenants={"t": Tenant(limits=Limits(tpm=10**12))}), 1)
    headers = CIMultiDict({"Authorization": f"Bearer {secret}"})  # as aiohttp gives them
    principal = tenancy.policy.authenticate(headers)
    def run(coro: Any) -> Any:
        """A coroutine that never suspends (the memory store's), driven without a loop, as the edge's
        own task drives it."""
        try:
            coro.send(None)
        except StopIteration as done:
            return done.value
        raise AssertionError("the memory store suspended")

    def admit_settle() -> None:  # a plan is one admission's (its ticket): each gets its own
        plan = tenancy.policy.plan(principal, model, tokens, 64)
        verdict = run(tenancy.limiter.admit(plan, principal.tenant_name))
        tenancy.limiter.settle(verdict.admission, Actual(tokens, 16))

    resource = SimpleNamespace(route=SimpleNamespace(resource=SimpleNamespace(canonical="/v1/chat/completions")))
    fake_request = SimpleNamespace(match_info=resource)
    started = exchange.started
    done = Exchange(exchange.request_id,
                    routed=Routed(model, metric_model=model, group=exchange.group, decoded=started, encoded=started),
                    attempts=Attempts(upstream="u", sent=started), answer=Answer(done=started, usage=response.usage))
    fields = {"method": "POST", "path": "/v1/chat/completions", "status": 200, "outcome": "ok",
              "duration_ms": 1.234, "model": model, "stream": False, "upstream": "u"}
    assert principal.key_id == key_id
    return {
        "decode": lambda: decode_chat_request_forwarding(body, gateway.forwards_extras),
        "route": lambda: route_decoded(gateway, exchange, request.model, False, meta),
        "count tokens": lambda: counter(gateway, match).chat(request),
        "guardrails (none)": lambda: _guarded_chat(exchange, request, tokens, "messages"),
        "passport": lambda: compute_passport(request, meta, prompt_tokens=tokens),
        "encode": lambda: encode_request(request, exchange.request_id, passport, match.route.provider,
                                         match.upstream_model, extra),
        "hop headers": lambda: prepared_for(gateway, exchange, request, match, passport, encoded, meta, 64),
        "verify + read answer": lambda: decode_answer(answer),
        "translate": lambda: translate_response(response),
        "JSON answer": lambda: json_response(completion),
        "exchange + request id": lambda: Exchange(request_id_of(None)),
        "Server-Timing": lambda: server_timing(done, time.perf_counter()),
        "metrics": lambda: _record(fake_request, done, 200, time.perf_counter()),  # type: ignore[arg-type]
        "access line": lambda: log.access(20, dict(fields), done.request_id),
        "tenancy: authenticate": lambda: tenancy.policy.authenticate(headers),
        "tenancy: plan": lambda: tenancy.policy.plan(principal, model, tokens, 64),
        "tenancy: plan, admit, settle (memory)": admit_settle,
    }


def chunk_stages() -> dict[str, Callable[[], object]]:
    """A streamed token's path through the edge, each stage on the data it gets there: one HTTP chunk of the
    upstream body decoded, its frame cut, read in place into a Delta, the gap counted, the SSE event rendered
    from the stream's template and framed as a chunk for the client's transport; and all of it at once, as
    the upstream connection's callback runs it (the write itself left out: it is the kernel's)."""
    from ingress import metrics, wire
    from ingress.edge.sse import SseWriter
    from ingress.metrics import Gaps
    from ingress.translate.stream import StreamTranslator
    from ingress.upstream.http1_decoder import ResponseDecoder
    from ingress.wire.framing import FrameDecoder

    head = bytes(wire.write_chunk(wire.Chunk(sequence=0, id="chatcmpl-x", model="m", created=1, role="assistant",
                                             content="")))
    frame = bytes(wire.write_chunk(wire.Chunk(sequence=1, content=" token")))
    piece = b"%x\r\n%s\r\n" % (len(frame), frame)

    def decoder() -> ResponseDecoder:
        d = ResponseDecoder()
        d.start()
        d.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        return d

    def translator() -> StreamTranslator:
        t = StreamTranslator(id="chatcmpl-0123456789abcdef", model="m", created=1, include_usage=False)
        t.read_frame(head)
        return t

    http, frames, tr, sse = decoder(), FrameDecoder(), translator(), SseWriter()
    gaps = Gaps(metrics.child(metrics.INTER_CHUNK, "bench"))
    delta = tr.read_frame(frame)[0]

    def read(t: StreamTranslator) -> object:
        t._next_sequence, t.output = 1, []  # the frame is always the stream's next one
        return t.read_frame(frame)

    def whole() -> bytes:
        http.feed(piece)
        for _ in frames.feed(http.take()):
            chunks = read(tr)
            now = time.perf_counter()
            for _ in chunks:
                gaps.mark(now)
            data = sse.render(chunks[0])  # type: ignore[arg-type]
            return b"%x\r\n%s\r\n" % (len(data), data)
        raise AssertionError("no frame")

    return {
        "chunk: HTTP decode": lambda: (http.feed(piece), http.take()),
        "chunk: frame cut": lambda: frames.feed(frame),
        "chunk: read in place": lambda: read(tr),
        "chunk: gap counted": lambda: gaps.mark(time.perf_counter()),
        "chunk: SSE render + framing": lambda: b"%x\r\n%s\r\n" % (len(d := sse.render(delta)), d),
        "chunk: all of it, as the callback runs it": whole,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="3 rounds of shorter loops")
    parser.add_argument("--model", default="ingress-demo", help="the model name the request sends")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    rounds, budget = (3, 0.02) if args.quick else (args.rounds, 0.05)

    from bench.lib.budget import cpu_us
    from bench.lib.provenance import code_version, describe
    from bench.lib.rounds import Rounds

    cases = {**stages(args.model), **chunk_stages()}
    for fn in cases.values():  # warm every path once
        fn()
    timed = Rounds(cases, rounds, order="shuffle").collect(lambda name: {"us": cpu_us(cases[name], budget, repeats=1)})
    table = {name: timed.median(name, "us") for name in cases}
    print(describe(code_version()))
    print(f"CPU µs per call (thread time), median of {rounds} rounds; 16 KB, 11-message chat request to {args.model}")
    width = max(map(len, table)) + 2
    print(f"{'stage':<{width}}{'µs':>9}{'range':>17}")
    for name, us in table.items():
        print(f"{name:<{width}}{us:>9.1f}{timed.spread(name, 'us').range(1):>17}")
    edge_own = sum(us for name, us in table.items() if not name.startswith(("tenancy", "chunk")))
    print(f"{'sum of the edge own stages':<{width}}{edge_own:>9.1f}  (a request's, without tenancy and chunks)")
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps({"code": code_version(), "model": args.model, "rounds": rounds, "table": table,
                                    "runs": {name: timed.values(name, "us") for name in cases}, "sum_us": edge_own},
                                   indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
