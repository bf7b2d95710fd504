"""send: endpoint choice, retries, and the route's fallback chain."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ingress import metrics
from ingress.errors import (
    IngressError,
    InvalidRequest,
    Overloaded,
    UpstreamAnswered,
    UpstreamConnectFailed,
    UpstreamError,
)
from ingress.exchange import Exchange
from ingress.pipeline.gateway import Gateway
from ingress.routing.affinity import Prefix
from ingress.routing.chain import Link, classify, falls_back, too_long
from ingress.routing.table import Match
from ingress.settings import ErrorClass
from ingress.upstream.group import Lease

T = TypeVar("T")

Reroute = Callable[[Link], Prefix | None]
"""Makes the request ready for another route of the chain (its model, provider, timeouts), and returns what
a cache-affine group of it chooses by; raises InvalidRequest when the request cannot go there."""


async def send(gw: Gateway, match: Match, ex: Exchange, attempt: Callable[[Lease], Awaitable[T]],
               prefix: Prefix | None = None, *, reroute: Reroute | None = None,
               refused: Callable[[T], bool] | None = None,
               discard: Callable[[T], Awaitable[None]] | None = None) -> T:
    """Run `attempt` on an endpoint of the route's group, and on others when it is safe to. `prefix`: what
    a cache-affine group chooses by (the request's prefix hashes and affinity key).

    Retried, within the retry budget: a connection that could not be made (nothing was sent).
    Then the next link of the route's chain (ingress/routing/chain.py), within the same budget: a route of
    its `fallbacks` (made ready by `reroute`; without it, only the `fallback` group of the same route), when
    the failure is of a class its `fallback_on` lists, always before the answer began; a fallback route
    whose max_context the prompt exceeds is skipped. `refused`: an answer that is a failure of class
    content_filter (it is let go with `discard`, or kept, and served if nothing after it serves).
    Never retried otherwise: answers, and anything once the answer had begun.
    The successful attempt's lease is left on the exchange, held until it settles.
    """
    loop = asyncio.get_running_loop()
    gw.budget.deposit(loop.time())
    links, on = match.links, match.fallback_on
    last: IngressError | None = None
    kept: tuple[T, Link] | None = None  # a filtered answer, served if nothing after it does
    route = links[0].route  # the route the request is ready for
    for index, link in enumerate(links):
        final = index == len(links) - 1
        if index:
            if too_long(link, ex.prompt_tokens) or (link.route is not route and reroute is None):
                _count(link, "skipped")
                continue
            if link.route is not route:
                try:
                    prefix = reroute(link) if reroute is not None else None
                except InvalidRequest:  # what the request asks for, this route's service cannot take
                    _count(link, "skipped")
                    continue
                route = link.route
        group = gw.groups[link.group]
        tried: set[str] = set()
        while group.has_candidates(frozenset(tried)):
            if ex.attempts and not gw.budget.withdraw(loop.time()):
                return _exhausted(ex, kept, last)
            if ex.attempts:
                metrics.child(metrics.RETRIES, link.group).inc()
            ex.attempts += 1
            ex.group = link.group
            try:
                lease = await group.acquire(frozenset(tried), prefix)
            except Overloaded as exc:  # the group is at capacity: another route may have room
                last = exc
                if _moves(ex, link, exc, on, final) is None:
                    return _exhausted(ex, kept, exc)
                break
            tried.add(lease.state.url)
            ex.upstream, ex.choice = lease.state.url, lease.decision
            if ex.upstream_sent is None:
                ex.upstream_sent = time.perf_counter()  # retries count as upstream time, not overhead
            if ex.trace is not None:
                ex.trace.attempt(link.group, lease.state.url, ex.attempts, link.name)
            try:
                try:
                    result = await attempt(lease)
                except BaseException as exc:
                    if ex.trace is not None:  # the attempt's span ends failed; a successful one, with the answer
                        ex.trace.end_attempt(exc)
                    raise
                finally:
                    ex.upstream_head = time.perf_counter()
            except UpstreamConnectFailed as exc:
                lease.release(False)
                last = exc
                if len(tried) <= gw.settings.retry.attempts:
                    _count(link, "unavailable")
                    continue  # another endpoint of the group: nothing was sent
                if _moves(ex, link, exc, on, final) is None:
                    return _exhausted(ex, kept, exc)
                break
            except UpstreamError as exc:
                # An answer is the endpoint doing its job, unless it is a 5xx; anything else is its failure.
                lease.release(isinstance(exc, UpstreamAnswered) and exc.status < 500)
                last = exc
                if _moves(ex, link, exc, on, final) is None:
                    return _exhausted(ex, kept, exc)
                break
            except BaseException:
                lease.release(None)
                raise
            if refused is not None and not final and "content_filter" in on and refused(result):
                lease.release(True)
                _count(link, "content_filter")
                ex.fell_back = [*(ex.fell_back or ()), f"{link.name}:content_filter"]
                if discard is not None:
                    await discard(result)
                else:
                    kept = (result, link)
                break
            ex.lease = lease
            _served(ex, link, "ok")
            return result
        else:  # every endpoint of the group was tried (each connection failed)
            if last is None or _moves(ex, link, last, on, final, count=False) is None:
                return _exhausted(ex, kept, last)
    return _exhausted(ex, kept, last)


def _moves(ex: Exchange, link: Link, exc: IngressError, on: frozenset[ErrorClass], final: bool, *,
           count: bool = True) -> ErrorClass | None:
    """The class the failure moves the request on for (recorded), or None: it ends the chain here."""
    kind = None if final else falls_back(exc, on)
    if count:
        _count(link, kind or classify(exc) or "error")
    if kind is not None:
        ex.fell_back = [*(ex.fell_back or ()), f"{link.name}:{kind}"]
    return kind


def _served(ex: Exchange, link: Link, outcome: str) -> None:
    ex.served_by = (link.name, link.model(ex.model or ""))
    _count(link, outcome)


def _count(link: Link, outcome: str) -> None:
    metrics.child(metrics.ROUTE_ATTEMPTS, link.name, outcome).inc()


def _exhausted(ex: Exchange, kept: tuple[T, Link] | None, last: IngressError | None) -> T:
    """The chain ended without an answer it would serve: a filtered answer kept from before, else the
    last failure."""
    if kept is not None:
        result, link = kept
        ex.served_by = (link.name, link.model(ex.model or ""))
        return result
    raise last or UpstreamConnectFailed("The model service is unavailable.")
