"""A soak of one edge worker: RSS, open fds and event-loop tasks every minute under 1,000 client connections
of mixed traffic with injected upstream faults, and every request's single outcome, client and edge agreeing.

    nice -n 10 .venv/bin/python -m bench soak            # 30 minutes -> results/soak.json (+ soak.png)
    nice -n 10 .venv/bin/python -m bench soak --quick    # 3 minutes, a sample every 20 s -> results/soak-quick.json
    .venv/bin/python -m bench soak --hangups 2000 --pace 0.001   # ~20 s: streams reset mid-way, client / edge

The rig, on loopback, all of it niced (the script renices itself to 10):

- **The edge**: `ingress serve --config ... --workers 1` (one process: the worker is the serving process),
  keys on (`[tenancy]`, memory backend): most clients present a key with rpm and tpm far above their rate,
  a few a key with `rpm = 60` that they exceed, so 429s come now and then. Its route's timeouts are short
  (first byte and idle 2.5 s, heartbeat 1 s) so that stalls run past them; the mock's group never ejects
  its one endpoint (`ejection.failures = 1000`): with faults injected at random, three failures in a row
  come every few seconds, and an ejected sole endpoint would turn the soak into a run of 502s. Its access
  log (stdout, one JSON line a request) goes to a file, read at the end.
- **The mock** (`--serve-mock`, its own process): a raw asyncio Protocol on uvloop speaking our contract,
  whose behaviour is named by the model: `soak-ok` answers (a whole CompletionResponse, or a stream of
  frames paced `--pace` apart, `max_tokens` words, honest usage); `soak-slow` the same after 0.3-1.5 s;
  `soak-error` an Error buffer (503); `soak-reset-head` a TCP reset before the head; `soak-stall-head`
  nothing (past the edge's first-byte timeout); `soak-drop-mid` two frames (8 bytes of a whole answer)
  then a reset; `soak-stall-mid` the same then silence (past the idle timeout); `soak-error-frame` two
  frames then an Error frame (a whole answer: a bare 502 text body, outside the contract).
- **The clients** (this process, uvloop, one connection each, HTTP/1.1 keep-alive, responses parsed with
  httptools): 40% stream chat (24 paced deltas, `stream_options.include_usage`, 2-6 s apart), 25%
  non-streamed chat (5-15 s apart), 3% open a stream of `soak-ok` and hang up after 2-5 deltas (half
  with a reset, half with a FIN), then reconnect; 2% send with the limited key every 5-10 s; the rest
  are keep-alive connections idle 40-60 s between tiny requests (under the edge's 75 s keep-alive
  timeout). Stream and chat clients pick the model per request: ok 70%, slow 10%, and each fault 3-4%.
  Connections open over the first minute (a sixth of the run with --quick); at the end every client
  finishes its request and closes.

Every request carries its own `x-request-id` (the edge keeps a well-formed one), and the client classifies
its end: `ok` (a chat.completion), `stream_done` (`data: [DONE]` last), `stream_error` (an in-band
`data: {"error": ...}` last, no [DONE]), `limited` (429 in OpenAI's error shape), `error` (any other status
with OpenAI's error shape: the upstream's faults before the head), `hung_up` (the client closed first);
anything else is a defect (`broken`: a stream that ends with neither; `malformed`: a body that is not
OpenAI's shape; `transport`: the connection failed under a request; `timeout`: no end in 30 s). The edge's
access log is joined on the request id: each id must have exactly one line, whose status and outcome give
the same class (200 ok, 200 stream ok, 200 stream_error, 429, other 4xx/5xx, 499 client_closed); and
`ingress_requests_total{route="/v1/chat/completions"}` by status must equal the client's counts.

Every minute (`--every`): the edge's RSS and open fds from /proc, its `ingress_event_loop_tasks` and
`ingress_in_flight` from /metrics, the client's open connections, requests by outcome, and the CPU of
edge, mock and client. At the end: RSS first/peak/last and its slope per 10 minutes over the last ten
(least squares), fds and tasks at the baseline (edge started, no client), under load and after every
connection closed, the outcomes, the cross-check, and the pass criteria: RSS <= 80 MiB once the
connections are open, its last-10-minute slope under 1 MiB/10 min, fds and tasks back to the baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import resource
import signal
import socket
import struct
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

from bench.lib.procs import cpu_seconds, machine_busy, rss_kb  # noqa: E402
from bench.lib.results import niced, result_path, write_result  # noqa: E402
from bench.lib.servers import Server, free_port  # noqa: E402

PY = sys.executable
CHAT = "/v1/chat/completions"
MIB = 1024 * 1024
RSS_LIMIT_MIB = 80.0
SLOPE_LIMIT_MIB = 1.0  # per 10 minutes, over the last ten
STREAM_WORDS = 24
CHAT_WORDS = 16
REQUEST_DEADLINE_S = 30.0
TIGHT_RPM = 60

# The fault mix of stream and chat clients, by model (the mock's behaviour).
MIX = (("ok", 70), ("slow", 10), ("error", 4), ("reset-head", 4), ("stall-head", 3), ("drop-mid", 3),
       ("stall-mid", 3), ("error-frame", 3))
# The share of connections each client role holds; the rest are idle keep-alive connections.
ROLES = (("stream", 0.40), ("chat", 0.25), ("hangup", 0.03), ("limited", 0.02))

CLIENT_CLASSES = ("ok", "stream_done", "stream_error", "limited", "error", "hung_up")
DEFECTS = ("broken", "malformed", "transport", "timeout")


# --- the mock: our contract, with faults named by the model ----------------------------------------


def serve_mock(port: int, pace_s: float) -> None:
    from bench.lib.mockhttp import Requests, serve
    from ingress import wire

    stream_head = (b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n\r\n"
                   % wire.STREAM_CONTENT_TYPE.encode())
    usage_of = {n: wire.Usage(prompt_tokens=40, completion_tokens=n, total_tokens=40 + n) for n in range(1, 65)}

    def chunked(data: bytes | bytearray) -> bytes:
        return b"%x\r\n%s\r\n" % (len(data), bytes(data))

    def whole(status: bytes, ctype: str, body: bytes | bytearray) -> bytes:
        return b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s" % (
            status, ctype.encode(), len(body), bytes(body))

    frames: dict[int, list[bytes]] = {}
    answers: dict[int, bytes] = {}

    def frames_of(n: int) -> list[bytes]:
        if n not in frames:
            chunks = [wire.Chunk(sequence=0, id="chatcmpl-soak", model="soak", created=1, role="assistant",
                                 content="")]
            chunks += [wire.Chunk(sequence=i + 1, content=f" w{i}") for i in range(n)]
            chunks += [wire.Chunk(sequence=n + 1, finish_reason="stop"),
                       wire.Chunk(sequence=n + 2, usage=usage_of[n], done=True)]
            frames[n] = [chunked(wire.write_chunk(c)) for c in chunks]
        return frames[n]

    def answer_of(n: int) -> bytes:
        if n not in answers:
            choice = wire.Choice(index=0, content="".join(f" w{i}" for i in range(n)), finish_reason="stop")
            body = wire.write_response(wire.Response(id="chatcmpl-soak", model="soak", created=1, choices=[choice],
                                                     usage=usage_of[n]))
            answers[n] = whole(b"200 OK", wire.CONTENT_TYPE, body)
        return answers[n]

    injected = wire.ErrorInfo(status=503, type="server_error", code="engine_overloaded",
                              message="injected: the engine is overloaded")
    error_answer = whole(b"503 Service Unavailable", wire.CONTENT_TYPE, wire.write_error(injected))
    error_frame = chunked(wire.write_error(wire.ErrorInfo(status=500, type="server_error", code="engine_failed",
                                                          message="injected: the engine failed mid-stream"),
                                           framed=True))
    bare_502 = b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nContent-Length: 11\r\n\r\nbad gateway"
    end = b"0\r\n\r\n"
    rng = random.Random(7)

    class Mock(Requests):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            self.timer: asyncio.TimerHandle | None = None

        def connection_lost(self, exc: Exception | None) -> None:
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None

        def later(self, delay: float, then: Any, *args: Any) -> None:
            self.timer = self.loop.call_later(delay, then, *args)

        def reset(self) -> None:
            """Close with a TCP reset (SO_LINGER 0), as a crashing service's kernel does."""
            sock = self.transport.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.transport.abort()

        def answer(self, head: bytes, start: int, end_: int) -> None:
            req = wire.read_request(bytes(self.buffer[start:end_]))
            fault = (req.ModelName() or b"").decode().removeprefix("soak-")
            n = max(1, min(64, req.MaxTokens() or CHAT_WORDS))
            stream = bool(req.Stream())
            if fault == "slow":
                self.later(rng.uniform(0.3, 1.5), self.start, "ok", n, stream)
            else:
                self.start(fault, n, stream)

        def start(self, fault: str, n: int, stream: bool) -> None:
            if self.transport.is_closing():
                return
            if fault == "error":
                self.transport.write(error_answer)
            elif fault == "reset-head":
                self.reset()
            elif fault == "stall-head":
                pass  # the edge gives up (first_byte) and closes the connection
            elif not stream:
                whole_answer = answer_of(n)
                if fault in ("drop-mid", "stall-mid"):
                    self.transport.write(whole_answer[:whole_answer.index(b"\r\n\r\n") + 4 + 8])
                    if fault == "drop-mid":
                        self.later(0.05, self.reset)
                elif fault == "error-frame":
                    self.transport.write(bare_502)
                else:
                    self.transport.write(whole_answer)
            else:
                self.transport.write(stream_head + frames_of(n)[0])
                self.later(pace_s, self.frame, fault, frames_of(n), 1)

        def frame(self, fault: str, frames: list[bytes], at: int) -> None:
            self.timer = None
            if self.transport.is_closing():
                return
            if at == 3 and fault != "ok":  # the role frame and two deltas sent
                if fault == "drop-mid":
                    self.reset()
                elif fault == "error-frame":
                    self.transport.write(error_frame + end)
                return  # stall-mid: silence, until the edge's idle timeout closes the connection
            if at >= len(frames) - 2:  # the finish and the usage frames go together
                self.transport.write(b"".join(frames[at:]) + end)
                return
            self.transport.write(frames[at])
            self.later(pace_s, self.frame, fault, frames, at + 1)

    serve(Mock, port)


# --- the edge, with a dump on SIGUSR1 (--debug-edge) ------------------------------------------------------


def run_edge(config: str, dump: Path, trace_frames: int, tombstone_s: float) -> int:
    """`ingress serve --config CONFIG --workers 1` in this process. With `tombstone_s` > 0 the memory
    backend forgets settled tickets after that many seconds instead of its 30 (600 before 427d5e6; an
    experiment: what the tombstones cost). With `trace_frames` >= 0, not frozen (`--no-gc-freeze`:
    gc.get_objects() leaves out what gc.freeze() put aside, the long-lived state among it), and on
    SIGUSR1 it appends to `dump` one JSON line: the live objects the collector tracks, counted by type;
    every container of 500 items or more held in an attribute of an ingress object; and with
    `trace_frames` > 0 (tracemalloc on from the start: slower, and each snapshot stalls the loop) the
    allocation sites whose live memory grew most since the reference snapshot, which SIGUSR2 takes."""
    import gc
    import signal
    import tracemalloc

    from ingress.__main__ import main as ingress_main

    if trace_frames > 0:
        tracemalloc.start(trace_frames)
    reference: list[tracemalloc.Snapshot] = []

    def snapshot() -> tracemalloc.Snapshot:
        return tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])

    def on_reference(signum: int, frame: object) -> None:
        if tracemalloc.is_tracing():
            reference[:] = [snapshot()]

    def on_dump(signum: int, frame: object) -> None:
        try:  # a handler runs inside whatever the edge was doing: nothing may escape into it
            dump_now()
        except Exception as exc:  # recorded, never raised into the edge
            with open(dump, "a") as f:
                f.write(json.dumps({"t": time.time(), "error": repr(exc)}) + "\n")

    def dump_now() -> None:
        objects = gc.get_objects()
        counts = Counter(type(o).__qualname__ for o in objects)
        held: dict[str, int] = {}
        for o in objects:
            kind = type(o)
            if not str(getattr(kind, "__module__", "")).startswith("ingress"):
                continue
            attrs = getattr(o, "__dict__", None) or {n: getattr(o, n, None) for n in getattr(kind, "__slots__", ())}
            for name, value in attrs.items():
                if isinstance(value, (dict, list, set, deque)) and len(value) >= 500:
                    where = f"{kind.__module__}.{kind.__qualname__}.{name}"
                    held[where] = held.get(where, 0) + len(value)
        del objects
        record: dict[str, Any] = {"t": time.time(), "objects": counts.most_common(80), "held": held,
                                  "gc": gc.get_count(), "frozen": gc.get_freeze_count(),
                                  "unreachable": gc.collect()}  # garbage in cycles, left to the collector
        if tracemalloc.is_tracing() and reference:
            record["traced_mib"] = tracemalloc.get_traced_memory()[0] / MIB
            record["grown"] = [[str(d.traceback), d.size_diff, d.count_diff]
                               for d in snapshot().compare_to(reference[0], "traceback")[:25]]
        with open(dump, "a") as f:
            f.write(json.dumps(record) + "\n")

    signal.signal(signal.SIGUSR1, on_dump)
    signal.signal(signal.SIGUSR2, on_reference)
    if tombstone_s > 0:
        from ingress.tenancy import store

        store.LOCAL_TOMBSTONE_US = int(tombstone_s * 1_000_000)
    if trace_frames < 0:
        return ingress_main(["serve", "--config", config, "--workers", "1"])
    return ingress_main(["serve", "--config", config, "--workers", "1", "--no-gc-freeze"])


def report_dumps(dump: Path, phases: list[str]) -> None:
    """What grew between the first dump under load and the last."""
    if not dump.exists():
        return
    records = [json.loads(line) for line in dump.read_text().splitlines()]
    loaded = [r for r, phase in zip(records, phases, strict=False) if phase == "load"]
    if len(loaded) < 2:
        return
    start, end = dict(map(tuple, loaded[0]["objects"])), dict(map(tuple, loaded[-1]["objects"]))
    grown = sorted(((end.get(k, 0) - start.get(k, 0), k) for k in set(start) | set(end)), reverse=True)
    print(f"\nthe edge's objects by type, the last dump under load against the first "
          f"({loaded[-1]['t'] - loaded[0]['t']:.0f} s apart): " + ", ".join(f"{k} {d:+d}" for d, k in grown[:15] if d))
    print("unreachable objects a full collection found at each dump under load (cycles waiting for the "
          "collector): " + ", ".join(str(r.get("unreachable")) for r in loaded))
    print("containers of 500+ held by ingress objects, under load: " + "; ".join(
        f"{k} {loaded[0]['held'].get(k, 0)} -> {v}" for k, v in sorted(loaded[-1]["held"].items())))
    if "grown" in loaded[-1]:
        print(f"tracemalloc: {loaded[-1]['traced_mib']:.1f} MiB traced; grown most since the first sample "
              "under load:")
        for where, size, count in loaded[-1]["grown"][:12]:
            print(f"  {size / 1024:+9.1f} KiB {count:+7d}  {where}")


# --- the clients ---------------------------------------------------------------------------------------


class Reply:
    """One answer as httptools reads it; a stream's SSE events counted as they arrive."""

    __slots__ = ("after_end", "body", "complete", "deltas", "done", "failed", "heartbeats", "keep_alive", "parser",
                 "pending", "status", "stream")

    def __init__(self, stream: bool) -> None:
        self.parser: Any = None  # the httptools parser calling back, set once made
        self.stream = stream
        self.status = 0
        self.body = bytearray()
        self.complete = False
        self.pending = b""
        self.deltas = 0
        self.done = False  # data: [DONE] seen
        self.failed = False  # an in-band error event seen
        self.after_end = 0  # events after [DONE] or an error: a defect
        self.heartbeats = 0
        self.keep_alive = False

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.keep_alive = self.parser.should_keep_alive()

    def on_body(self, data: bytes) -> None:
        if not (self.stream and self.status == 200):
            self.body += data
            return
        data = self.pending + data
        events = data.split(b"\n\n")
        self.pending = events.pop()
        for event in events:
            if event.startswith(b":"):
                self.heartbeats += 1
                continue
            if self.done or self.failed:
                self.after_end += 1
            if event == b"data: [DONE]":
                self.done = True
            elif event.startswith(b'data: {"error"'):
                self.failed = True
            else:
                self.deltas += 1

    def on_message_complete(self) -> None:
        self.complete = True

    def outcome(self) -> str:
        if self.stream and self.status == 200:
            if self.pending or self.after_end or self.done == self.failed:
                return "broken"
            return "stream_done" if self.done else "stream_error"
        try:
            body = json.loads(self.body)
        except ValueError:
            return "malformed"
        if self.status == 200:
            return "ok" if isinstance(body, dict) and body.get("object") == "chat.completion" else "malformed"
        error = body.get("error") if isinstance(body, dict) else None
        if not isinstance(error, dict) or set(error) != {"message", "type", "param", "code"}:
            return "malformed"
        return "limited" if self.status == 429 else "error"


@dataclass
class Tally:
    """What the clients did: each request's class by id, counts by minute, defects' details."""

    by_id: dict[str, str] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    statuses: Counter[int] = field(default_factory=Counter)
    defects: list[dict[str, Any]] = field(default_factory=list)
    open_connections: int = 0
    connects: int = 0
    heartbeats: int = 0


class Conn:
    """One client connection: requests one after another on it, reconnecting when the edge closes it."""

    def __init__(self, port: int, name: str, key: str, tally: Tally) -> None:
        self.port, self.name, self.key, self.tally = port, name, key, tally
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.sent = 0

    async def connect(self) -> None:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.tally.open_connections += 1
        self.tally.connects += 1

    def close(self, reset: bool = False) -> None:
        if self.writer is None:
            return
        if reset:
            sock = self.writer.get_extra_info("socket")
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.writer.transport.abort()
        else:
            self.writer.close()
        self.reader = self.writer = None
        self.tally.open_connections -= 1

    async def chat(self, model: str, *, stream: bool, words: int, hang_after: int = 0, reset: bool = False) -> str:
        import httptools

        if self.writer is None or self.writer.is_closing() or (self.reader is not None and self.reader.at_eof()):
            self.close()
            await self.connect()
        assert self.reader is not None and self.writer is not None
        self.sent += 1
        request_id = f"soak-{self.name}-{self.sent}"
        body = {"model": model, "max_tokens": words,
                "messages": [{"role": "user", "content": f"soak request {request_id}: say {words} words"}]}
        if stream:
            body.update(stream=True, stream_options={"include_usage": True})
        data = json.dumps(body, separators=(",", ":")).encode()
        head = (f"POST {CHAT} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nContent-Type: application/json\r\n"
                f"Authorization: Bearer {self.key}\r\nx-request-id: {request_id}\r\n"
                f"Content-Length: {len(data)}\r\n\r\n")
        reply = Reply(stream)
        parser = httptools.HttpResponseParser(reply)
        reply.parser = parser
        outcome, detail = "", ""
        try:
            async with asyncio.timeout(REQUEST_DEADLINE_S):
                self.writer.write(head.encode() + data)
                while not reply.complete:
                    got = await self.reader.read(65536)
                    if not got:
                        outcome, detail = "transport", "the connection closed before the answer ended"
                        break
                    parser.feed_data(got)
                    if hang_after and reply.deltas >= hang_after and not (reply.done or reply.failed):
                        outcome = "hung_up"
                        break
        except TimeoutError:
            outcome, detail = "timeout", f"no end in {REQUEST_DEADLINE_S:.0f} s"
        except (OSError, httptools.HttpParserError) as exc:
            outcome, detail = "transport", f"{type(exc).__name__}: {exc}"
        if not outcome:
            outcome = reply.outcome()
            if outcome in DEFECTS:
                detail = f"status {reply.status}, body {bytes(reply.body[:200])!r}, pending {reply.pending[:200]!r}"
        keep = outcome not in ("hung_up", "transport", "timeout") and reply.keep_alive
        if not keep:
            self.close(reset=reset and outcome == "hung_up")
        self.tally.by_id[request_id] = outcome
        self.tally.counts[outcome] += 1
        self.tally.heartbeats += reply.heartbeats
        if reply.status:
            self.tally.statuses[reply.status] += 1
        if outcome in DEFECTS and len(self.tally.defects) < 200:
            self.tally.defects.append({"request_id": request_id, "model": model, "stream": stream,
                                       "outcome": outcome, "detail": detail})
        return outcome


def _pick(rng: random.Random) -> str:
    return "soak-" + rng.choices([m for m, _ in MIX], weights=[w for _, w in MIX])[0]


async def _pause(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


async def client(role: str, i: int, port: int, keys: dict[str, str], tally: Tally, stop: asyncio.Event,
                 start_at: float) -> None:
    rng = random.Random(f"{role}-{i}")
    await _pause(stop, start_at)
    if stop.is_set():
        return
    conn = Conn(port, f"{role}{i}", keys["tight" if role == "limited" else "main"], tally)
    try:
        await conn.connect()
        while not stop.is_set():
            if role == "stream":
                await conn.chat(_pick(rng), stream=True, words=STREAM_WORDS)
                await _pause(stop, rng.uniform(2.0, 6.0))
            elif role == "chat":
                await conn.chat(_pick(rng), stream=False, words=CHAT_WORDS)
                await _pause(stop, rng.uniform(5.0, 15.0))
            elif role == "hangup":
                await conn.chat("soak-ok", stream=True, words=STREAM_WORDS, hang_after=rng.randint(2, 5),
                                reset=conn.sent % 2 == 0)
                await _pause(stop, rng.uniform(3.0, 6.0))
            elif role == "limited":
                await conn.chat("soak-ok", stream=False, words=4)
                await _pause(stop, rng.uniform(5.0, 10.0))
            else:  # idle: a tiny request, then 40-60 s of nothing on a kept-alive connection
                await conn.chat("soak-ok", stream=False, words=1)
                await _pause(stop, rng.uniform(40.0, 60.0))
    except OSError as exc:  # the connection could not be made
        tally.counts["transport"] += 1
        tally.defects.append({"request_id": None, "role": role, "outcome": "transport", "detail": f"connect: {exc}"})
    finally:
        conn.close()


# --- readings ------------------------------------------------------------------------------------------


def _fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def scrape(port: int) -> dict[str, float]:
    """The figures the soak reads from /metrics (one fresh connection, closed after)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in ("ingress_event_loop_tasks", "ingress_in_flight", "process_open_fds",
                          "process_resident_memory_bytes"):
                found[s.name] = s.value
            elif s.name == "ingress_requests_total" and s.labels.get("route") == CHAT:
                key = f"status_{s.labels['status']}"
                found[key] = found.get(key, 0.0) + s.value
    return found


@dataclass
class Sample:
    t_s: float
    phase: str
    rss_mib: float
    fds: int
    tasks: float
    in_flight: float
    connections: int
    requests: int
    outcomes: dict[str, int]
    cpu_percent: dict[str, float]


class Sampler:
    """Every `every` seconds (and when asked): the edge's readings, the clients' counts, the CPU of each."""

    def __init__(self, edge_pid: int, mock_pid: int, port: int, tally: Tally, every: float,
                 dump: bool = False) -> None:
        self.edge_pid, self.mock_pid, self.port, self.tally, self.every = edge_pid, mock_pid, port, tally, every
        self.dump = dump
        self.samples: list[Sample] = []
        self.phase = "baseline"
        self.t0 = time.perf_counter()
        self._stop = threading.Event()
        self._last = self._cpu()
        self._last_counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _cpu(self) -> tuple[float, float, float, float, float]:
        """(now, CPU seconds of the edge, of the mock, of this process, busy seconds of the whole machine)."""
        own = resource.getrusage(resource.RUSAGE_SELF)
        return (time.perf_counter(), sum(cpu_seconds(self.edge_pid)), sum(cpu_seconds(self.mock_pid)),
                own.ru_utime + own.ru_stime, machine_busy()[0])

    def take(self, print_row: bool = True) -> Sample:
        with self._lock:
            rss = rss_kb(self.edge_pid) / 1024
            fds = _fds(self.edge_pid)
            got = scrape(self.port)
            now = self._cpu()
            wall = max(now[0] - self._last[0], 1e-9)
            cpu = {"edge": (now[1] - self._last[1]) / wall * 100, "mock": (now[2] - self._last[2]) / wall * 100,
                   "client": (now[3] - self._last[3]) / wall * 100,
                   "machine": (now[4] - self._last[4]) / wall * 100}
            counts = Counter(self.tally.counts)
            delta = counts - self._last_counts
            self._last, self._last_counts = now, counts
            sample = Sample(round(now[0] - self.t0, 1), self.phase, round(rss, 2), fds,
                            got.get("ingress_event_loop_tasks", -1), got.get("ingress_in_flight", -1),
                            self.tally.open_connections, sum(delta.values()), dict(delta),
                            {k: round(v, 1) for k, v in cpu.items()})
            self.samples.append(sample)
            if self.dump:
                if self.phase == "load" and not any(s.phase == "load" for s in self.samples[:-1]):
                    os.kill(self.edge_pid, signal.SIGUSR2)  # the reference for tracemalloc's growth
                    time.sleep(0.5)
                os.kill(self.edge_pid, signal.SIGUSR1)
        if print_row:
            print(row(sample), flush=True)
        return sample

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.take()

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self._run, daemon=True)
        thread.start()
        return thread

    def stop(self, thread: threading.Thread) -> None:
        self._stop.set()
        thread.join()


HEAD = (f"{'t (s)':>7} {'phase':<8} {'RSS MiB':>8} {'fds':>5} {'tasks':>6} {'in fl':>6} {'conns':>6} {'reqs':>6} "
        + " ".join(f"{c[:7]:>7}" for c in CLIENT_CLASSES) + f" {'defects':>7}"
        + f" {'edge%':>6} {'mock%':>6} {'client%':>7} {'mach%':>6}")


def row(s: Sample) -> str:
    o = s.outcomes
    return (f"{s.t_s:7.0f} {s.phase:<8} {s.rss_mib:8.1f} {s.fds:5d} {s.tasks:6.0f} {s.in_flight:6.0f} "
            f"{s.connections:6d} {s.requests:6d} " + " ".join(f"{o.get(c, 0):7d}" for c in CLIENT_CLASSES)
            + f" {sum(o.get(d, 0) for d in DEFECTS):7d}"
            + f" {s.cpu_percent['edge']:6.1f} {s.cpu_percent['mock']:6.1f} {s.cpu_percent['client']:7.1f}"
            + f" {s.cpu_percent['machine']:6.1f}")


# --- the edge's account ----------------------------------------------------------------------------------


def edge_class(line: dict[str, Any]) -> str:
    status, outcome = line.get("status"), line.get("outcome")
    if status == 499 and outcome == "client_closed":
        return "hung_up"
    if status == 200 and outcome == "ok":
        return "stream_done" if line.get("stream") else "ok"
    if status == 200 and outcome == "stream_error":
        return "stream_error"
    if status == 429:
        return "limited"
    if isinstance(status, int) and status >= 400 and outcome == "error":
        return "error"
    return f"other({status},{outcome})"


def cross_check(tally: Tally, access_log: Path, metrics: dict[str, float]) -> dict[str, Any]:
    """Each client request against the edge's access-log line for its id, and the counts against
    ingress_requests_total by status."""
    lines: dict[str, list[str]] = {}
    codes: Counter[str] = Counter()
    other = 0
    with open(access_log, "rb") as f:
        for raw in f:
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            if line.get("event") != "request" or line.get("path") != CHAT:
                other += line.get("event") == "request"
                continue
            lines.setdefault(line["request_id"], []).append(edge_class(line))
            if line.get("error_code"):
                codes[f"{line['status']} {line['error_code']}"] += 1
    pairs: Counter[str] = Counter()
    missing, twice, disagree = [], [], []
    for request_id, outcome in tally.by_id.items():
        found = lines.get(request_id, [])
        if not found:
            missing.append(request_id)
            pairs[f"{outcome} / (no line)"] += 1
        elif len(found) > 1:
            twice.append(request_id)
            pairs[f"{outcome} / {'+'.join(found)}"] += 1
        else:
            pairs[f"{outcome} / {found[0]}"] += 1
            if found[0] != outcome:
                disagree.append(request_id)
    unknown = [i for i in lines if i not in tally.by_id]
    edge_by_class = Counter(c for found in lines.values() for c in found)
    # ingress_requests_total by status against the edge's lines (the client does not see a 499's status).
    log_status: Counter[str] = Counter()
    for found in lines.values():
        for c in found:
            log_status[{"hung_up": "499", "limited": "429"}.get(c, "200" if c in ("ok", "stream_done",
                                                                               "stream_error") else "4xx/5xx")] += 1
    metric_status: Counter[str] = Counter()
    for key, value in metrics.items():
        if key.startswith("status_"):
            code = key.removeprefix("status_")
            metric_status[code if code in ("200", "429", "499") else "4xx/5xx"] += int(value)
    return {
        "client_requests": len(tally.by_id), "edge_lines": sum(len(v) for v in lines.values()),
        "pairs": dict(pairs.most_common()), "missing": len(missing), "missing_ids": missing[:20],
        "twice": len(twice), "twice_ids": twice[:20], "disagree": len(disagree), "disagree_ids": disagree[:20],
        "edge_only": len(unknown), "edge_only_ids": unknown[:20], "edge_by_class": dict(edge_by_class),
        "edge_error_codes": dict(codes.most_common()), "other_requests_logged": other,
        "metrics_by_status": dict(metric_status), "log_by_status": dict(log_status),
        "metrics_agree": metric_status == log_status,
    }


# --- the run ---------------------------------------------------------------------------------------------


def edge_toml(port: int, mock_port: int, keys: dict[str, tuple[str, str]]) -> str:
    main_id, main_hash = keys["main"]
    tight_id, tight_hash = keys["tight"]
    return f"""port = {port}
workers = 1

[groups.mock]
endpoints = [{{ url = "http://127.0.0.1:{mock_port}" }}]
ejection = {{ failures = 1000 }}

[[routes]]
prefix = "soak-"
group = "mock"
timeouts = {{ first_byte = 2.5, idle = 2.5, heartbeat = 1.0 }}

[tenancy]
backend = "memory"

[tenancy.tenants.soak]
limits = {{ tpm = 50_000_000 }}

[[tenancy.keys]]
id = "{main_id}"
tenant = "soak"
hash = "{main_hash}"
limits = {{ rpm = 1_000_000, tpm = 50_000_000 }}

[[tenancy.keys]]
id = "{tight_id}"
tenant = "soak"
hash = "{tight_hash}"
limits = {{ rpm = {TIGHT_RPM}, tpm = 100_000 }}
"""


def slope_per_10min(samples: list[Sample]) -> float | None:
    if len(samples) < 2:
        return None
    xs = [s.t_s for s in samples]
    ys = [s.rss_mib for s in samples]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den * 600 if den else None


async def drive(port: int, connections: int, keys: dict[str, str], tally: Tally, ramp_s: float, load_s: float,
                sampler: Sampler) -> float:
    stop = asyncio.Event()
    roles: list[str] = []
    for role, share in ROLES:
        roles += [role] * round(connections * share)
    roles += ["idle"] * (connections - len(roles))
    random.Random(1).shuffle(roles)
    seen: Counter[str] = Counter()
    tasks = []
    for k, role in enumerate(roles):
        tasks.append(asyncio.create_task(client(role, seen[role], port, keys, tally, stop, k / connections * ramp_s)))
        seen[role] += 1
    sampler.phase = "ramp"
    await asyncio.sleep(ramp_s)
    sampler.phase = "load"
    await asyncio.sleep(load_s)
    await asyncio.to_thread(sampler.take)  # the last reading under load
    sampler.phase = "closing"
    stop.set()
    closing = time.perf_counter()
    await asyncio.gather(*tasks)
    return time.perf_counter() - closing


async def hangup_burst(port: int, keys: dict[str, str], tally: Tally, n: int) -> None:
    """`n` streams of soak-ok, 50 at a time, each reset by its client once its first delta arrives."""
    gate = asyncio.Semaphore(50)

    async def one(i: int) -> None:
        async with gate:
            conn = Conn(port, f"burst{i}", keys["main"], tally)
            await conn.connect()
            await conn.chat("soak-ok", stream=True, words=64, hang_after=1, reset=True)
            conn.close()

    await asyncio.gather(*(one(i) for i in range(n)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="length of the soak (default 30)")
    parser.add_argument("--quick", action="store_true", help="3 minutes, a sample every 20 s")
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--every", type=float, default=None, help="seconds between samples (default 60; quick 20)")
    parser.add_argument("--pace", type=float, default=0.5, help="seconds between a stream's deltas (default 0.5)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--debug-edge", type=int, nargs="?", const=0, default=None, metavar="FRAMES",
                        help="dump the edge's objects by type at every sample (and with FRAMES > 0, tracemalloc's "
                             "growth: slower); for finding a leak, not for the figures")
    parser.add_argument("--hangups", type=int, default=0, metavar="N",
                        help="instead of the soak: N streams reset by their clients mid-way (with --pace 0.001: the "
                             "hang-ups the edge logs as 500s), and the client / edge classes")
    parser.add_argument("--tombstone-s", type=float, default=0.0, metavar="S",
                        help="an experiment: the edge's memory backend keeps settled tickets S seconds, not 30")
    parser.add_argument("--serve-mock", nargs=2, metavar=("PORT", "PACE"), help=argparse.SUPPRESS)
    parser.add_argument("--run-edge", nargs=4, metavar=("CONFIG", "DUMP", "FRAMES", "TOMBSTONE_S"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_edge:
        return run_edge(args.run_edge[0], Path(args.run_edge[1]), int(args.run_edge[2]), float(args.run_edge[3]))
    if args.serve_mock:
        serve_mock(int(args.serve_mock[0]), float(args.serve_mock[1]))
        return 0
    minutes = 3.0 if args.quick else args.minutes
    every = args.every or (20.0 if args.quick else 60.0)
    out = result_path("soak", args.quick, args.out)
    niced()

    import uvloop

    from bench.lib.provenance import code_version, describe
    from ingress.tenancy.keys import new_key

    work = Path(tempfile.mkdtemp(prefix="ingress-bench-soak-"))
    made = {name: new_key() for name in ("main", "tight")}
    port, mock_port = free_port(), free_port()
    config = work / "edge.toml"
    config.write_text(edge_toml(port, mock_port, {n: (k[1], k[2]) for n, k in made.items()}))
    access_log, edge_err, mock_log = work / "access.jsonl", work / "edge.stderr", work / "mock.log"
    total_s = minutes * 60
    ramp_s = min(60.0, total_s / 6)
    load_before = os.getloadavg()
    started_at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    def terminated(signum: int, _frame: object) -> None:  # stopped from outside: the mock and edge with it
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminated)
    # Stopped with SIGTERM and up to 40 s for the edge's drain: its access log is read once it has stopped.
    mock = Server("mock", [PY, "-m", "bench.soak", "--serve-mock", str(mock_port), str(args.pace)], mock_port,
                  mock_log, stop_timeout=40.0)
    dump = work / "edge-dump.jsonl"
    argv = [PY, "-m", "ingress", "serve", "--config", str(config), "--workers", "1"]
    if args.debug_edge is not None or args.tombstone_s:
        frames = -1 if args.debug_edge is None else args.debug_edge
        argv = [PY, "-m", "bench.soak", "--run-edge", str(config), str(dump), str(frames), str(args.tombstone_s)]
    edge = Server("edge", argv, port, edge_err, stdout=access_log, stop_timeout=40.0)
    mock.start()
    edge.start()
    tally = Tally()
    result: dict[str, Any] = {}
    try:
        mock.wait_ready()
        edge.wait_ready()
        print(f"soak: {describe(code_version())}; {minutes:g} min, {args.connections} connections opened over "
              f"{ramp_s:.0f} s; streams paced {args.pace} s; load average {load_before[0]:.2f}; nice {os.nice(0)}; "
              f"started {started_at}", flush=True)
        time.sleep(2.0)
        sampler = Sampler(edge.pid, mock.pid, port, tally, every, dump=args.debug_edge is not None)
        baseline = sampler.take(print_row=False)
        print(HEAD, flush=True)
        print(row(baseline), flush=True)
        thread = sampler.start()
        keys = {n: k[0] for n, k in made.items()}
        if args.hangups:
            sampler.stop(thread)
            uvloop.run(hangup_burst(port, keys, tally, args.hangups))
            time.sleep(2.0)
            check = cross_check(tally, access_log, scrape(port))
            print(f"{args.hangups} streams, each reset by its client after its first delta, {args.pace * 1000:g} ms "
                  "between deltas: client / edge " + ", ".join(f"{k}: {v}" for k, v in check["pairs"].items()))
            print("edge error codes: " + ", ".join(f"{k}: {v}" for k, v in check["edge_error_codes"].items()))
            return 0 if check["disagree"] == 0 else 1
        closing_s = uvloop.run(drive(port, args.connections, keys, tally, ramp_s, total_s - ramp_s, sampler))
        sampler.stop(thread)
        sampler.phase = "closed"
        time.sleep(1.0)
        sampler.take()
        time.sleep(9.0)  # past the upstream keep-alive (4 s): the edge's idle connections to the mock close
        after = sampler.take()
        metrics = scrape(port)
    finally:
        edge.stop()
        mock.stop()
    check = cross_check(tally, access_log, metrics)
    samples = sampler.samples
    loaded = [s for s in samples if s.phase == "load"]
    last10 = [s for s in loaded if s.t_s >= loaded[-1].t_s - 600] if loaded else []
    slope = slope_per_10min(last10)
    peak = max((s.rss_mib for s in loaded), default=0.0)
    result = {
        "code": describe(code_version()), "started": started_at, "minutes": minutes, "every_s": every,
        "connections": args.connections, "pace_s": args.pace, "ramp_s": ramp_s, "closing_s": round(closing_s, 1),
        "load_average_before": load_before, "load_average_after": os.getloadavg(),
        "mix": dict(MIX), "roles": dict(ROLES),
        "samples": [vars(s) for s in samples],
        "outcomes": dict(tally.counts), "statuses": {str(k): v for k, v in sorted(tally.statuses.items())},
        "connects": tally.connects, "heartbeats_seen": tally.heartbeats, "defects": tally.defects,
        "cross_check": check, "edge_config": config.read_text().replace(made["main"][2], "<hash>")
        .replace(made["tight"][2], "<hash>"),
    }
    rss = {"first": baseline.rss_mib, "loaded_first": loaded[0].rss_mib if loaded else None, "peak": peak,
           "last_loaded": loaded[-1].rss_mib if loaded else None, "after_close": after.rss_mib,
           "slope_last_10min_per_10min": None if slope is None else round(slope, 3),
           "slope_window_s": round(last10[-1].t_s - last10[0].t_s, 1) if len(last10) > 1 else 0}
    fds = {"baseline": baseline.fds, "loaded_last": loaded[-1].fds if loaded else None, "after_close": after.fds}
    tasks = {"baseline": baseline.tasks, "loaded_last": loaded[-1].tasks if loaded else None,
             "after_close": after.tasks}
    defects = sum(tally.counts.get(d, 0) for d in DEFECTS)
    criteria = {
        "rss_under_80mib_with_connections_open": peak <= RSS_LIMIT_MIB,
        "rss_flat_last_10min": slope is not None and slope < SLOPE_LIMIT_MIB,
        "fds_back_to_baseline": after.fds <= baseline.fds,
        "tasks_back_to_baseline": after.tasks <= baseline.tasks,
        "every_request_one_outcome": check["missing"] == 0 and check["twice"] == 0 and check["edge_only"] == 0,
        "client_and_edge_agree": check["disagree"] == 0 and check["metrics_agree"],
        "no_defects": defects == 0,
    }
    result.update(rss_mib=rss, fds=fds, tasks=tasks, criteria=criteria)
    write_result(result, out)
    report(result, check, tally)
    report_dumps(dump, [s.phase for s in samples])
    plot(samples, out.with_suffix(".png"))
    print(f"saved {out}; the edge's logs in {work}")
    return 0 if all(criteria.values()) else 1


def report(result: dict[str, Any], check: dict[str, Any], tally: Tally) -> None:
    rss, fds, tasks = result["rss_mib"], result["fds"], result["tasks"]
    print(f"\nRSS (MiB): baseline {rss['first']:.1f}, first under load {rss['loaded_first']:.1f}, peak under load "
          f"{rss['peak']:.1f}, last under load {rss['last_loaded']:.1f}, after close {rss['after_close']:.1f}; "
          f"slope {rss['slope_last_10min_per_10min']} MiB/10 min over the last {rss['slope_window_s']:.0f} s of load")
    print(f"fds: baseline {fds['baseline']}, last under load {fds['loaded_last']}, after close {fds['after_close']}; "
          f"tasks: baseline {tasks['baseline']:.0f}, last under load {tasks['loaded_last']:.0f}, after close "
          f"{tasks['after_close']:.0f}")
    total = sum(tally.counts.values())
    print(f"\nrequests {total} ({result['connects']} connections made; {result['heartbeats_seen']} heartbeats seen); "
          "outcomes (client):")
    for name in (*CLIENT_CLASSES, *DEFECTS):
        n = tally.counts.get(name, 0)
        print(f"  {name:<14} {n:8d}  {n / max(total, 1) * 100:5.1f}%  edge {check['edge_by_class'].get(name, 0):8d}")
    print(f"  edge lines of another class: "
          f"{ {k: v for k, v in check['edge_by_class'].items() if k not in CLIENT_CLASSES} }")
    print(f"\ncross-check: {check['client_requests']} client requests, {check['edge_lines']} edge lines; no line "
          f"{check['missing']}, two lines {check['twice']}, classes differ {check['disagree']}, edge-only "
          f"{check['edge_only']}; ingress_requests_total by status {check['metrics_by_status']} against the log "
          f"{check['log_by_status']}: {'agree' if check['metrics_agree'] else 'DISAGREE'}")
    print("client / edge pairs: " + ", ".join(f"{k}: {v}" for k, v in check["pairs"].items()))
    print("edge error codes: " + ", ".join(f"{k}: {v}" for k, v in check["edge_error_codes"].items()))
    for d in tally.defects[:10]:
        print(f"  defect: {d}")
    print("\ncriteria:")
    for name, ok in result["criteria"].items():
        print(f"  {'PASS' if ok else 'FAIL'}  {name}")


def plot(samples: list[Sample], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (not a dev dependency): no plot")
        return
    minutes = [s.t_s / 60 for s in samples]
    fig, axes = plt.subplots(3, 1, figsize=(8, 8), sharex=True)
    for ax, values, label in ((axes[0], [s.rss_mib for s in samples], "RSS (MiB)"),
                              (axes[1], [s.fds for s in samples], "open fds"),
                              (axes[2], [s.tasks for s in samples], "event-loop tasks")):
        ax.plot(minutes, values, marker=".")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].axhline(RSS_LIMIT_MIB, color="red", linestyle="--", linewidth=0.8)
    axes[2].set_xlabel("minutes")
    fig.suptitle("bench/soak.py: one edge worker, 1,000 connections, faults injected")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"saved {path}")


if __name__ == "__main__":
    sys.exit(main())
