"""Build the edge application and own its lifecycle: upstream groups (each endpoint with its connection pool),
health checks, and the embedded demo service."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from aiohttp import web

from ingress import log, metrics
from ingress.admin.keystore import KeyStore, MemoryKeyStore, RedisKeyStore, Unavailable
from ingress.admin.sync import Follower
from ingress.cache import ResponseCache
from ingress.demo.service import create_demo_app
from ingress.edge import routes
from ingress.edge.appkeys import DRAIN, GATE, GATEWAY, LEDGER, PACER, SETTINGS, STARTED, TASKS
from ingress.edge.connections import EdgeSite, listening_socket
from ingress.edge.drain import Drain
from ingress.edge.middleware import edge_middleware, leave_at_head, name_request
from ingress.edge.overload import Gate
from ingress.edge.pacing import StartPacer
from ingress.oai.sealing import Sealer, new_key, parse_key
from ingress.pipeline import Gateway
from ingress.routing.affinity import SESSION_HEADERS
from ingress.routing.budget import RetryBudget
from ingress.routing.table import RouteTable
from ingress.serve import gctune
from ingress.settings import EMBEDDED, Bridge, Client, Settings
from ingress.sockets import name_server
from ingress.state import ResponseStore
from ingress.tasks import BackgroundTasks
from ingress.tenancy import build as build_tenancy
from ingress.tenancy.ledger import Ledger
from ingress.tenancy.stores.ledger import ledger_store
from ingress.tokens import counter_for
from ingress.tracing import Tracer
from ingress.upstream.client import UpstreamClient
from ingress.upstream.group import EndpointGroup


@asynccontextmanager
async def serve_app(app: web.Application, host: str, port: int, unix: str | None = None) -> AsyncIterator[str]:
    """Run `app` on host:port (0: any free port), or on a Unix socket, until the block ends; yields its
    base URL (`unix:/path` for a socket). Its connections keep the app's `client` settings."""
    settings = app.get(SETTINGS)
    sock = listening_socket(host, port, unix)
    runner = web.AppRunner(app, handler_cancellation=True)
    try:
        await runner.setup()
        await EdgeSite(runner, sock, settings.client if settings is not None else Client()).start()
        if unix is not None:
            yield f"unix:{unix}"
        else:
            bound_host, bound_port = sock.getsockname()[:2]
            yield f"http://{bound_host}:{bound_port}"
    finally:
        await runner.cleanup()
        sock.close()


async def fold_metrics_forever(interval: float = 1.0) -> None:
    """Every `interval` seconds: the GC pauses noted since the last flush (metrics.GcRecorder), and what the
    loop recorded, added to prometheus-client (metrics.fold)."""
    while True:
        await asyncio.sleep(interval)
        metrics.flush_gc()
        metrics.fold()


async def _gateway(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    groups_config, routes = settings.resolved()
    tasks = app[TASKS] = BackgroundTasks()
    async with AsyncExitStack() as stack:
        stack.callback(metrics.fold)  # last of all: what the drain's requests recorded
        stack.callback(log.flush)  # and the access lines they wrote
        tracer = None
        if settings.tracing is not None:  # in each worker: the exporter's thread does not survive a fork
            tracer = Tracer(settings.tracing)
            stack.push_async_callback(asyncio.to_thread, tracer.flush)  # what is queued is sent at the end
        demo_url = None
        if any(e.url == EMBEDDED for g in groups_config.values() for e in g.endpoints):
            demo_url = await stack.enter_async_context(serve_app(create_demo_app(), "", 0, _inner_socket(stack)))
        bridged: dict[Bridge, str] = {}  # each distinct bridge, served on a Unix socket of its own
        for config in groups_config.values():
            for endpoint in config.endpoints:
                if endpoint.bridge is not None and endpoint.bridge not in bridged:
                    bridged[endpoint.bridge] = await stack.enter_async_context(
                        serve_app(_bridge_app(endpoint.bridge, tracer), "", 0, _inner_socket(stack)))
        groups: dict[str, EndpointGroup] = {}
        for name, config in groups_config.items():
            clients = []
            for endpoint in config.endpoints:
                if endpoint.bridge is not None:
                    url = bridged[endpoint.bridge]
                else:
                    assert endpoint.url is not None  # config.py: one of url and bridge
                    url = demo_url if endpoint.url == EMBEDDED and demo_url else endpoint.url
                clients.append(UpstreamClient(url, settings.timeouts, settings.max_answer_bytes, endpoint.keepalive))
            pool = EndpointGroup(name, config, clients)
            stack.push_async_callback(pool.close)
            groups[name] = pool
            if config.health_check is not None:
                tasks.spawn(pool.check_health(), f"health:{name}")
        stack.push_async_callback(tasks.close)
        tasks.spawn(fold_metrics_forever(), "metrics-fold")
        tenancy = None
        if settings.tenancy is not None:
            tenancy = build_tenancy(settings.tenancy, settings.worker_count())
            stack.push_async_callback(tenancy.limiter.close)  # after the renewals stop (callbacks run last first)
            tasks.spawn(tenancy.limiter.renew_forever(), "lease-renewal")
            if tenancy.keysets is not None:  # fetched beside the start: an issuer down does not hold it up
                stack.push_async_callback(tenancy.keysets.close)
                tasks.spawn(tenancy.keysets.refresh_forever(), "issuer-keys")
            if settings.admin is not None:  # the admin API's keys, read before the first request, then followed
                redis = settings.tenancy.redis
                store = app[KEYSTORE] = (RedisKeyStore(redis, settings.admin.deadline_ms) if redis is not None
                                         else MemoryKeyStore())
                stack.push_async_callback(store.close)
                follower = Follower(store, tenancy)
                with contextlib.suppress(Unavailable):  # then the edge starts on its file's keys; the task says so
                    await follower.once()
                tasks.spawn(follower.forever(settings.admin.poll_interval), "admin-keys")
                kept = settings.admin.ledger
                if kept.enabled:  # the spend ledger: its last flush once the drain's requests have ended
                    ledger = app[LEDGER] = Ledger(ledger_store(redis, settings.admin.deadline_ms, kept.hour_days,
                                                               kept.day_days), kept.flush_interval)
                    stack.push_async_callback(ledger.close)
                    ledger.start()
        cache = None
        if any(route.cache is not None for route in routes):  # the stores, once per worker (ingress/cache)
            redis = settings.tenancy.redis if settings.tenancy is not None else None
            cache = ResponseCache(settings.cache, redis)
            stack.push_async_callback(cache.close)
        responses = ResponseStore.build(settings.responses, settings.tenancy.redis if settings.tenancy else None)
        if responses is not None:  # what `store: true` keeps, once per worker (ingress/state)
            stack.push_async_callback(responses.close)
        # Each route's counter is made now. Its vocabulary is built now too (20-95 ms, 16-34 MB), not on a
        # first request, where a limit or a guardrail will count prompts exactly; otherwise by the first exact
        # count (a count_tokens or countTokens request, a stream whose service sent no usage, a limit a reload
        # of the keys file added), which pays that once per worker.
        counts = tenancy is not None and tenancy.policy.counts_prompts()
        for route in routes:
            if route.model is not None or route.upstream_model is not None:
                counter = counter_for(route.upstream_model or route.model or "", route.tokenizer,
                                      settings.max_exact_count_bytes)
                if counts:
                    counter.load()
        app[GATEWAY] = Gateway(
            settings=settings,
            routes=RouteTable(routes),
            groups=groups,
            budget=RetryBudget(settings.retry.budget_ratio, settings.retry.budget_min_per_s,
                               asyncio.get_running_loop().time()),
            tenancy=tenancy,
            tracer=tracer,
            cache=cache,
            responses=responses,
            affinity_headers=tuple(sorted({name.lower() for r in routes
                                           for name in (r.affinity_header, r.split_header) if name}
                                          | (set(SESSION_HEADERS) if any(g.affinity is not None
                                                                         for g in groups.values()) else set()))),
            sealer=sealer(settings),
        )
        yield


KEYSTORE = web.AppKey("keystore", KeyStore)  # with [admin]: where its keys are, for its listener (server.py)


SEALING_KEY = "INGRESS_SEALING_KEY"  # the key made at start when [sealing] names none, for every worker


def sealer(settings: Settings) -> Sealer:
    """The keys of `[sealing]` from the environment; without them one key made at start (by the supervisor,
    for its workers), named by its digest, so that what a former start sealed is known as such."""
    if settings.sealing is not None:
        return Sealer([(k.id, parse_key(os.environ.get(k.key_env, ""), f"[sealing] key '{k.id}' (${k.key_env})"))
                       for k in settings.sealing.keys])
    made = os.environ.get(SEALING_KEY) or os.environ.setdefault(SEALING_KEY, base64.b64encode(new_key()).decode())
    key = parse_key(made, f"${SEALING_KEY}")
    return Sealer([(f"start-{hashlib.sha256(key).hexdigest()[:12]}", key)])


INNER_DIR = "INGRESS_INNER_DIR"  # where the services inside the edge listen: a supervisor's, for its workers


def _inner_socket(stack: AsyncExitStack) -> str:
    """A path for a service the edge runs inside itself (a bridge, the demo): a Unix socket in a directory
    of its own that only this user may enter, removed when the stack closes (and, under a supervisor, in
    the supervisor's directory, removed when it stops, whatever became of the worker). Not a loopback
    port, which every local user could connect to, and a bridge spends its provider's key for whoever
    calls it. A Unix socket also costs the kernel less a message than TCP on loopback."""
    where = tempfile.mkdtemp(prefix="ingress-", dir=os.environ.get(INNER_DIR))  # mode 0700
    stack.callback(shutil.rmtree, where, ignore_errors=True)
    return os.path.join(where, "service.sock")


def _bridge_app(bridge: Bridge, tracer: Tracer | None) -> web.Application:
    from ingress.bridges import load_dialect, target_of
    from ingress.bridges.service import create_bridge_app

    return create_bridge_app(load_dialect(bridge.dialect), target_of(bridge), bridge.timeouts, tracer=tracer)


async def tune_gc(app: web.Application) -> None:
    """An on_startup hook for a serving process (tests leave their own interpreter alone)."""
    gctune.tune_as_served(app[SETTINGS])


def create_app(settings: Settings) -> web.Application:
    metrics.set_build_info()
    metrics.record_gc()
    app = web.Application(middlewares=[edge_middleware], client_max_size=settings.max_body_bytes)
    app[SETTINGS] = settings
    app[DRAIN] = Drain()
    if settings.start_pacing_ms:
        app[PACER] = StartPacer(settings.start_pacing_ms / 1000, streaming=settings.start_pacing_streaming_ms / 1000)
    if settings.overload.enabled:  # else no request takes a place, and no answer's head has one to give back
        app[GATE] = Gate(settings.overload)
        app.on_response_prepare.append(leave_at_head)
    app[STARTED] = int(time.time())
    app.cleanup_ctx.append(_gateway)
    routes.add_routes(app)
    name_server(app)
    app.on_response_prepare.append(name_request)
    return app
