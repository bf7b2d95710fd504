"""Graceful drain, end to end: `python -m ingress serve` as a real process, stopped with SIGTERM.

On SIGTERM readiness turns false at once; for `drain.delay` the edge still serves (every response
closing its connection); then it stops listening and closes idle keep-alive connections; requests and
streams still running get `drain.deadline` more, after which a stream ends with an in-band
`shutting_down` error and an answer still waited for is a 503. The process then exits 0.

Each edge runs in a process group of its own, killed whole when its test ends, whatever happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import openai
from fakes import upstream as fu
from fakes.processes import CHAT, EdgeProcess, free_port
from fakes.upstream import FakeUpstream
from waiting import eventually

MODEL = "ingress-demo"
WORDS = [f"w{i}" for i in range(20)]


def drain_config(tmp_path: Path, *, delay: float, deadline: float) -> str:
    path = tmp_path / f"drain-{delay}-{deadline}.toml"
    path.write_text(f"[drain]\ndelay = {delay}\ndeadline = {deadline}\n")
    return str(path)


@contextlib.contextmanager
def edge_process(tmp_path: Path, *args: str, name: str = "edge", port: int | None = None,
                 workers: int = 1) -> Iterator[EdgeProcess]:
    # Each edge of several workers gets its own metrics directory, removed with tmp_path.
    metrics_dir = tmp_path / f"{name}-metrics" if workers > 1 else None
    edge = EdgeProcess(tmp_path, name, port or free_port(), list(args), workers, metrics_dir)
    try:
        yield edge
    finally:
        edge.kill()


def _chat(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], **extra}


async def _read_events(response: aiohttp.ClientResponse, limit: int | None = None) -> list[str]:
    """The next SSE `data:` payloads: `limit` of them, or all to the end of the body."""
    events: list[str] = []
    while limit is None or len(events) < limit:
        line = await response.content.readline()
        if not line:
            break
        if line.startswith(b"data: "):
            events.append(line[6:].decode().rstrip("\n"))
    return events


# --- readiness ------------------------------------------------------------------------------------


async def test_readiness_turns_false_as_soon_as_a_drain_starts(tmp_path: Path) -> None:
    delay = 1.5
    with edge_process(tmp_path, "--config", drain_config(tmp_path, delay=delay, deadline=2.0)) as edge:
        await edge.started()
        async with aiohttp.ClientSession() as http:
            async with http.get(edge.url + "/readyz") as r:
                assert r.status == 200
            signalled = time.monotonic()
            edge.terminate()

            async def not_ready() -> bool:
                async with http.get(edge.url + "/readyz") as r:
                    if r.status == 200:
                        return False
                    assert r.status == 503
                    assert await r.json() == {"status": "not ready", "draining": True, "healthy_endpoints": {"demo": 1}}
                    assert r.headers["Connection"] == "close"
                    return True

            await eventually(not_ready, "/readyz answering 503")
            assert time.monotonic() - signalled < delay, "readiness still true when the drain delay ended"
            async with http.get(edge.url + "/healthz") as r:
                assert r.status == 200  # alive while it drains: liveness must not restart it
            async with http.post(edge.url + CHAT, json=_chat("still served")) as r:
                assert r.status == 200  # load balancers may not have noticed yet
                assert r.headers["Connection"] == "close"
        assert await edge.exit_code(timeout=10) == 0
        assert time.monotonic() - signalled >= delay


# --- requests running when the drain starts -------------------------------------------------------


async def _stream_across_sigterm(edge: EdgeProcess, path: str, body: dict[str, Any],
                                 before: int) -> tuple[list[str], float, bool]:
    """A stream from the edge, which is sent SIGTERM once `before` events have arrived: its events, the
    seconds the rest took, and whether the edge still ran when the stream ended."""
    async with aiohttp.ClientSession() as http, http.post(edge.url + path, json=body) as r:
        assert r.status == 200
        events = await _read_events(r, before)
        signalled = time.monotonic()
        edge.terminate()
        events += await _read_events(r)
        return events, time.monotonic() - signalled, edge.proc.poll() is None


async def test_a_stream_running_at_sigterm_is_finished(tmp_path: Path, fake_upstream: FakeUpstream) -> None:
    fake_upstream.play(fu.answer(), pace=0.05)  # about 1 s of frames
    config = drain_config(tmp_path, delay=0.2, deadline=5.0)
    with edge_process(tmp_path, "--config", config, "--upstream", fake_upstream.url) as edge:
        await edge.started()
        events, _, running = await _stream_across_sigterm(edge, CHAT, _chat(" ".join(WORDS), stream=True), 1)
        assert running  # the edge waited for this stream
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == " ".join(WORDS)
        assert await edge.exit_code(timeout=10) == 0


async def test_a_stream_that_outlives_the_deadline_ends_with_an_in_band_error(
        tmp_path: Path, fake_upstream: FakeUpstream) -> None:
    fake_upstream.play(fu.stall_mid_stream(frames=3))  # the role, two words, then silence
    config = drain_config(tmp_path, delay=0.2, deadline=0.5)
    with edge_process(tmp_path, "--config", config, "--upstream", fake_upstream.url) as edge:
        await edge.started()
        events, ended, _ = await _stream_across_sigterm(edge, CHAT, _chat(" ".join(WORDS), stream=True), 3)
        assert [json.loads(e)["choices"][0]["delta"].get("content") for e in events[:3]] == ["", "w0", " w1"]
        assert json.loads(events[-1])["error"]["code"] == "shutting_down"
        assert "[DONE]" not in events
        assert 0.7 <= ended < 3.0  # delay + deadline, then the stream was ended
        await fake_upstream.wait_idle(timeout=3)
        assert fake_upstream.outcomes == ["cancelled"]  # the upstream call was cut, not left running
        assert await edge.exit_code(timeout=10) == 0


async def test_a_responses_stream_that_outlives_the_deadline_ends_with_error_and_response_failed(
        tmp_path: Path, fake_upstream: FakeUpstream) -> None:
    fake_upstream.play(fu.stall_mid_stream(frames=3))
    config = drain_config(tmp_path, delay=0.2, deadline=0.5)
    with edge_process(tmp_path, "--config", config, "--upstream", fake_upstream.url) as edge:
        await edge.started()
        body = {"model": MODEL, "input": " ".join(WORDS), "stream": True}
        # created, in_progress, item added, part added, w0, w1
        events, _, _ = await _stream_across_sigterm(edge, "/v1/responses", body, 6)
        docs = [json.loads(e) for e in events]
        assert [d["sequence_number"] for d in docs] == list(range(len(docs)))
        assert [d.get("delta") for d in docs[4:6]] == ["w0", " w1"]
        assert [d["type"] for d in docs[-2:]] == ["error", "response.failed"]
        assert docs[-2]["code"] == "shutting_down" and docs[-1]["response"]["status"] == "failed"
        assert docs[-1]["response"]["output"][0]["content"][0]["text"] == "w0 w1"
        assert await edge.exit_code(timeout=10) == 0


async def test_an_answer_still_awaited_at_the_deadline_is_a_503(tmp_path: Path, fake_upstream: FakeUpstream) -> None:
    fake_upstream.play(fu.slow_head(None))
    config = drain_config(tmp_path, delay=0.2, deadline=0.5)
    with edge_process(tmp_path, "--config", config, "--upstream", fake_upstream.url) as edge:
        await edge.started()
        async with aiohttp.ClientSession() as http:

            async def terminate_once_received() -> None:
                await eventually(lambda: fake_upstream.received, "the request at the fake", interval=0.01)
                edge.terminate()

            async with asyncio.TaskGroup() as tasks:
                tasks.create_task(terminate_once_received())
                async with http.post(edge.url + CHAT, json=_chat("never answered")) as r:
                    body = await r.json()
        assert r.status == 503
        assert body["error"]["code"] == "shutting_down"
        assert r.headers["Retry-After"] == "1"
        assert r.headers["Connection"] == "close"
        await fake_upstream.wait_idle(timeout=3)
        assert fake_upstream.outcomes == ["cancelled"]
        assert await edge.exit_code(timeout=10) == 0


# --- connections ----------------------------------------------------------------------------------


async def _get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str) -> bytes:
    """One keep-alive GET on a raw connection; returns the response head."""
    writer.write(f"GET {path} HTTP/1.1\r\nHost: edge\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    await reader.readexactly(length)
    return head


async def test_idle_keep_alive_connections_are_closed_after_the_delay(tmp_path: Path) -> None:
    delay = 0.5
    with edge_process(tmp_path, "--config", drain_config(tmp_path, delay=delay, deadline=2.0)) as edge:
        await edge.started()
        idle = await asyncio.open_connection("127.0.0.1", edge.port)
        used = await asyncio.open_connection("127.0.0.1", edge.port)
        try:
            for conn in (idle, used):
                assert b"connection: close" not in (await _get(*conn, "/healthz")).lower()
            signalled = time.monotonic()
            edge.terminate()
            await asyncio.sleep(0.1)
            # A request on a kept-alive connection during the delay is served, and its connection closed.
            assert b"connection: close" in (await _get(*used, "/healthz")).lower()
            assert await asyncio.wait_for(used[0].read(), timeout=1) == b""
            # A connection that stays idle is closed by the edge once the delay is over.
            assert await asyncio.wait_for(idle[0].read(), timeout=delay + 3) == b""
            closed = time.monotonic() - signalled
            assert delay - 0.05 <= closed < delay + 1.5
        finally:
            for _, writer in (idle, used):
                writer.close()
                with contextlib.suppress(ConnectionError):
                    await writer.wait_closed()
        assert await edge.exit_code(timeout=10) == 0


# --- a restart without failed requests ------------------------------------------------------------


@dataclass
class Tally:
    ok: int = 0
    failures: list[str] = field(default_factory=list)


async def _sdk_user(client: openai.AsyncOpenAI, user: int, stop: asyncio.Event, tally: Tally) -> None:
    """Requests back to back, streamed and not in turn, each checked; failures counted, never raised."""
    i = 0
    while not stop.is_set():
        text = f"user {user} request {i}"
        try:
            if i % 2:
                stream = await client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": text}], stream=True)
                async with stream:
                    got = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
            else:
                answer = await client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": text}])
                got = answer.choices[0].message.content or ""
            if got != text:
                raise AssertionError(f"answered {got!r} to {text!r}")
            tally.ok += 1
        except Exception as exc:  # every failure is recorded; the load goes on
            tally.failures.append(f"{type(exc).__name__}: {exc}")
        i += 1


async def test_a_new_edge_takes_over_the_port_under_load_with_no_failed_request(tmp_path: Path) -> None:
    """EdgeProcess A (a supervisor and two workers) serves a steady load of openai SDK clients; edge B binds
    the same port while A still listens; A gets SIGTERM and drains; not one request fails."""
    port = free_port()
    config = drain_config(tmp_path, delay=0.5, deadline=5.0)
    tally, stop = Tally(), asyncio.Event()
    with edge_process(tmp_path, "--config", config, name="a", port=port, workers=2) as a:
        await a.started()
        # The SDK's own retries (max_retries=2) stay on, as in production.
        async with (
            openai.AsyncOpenAI(base_url=a.url + "/v1", api_key="sk-test", timeout=10) as client,
            asyncio.TaskGroup() as tasks,
        ):
            users = [tasks.create_task(_sdk_user(client, user, stop, tally)) for user in range(8)]
            try:
                await asyncio.sleep(0.5)
                with edge_process(tmp_path, "--config", config, name="b", port=port) as b:
                    await b.started()
                    a.terminate()
                    assert await a.exit_code(timeout=15) == 0
                    ok_when_a_stopped = tally.ok
                    await asyncio.sleep(1.0)
                    stop.set()
                    await asyncio.wait(users)  # the last requests finish while B is up
            finally:
                stop.set()
    assert tally.failures == []
    assert ok_when_a_stopped > 0 and tally.ok > ok_when_a_stopped
    served_by_a, served_by_b = a.served(), b.served()
    assert served_by_a > 0 and served_by_b > 0
    assert served_by_a + served_by_b >= tally.ok


async def test_new_connections_do_not_wait_for_a_draining_edge(tmp_path: Path, fake_upstream: FakeUpstream) -> None:
    """While A (a supervisor and two workers) drains a long stream, connections made after its drain
    delay are answered by B at once: none is left queued on a listening socket that nobody accepts on."""
    fake_upstream.play(fu.stall_mid_stream(frames=2))  # A's stream: open until A's deadline ends it
    port, delay = free_port(), 0.3
    config = drain_config(tmp_path, delay=delay, deadline=5.0)
    with edge_process(tmp_path, "--config", config, "--upstream", fake_upstream.url, name="a", port=port,
                      workers=2) as a:
        await a.started()
        async with (
            aiohttp.ClientSession() as http,
            http.post(a.url + CHAT, json=_chat("long", stream=True)) as stream,
        ):
            assert await _read_events(stream, 1)
            with edge_process(tmp_path, "--config", config, name="b", port=port) as b:
                await b.started()
                a.terminate()
                await asyncio.sleep(delay + 0.3)

                async def probe() -> float:
                    started = time.monotonic()
                    async with aiohttp.ClientSession() as fresh:  # a new connection each
                        try:
                            async with fresh.get(b.url + "/healthz", timeout=aiohttp.ClientTimeout(total=3.5)) as r:
                                assert r.status == 200
                        except TimeoutError:
                            return float("inf")
                    return time.monotonic() - started

                waits = await asyncio.gather(*(probe() for _ in range(16)))
        assert max(waits) < 3.0, f"new connections waited {sorted(round(w, 2) for w in waits)} s"

