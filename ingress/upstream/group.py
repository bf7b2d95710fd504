"""Upstream groups at run time: endpoint leases with per-endpoint and per-group limits, a bounded wait
queue, passive health from every outcome, and optional active health checks."""

from __future__ import annotations

import asyncio
import random
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from ingress import metrics
from ingress.errors import Overloaded
from ingress.log import get_logger
from ingress.routing.affinity import CacheAffinity, Decision, Prefix
from ingress.routing.balance import RoundRobin, choose
from ingress.routing.health import EndpointState
from ingress.settings import Affinity, Endpoint, Group
from ingress.upstream.client import UpstreamClient

log = get_logger("ingress.upstream")


@dataclass
class Lease:
    """One request's hold on one endpoint; released exactly once with its outcome."""

    group: EndpointGroup
    state: EndpointState
    client: UpstreamClient
    decision: Decision | None = None  # how a cache-affine group chose the endpoint (None: by P2C)
    released: bool = False

    def release(self, ok: bool | None) -> None:
        """ok: True success, False failure (counts toward ejection), None neither (e.g. a client error)."""
        if self.released:
            return
        self.released = True
        self.group.release(self, ok)


def _identity(endpoint: Endpoint) -> str:
    if endpoint.bridge is not None:
        return f"{endpoint.bridge.dialect}+{endpoint.bridge.target}#{endpoint.bridge.model or ''}"
    return endpoint.url or ""


class EndpointGroup:
    def __init__(self, name: str, config: Group, clients: list[UpstreamClient],
                 clock: Callable[[], float] = time.monotonic, rng: random.Random | None = None) -> None:
        self.name = name
        self.config = config
        # clients[i] serves config.endpoints[i] (its URL resolved, e.g. the embedded demo's port).
        # An endpoint's identity is its configured URL, or its bridge's target: a bridge's (or the embedded
        # demo's) own socket differs from worker to worker, and rendezvous hashing must not.
        self.states = [EndpointState(url=c.endpoint, weight=e.weight, max_in_flight=e.max_in_flight,
                                     ejection=config.ejection, identity=_identity(e))
                       for e, c in zip(config.endpoints, clients, strict=True)]
        self.clients = {c.endpoint: c for c in clients}
        self.in_flight = 0
        self._waiters: deque[tuple[asyncio.Future[None], frozenset[str]]] = deque()
        self._clock = clock
        self._rng = rng or random.Random()
        affinity = config.affinity or Affinity()
        self.affinity = (CacheAffinity(affinity.load_slack, affinity.max_entries, affinity.max_age,
                                       affinity.load_allowance, affinity.prefix_spread)
                         if config.balance == "cache_affine" else None)
        self.round_robin = RoundRobin() if config.balance == "round_robin" else None

    def _has_room(self) -> bool:
        return self.config.max_in_flight == 0 or self.in_flight < self.config.max_in_flight

    def _try(self, exclude: frozenset[str], prefix: Prefix | None) -> Lease | None:
        if not self._has_room():
            return None
        now = self._clock()
        decision = None
        if self.affinity is not None:
            decision = self.affinity.choose(self.states, prefix, now, self._rng, exclude)
            state = decision.endpoint if decision is not None else None
        elif self.round_robin is not None:
            state = self.round_robin.choose(self.states, now, exclude)
        else:
            state = choose(self.states, now, self._rng, exclude)
        if state is None:
            return None
        if self.affinity is not None:
            self.affinity.served(prefix, state.url, now)
        state.in_flight += 1
        self.in_flight += 1
        return Lease(self, state, self.clients[state.url], decision)

    def has_candidates(self, exclude: frozenset[str]) -> bool:
        return any(s.url not in exclude for s in self.states)

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def _could_serve(self, exclude: frozenset[str]) -> bool:
        return self._has_room() and any(s.url not in exclude and s.has_room() for s in self.states)

    async def acquire(self, exclude: frozenset[str] = frozenset(), prefix: Prefix | None = None) -> Lease:
        """An endpoint lease, waiting in a bounded FIFO queue when every endpoint is at its limit. `prefix`:
        what a cache-affine group chooses by (ingress/routing/affinity.py); a P2C group ignores it.

        Arrivals never overtake waiters; a waiter woken for a slot it cannot use keeps its place;
        a wake-up a waiter will not use (it timed out or was cancelled) is passed on.
        """
        if not self._waiters:
            lease = self._try(exclude, prefix)
            if lease is not None:
                return lease
        if len(self._waiters) >= self.config.max_queue:
            raise Overloaded("The model service for this model is at capacity; retry shortly.")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.queue_timeout
        front = False
        while True:
            woken: asyncio.Future[None] = loop.create_future()
            entry = (woken, exclude)
            if front:
                self._waiters.appendleft(entry)
            else:
                self._waiters.append(entry)
            try:
                async with asyncio.timeout_at(deadline):
                    await woken
            except BaseException:
                if woken.done() and not woken.cancelled():
                    self._wake_one()  # pass on the wake-up this request will not use
                if isinstance(sys.exc_info()[1], TimeoutError):
                    raise Overloaded("The model service for this model is at capacity; retry shortly.") from None
                raise
            finally:
                if entry in self._waiters:
                    self._waiters.remove(entry)
            lease = self._try(exclude, prefix)
            if lease is not None:
                self._wake_one()  # there may be room for the next waiter too
                return lease
            front = True  # keep its place at the head of the queue

    def _wake_one(self) -> None:
        """Wake the first waiter that a free slot can serve (one excluding the freed endpoint cannot)."""
        for woken, exclude in self._waiters:
            if not woken.done() and self._could_serve(exclude):
                woken.set_result(None)
                return

    def release(self, lease: Lease, ok: bool | None) -> None:
        state = lease.state
        state.in_flight -= 1
        self.in_flight -= 1
        if ok is True:
            state.record_success()
        elif ok is False and state.record_failure(self._clock()):
            log.warning("endpoint ejected", group=self.name, endpoint=state.url,
                        seconds=round(state.ejected_until - self._clock(), 3))
            metrics.ENDPOINT_HEALTHY.labels(self.name, state.url).set(0)
        self._wake_one()

    async def check_health(self) -> None:
        """Active checks, forever: GET the health path of every endpoint each interval.

        A probe that raises (a bug: its own failures are verdicts) is logged and counts as a failed
        check; the loop goes on, or every endpoint of the group would keep its last verdict for the
        process's life."""
        check = self.config.health_check
        assert check is not None
        while True:
            for state in self.states:
                client = self.clients[state.url]
                try:
                    ok = await client.probe(check.path, check.timeout)
                except Exception:
                    log.exception("health check raised", group=self.name, endpoint=state.url)
                    ok = False
                if ok != state.active_healthy:
                    log.warning("endpoint health changed", group=self.name, endpoint=state.url, healthy=ok)
                state.active_healthy = ok
                metrics.ENDPOINT_HEALTHY.labels(self.name, state.url).set(1 if state.healthy(self._clock()) else 0)
            await asyncio.sleep(check.interval)

    async def close(self) -> None:
        for client in self.clients.values():
            await client.close()
