"""send: endpoint choice, retries, fallback."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ingress import metrics
from ingress.errors import (
    IngressError,
    UpstreamAnswered,
    UpstreamConnectFailed,
    UpstreamError,
    UpstreamTimeout,
)
from ingress.exchange import Exchange
from ingress.pipeline.gateway import Gateway
from ingress.routing.affinity import Prefix
from ingress.routing.table import Match
from ingress.upstream.group import Lease

T = TypeVar("T")


async def send(gw: Gateway, match: Match, ex: Exchange, attempt: Callable[[Lease], Awaitable[T]],
               prefix: Prefix | None = None) -> T:
    """Run `attempt` on an endpoint of the route's group, and on others when it is safe to. `prefix`: what
    a cache-affine group chooses by (the request's prefix hashes and affinity key).

    Retried, within the retry budget: a connection that could not be made (nothing was sent).
    Then the fallback group, if any: when the group is unavailable or fails before the first byte.
    Never retried: timeouts, answers (even errors) and anything once the answer had begun.
    The successful attempt's lease is left on the exchange, held until it settles.
    """
    loop = asyncio.get_running_loop()
    gw.budget.deposit(loop.time())
    groups = [match.route.group] + ([match.route.fallback] if match.route.fallback else [])
    last: IngressError | None = None
    for name in groups:
        group = gw.groups[name]
        tried: set[str] = set()
        while group.has_candidates(frozenset(tried)):
            if ex.attempts and not gw.budget.withdraw(loop.time()):
                raise last or UpstreamConnectFailed("The model service is unavailable.")
            if ex.attempts:
                metrics.RETRIES.labels(name).inc()
            ex.attempts += 1
            ex.group = name
            lease = await group.acquire(frozenset(tried), prefix)
            tried.add(lease.state.url)
            ex.upstream, ex.choice = lease.state.url, lease.decision
            if ex.upstream_sent is None:
                ex.upstream_sent = time.perf_counter()  # retries count as upstream time, not overhead
            if ex.trace is not None:
                ex.trace.attempt(name, lease.state.url, ex.attempts)
            try:
                try:
                    result = await attempt(lease)
                except BaseException as exc:
                    if ex.trace is not None:  # the attempt's span ends failed; a successful one, with the answer
                        ex.trace.end_attempt(exc)
                    raise
                finally:
                    ex.upstream_head = time.perf_counter()
            except UpstreamAnswered as exc:
                lease.release(exc.status < 500)
                if exc.status < 500:
                    raise
                last = exc
                break
            except UpstreamConnectFailed as exc:
                lease.release(False)
                last = exc
                if len(tried) > gw.settings.retry.attempts:
                    break
                continue
            except UpstreamError as exc:
                lease.release(False)
                last = exc
                if isinstance(exc, UpstreamTimeout) or exc.after_head:
                    raise  # the generation may have run: sending it elsewhere could run it twice
                break  # the endpoint took the request: no retry in this group; the fallback may serve it
            except BaseException:
                lease.release(None)
                raise
            ex.lease = lease
            return result
    assert last is not None
    raise last

