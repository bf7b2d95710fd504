"""Clients that send what no HTTP client should: malformed requests, bodies and encodings.

Each is refused in OpenAI's error shape, and nothing the client sent reaches the logs.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web
from fakes.processes import EdgeProcess, free_port

from ingress.demo.service import create_demo_app
from ingress.edge.connections import EdgeSite, listening_socket
from ingress.serve.app import serve_app
from ingress.settings import Client, Settings

StartEdge = Callable[[Settings], Awaitable[str]]  # the `start_edge` fixture
API_KEY = b"sk-secret-0123456789abcdef"
PROMPT = b"PROMPT-MARKER-launch-code-7731"
BODY = b'{"model": "ingress-demo", "messages": [{"role": "user", "content": "' + PROMPT + b'"}]}'


def _head(*lines: bytes, eol: bytes = b"\r\n") -> bytes:
    return eol.join([b"POST /v1/chat/completions HTTP/1.1", b"Host: edge", b"Authorization: Bearer " + API_KEY,
                     *lines, b"", b""])


# Requests aiohttp's parser refuses; each quotes the key or the prompt in the parser's own message.
MALFORMED = [
    pytest.param(_head(b"Content-Length: %d" % len(BODY), eol=b"\n") + BODY, id="bare-lf-line-endings"),
    pytest.param(_head(b"X-Bad\x01: y", b"Content-Length: %d" % len(BODY)) + BODY, id="control-byte-in-a-name"),
    pytest.param(_head(b"X-Key: " + API_KEY + b"\x00", b"Content-Length: %d" % len(BODY)) + BODY,
                 id="nul-in-a-value"),
    pytest.param(_head(b"Authorization : Bearer " + API_KEY, b"Content-Length: %d" % len(BODY)) + BODY,
                 id="space-before-the-colon"),
    pytest.param(_head(b"Transfer-Encoding: chunked") + b"10\r\n" + BODY[:16] + b"\r\nzz" + BODY + b"\r\n0\r\n\r\n",
                 id="bad-chunk-size"),
    pytest.param(_head(b"X-Long: " + API_KEY * 400, b"Content-Length: %d" % len(BODY)) + BODY, id="header-too-long"),
    pytest.param(b"P\x01ST /v1/chat/completions HTTP/1.1\r\nAuthorization: Bearer " + API_KEY + b"\r\n\r\n",
                 id="bad-method"),
]


async def _exchange(port: int, raw: bytes) -> bytes:
    """Send `raw` on a connection of its own; what came back before the edge closed it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), timeout=10)
    finally:
        writer.close()


def _server(head: bytes) -> bytes | None:
    """The Server header's value in a raw response head (None without one)."""
    values = [line.partition(b":")[2].strip() for line in head.split(b"\r\n")[1:]
              if line.partition(b":")[0].strip().lower() == b"server"]
    assert len(values) <= 1, head
    return values[0] if values else None


async def test_every_answer_names_the_server_without_its_version(start_edge: StartEdge) -> None:
    url = await start_edge(Settings())
    port = _port(url)
    chat = b'{"model": "ingress-demo", "messages": [{"role": "user", "content": "hi"}]}'
    stream = chat[:-1] + b', "stream": true}'
    requests = {
        "an answer": _post(b"/v1/chat/completions", chat),
        "a stream": _post(b"/v1/chat/completions", stream),
        "a refused body": _post(b"/v1/chat/completions", b'{"model": 1}'),
        "an unknown path": b"GET /v1/nothing HTTP/1.1\r\nHost: edge\r\nConnection: close\r\n\r\n",
        "the models": b"GET /v1/models HTTP/1.1\r\nHost: edge\r\nConnection: close\r\n\r\n",
        "metrics": b"GET /metrics HTTP/1.1\r\nHost: edge\r\nConnection: close\r\n\r\n",
    }
    for name, raw in requests.items():
        answer = await _exchange(port, raw)

        head = answer.partition(b"\r\n\r\n")[0]
        assert head.startswith(b"HTTP/1.1 "), (name, answer[:200])
        assert _server(head) == b"ingress", (name, head)
        assert b"aiohttp" not in head and b"Python" not in head, (name, head)


async def test_the_demo_service_names_itself_as_the_edge_does() -> None:
    async with serve_app(create_demo_app(), "127.0.0.1", 0) as url:
        answer = await _exchange(_port(url), b"GET /healthz HTTP/1.1\r\nHost: demo\r\nConnection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 ") and _server(answer.partition(b"\r\n\r\n")[0]) == b"ingress"


def _post(path: bytes, body: bytes) -> bytes:
    return (b"POST " + path + b" HTTP/1.1\r\nHost: edge\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)) + body


async def test_malformed_requests_never_put_keys_or_prompts_in_the_logs(tmp_path: Path) -> None:
    config = tmp_path / "quick-drain.toml"
    config.write_text("[drain]\ndelay = 0.1\ndeadline = 2.0\n")
    edge = EdgeProcess(tmp_path, "edge", free_port(), ["--config", str(config)], 1, None, stderr_apart=True)
    try:
        await edge.started()
        for param in MALFORMED:
            (raw,) = param.values
            answer = await _exchange(edge.port, raw)  # type: ignore[arg-type]
            assert answer.startswith((b"HTTP/1.0 400 ", b"HTTP/1.1 400 ")), (param.id, answer[:200])
        edge.terminate()
        assert await edge.exit_code(timeout=15) == 0
    finally:
        edge.kill()
    out, err = edge.log.read_bytes(), edge.err.read_bytes()
    assert API_KEY[3:] not in out + err
    assert PROMPT not in out + err
    assert err == b"", f"everything is logged on stdout, as JSON lines; stderr held:\n{err.decode()[:2000]}"
    lines = [json.loads(line) for line in out.splitlines()]  # every line is JSON
    refusals = [line for line in lines if "exc_type" in line]
    assert len(refusals) >= len(MALFORMED) - 1, lines  # each is logged (a bad method on a first request at debug)


async def test_malformed_requests_are_refused_in_openai_s_shape_without_echoing_them(start_edge: StartEdge) -> None:
    port = _port(await start_edge(Settings()))
    for param in MALFORMED:
        (raw,) = param.values

        answer = await _exchange(port, raw)  # type: ignore[arg-type]

        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith((b"HTTP/1.0 400 ", b"HTTP/1.1 400 ")), (param.id, answer[:300])  # 1.0: unparsed
        assert b"Content-Type: application/json" in head, (param.id, head)
        assert _server(head) == b"ingress", (param.id, head)
        assert json.loads(body) == {"error": {"message": "The request is not valid HTTP/1.1.", "type":
                                              "invalid_request_error", "param": None, "code": "invalid_http"}}
        assert API_KEY[3:] not in answer and PROMPT not in answer


async def test_a_chunk_that_breaks_the_framing_midway_is_one_400_then_close(start_edge: StartEdge) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", _port(await start_edge(Settings())))
    try:
        writer.write(_head(b"Content-Type: application/json", b"Transfer-Encoding: chunked") + b"4\r\n{\"mo\r\n")
        await writer.drain()
        await asyncio.sleep(0.2)  # the handler is reading the body by now (either way the answer is a 400)
        writer.write(b"zz\r\nnot a chunk\r\n0\r\n\r\n")
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), timeout=10)  # until the edge closes
    finally:
        writer.close()

    assert answer.count(b"HTTP/1.1 ") == 1, answer
    assert answer.startswith(b"HTTP/1.1 400 "), answer
    assert json.loads(answer.partition(b"\r\n\r\n")[2])["error"]["code"] in ("invalid_body", "invalid_http")


# --- deadlines and the connection cap (short ones, configured) ------------------------------------


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _client(**deadlines: float) -> Settings:
    return Settings(client=Client(**deadlines))  # type: ignore[arg-type]  # floats and the int cap


async def test_a_stalled_body_is_a_408_then_the_connection_closes(start_edge: StartEdge) -> None:
    port = _port(await start_edge(_client(body_timeout=0.5, keepalive_timeout=60.0)))
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: edge\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"m")
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), timeout=10)  # all of it: the edge closes after
    finally:
        writer.close()

    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), answer
    error = json.loads(body)["error"]
    assert (error["type"], error["code"], error["param"]) == ("invalid_request_error", "request_timeout", None)


async def test_a_body_that_keeps_coming_is_not_cut_by_the_body_deadline(start_edge: StartEdge) -> None:
    port = _port(await start_edge(_client(body_timeout=1.0)))
    body = b'{"model": "ingress-demo", "messages": [{"role": "user", "content": "slow but steady"}]}'
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: edge\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body))
        for i in range(0, len(body), 20):  # longer in all than the deadline, never a second's gap
            writer.write(body[i : i + 20])
            await writer.drain()
            await asyncio.sleep(0.2)
        status_line = await asyncio.wait_for(reader.readline(), timeout=10)
    finally:
        writer.close()

    assert status_line.startswith(b"HTTP/1.1 200 "), status_line


async def _trickle(port: int, head: bytes, gap: float) -> tuple[int, bytes]:
    """Send `head` a byte at a time; how many bytes went before the edge closed, and what it sent."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    sent = 0
    try:
        for byte in head:
            if reader.at_eof() or writer.is_closing():
                break
            writer.write(bytes([byte]))
            await writer.drain()
            sent += 1
            await asyncio.sleep(gap)
            if reader._buffer or reader.at_eof():  # type: ignore[attr-defined]  # something came back: stop
                break
        return sent, await asyncio.wait_for(reader.read(), timeout=10)
    except ConnectionError:
        return sent, b""
    finally:
        writer.close()


async def test_a_trickled_head_is_closed_by_the_header_deadline(start_edge: StartEdge) -> None:
    port = _port(await start_edge(_client(header_timeout=1.0, keepalive_timeout=60.0)))
    head = _head(b"Content-Length: 0", b"X-Padding: " + b"p" * 200)
    started = asyncio.get_running_loop().time()

    sent, answer = await _trickle(port, head, gap=0.1)

    assert sent < len(head) // 2, f"{sent} of {len(head)} bytes went before the edge closed"
    assert asyncio.get_running_loop().time() - started >= 1.0
    assert answer.startswith(b"HTTP/1.1 408 ") and b'"request_timeout"' in answer, answer
    assert _server(answer.partition(b"\r\n\r\n")[0]) == b"ingress"


async def test_a_head_that_arrives_in_time_is_served_however_slowly(start_edge: StartEdge) -> None:
    port = _port(await start_edge(_client(header_timeout=5.0)))
    head = b"GET /healthz HTTP/1.1\r\nHost: edge\r\nConnection: close\r\n\r\n"

    sent, answer = await _trickle(port, head, gap=0.01)

    assert sent == len(head) and answer.startswith(b"HTTP/1.1 200 "), answer


async def test_an_idle_connection_is_closed_after_the_keepalive(start_edge: StartEdge) -> None:
    port = _port(await start_edge(_client(keepalive_timeout=0.5, header_timeout=30.0)))
    loop = asyncio.get_running_loop()
    silent_reader, silent = await asyncio.open_connection("127.0.0.1", port)  # never sends a byte
    used_reader, used = await asyncio.open_connection("127.0.0.1", port)  # one request, then nothing
    try:
        started = loop.time()
        used.write(b"GET /healthz HTTP/1.1\r\nHost: edge\r\n\r\n")
        assert (await used_reader.readline()).startswith(b"HTTP/1.1 200 ")

        assert await asyncio.wait_for(silent_reader.read(), timeout=10) == b""
        rest = await asyncio.wait_for(used_reader.read(), timeout=10)
        assert loop.time() - started >= 0.5
    finally:
        silent.close()
        used.close()
    assert rest.endswith(b'{"status":"ok"}'), rest  # the rest of the answer, then the close


async def test_beyond_the_connection_cap_a_connection_waits_for_a_free_one(start_edge: StartEdge) -> None:
    cap = 3
    port = _port(await start_edge(_client(keepalive_timeout=60.0, max_connections=cap)))
    request = b"GET /healthz HTTP/1.1\r\nHost: edge\r\n\r\n"

    async def ask(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
        writer.write(request)
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
                     .split(b":")[1])
        return head + await reader.readexactly(length)

    held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(cap)]
    extra = await asyncio.open_connection("127.0.0.1", port)  # the kernel completes it: it waits in the backlog
    try:
        for conn in held:
            assert (await ask(*conn)).startswith(b"HTTP/1.1 200 ")
        waiting = asyncio.ensure_future(ask(*extra))
        for _ in range(3):  # the held connections are answered again and again; the extra one is not
            for conn in held:
                assert (await ask(*conn)).startswith(b"HTTP/1.1 200 ")
        assert not waiting.done()

        held[0][1].close()  # a place frees up

        assert (await asyncio.wait_for(waiting, timeout=10)).startswith(b"HTTP/1.1 200 ")
    finally:
        for _, writer in [*held, extra]:
            writer.close()


@pytest.mark.parametrize("workers", [1, 4])
async def test_a_burst_of_new_connections_is_taken_in_together(workers: int) -> None:
    """Connections waiting in the backlog are accepted in a turn or two of the loop, not one a turn: a busy
    worker's turns are long, and a connection accepted late waited for all of them before its first request
    was read. With several workers on one listener, each takes a share of a burst a turn, not all of it."""
    burst, batch = 48, 64 // (2 * workers) if workers > 1 else 64
    runner = web.AppRunner(web.Application())
    await runner.setup()
    sock = listening_socket("127.0.0.1", 0)
    site = EdgeSite(runner, sock, Client(), workers)
    await site.start()
    clients: list[socket.socket] = []
    try:
        for _ in range(burst):  # the kernel completes each: they wait in the backlog
            clients.append(socket.create_connection(sock.getsockname()[:2]))
        assert runner.server is not None
        counts = [0]
        for _ in range(300):
            await asyncio.sleep(0)
            counts.append(len(runner.server.connections))
            if counts[-1] == burst:
                break
        assert counts[-1] == burst, counts
        assert max(b - a for a, b in itertools.pairwise(counts)) <= batch, counts
        if workers == 1:
            assert len(counts) <= 6, counts  # all of them within a few turns
    finally:
        for client in clients:
            client.close()
        await runner.cleanup()
