"""Real servers on loopback: the edge in front of the embedded demo or of a scripted fake upstream."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack

import aiohttp
import openai
import pytest
from fakes.upstream import FakeUpstream

from ingress.serve.app import create_app, serve_app
from ingress.settings import Settings, Timeouts

# Small enough that timeout tests take a second or two; the first byte's has room for a collector's pause
# in this process (the edge, the fake and the test share its loop): 0.5 s once cut a good answer here.
FAST = Timeouts(connect=1.0, first_byte=2.0, idle=0.5)

StartEdge = Callable[[Settings], Awaitable[str]]


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    """What a test starts (edges, fakes, clients), stopped when it ends, last first."""
    async with AsyncExitStack() as stack:
        yield stack


@pytest.fixture
async def start_edge() -> AsyncIterator[StartEdge]:
    """`url = await start_edge(settings)`: an edge that runs until the test ends."""
    async with AsyncExitStack() as stack:

        async def start(settings: Settings) -> str:
            return await stack.enter_async_context(serve_app(create_app(settings), "127.0.0.1", 0))

        yield start


@pytest.fixture
async def demo_edge() -> AsyncIterator[str]:
    """The edge with the demo service embedded (model "ingress-demo"); yields its base URL."""
    async with serve_app(create_app(Settings()), "127.0.0.1", 0) as url:
        yield url


@pytest.fixture
async def fake_upstream() -> AsyncIterator[FakeUpstream]:
    fake = FakeUpstream()
    async with fake.running():
        yield fake


@pytest.fixture
async def edge(fake_upstream: FakeUpstream) -> AsyncIterator[str]:
    """The edge in front of `fake_upstream`, with FAST timeouts; yields its base URL."""
    async with serve_app(create_app(Settings(upstream=fake_upstream.url, timeouts=FAST)), "127.0.0.1", 0) as url:
        yield url


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    """A plain HTTP client, for what the SDK hides: status lines, headers and raw SSE lines."""
    async with aiohttp.ClientSession() as session:
        yield session


class ThreadedEdge:
    """An edge on its own event loop in a background thread, for blocking clients such as `openai.OpenAI`."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._ready = threading.Event()
        self._thread = threading.Thread(target=asyncio.run, args=(self._serve(),), name="edge", daemon=True)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self.url = ""

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        try:
            async with serve_app(create_app(self._settings), "127.0.0.1", 0) as url:
                self.url = url
                self._ready.set()
                await self._stop.wait()
        except BaseException as exc:
            self._error = exc
            raise
        finally:
            self._ready.set()

    def __enter__(self) -> str:
        self._thread.start()
        if not self._ready.wait(timeout=10) or not self.url:
            raise RuntimeError("the edge did not start") from self._error
        return self.url

    def __exit__(self, *exc_info: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=10)
        assert not self._thread.is_alive(), "the edge did not stop"
        if self._error is not None:
            raise self._error


@pytest.fixture(scope="module")
def threaded_demo_edge() -> Iterator[str]:
    """The demo edge in a background thread, shared by a module's blocking-client tests."""
    with ThreadedEdge(Settings()) as url:
        yield url


@pytest.fixture
def client(threaded_demo_edge: str) -> Iterator[openai.OpenAI]:
    """The official blocking SDK in front of the demo edge, which changes only `base_url`."""
    with openai.OpenAI(base_url=f"{threaded_demo_edge}/v1", api_key="sk-test", max_retries=0) as c:
        yield c


@pytest.fixture
async def aclient(demo_edge: str) -> AsyncIterator[openai.AsyncOpenAI]:
    """The official async SDK in front of the demo edge."""
    async with openai.AsyncOpenAI(base_url=f"{demo_edge}/v1", api_key="sk-test", max_retries=0) as c:
        yield c
