"""cache: the response cache in front of `send`, for a route that has one (ingress/cache).

    lookup   canonical bytes → key → the store: a hit is the stored answer, in the shape asked for
    hit      the stage's own `attempt` runs on the stored answer instead of an endpoint: the answer is then
             read, verified and translated exactly as a live one (any dialect, whole or streamed), and said
             to be served by the route and model whose attempt made it (recorded in its entry)
    miss     `send` as without a cache, the answer's bytes recorded as they pass; stored once it is whole
             and successful (a whole answer once it decoded, a stream once its final frame was read and
             nothing failed), with the route and model that answered (a fallback's, when the chain moved),
             never an error, a cut or failed stream, or one whose client left first
    in flight  an identical miss already being answered in this worker (ingress/cache/flight.py): the
             request waits for that answer and is served it as a hit, in its own shape and dialect; if
             that one ends with nothing to share, or stalls, the request is a miss of its own

A store that fails or is slow is a miss (ingress/cache/stores.py). `exchange.cache` says which way it went
(hit, miss, bypass): the x-ingress-cache header, the metrics and the usage record read it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from ingress import metrics
from ingress.cache import NO_CACHE, NO_STORE, Flight, ResponseCache, entry_key, scope_value
from ingress.cache.entries import STREAM, Producer, Shape, entry, served
from ingress.cache.settings import RouteCache
from ingress.errors import IngressError, UpstreamUnavailable
from ingress.exchange import Exchange
from ingress.pipeline.gateway import Gateway
from ingress.pipeline.prepare import Prepared
from ingress.pipeline.send import send, served_stored
from ingress.routing.chain import route_name
from ingress.settings import Timeouts
from ingress.upstream.client import Reads
from ingress.upstream.group import Lease
from ingress.wire.canonical import canonical, deterministic

T = TypeVar("T")
R = TypeVar("R")
HIT, MISS, BYPASS = "hit", "miss", "bypass"


async def send_cached(gateway: Gateway, prepared: Prepared[Any], exchange: Exchange,
                      attempt: Callable[[Any, Prepared[Any]], Awaitable[T]], shape: Shape, **chain: Any) -> T:
    """`send`, behind the route's cache: `attempt` runs on an endpoint's lease, or on the stored answer.
    `chain`: send's options for the route's fallback chain (reroute, refused, discard)."""
    route, cache = prepared.match.route.cache, gateway.cache
    if route is None or cache is None:
        return await send(gateway, prepared, exchange, attempt, **chain)
    asked = time.perf_counter()
    key = _key(prepared, exchange, route)
    if key is None:
        _outcome(exchange, BYPASS, asked)
        return await send(gateway, prepared, exchange, attempt, **chain)
    if exchange.cache_control != NO_CACHE:
        stored: _Lease | None = None
        value = await cache.get(route, key)
        if value is not None and (hit := served(value, shape)) is not None:
            stored = _Lease(_StoredClient(hit.answer), hit.producer)
        elif value is None and (flight := cache.flights.get(key)) is not None:
            stored = await _follow(cache, key, flight, shape, gateway.timeouts(prepared.match))
        if stored is not None:
            try:
                result = await attempt(stored, prepared)
            except IngressError:  # an answer that does not read back: served by the service instead
                pass
            else:
                _outcome(exchange, HIT, asked)
                served_stored(exchange, prepared, stored.producer)  # x-ingress-served-by: who made the answer
                if value is None:
                    metrics.child(metrics.CACHE_COALESCED, _route(exchange)).inc()
                return result
    _outcome(exchange, MISS, asked)
    flight = None
    if key not in cache.flights:  # the identical requests that come meanwhile are answered with this one's answer
        flight = cache.flights[key] = Flight(shape)
    recorder = _Recorder(cache, route, key, shape, exchange, cache.settings.max_entry_bytes, flight)
    try:
        result = await send(gateway, prepared, exchange,
                            lambda lease, ready: attempt(recorder.lease(lease), ready), **chain)
    except BaseException:
        recorder.settle(None)
        raise
    if shape != STREAM:
        recorder.whole()
    else:
        recorder.opened()  # the stream this attempt opened is the answer: its end settles the flight
    return result


async def _follow(cache: ResponseCache, key: str, flight: Flight, shape: Shape,
                  timeouts: Timeouts) -> _Lease | None:
    """What the identical miss in flight answers this request with: its stream's frames as they come, for a
    stream of a stream, once it has begun; else its entry, once it has one; either with the route and model
    that made it. None: it had nothing to share, or stalled (then it is no longer a flight others wait for)."""
    tail = shape == STREAM and flight.shape == STREAM
    if not await flight.joined(timeouts.connect + timeouts.first_byte, timeouts.idle, tail=tail):
        if cache.flights.get(key) is flight:
            del cache.flights[key]
        return None
    if not flight.ended:
        return _Lease(_TailClient(flight, timeouts.idle), flight.producer)
    hit = served(flight.value, shape) if flight.value is not None else None
    return _Lease(_StoredClient(hit.answer), hit.producer) if hit is not None else None


def _key(prepared: Prepared[Any], exchange: Exchange, route: RouteCache) -> str | None:
    """The entry's key, or None when the request is not to be cached (no-store, or not deterministic)."""
    if exchange.cache_control == NO_STORE or not (route.nondeterministic or deterministic(prepared.encoded)):
        return None
    request = canonical(prepared.encoded)
    principal = exchange.principal
    who = scope_value(route.scope, principal.tenant_name if principal is not None else None,
                      principal.id if principal is not None else None, prepared.headers.get("authorization"))
    # The route that serves: a split's variant keeps its own entries (a canary is never answered from the
    # stable variant's, nor the reverse), though the request named the split's route and both send one model.
    return entry_key(request.data, route_name(prepared.match.route), prepared.match.upstream_model, who)


def _route(exchange: Exchange) -> str:
    return exchange.routed.route or ""


def _outcome(exchange: Exchange, outcome: str, asked: float) -> None:
    exchange.cache = outcome
    metrics.child(metrics.CACHE_LOOKUPS, _route(exchange), outcome).inc()
    if exchange.trace is not None:
        exchange.trace.child("cache", asked, time.perf_counter(), {"ingress.cache": outcome})


# --- a hit: the stored answer, where an endpoint's client would be -------------------------------------


class _Lease:
    """What an attempt reads its answer from (`lease.client`) in an endpoint's lease's place: the stored
    answer (a hit), the frames of an identical stream in flight, or the endpoint's client recording; for the
    first two, the route and model that made the answer (None: not known, an entry of the first format)."""

    __slots__ = ("client", "producer")

    def __init__(self, client: _StoredClient | _TailClient | _RecordingClient,
                 producer: Producer | None = None) -> None:
        self.client, self.producer = client, producer


class _StoredClient:
    """An upstream client's calls, answered with the stored answer."""

    __slots__ = ("_answer",)

    def __init__(self, answer: bytes) -> None:
        self._answer = answer

    async def complete(self, body: bytes | bytearray, headers: Mapping[str, str], timeouts: Timeouts | None = None,
                       **_: object) -> bytes:
        return self._answer

    async def embed(self, body: bytes | bytearray, headers: Mapping[str, str],
                    timeouts: Timeouts | None = None) -> bytes:
        return self._answer

    @asynccontextmanager
    async def stream(self, body: bytes | bytearray, headers: Mapping[str, str],
                     timeouts: Timeouts | None = None) -> AsyncIterator[_StoredReads]:
        yield _StoredReads(self._answer)


class _StoredReads:
    """A stored stream's body as `Reads`: all of its frames in one read."""

    __slots__ = ("_data",)

    def __init__(self, data: bytes) -> None:
        self._data = data

    def __aiter__(self) -> _StoredReads:
        return self

    async def __anext__(self) -> bytes:
        data, self._data = self._data, b""
        if not data:
            raise StopAsyncIteration
        return data

    async def pump(self, consume: Callable[[bytes], R | None]) -> R | None:
        data, self._data = self._data, b""
        return consume(data) if data else None


# --- a follower's stream: the leader's frames, as they come ---------------------------------------------


class _TailClient:
    """An upstream client's stream, answered with the frames of an identical stream in flight."""

    __slots__ = ("_flight", "_idle")

    def __init__(self, flight: Flight, idle: float) -> None:
        self._flight, self._idle = flight, idle

    @asynccontextmanager
    async def stream(self, body: bytes | bytearray, headers: Mapping[str, str],
                     timeouts: Timeouts | None = None) -> AsyncIterator[_TailReads]:
        flight = self._flight
        flight.tailing += 1
        try:
            yield _TailReads(flight, self._idle)
        finally:
            flight.tailing -= 1


class _TailReads:
    """The leader's reads as `Reads`: each once it has come; a leader that ends with nothing to share, or
    stalls, breaks this stream as its own service would."""

    __slots__ = ("_at", "_flight", "_idle")

    def __init__(self, flight: Flight, idle: float) -> None:
        self._flight, self._idle, self._at = flight, idle, 0

    def __aiter__(self) -> _TailReads:
        return self

    async def __anext__(self) -> bytes:
        data = await self._flight.frame(self._at, self._idle)
        if data is None:
            raise UpstreamUnavailable("The model service's answer, shared with an identical request in flight, "
                                      "broke off.", after_head=True)
        if not data:
            raise StopAsyncIteration
        self._at += 1
        return data

    async def pump(self, consume: Callable[[bytes], R | None]) -> R | None:
        async for data in self:
            if (made := consume(data)) is not None:
                return made
        return None


# --- a miss: the answer recorded on its way, stored once it is whole -----------------------------------


class _Recorder:
    """The bytes of the attempt's answer as they pass (up to `limit`: a larger answer is not stored), and the
    flight its followers wait on (None: this request leads none), settled once the answer is whole or failed."""

    def __init__(self, cache: ResponseCache, route: RouteCache, key: str, shape: Shape, exchange: Exchange,
                 limit: int, flight: Flight | None = None) -> None:
        self.cache, self.route, self.key, self.shape, self.limit = cache, route, key, shape, limit
        self.exchange = exchange
        self.flight = flight
        self.final = False  # a stream: the attempt that opened it is the one served (a chain moves no more)
        self.parts: list[bytes] = []
        self.size = 0

    def lease(self, lease: Lease) -> _Lease:
        self.parts, self.size = [], 0  # each attempt records afresh
        if self.flight is not None:
            self.flight.frames = []
        return _Lease(_RecordingClient(lease, self))

    def opened(self) -> None:
        """The stream the last attempt opened is the answer: followers may tail it, and its end settles."""
        self.final = True
        if self.flight is not None:
            self.flight.open(self.exchange.attempts.served_by)

    def add(self, data: bytes) -> None:
        self.size += len(data)
        if self.size <= self.limit:
            self.parts.append(data)
        else:
            self.parts = []
        if self.flight is not None:
            self.flight.read(data)

    def whole(self) -> None:
        """The attempt succeeded with a whole answer: stored if it is one to keep, and shared with the
        followers. What was recorded is the last attempt's answer: the one served, or (a filtered answer held
        back on a chain, served when every route after it failed) a failure, which `entry` does not keep.
        Its producer is the route and model `send` recorded as serving (`attempts.served_by`)."""
        value = None
        if self.size <= self.limit and self.parts:
            value = entry(self.shape, b"".join(self.parts), self.exchange.attempts.served_by)
        if value is not None:
            self.cache.put(self.route, self.key, value)
        self.settle(value)

    def settle(self, value: bytes | None) -> None:
        """The flight this request leads ends: its followers get `value`, or go their own way (None)."""
        flight, self.flight = self.flight, None
        if flight is not None:
            flight.end(value)
            if self.cache.flights.get(self.key) is flight:
                del self.cache.flights[self.key]

    async def read_on(self, reads: Reads) -> None:
        """The answer's client left before its end while followers wait for it: the rest of the stream is
        read for them (each read within the service's idle timeout), and stored and shared as a whole answer
        would be (or, if it was not whole, nothing is)."""
        try:
            async for data in reads:
                self.add(data)
        except (IngressError, OSError):
            pass
        self.whole()

    def ended(self) -> None:
        """A stream closed: stored if the service's answer was whole and nothing failed on the way; its
        frames checked once more (`entry`) in a later turn of the loop, once its end is on its way. The stream
        of an attempt a chain moved on from (`final` not yet set) settles nothing."""
        if self.answered:
            asyncio.get_running_loop().call_soon(self.whole)
        elif self.final:
            self.settle(None)

    @property
    def answered(self) -> bool:
        """The service's answer came whole, and nothing failed on its way to the client."""
        return self.exchange.answer.upstream_ok is True and self.exchange.failure is None

    @property
    def waited(self) -> bool:
        """The served stream is still wanted by followers (its own client gone or not)."""
        return self.final and self.flight is not None and self.flight.waited


class _RecordingClient:
    """The endpoint's client, each answer's bytes recorded on their way to the attempt."""

    __slots__ = ("_client", "_recorder")

    def __init__(self, lease: Lease, recorder: _Recorder) -> None:
        self._client, self._recorder = lease.client, recorder

    async def complete(self, body: bytes | bytearray, headers: Mapping[str, str], timeouts: Timeouts | None = None,
                       **options: Any) -> bytes:
        answer = await self._client.complete(body, headers, timeouts, **options)
        self._recorder.add(answer)
        return answer

    async def embed(self, body: bytes | bytearray, headers: Mapping[str, str],
                    timeouts: Timeouts | None = None) -> bytes:
        answer = await self._client.embed(body, headers, timeouts)
        self._recorder.add(answer)
        return answer

    @asynccontextmanager
    async def stream(self, body: bytes | bytearray, headers: Mapping[str, str],
                     timeouts: Timeouts | None = None) -> AsyncIterator[_RecordingReads]:
        recorder = self._recorder
        async with self._client.stream(body, headers, timeouts) as reads:
            try:
                yield _RecordingReads(reads, recorder)
            finally:
                try:
                    if recorder.waited and not recorder.answered:
                        await recorder.read_on(reads)
                finally:
                    recorder.ended()  # settles the flight, if reading on did not (or was cancelled)


class _RecordingReads:
    """`Reads`, each read recorded before it is handed on (in the stream's task, or the pump's callback)."""

    __slots__ = ("_reads", "_recorder")

    def __init__(self, reads: Reads, recorder: _Recorder) -> None:
        self._reads, self._recorder = reads, recorder

    def __aiter__(self) -> _RecordingReads:
        return self

    async def __anext__(self) -> bytes:
        data = await anext(self._reads)
        self._recorder.add(data)
        return data

    async def pump(self, consume: Callable[[bytes], R | None]) -> R | None:
        add = self._recorder.add

        def recorded(data: bytes) -> R | None:
            add(data)
            return consume(data)

        return await self._reads.pump(recorded)
