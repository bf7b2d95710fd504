"""The CPU cost of each sans-I/O stage of the edge, to set beside the edge's measured CPU per request.

bench/e2e.py reads the edge's CPU time per request from /proc; what the stages below do not account for
is aiohttp (server and client), the event loop and the kernel's loopback TCP.
"""

from __future__ import annotations

import gc
import itertools
import os
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import msgspec

from ingress.edge.sse import SseWriter
from ingress.encoding.passport import RequestMeta, compute_passport
from ingress.encoding.requests import encode_request
from ingress.encoding.stock import encode_request_stock
from ingress.log import access, configure
from ingress.oai.codec import decode_chat_request
from ingress.translate.completion import translate_response
from ingress.translate.stream import StreamTranslator
from ingress.wire.answer import decode_answer
from ingress.wire.framing import PREFIX, FrameDecoder
from ingress.wire.stock import BuilderPool

REQUEST_ID = "0123456789abcdef0123456789abcdef"
META = RequestMeta(tenant_id="tenant-bench")


def cpu_us(fn: Callable[[], object], min_s: float = 0.03, repeats: int = 7) -> float:
    """Median thread CPU µs per call over `repeats` calibrated loops, GC off inside each."""
    fn()
    loops = 1
    while True:
        elapsed = _loop(fn, loops)
        if elapsed >= min_s / 4:
            break
        loops *= 4
    loops = max(1, round(loops * min_s / elapsed))
    return statistics.median(_loop(fn, loops) / loops * 1e6 for _ in range(repeats))


Pair = tuple[Callable[[], object] | None, Callable[[], object]]  # a stage's baseline call (None: none) and other


def side_by_side(pairs: dict[str, Pair], apis: tuple[str, str], rounds: int, budget: float) -> dict[str, Any]:
    """Each stage's two calls (`apis` names them: the baseline, then the other) timed back to back, which
    first alternating by round, the stages in a random order each round: each side's median µs and range
    over the rounds, and the median and range of the rounds' differences (the other's less the baseline's)."""
    for pair in pairs.values():  # warm every path once
        for fn in pair:
            if fn is not None:
                fn()
    runs: dict[str, dict[str, list[float]]] = {name: {api: [] for api in apis} for name in pairs}
    for r in range(rounds):
        order = list(pairs)
        random.shuffle(order)
        for name in order:
            for api in apis if r % 2 == 0 else apis[::-1]:
                fn = pairs[name][apis.index(api)]
                runs[name][api].append(0.0 if fn is None else cpu_us(fn, budget, repeats=1))
    table: dict[str, Any] = {}
    base, other = apis
    for name, by in runs.items():
        differences = [o - b for b, o in zip(by[base], by[other], strict=True)]
        table[name] = {api: {"us": statistics.median(by[api]), "range": [min(by[api]), max(by[api])]} for api in apis}
        table[name]["difference_us"] = statistics.median(differences)
        table[name]["difference_range"] = [min(differences), max(differences)]
        if pairs[name][0] is None:
            del table[name][base]
    return table


def print_side_by_side(table: dict[str, Any], apis: tuple[str, str]) -> None:
    """side_by_side's table as text: a stage a row, the two APIs' µs, the difference's median and range."""
    base, other = apis
    width = max(42, *(len(name) + 2 for name in table))
    header = f"{'stage':<{width}}{base:>9}{other:>10}{'difference':>12}{'rounds':>16}"
    print(header + "\n" + "-" * len(header))
    for name, by in table.items():
        first = by.get(base, {}).get("us")
        lo, hi = by["difference_range"]
        print(f"{name:<{width}}{'-' if first is None else f'{first:.1f}':>9}{by[other]['us']:>10.1f}"
              f"{by['difference_us']:>+12.1f}{f'{lo:+.1f} .. {hi:+.1f}':>16}")


def _loop(fn: Callable[[], object], loops: int) -> float:
    gc.disable()
    try:
        start = time.thread_time()
        for _ in itertools.repeat(None, loops):
            fn()
        return time.thread_time() - start
    finally:
        gc.enable()


def request_budget(body: bytes, answer: bytes, min_s: float = 0.03, repeats: int = 7) -> dict[str, float]:
    """µs per non-streamed request for each stage; `answer` is the service's CompletionResponse."""
    configure("info", stream=open(os.devnull, "w"), cache=False)  # noqa: SIM115  # lives as long as the process
    request = decode_chat_request(body)
    passport = compute_passport(request, META)
    pool = BuilderPool()
    completion = translate_response(decode_answer(answer))
    json_encode = msgspec.json.Encoder().encode
    fields: dict[str, Any] = {"method": "POST", "path": "/v1/chat/completions", "status": 200, "outcome": "ok",
                              "duration_ms": 2.5, "model": request.model, "stream": False,
                              "upstream": "http://127.0.0.1:9000", "ttfb_ms": 2.1, "prompt_tokens": 2000,
                              "completion_tokens": 64}
    stages: dict[str, Callable[[], object]] = {
        "decode": lambda: decode_chat_request(body),
        "passport": lambda: compute_passport(request, META),
        "encode_generated": lambda: encode_request(request, REQUEST_ID, passport),
        "encode_stock": lambda: encode_request_stock(pool, request, REQUEST_ID, passport),
        "answer_decode_translate": lambda: translate_response(decode_answer(answer)),  # verifies, as the edge does
        "answer_json_encode": lambda: json_encode(completion),
        "log_line": lambda: access(20, dict(fields), REQUEST_ID),  # as the middleware writes it
    }
    return {name: cpu_us(fn, min_s, repeats) for name, fn in stages.items()}


def split_frames(stream: bytes) -> list[bytes]:
    """A frames body cut into one read per frame, prefixes kept, as a paced service delivers them."""
    reads, pos = [], 0
    while pos < len(stream):
        (size,) = PREFIX.unpack_from(stream, pos)
        reads.append(stream[pos:pos + PREFIX.size + size])
        pos += PREFIX.size + size
    return reads


def chunk_budget(stream: bytes, model: str, min_s: float = 0.03, repeats: int = 7) -> dict[str, float]:
    """µs per streamed chunk for frame splitting, verification, decoding, translation and SSE encoding."""
    reads = split_frames(stream)

    def one_stream() -> None:
        frames, sse = FrameDecoder(), SseWriter()
        translator = StreamTranslator(id="x", model=model, created=0, include_usage=False)
        for data in reads:
            for frame in frames.feed(data):
                for chunk in translator.feed_frame(frame):
                    sse.event(chunk)

    return {"frames_per_stream": len(reads), "per_chunk": cpu_us(one_stream, min_s, repeats) / len(reads)}
