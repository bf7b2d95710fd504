"""send: endpoint choice, retries, and the route's fallback chain."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, Generic, NamedTuple, TypeVar

from ingress import metrics
from ingress.errors import (
    IngressError,
    InvalidRequest,
    Overloaded,
    UpstreamAnswered,
    UpstreamConnectFailed,
    UpstreamError,
)
from ingress.exchange import Attempts, Exchange
from ingress.pipeline.gateway import Gateway
from ingress.pipeline.prepare import Prepared
from ingress.routing.affinity import Decision
from ingress.routing.chain import Link, classify, falls_back, too_long
from ingress.routing.table import Match
from ingress.settings import ErrorClass
from ingress.upstream.group import Lease

T = TypeVar("T")

Reroute = Callable[[Link], Prepared[Any]]
"""The request prepared for another route of the chain (its model, provider, timeouts, what a cache-affine
group of it chooses by); raises InvalidRequest when the request cannot go there."""

Attempt = Callable[[Lease, Prepared[Any]], Awaitable[T]]
"""One attempt on an endpoint's lease, of the request as prepared for the endpoint's route."""


async def send(gateway: Gateway, prepared: Prepared[Any], exchange: Exchange, attempt: Attempt[T], *,
               reroute: Reroute | None = None, refused: Callable[[T], bool] | None = None,
               discard: Callable[[T], Awaitable[None]] | None = None) -> T:
    """Run `attempt` on an endpoint of the route's group, and on others when it is safe to; its answer is
    returned, and the attempts recorded on the exchange (`exchange.attempts`, this stage's part of it).
    A cache-affine group chooses by the request's `prefix` (its prefix hashes and affinity key).

    Retried, within the retry budget: a connection that could not be made (nothing was sent).
    Then the next link of the route's chain (ingress/routing/chain.py), within the same budget: a route of
    its `fallbacks` (prepared for it by `reroute`; without it, only the `fallback` group of the same route),
    when the failure is of a class its `fallback_on` lists, always before the answer began; a fallback route
    whose max_context the prompt exceeds is skipped. `refused`: an answer that is a failure of class
    content_filter (it is let go with `discard`, or kept, and served if nothing after it serves).
    Never retried otherwise: answers, and anything once the answer had begun.
    The successful attempt's lease is left on the exchange, held until it settles.
    """
    loop = asyncio.get_running_loop()
    gateway.budget.deposit(loop.time())
    attempts, asked, prompt_tokens = exchange.attempts, exchange.routed.model or "", exchange.routed.prompt_tokens
    match = prepared.match
    links, on = match.links, match.fallback_on
    last: IngressError | None = None
    kept: _Kept[T] | None = None  # a filtered answer, served if nothing after it does
    ready = prepared  # the request as prepared for the route of the link being tried
    for index, link in enumerate(links):
        final = index == len(links) - 1
        if index:
            if too_long(link, prompt_tokens) or (link.route is not ready.match.route and reroute is None):
                _count(link, "skipped")
                continue
            if link.route is not ready.match.route and reroute is not None:
                try:
                    ready = reroute(link)
                except InvalidRequest:  # what the request asks for, this route's service cannot take
                    _count(link, "skipped")
                    continue
        group = gateway.groups[link.group]
        tried: set[str] = set()
        while group.has_candidates(frozenset(tried)):
            if attempts.count and not gateway.budget.withdraw(loop.time()):
                return _exhausted(attempts, asked, kept, last)
            if attempts.count:
                metrics.child(metrics.RETRIES, link.group).inc()
            attempts.count += 1
            attempts.group = link.group
            try:
                lease = await group.acquire(frozenset(tried), ready.prefix)
            except Overloaded as exc:  # the group is at capacity: another route may have room
                last = exc
                if _moves(attempts, link, exc, on, final) is None:
                    return _exhausted(attempts, asked, kept, exc)
                break
            tried.add(lease.state.url)
            attempts.upstream, attempts.choice = lease.state.url, lease.decision
            if attempts.sent is None:
                attempts.sent = time.perf_counter()  # retries count as upstream time, not overhead
            if exchange.trace is not None:
                exchange.trace.attempt(link.group, lease.state.url, attempts.count, link.name)
            try:
                try:
                    result = await attempt(lease, ready)
                except BaseException as exc:
                    if exchange.trace is not None:  # the attempt's span ends failed; a successful one, with the answer
                        exchange.trace.end_attempt(exc)
                    raise
                finally:
                    attempts.head = time.perf_counter()
            except UpstreamConnectFailed as exc:
                lease.release(False)
                last = exc
                if len(tried) <= gateway.settings.retry.attempts:
                    _count(link, "unavailable")
                    continue  # another endpoint of the group: nothing was sent
                if _moves(attempts, link, exc, on, final) is None:
                    return _exhausted(attempts, asked, kept, exc)
                break
            except UpstreamError as exc:
                # An answer is the endpoint doing its job, unless it is a 5xx; anything else is its failure.
                lease.release(isinstance(exc, UpstreamAnswered) and exc.status < 500)
                last = exc
                if _moves(attempts, link, exc, on, final) is None:
                    return _exhausted(attempts, asked, kept, exc)
                break
            except BaseException:
                lease.release(None)
                raise
            if refused is not None and not final and "content_filter" in on and refused(result):
                lease.release(True)
                _count(link, "content_filter")
                attempts.fell_back = [*(attempts.fell_back or ()), f"{link.name}:content_filter"]
                if discard is not None:
                    await discard(result)
                else:
                    kept = _Kept(result, link, ready, lease.state.url, lease.decision)
                break
            attempts.lease = lease
            _served(attempts, link, asked, ready)
            _count(link, "ok")
            return result
        else:  # every endpoint of the group was tried (each connection failed)
            if last is None or _moves(attempts, link, last, on, final, count=False) is None:
                return _exhausted(attempts, asked, kept, last)
    return _exhausted(attempts, asked, kept, last)


def _moves(attempts: Attempts, link: Link, exc: IngressError, on: frozenset[ErrorClass], final: bool, *,
           count: bool = True) -> ErrorClass | None:
    """The class the failure moves the request on for (recorded), or None: it ends the chain here."""
    kind = None if final else falls_back(exc, on)
    if count:
        _count(link, kind or classify(exc) or "error")
    if kind is not None:
        attempts.fell_back = [*(attempts.fell_back or ()), f"{link.name}:{kind}"]
    return kind


def served_stored(exchange: Exchange, prepared: Prepared[Any], producer: tuple[str, str] | None) -> None:
    """A hit of the route's response cache (ingress/pipeline/cache.py), no attempt made: recorded as served by
    `producer`, the route (its name) and model of the attempt that made the stored answer, read from its
    entry: after a miss that fell back, a later route of the chain than the request's, whose key the entry is
    kept under. None (an entry stored before entries recorded it): served by no route named, not a guess.
    `served` is the producer's route too, when it is a link of the request's chain: what seals the answer's
    reasoning names the provider that made it, and streamed tokens are counted as its model counts them."""
    attempts = exchange.attempts
    match = prepared.match
    link = next((link for link in match.links if producer is not None and link.name == producer[0]), None)
    if producer is not None and link is not None and link.route is not match.route:
        match = Match(link.route, producer[1])  # as send's reroute matches a fallback route
    attempts.served_by, attempts.served = producer, match


def _served(attempts: Attempts, link: Link, asked: str, ready: Prepared[Any]) -> None:
    attempts.served_by = (link.name, link.model(asked))
    attempts.served = ready.match


def _count(link: Link, outcome: str) -> None:
    metrics.child(metrics.ROUTE_ATTEMPTS, link.name, outcome).inc()


class _Kept(NamedTuple, Generic[T]):
    """A filtered answer held back, and the attempt that answered it."""

    result: T
    link: Link
    ready: Prepared[Any]
    upstream: str
    choice: Decision | None


def _exhausted(attempts: Attempts, asked: str, kept: _Kept[T] | None, last: IngressError | None) -> T:
    """The chain ended without an answer it would serve: a filtered answer kept from before (its attempt's
    group and endpoint recorded as the one that answered, not the last one tried), else the last failure."""
    if kept is not None:
        attempts.group, attempts.upstream, attempts.choice = kept.link.group, kept.upstream, kept.choice
        _served(attempts, kept.link, asked, kept.ready)
        return kept.result
    raise last or UpstreamConnectFailed("The model service is unavailable.")
