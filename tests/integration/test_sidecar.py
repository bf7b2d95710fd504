"""Sidecar mode: the edge on a Unix socket, in front of a service on another Unix socket.

The openai SDK reaches a Unix-socket edge through its HTTP client's transport (`uds=`); the installed
SDK is built on `httpx2`, so that is the client configured here. AF_UNIX paths are limited to ~107
bytes, so the sockets live in a short directory under /tmp rather than in pytest's tmp_path.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import httpx2
import openai
import pytest
from fakes import upstream as fu
from fakes.upstream import FakeUpstream
from openai.types.chat import ChatCompletionMessageParam
from waiting import eventually

from ingress.demo.service import create_demo_app
from ingress.serve.app import create_app, serve_app
from ingress.settings import Settings, Timeouts

ROOT = Path(__file__).resolve().parents[2]
TEXT = "Say hello over a socket"
WORDS = ["Say", " hello", " over", " a", " socket"]


@pytest.fixture
def sockets() -> Iterator[Path]:
    """A short directory for socket files, removed with whatever is left in it."""
    path = Path(tempfile.mkdtemp(prefix="ingress-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def fake_on_socket(sockets: Path) -> AsyncIterator[FakeUpstream]:
    fake = FakeUpstream()
    async with fu.running_unix(fake, str(sockets / "model.sock")):
        yield fake


@pytest.fixture
async def edge_socket(sockets: Path, fake_on_socket: FakeUpstream) -> AsyncIterator[str]:
    """The edge on a Unix socket, forwarding to the fake on another; yields the edge's socket path."""
    settings = Settings(upstream=fake_on_socket.url, timeouts=Timeouts(connect=1.0, first_byte=5.0, idle=5.0))
    path = str(sockets / "edge.sock")
    async with serve_app(create_app(settings), "", 0, unix=path) as url:
        assert url == f"unix:{path}"
        yield path


def _messages() -> list[ChatCompletionMessageParam]:
    return [{"role": "user", "content": TEXT}]


# --- in-process: serve_app(..., unix=path) ------------------------------------------------------


async def test_a_plain_http_client_reaches_the_edge_on_its_socket(
    edge_socket: str, fake_on_socket: FakeUpstream,
) -> None:
    async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(edge_socket)) as http:
        async with http.get("http://localhost/healthz") as response:
            assert response.status == 200
        async with http.post("http://localhost/v1/chat/completions",
                             json={"model": "m", "messages": _messages()}) as response:
            assert response.status == 200
            assert (await response.json())["choices"][0]["message"]["content"] == TEXT
        async with http.post("http://localhost/v1/chat/completions",
                             json={"model": "m", "messages": _messages(), "stream": True}) as response:
            lines = [line async for line in response.content if line.startswith(b"data: ")]

    assert lines[-1] == b"data: [DONE]\n"
    assert "".join(json.loads(line[6:])["choices"][0]["delta"].get("content", "") for line in lines[:-1]) == TEXT
    assert [r.stream for r in fake_on_socket.received] == [False, True]


async def test_the_blocking_sdk_reaches_a_unix_socket_edge(edge_socket: str, fake_on_socket: FakeUpstream) -> None:
    def use_the_sdk() -> tuple[str, list[str]]:
        http_client = httpx2.Client(transport=httpx2.HTTPTransport(uds=edge_socket))
        with openai.OpenAI(base_url="http://localhost/v1", api_key="sk-test", http_client=http_client,
                           max_retries=0) as client:
            completion = client.chat.completions.create(model="m", messages=_messages())
            stream = client.chat.completions.create(model="m", messages=_messages(), stream=True)
            pieces = [c.choices[0].delta.content or "" for c in stream if c.choices]
        return completion.choices[0].message.content or "", pieces

    whole, pieces = await asyncio.to_thread(use_the_sdk)

    assert whole == TEXT
    assert [p for p in pieces if p] == WORDS
    assert [r.stream for r in fake_on_socket.received] == [False, True]


async def test_the_async_sdk_reaches_a_unix_socket_edge(edge_socket: str, fake_on_socket: FakeUpstream) -> None:
    http_client = httpx2.AsyncClient(transport=httpx2.AsyncHTTPTransport(uds=edge_socket))
    async with openai.AsyncOpenAI(base_url="http://localhost/v1", api_key="sk-test", http_client=http_client,
                                  max_retries=0) as client:
        completion = await client.chat.completions.create(model="m", messages=_messages())
        stream = await client.chat.completions.create(model="m", messages=_messages(), stream=True)
        pieces = [c.choices[0].delta.content or "" async for c in stream if c.choices]
        models = await client.models.list()

    assert completion.choices[0].message.content == TEXT
    assert "".join(pieces) == TEXT
    assert [m.id for m in models.data] == []  # `--upstream` without `--model` serves any name, lists none


async def test_a_fault_on_the_unix_upstream_is_reported_like_any_other(
    edge_socket: str, fake_on_socket: FakeUpstream,
) -> None:
    fake_on_socket.play(fu.drop_mid_stream(frames=2), pace=0.05)

    async with (
        aiohttp.ClientSession(connector=aiohttp.UnixConnector(edge_socket)) as http,
        http.post("http://localhost/v1/chat/completions",
                  json={"model": "m", "messages": _messages(), "stream": True}) as response,
    ):
        lines = [line async for line in response.content if line.startswith(b"data: ")]

    assert json.loads(lines[-1][6:])["error"]["code"] == "upstream_protocol_error"
    assert b"/tmp" not in b"".join(lines)  # the socket path is an internal address too


async def test_a_missing_upstream_socket_is_upstream_unavailable(sockets: Path) -> None:
    settings = Settings(upstream=f"unix:{sockets / 'absent.sock'}")
    path = str(sockets / "edge.sock")

    async with (
        serve_app(create_app(settings), "", 0, unix=path),
        aiohttp.ClientSession(connector=aiohttp.UnixConnector(path)) as http,
        http.post("http://localhost/v1/chat/completions", json={"model": "m", "messages": _messages()}) as response,
    ):
        body = await response.json()

    assert response.status == 502
    assert body["error"] == {"message": "The model service is unavailable.", "type": "server_error",
                             "param": None, "code": "upstream_unavailable"}


async def test_the_edge_forwards_to_the_demo_service_on_a_socket(sockets: Path) -> None:
    service, edge = str(sockets / "demo.sock"), str(sockets / "edge.sock")

    async with (
        serve_app(create_demo_app(), "", 0, unix=service),
        serve_app(create_app(Settings(upstream=f"unix:{service}", models=("ingress-demo",))), "", 0, unix=edge),
    ):
        http_client = httpx2.AsyncClient(transport=httpx2.AsyncHTTPTransport(uds=edge))
        async with openai.AsyncOpenAI(base_url="http://localhost/v1", api_key="sk-test",
                                      http_client=http_client, max_retries=0) as client:
            completion = await client.chat.completions.create(model="ingress-demo", messages=_messages())
            with pytest.raises(openai.NotFoundError):
                await client.chat.completions.create(model="other", messages=_messages())

    assert completion.choices[0].message.content == TEXT


# --- the command line: `ingress demo-upstream --unix` and `ingress serve --unix --upstream unix:` -----


class Process:
    """A command-line process whose output goes to a file, stopped with SIGTERM."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.log = log
        with log.open("wb") as out:
            self.popen = subprocess.Popen([sys.executable, "-m", "ingress", *args], cwd=ROOT, stdout=out,
                                          stderr=subprocess.STDOUT)

    async def wait_for_socket(self, path: str, timeout: float = 20.0) -> None:
        """Until `path` answers GET /healthz."""
        async def answering() -> bool:
            assert self.popen.poll() is None, f"exited with {self.popen.returncode}:\n{self.log.read_text()}"
            if not os.path.exists(path):
                return False
            try:
                async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path)) as http, \
                        http.get("http://localhost/healthz") as response:
                    return response.status == 200
            except aiohttp.ClientConnectionError:
                return False

        await eventually(answering, f"{path} answering GET /healthz", timeout=timeout, interval=0.05)

    async def stop(self) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
        try:
            await eventually(lambda: self.popen.poll() is not None, "the process exited", timeout=15.0, interval=0.05)
        finally:
            if self.popen.poll() is None:
                self.popen.kill()
                self.popen.wait()
        return self.popen.returncode


@pytest.fixture
async def cli_sidecar(sockets: Path) -> AsyncIterator[tuple[str, list[Process]]]:
    """`ingress demo-upstream --unix` and `ingress serve --unix --upstream unix:` as processes; yields the
    edge's socket path and both processes (stopped, if still running, when the test ends)."""
    service, edge = str(sockets / "demo.sock"), str(sockets / "edge.sock")
    config = sockets / "drain.toml"
    config.write_text("[drain]\ndelay = 0\ndeadline = 2.0\n")  # a quick exit on SIGTERM
    demo = Process(["demo-upstream", "--unix", service], sockets / "demo.log")
    processes = [demo]
    try:
        await demo.wait_for_socket(service)
        serve = Process(["serve", "--config", str(config), "--unix", edge, "--upstream", f"unix:{service}",
                         "--workers", "1", "--no-gc-freeze"], sockets / "edge.log")
        processes.append(serve)
        await serve.wait_for_socket(edge)
        yield edge, processes
    finally:
        for process in reversed(processes):
            await process.stop()


async def test_the_command_line_sidecar_serves_the_sdk(cli_sidecar: tuple[str, list[Process]]) -> None:
    edge, (demo, serve) = cli_sidecar
    http_client = httpx2.AsyncClient(transport=httpx2.AsyncHTTPTransport(uds=edge))

    async with openai.AsyncOpenAI(base_url="http://localhost/v1", api_key="sk-test", http_client=http_client,
                                  max_retries=0) as client:
        completion = await client.chat.completions.create(model="ingress-demo", messages=_messages())
        stream = await client.chat.completions.create(model="any-name", messages=_messages(), stream=True,
                                                      stream_options={"include_usage": True})
        chunks = [c async for c in stream]

    assert completion.choices[0].message.content == TEXT
    assert completion.usage is not None and completion.usage.completion_tokens == len(WORDS)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == TEXT
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == len(WORDS)
    assert {c.model for c in chunks} == {"any-name"}

    assert await serve.stop() == 0
    assert await demo.stop() == 0
    log = [json.loads(line) for line in serve.log.read_text().splitlines() if line.startswith("{")]
    requests = [entry for entry in log if entry.get("event") == "request"]
    assert [(r["status"], r["stream"]) for r in requests if r["path"] == "/v1/chat/completions"] == [
        (200, False), (200, True)]
    assert all(r["upstream"] == f"unix:{Path(edge).parent / 'demo.sock'}" for r in requests if "upstream" in r)
