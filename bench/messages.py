"""What a request sent to Anthropic's Messages API costs the edge beside the same conversation sent as chat:
CPU per request (non-streamed and streamed) and per streamed chunk, side by side in one run.

    nice -n 10 .venv/bin/python -m bench messages [--quick] [--rounds 6] [--seconds 4] [--connections 32]
                                                  [--streams 128] [--reps 3] [--keyless] [--out FILE]
                                                  [--measures request stream paced stages] [--stage-rounds 7]
        -> results/messages.json (~7 min; --quick ~2 min, results/messages-quick.json)

The conversation is payloads.py's 16 KB, 11-message chat request with a tool (max_tokens 64), sent to
`/v1/chat/completions` as it is, and to `/v1/messages` as `messages_request` translates it (the system
prompt as `system`, the same turns, the tool as a client tool); the run first checks that the edge reads the
Messages body as exactly the chat request (streamed, chat's body asks for usage, as a Messages stream always
reports it). Both model names: gpt-4o and llama-3.1-8b-instruct. Each edge (`ingress serve`, one worker) has
peers.py's `[tenancy]`: a key with an rpm and a tpm limit, never reached, so gpt-4o's prompt is counted
exactly (o200k) and llama's estimated, as bench/model_names.py runs them (`--keyless`: no [tenancy], both
estimated). Chat sends the key as `Authorization: Bearer`, Messages as Anthropic's clients do (`x-api-key`,
with `anthropic-version`). Three edges, each in front of a zero-delay mock of its own (a process each):

- non-streamed, µs/request: tenancy.py's mock (one fixed CompletionResponse of 64 words); wrk, one thread,
  `--connections` kept-alive connections, `--seconds` a run; the edge's CPU (its process tree, user + system,
  /proc) over the run per request;
- streamed, µs/request: chunks.py's mock at zero pacing (the role frame, 64 content frames, finish and usage
  in one write: the whole stream in one read); wrk as above, the stream read to its end;
- paced, µs/stream and µs/chunk: chunks.py's mock at 20 ms pacing (each frame its own read, as a model's
  tokens come), `--streams` concurrent streams from this process (chunks.py's raw-Protocol client), started
  spread over one pacing interval after an uncounted stream on each connection, `--reps` counted phases a
  round: µs/stream is the edge's CPU over a phase per stream (the request and its 64 chunks); µs/chunk its
  CPU over a window mid-stream (chunks.py's steady window) per content delta arriving in it.

Every path is checked to answer correctly (the 64 words, whole; Anthropic's events in its grammar) before
anything is timed. A round runs each measure for both names and both APIs back to back on the same edge
process, chat and Messages in A B B A order (the order of the names alternating too); a ratio is Messages /
chat within a round, and the table gives medians over rounds and the ratios' range.

Then, in process, the stages that differ, timed as bench/stages.py times them (thread CPU, calibrated loops,
GC off; the stages in a random order each round, each one's chat and Messages calls back to back): the
request's decode (and for Messages its reading as chat), the whole of `prepare` against `prepare_messages`
for each name, the answer's translation and JSON, a streamed token's frame read in place and its event
rendered and framed, and all of a token's work as the upstream connection's callback runs it for chat
(HTTP chunk, frame, core, event, framing). What they leave out is the edge's structure: which task runs
that work, and how a chunk reaches the client's socket. `--measures` runs a part alone (`stages`: seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import http.client
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

HERE = Path(__file__).resolve().parent

from bench.chunks import DELTAS, STEADY_BEFORE_END, STEADY_FROM, Client  # noqa: E402
from bench.lib.payloads import OPEN_MODEL, OPENAI_MODEL, chat_request, messages_request, words  # noqa: E402
from bench.lib.procs import cpu_seconds, machine_busy  # noqa: E402
from bench.lib.provenance import code_version, describe  # noqa: E402
from bench.lib.results import niced, result_path, write_result  # noqa: E402
from bench.lib.servers import Server, free_port, start_all, stop_all  # noqa: E402
from bench.lib.wrk import SCRIPT, Wrk, ensure_wrk  # noqa: E402

PY = sys.executable
MODELS = (OPENAI_MODEL, OPEN_MODEL)
APIS = ("chat", "messages")
PATHS = {"chat": "/v1/chat/completions", "messages": "/v1/messages"}
MEASURES = {"request": "non-streamed, µs/request", "stream": "streamed, µs/request",
            "paced": "paced stream, µs/stream", "chunk": "paced stream, µs/chunk"}
MEASURE_KINDS = ("request", "stream", "paced")  # each its own edge and mock
PACING_MS = 20.0
SIZE = 16 * 1024
MAX_TOKENS = 64
ANTHROPIC_VERSION = "2023-06-01"
ANSWER = words(DELTAS, seed=3)  # what both mocks answer: tenancy.py's whole, chunks.py's a word a frame
# Where a stream's content deltas are among its events, and how it ends.
FIRST_DELTA = {"chat": 1, "messages": 2}  # after the role chunk; after message_start and content_block_start
LAST_EVENT = {"chat": b"data: [DONE]\n\n", "messages": b'event: message_stop\ndata: {"type":"message_stop"}\n\n'}

HEADERS = f"""
local key = os.getenv("BENCH_KEY")
if os.getenv("BENCH_API") == "messages" then
  wrk.headers["anthropic-version"] = "{ANTHROPIC_VERSION}"
  if key ~= "" then wrk.headers["x-api-key"] = key end
elseif key ~= "" then
  wrk.headers["Authorization"] = "Bearer " .. key
end
"""


def headers(api: str, key: str) -> dict[str, str]:
    """The headers each API's clients send, as the wrk script sets them."""
    if api == "messages":
        return {"anthropic-version": ANTHROPIC_VERSION, **({"x-api-key": key} if key else {})}
    return {"Authorization": f"Bearer {key}"} if key else {}


def body(api: str, model: str, stream: bool) -> bytes:
    """The conversation as each API sends it; the chat stream asks for usage, as Messages streams report it."""
    if api == "messages":
        return messages_request(SIZE, stream=stream, max_tokens=MAX_TOKENS, model=model)
    encoded = chat_request(SIZE, stream=stream, max_tokens=MAX_TOKENS, model=model)
    if not stream:
        return encoded
    fields = msgspec.json.decode(encoded)
    fields["stream_options"] = {"include_usage": True}
    return msgspec.json.encode(fields)


def check_translation() -> None:
    """The Messages bodies are read as exactly the chat bodies' requests, with nothing dropped."""
    from ingress.anthropic.messages_codec import decode_messages
    from ingress.anthropic.messages_to_chat import as_chat
    from ingress.oai.codec import decode_chat_request

    for model in MODELS:
        for stream in (False, True):
            read = as_chat(decode_messages(body("messages", model, stream))[0])
            if read.request != decode_chat_request(body("chat", model, stream)) or read.dropped:
                raise SystemExit(f"the Messages body ({model}, stream={stream}) is not read as the chat body")


# --- checking each path ----------------------------------------------------------------------------


def _post(port: int, api: str, payload: bytes, key: str) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", PATHS[api], payload, {"Content-Type": "application/json", **headers(api, key)})
        r = conn.getresponse()
        data = r.read()
        if r.status != 200:
            raise SystemExit(f"{PATHS[api]} answered {r.status}: {data[:500]!r}")
        return data
    finally:
        conn.close()


def check_answer(port: int, api: str, model: str, stream: bool, key: str) -> None:
    """The mock's 64 words come back whole, in the API's own shape."""
    data = _post(port, api, body(api, model, stream), key)
    if not stream:
        answer = json.loads(data)
        text = (answer["choices"][0]["message"]["content"] if api == "chat"
                else "".join(b["text"] for b in answer["content"] if b["type"] == "text"))
        # (chat's answer names the service's model, as OpenAI's does; Messages' the one asked for)
        ok = api == "chat" or (answer["model"] == model and answer["stop_reason"] == "end_turn")
    else:
        events = [e for e in data.split(b"\n\n") if e]
        datas = [e.split(b"data: ", 1)[1] for e in events]
        ok = data.endswith(LAST_EVENT[api]) and b'"error"' not in data
        if api == "chat":
            chunks = [json.loads(d) for d in datas if d != b"[DONE]"]
            deltas = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
            deltas = [d for d in deltas if d]
            ok = ok and chunks[-1]["usage"] is not None
        else:
            parsed = [json.loads(d) for d in datas]
            kinds = [e["type"] for e in parsed]
            deltas = [e["delta"]["text"] for e in parsed if e["type"] == "content_block_delta"]
            ok = ok and kinds == ["message_start", "content_block_start", *["content_block_delta"] * DELTAS,
                                  "content_block_stop", "message_delta", "message_stop"]
        ok = ok and len(deltas) == DELTAS and len(events) == FIRST_DELTA[api] + DELTAS + 3
        text = "".join(deltas)
    if not ok or text.strip() != ANSWER:
        raise SystemExit(f"{api} {model} stream={stream}: not the mock's answer: {data[:800]!r}")


# --- paced streams ---------------------------------------------------------------------------------


class _Client(Client):
    """chunks.py's client, for a stream that ends with `last` (chat's [DONE], Messages' message_stop)."""

    def __init__(self, request: bytes, last: bytes) -> None:
        super().__init__(request, sse=True)
        self.last = last

    def _end(self, error: str | None) -> None:
        stream = self.stream
        if error is None:
            if not self.body.endswith(self.last) or b'"error"' in self.body:
                error = "in-band error" if b'"error"' in self.body else "not ended"
            elif len(stream.times) < DELTAS + 3:
                error = f"{len(stream.times)} events"
        stream.error = error
        if error is not None and self.transport is not None:
            self.transport.close()
            self.lost = True
        assert self.done is not None
        if not self.done.done():
            self.done.set_result(stream)


async def paced(port: int, api: str, payload: bytes, key: str, n: int, pid: int, reps: int,
                pacing: float) -> list[dict[str, Any]]:
    """`n` connections, each one uncounted stream, then `reps` phases of `n` counted streams started spread
    over one pacing interval: each phase's edge CPU per stream, and per content delta in its steady window."""
    loop = asyncio.get_running_loop()
    head = f"POST {PATHS[api]} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers(api, key).items())
    request = f"{head}Content-Length: {len(payload)}\r\n\r\n".encode() + payload
    clients = [_Client(request, LAST_EVENT[api]) for _ in range(n)]

    async def connect(c: _Client) -> None:
        await loop.create_connection(lambda: c, "127.0.0.1", port)

    await asyncio.gather(*(connect(c) for c in clients))

    async def one(i: int, c: _Client) -> Any:
        await asyncio.sleep(i / n * pacing)
        return await c.run()

    def read_cpu(readings: list[tuple[float, float, float]]) -> None:
        user, system = cpu_seconds(pid)
        readings.append((time.perf_counter(), user + system, system))

    phases = []
    try:
        await asyncio.wait_for(asyncio.gather(*(one(i, c) for i, c in enumerate(clients))), 60)
        for _ in range(reps):
            readings: list[tuple[float, float, float]] = []
            for at in (pacing + STEADY_FROM, DELTAS * pacing - STEADY_BEFORE_END):
                loop.call_later(at, read_cpu, readings)
            cpu0, (busy0, total0) = sum(cpu_seconds(pid)), machine_busy()
            gc.disable()  # a collection in this client would show as every stream's stall
            try:
                streams = await asyncio.wait_for(asyncio.gather(*(one(i, c) for i, c in enumerate(clients))),
                                                 10 + 4 * DELTAS * pacing)
            finally:
                gc.enable()
            cpu, (busy1, total1) = sum(cpu_seconds(pid)) - cpu0, machine_busy()
            errors = Counter(s.error for s in streams if s.error is not None)
            if errors or len(readings) != 2:
                raise SystemExit(f"{api}: paced streams failed: {dict(errors)}, {len(readings)} readings")
            (w0, c0, s0), (w1, c1, s1) = readings
            first = FIRST_DELTA[api]
            inside = sum(1 for s in streams for t in s.times[first:first + DELTAS] if w0 <= t < w1)
            phases.append({"streams": n, "cpu_s": cpu, "us_per_stream": cpu / n * 1e6,
                           "steady_cpu_s": c1 - c0, "steady_chunks": inside, "steady_window_s": w1 - w0,
                           "us_per_chunk": (c1 - c0) / inside * 1e6, "sys_us_per_chunk": (s1 - s0) / inside * 1e6,
                           "machine_busy_percent": (busy1 - busy0) / ((total1 - total0) / (os.cpu_count() or 1)) * 100})
    finally:
        for c in clients:
            if c.transport is not None:
                c.transport.close()
    return phases


# --- in process ------------------------------------------------------------------------------------


def stage_pairs() -> dict[str, tuple[Callable[[], object] | None, Callable[[], object]]]:
    """Each stage that differs, as (chat's call, Messages' call) on the data it gets in the edge."""
    from multidict import CIMultiDict

    from bench.chunks import COMPLETE, _pieces
    from bench.tenancy import mock_answer
    from ingress import pipeline, wire
    from ingress.anthropic.answers import ContentBlockDelta, TextDelta
    from ingress.anthropic.messages_codec import decode_messages
    from ingress.anthropic.messages_to_chat import as_chat
    from ingress.edge.sse import MessagesSseWriter, SseWriter
    from ingress.edge.writers import json_response
    from ingress.encoding.passport import RequestMeta
    from ingress.exchange import Exchange
    from ingress.oai.codec import decode_chat_request_forwarding
    from ingress.routing.budget import RetryBudget
    from ingress.routing.table import RouteTable
    from ingress.settings import Settings
    from ingress.sockets import chunk
    from ingress.tenancy import build
    from ingress.tenancy.keys import new_key
    from ingress.tenancy.settings import Key, Limits, Tenancy, Tenant
    from ingress.translate.body import StreamBody
    from ingress.translate.completion import translate_response
    from ingress.translate.messages import MessagesStreamTranslator, message_from_response
    from ingress.translate.stream import StreamTranslator
    from ingress.upstream.http1_decoder import ResponseDecoder
    from ingress.wire.answer import decode_answer

    secret, key_id, key_hash = new_key()  # as bench/stages.py: rpm and tpm on the key, tpm on its tenant
    key = Key(id=key_id, tenant="t", hash=key_hash, limits=Limits(rpm=10**9, tpm=10**12))
    tenancy = build(Tenancy(keys=(key,), tenants={"t": Tenant(limits=Limits(tpm=10**12))}), 1)
    settings = Settings(models=MODELS, upstream="http://127.0.0.1:1")
    gateway = pipeline.Gateway(settings=settings, routes=RouteTable(settings.resolved()[1]), groups={},
                          budget=RetryBudget(0.2, 10, 0.0), tenancy=tenancy)
    principal = tenancy.policy.authenticate(CIMultiDict({"Authorization": f"Bearer {secret}"}))
    meta = RequestMeta()

    def new_exchange() -> Exchange:
        exchange = Exchange("0123456789abcdef0123456789abcdef")
        exchange.principal = principal
        return exchange

    chat_body, messages_body = body("chat", OPENAI_MODEL, False), body("messages", OPENAI_MODEL, False)
    decoded = decode_messages(messages_body)[0]
    response = decode_answer(bytes(wire.write_response(mock_answer())))
    completion = translate_response(response)
    message = message_from_response(response, id="msg_0123456789abcdef", model=OPENAI_MODEL)

    head = bytes(wire.write_chunk(wire.Chunk(sequence=0, id="chatcmpl-x", model="m", created=1, role="assistant",
                                             content="")))
    frame = bytes(wire.write_chunk(wire.Chunk(sequence=1, content=" token")))
    chat_stream = StreamTranslator(id="chatcmpl-0123456789abcdef", model=OPENAI_MODEL, created=1, include_usage=True)
    messages_stream = MessagesStreamTranslator(id="msg_0123456789abcdef", model=OPENAI_MODEL, input_tokens=4000)
    for t in (chat_stream, messages_stream):
        t.read_frame(head)
        t.read_frame(frame)  # the text block is open: every later token is a delta

    def read(t: Any) -> list[Any]:  # either translator
        t._next_sequence, t.output = 1, []  # the frame is always the stream's next one
        chunks: list[Any] = t.read_frame(frame)
        return chunks

    delta = read(chat_stream)[0]
    event = read(messages_stream)[0]
    assert type(event) is ContentBlockDelta and type(event.delta) is TextDelta, event
    sse, named = SseWriter(), MessagesSseWriter("0123456789abcdef")
    head_bytes, pieces = _pieces()[COMPLETE.encode()]  # chunks.py's mock's answer, as it writes it

    def callback(api: str) -> Callable[[], object]:
        """A token's HTTP chunk from the upstream (the mock's own bytes) decoded, its frame cut and read
        through the streaming core (`StreamBody`), its event rendered and framed for the client, as the
        upstream connection's callback runs it for chat (bench/stages.py's last `chunk:` row)."""
        http = ResponseDecoder()
        http.start()
        http.feed(head_bytes)
        http.take()
        translator: Any = (
            StreamTranslator(id="chatcmpl-0123456789abcdef", model=OPENAI_MODEL, created=1, include_usage=True)
            if api == "chat" else MessagesStreamTranslator(id="msg_0123456789abcdef", model=OPENAI_MODEL,
                                                           input_tokens=4000))
        core = StreamBody(translator, settings.max_frame_bytes)
        writer: Any = SseWriter() if api == "chat" else MessagesSseWriter("0123456789abcdef")
        for piece in pieces[:2]:  # the role frame, the first token's (the text block opened)
            http.feed(piece)
            writer.render(core.feed(http.take()).chunks[-1])

        def run() -> bytes:
            translator._next_sequence = 2  # the piece is always the stream's next frame
            translator.output = []
            http.feed(pieces[2])
            return chunk(writer.render(core.feed(http.take()).chunks[0]))

        return run

    def prepare(model: str) -> tuple[Callable[[], object], Callable[[], object]]:
        chat, messages = body("chat", model, False), body("messages", model, False)
        return (lambda: pipeline.prepare(gateway, chat, meta, new_exchange()),
                lambda: pipeline.prepare_messages(gateway, messages, meta, new_exchange(), beta=[],
                                                        version="2023-06-01"))

    return {
        "request: decode": (lambda: decode_chat_request_forwarding(chat_body, gateway.forwards_extras),
                            lambda: decode_messages(messages_body)),
        "request: read as chat": (None, lambda: as_chat(decoded)),
        f"request: prepare, {OPENAI_MODEL}": prepare(OPENAI_MODEL),
        f"request: prepare, {OPEN_MODEL}": prepare(OPEN_MODEL),
        "answer: translate": (lambda: translate_response(response),
                              lambda: message_from_response(response, id="msg_0123456789abcdef", model=OPENAI_MODEL)),
        "answer: JSON": (lambda: json_response(completion), lambda: json_response(message)),
        "chunk: read in place": (lambda: read(chat_stream), lambda: read(messages_stream)),
        # (MessagesSseWriter.render is typed for chat's StreamEvent; a Messages stream's Events pass through it)
        "chunk: render + framing": (lambda: chunk(sse.render(delta)),
                                    lambda: chunk(named.render(event))),  # type: ignore[arg-type]  # see above
        "chunk: read + render + framing": (lambda: chunk(sse.render(read(chat_stream)[0])),
                                           lambda: chunk(named.render(read(messages_stream)[0]))),
        "chunk: all of it, as the callback runs it": (callback("chat"), callback("messages")),
    }


def time_stages(rounds: int, budget: float) -> dict[str, Any]:
    """Each stage's chat and Messages calls timed back to back (which first alternating by round), the stages
    in a random order each round: medians over rounds, and the median of the rounds' differences."""
    from bench.lib.budget import side_by_side
    from ingress import log

    log.configure("info", open(os.devnull, "w"))  # noqa: SIM115  # the access line's stream, for the process
    return side_by_side(stage_pairs(), APIS, rounds, budget)


# --- the run ---------------------------------------------------------------------------------------


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from bench.peers import key_section  # the edge's [tenancy], as peers.py and model_names.py set it

    started, load_before = time.perf_counter(), os.getloadavg()
    check_translation()
    work = Path(tempfile.mkdtemp(prefix="ingress-bench-messages-"))
    files = {}
    for api in APIS:
        for model in MODELS:
            for stream in (False, True):
                files[(api, model, stream)] = work / f"{api}-{model}-{'stream' if stream else 'json'}.json"
                files[(api, model, stream)].write_bytes(body(api, model, stream))
    section, key, _ = ("", "", "") if args.keyless else key_section()
    mocks = {"request": [PY, "-m", "bench.tenancy", "--serve-mock"], "stream": [PY, "-m", "bench.chunks",
             "--serve-mock"], "paced": [PY, "-m", "bench.chunks", "--serve-mock"]}
    mocks = {kind: argv for kind, argv in mocks.items() if kind in args.measures}
    servers: dict[str, Server] = {}
    edges: dict[str, Server] = {}
    for kind, argv in mocks.items():
        port = free_port()
        servers[f"mock-{kind}"] = mock = Server(f"mock-{kind}", [*argv, str(port), str(PACING_MS if kind == "paced"
                                                                                         else 0)], port,
                                                work / f"mock-{kind}.log")
        port = free_port()
        config = work / f"edge-{kind}.toml"
        config.write_text(f'port = {port}\nworkers = 1\nupstream = "{mock.url}"\n'
                          f'models = ["{OPENAI_MODEL}", "{OPEN_MODEL}"]\n' + section)
        servers[kind] = edges[kind] = Server(f"edge-{kind}", [PY, "-m", "ingress", "serve", "--config", str(config)],
                                             port, work / f"edge-{kind}.log")
    wrk = Wrk(ensure_wrk(), work / "bench.lua")
    wrk.script.write_text(SCRIPT + HEADERS)
    os.environ["BENCH_KEY"] = key
    runs: dict[str, list[dict[str, Any]]] = {}
    loop = asyncio.new_event_loop()
    try:
        if not edges:
            args.rounds = 0  # the in-process timings alone
        start_all(*servers.values())
        for kind, edge in edges.items():
            for api in APIS:
                for model in MODELS:
                    check_answer(edge.port, api, model, kind != "request", key)
        print(f"{describe(code_version())}; load average {load_before[0]:.2f}; nice {os.nice(0)}; every path "
              "answers the mock's words whole", flush=True)
        for r in range(-1 if edges else 0, args.rounds):  # round -1 warms every path (1 s each): not kept
            models = MODELS if r % 2 == 0 else MODELS[::-1]
            for kind, edge in edges.items():
                for m, model in enumerate(models):
                    for api in APIS if m % 2 == 0 else APIS[::-1]:  # A B B A
                        if kind == "paced":
                            phases = loop.run_until_complete(paced(
                                edge.port, api, files[(api, model, True)].read_bytes(), key, args.streams,
                                edge.pid, 1 if r < 0 else args.reps, PACING_MS / 1000))
                            if r >= 0:
                                chunks = sum(p["steady_chunks"] for p in phases)
                                runs.setdefault(f"paced/{model}/{api}", []).append({
                                    "us": sum(p["cpu_s"] for p in phases) / sum(p["streams"] for p in phases) * 1e6,
                                    "phases": phases})
                                runs.setdefault(f"chunk/{model}/{api}", []).append({
                                    "us": sum(p["steady_cpu_s"] for p in phases) / chunks * 1e6, "chunks": chunks,
                                    "sys_us": statistics.median(p["sys_us_per_chunk"] for p in phases),
                                    "machine_busy_percent": statistics.median(
                                        p["machine_busy_percent"] for p in phases)})
                            continue
                        os.environ["BENCH_API"] = api
                        result = wrk.run(f"{edge.url}{PATHS[api]}", files[(api, model, kind == "stream")],
                                         "application/json", args.connections, 1 if r < 0 else args.seconds,
                                         watch={"edge": edge.pid})
                        if result["errors"]:
                            raise SystemExit(f"{kind} {api} {model}: errors {result['errors']}")
                        if r >= 0:
                            runs.setdefault(f"{kind}/{model}/{api}", []).append({
                                "us": result["cpu_us_per_request"]["edge"], "rps": result["rps"],
                                "p50_ms": result["p50_ms"], "p99_ms": result["p99_ms"],
                                "others_cpu_percent": result["others_cpu_percent"]})
            print(f"round {r + 1}/{args.rounds} done ({time.perf_counter() - started:.0f} s)" if r >= 0 else "warmed",
                  flush=True)
    finally:
        loop.close()
        stop_all(*servers.values())

    table = []
    for kind in MEASURES:
        for model in MODELS:
            if f"{kind}/{model}/chat" not in runs:
                continue
            chat, messages = runs[f"{kind}/{model}/chat"], runs[f"{kind}/{model}/messages"]
            ratios = [b["us"] / a["us"] for a, b in zip(chat, messages, strict=True)]
            row = {"measure": kind, "model": model, "chat_us": statistics.median(a["us"] for a in chat),
                   "messages_us": statistics.median(b["us"] for b in messages), "ratio": statistics.median(ratios),
                   "ratio_range": [min(ratios), max(ratios)]}
            if kind in ("request", "stream"):
                row["chat_rps"] = statistics.median(a["rps"] for a in chat)
                row["messages_rps"] = statistics.median(b["rps"] for b in messages)
            table.append(row)
    others = [x["others_cpu_percent"] for k, v in runs.items() if not k.startswith(("paced", "chunk")) for x in v]
    others = others or [float("nan")]
    stages = {}
    if "stages" in args.measures:
        print("in process: the stages that differ ...", flush=True)
        stages = time_stages(args.stage_rounds, args.stage_budget)
    return {
        "meta": {"code": code_version(), "models": MODELS, "measures": args.measures, "keyless": args.keyless,
                 "rounds": args.rounds,
                 "seconds": args.seconds, "connections": args.connections, "streams": args.streams, "reps": args.reps,
                 "pacing_ms": PACING_MS, "deltas": DELTAS, "nice": os.nice(0), "cpus": os.cpu_count(),
                 "load_average_before": load_before, "load_average_after": os.getloadavg(),
                 "others_cpu_percent_median": statistics.median(others), "others_cpu_percent_range": [min(others),
                                                                                                       max(others)],
                 "body_bytes": {f"{api}/{'stream' if s else 'json'}": len(body(api, OPENAI_MODEL, s))
                                for api in APIS for s in (False, True)},
                 "stage_rounds": args.stage_rounds, "wall_s": round(time.perf_counter() - started, 1)},
        "table": table, "stages": stages, "runs": runs,
    }


def print_table(result: dict[str, Any]) -> None:
    meta = result["meta"]
    sizes = meta["body_bytes"]
    print(f"\n{describe(meta['code'])}; one worker a subject; "
          + ("no key (both names estimated)" if meta["keyless"] else
             "a key with rpm and tpm limits (never reached: gpt-4o counted exactly, llama estimated)")
          + f"; medians over {meta['rounds']} interleaved rounds; the rest of the machine at "
          f"{meta['others_cpu_percent_median']:.0f}% of a core (median; {meta['others_cpu_percent_range'][0]:.0f}-"
          f"{meta['others_cpu_percent_range'][1]:.0f}); load average {meta['load_average_before'][0]:.2f} before, "
          f"{meta['load_average_after'][0]:.2f} after")
    print(f"the 16 KB, 11-message conversation with a tool: chat {sizes['chat/json']:,} B (streamed "
          f"{sizes['chat/stream']:,}), Messages {sizes['messages/json']:,} B ({sizes['messages/stream']:,}); wrk -t1 "
          f"-c{meta['connections']}, {meta['seconds']} s a run; paced: {meta['streams']} streams of {meta['deltas']} "
          f"deltas {meta['pacing_ms']:.0f} ms apart, {meta['reps']} phase(s) a round")
    header = f"{'measure':<26}{'model':<24}{'chat':>9}{'messages':>10}{'ratio':>8}{'rounds':>13}"
    if result["table"]:
        print(header + "\n" + "-" * len(header))
    for row in result["table"]:
        digits = 1 if row["measure"] == "chunk" else 0
        lo, hi = row["ratio_range"]
        print(f"{MEASURES[row['measure']]:<26}{row['model']:<24}{row['chat_us']:>9,.{digits}f}"
              f"{row['messages_us']:>10,.{digits}f}{row['ratio']:>8.3f}{f'{lo:.2f}-{hi:.2f}':>13}")
    if not result["stages"]:
        return
    print(f"\nin process, CPU µs per call (thread time, median of {meta['stage_rounds']} rounds; the difference: "
          "the median of the rounds' differences, chat and Messages timed back to back); the 16 KB request, the mock's "
          "answer, one token")
    from bench.lib.budget import print_side_by_side

    print_side_by_side(result["stages"], APIS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="~2 min: 2 rounds of 2 s, one paced phase")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--seconds", type=int)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--streams", type=int, default=128, help="concurrent paced streams")
    parser.add_argument("--reps", type=int, help="paced phases a round")
    parser.add_argument("--keyless", action="store_true", help="no [tenancy]: both names' prompts estimated")
    parser.add_argument("--measures", nargs="+", choices=[*MEASURE_KINDS, "stages"], default=[*MEASURE_KINDS, "stages"],
                        help="which to run: paced gives µs/stream and µs/chunk; stages, the in-process timings")
    parser.add_argument("--stage-rounds", type=int, help="rounds of the in-process timings (7; --quick 3)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    niced()
    args.rounds = args.rounds or (2 if args.quick else 6)
    args.seconds = args.seconds or (2 if args.quick else 4)
    args.reps = args.reps or (1 if args.quick else 3)
    args.stage_rounds = args.stage_rounds or (3 if args.quick else 7)
    args.stage_budget = 0.02 if args.quick else 0.05
    out = result_path("messages", args.quick, args.out)
    result = measure(args)
    print_table(result)
    write_result(result, out)


if __name__ == "__main__":
    main()
