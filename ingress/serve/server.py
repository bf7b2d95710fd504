"""Serving: one process with a graceful drain on SIGTERM, or a supervisor of several such workers.

A worker: SIGTERM/SIGINT → readiness false (drain.start) → `drain.delay` for load balancers to notice →
the listener closes and idle keep-alive connections are closed → running requests get `drain.deadline`
→ what still runs ends (streams with an in-band error) → exit 0.

Several workers share one listening socket, bound by the supervisor and inherited by every worker
(TCP or Unix alike). A worker that dies is replaced, with a growing delay if it keeps dying. SIGTERM
to the supervisor is passed to every worker, and the supervisor exits 0 once they have drained.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import socket
import tempfile
import time
from multiprocessing.process import BaseProcess
from typing import Any

import msgspec
from aiohttp import web

from ingress.admin.api import create_admin_app
from ingress.edge.appkeys import DRAIN, GATEWAY, LEDGER
from ingress.edge.connections import EdgeSite
from ingress.log import capture_uncaught, configure, get_logger
from ingress.serve.app import INNER_DIR, KEYSTORE, create_app, sealer, tune_gc
from ingress.settings import Settings

log = get_logger("ingress.server")


def event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # uvloop does not build on every platform; asyncio's loop still works
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def bind_admin(settings: Settings) -> socket.socket | None:
    """The admin API's listening socket, when [admin] is configured: shared by the workers as the public one is."""
    if settings.admin is None:
        return None
    host, port = settings.admin.address()
    return bind(settings, (host, port))


def bind(settings: Settings, address: tuple[str, int] | None = None) -> socket.socket:
    """The listening socket: a Unix socket path, or host:port (or `address`)."""
    if settings.unix and address is None:
        if os.path.exists(settings.unix):
            os.unlink(settings.unix)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(settings.unix)
    else:
        host, port = address or (settings.host, settings.port)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if hasattr(socket, "SO_REUSEPORT"):  # a new edge can bind the port while the old one drains
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


async def _serve(settings: Settings, sock: socket.socket, admin_sock: socket.socket | None = None) -> None:
    app = create_app(settings)
    app.on_startup.append(tune_gc)  # after the cleanup contexts: everything built at start-up is frozen
    # The drain below waits for running requests itself; aiohttp's own wait at cleanup only has to
    # cover handlers finishing their last write (and a connection accepted as the listener closed,
    # which aiohttp would otherwise wait on for the whole timeout).
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=2.0)
    await runner.setup()
    site = EdgeSite(runner, sock, settings.client, settings.worker_count())  # the connections' deadlines and cap
    await site.start()
    admin = await _serve_admin(app, settings, admin_sock) if admin_sock is not None else None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, _reload_keys, app)
    log.info("ready", pid=os.getpid())
    await stop.wait()
    drain = app[DRAIN]
    drain.start()
    log.info("draining", delay_s=settings.drain.delay, deadline_s=settings.drain.deadline)
    await asyncio.sleep(settings.drain.delay)
    await site.stop()  # no new connections; running requests go on
    if admin is not None:
        await admin.cleanup()
    if not await drain.idle(settings.drain.deadline):
        drain.expire()  # what still runs ends now: streams with an in-band error, the rest with a 503
        await drain.idle(2.0)
    await runner.cleanup()  # closes idle connections and the app
    log.info("stopped", pid=os.getpid())


async def _serve_admin(app: web.Application, settings: Settings, sock: socket.socket) -> web.AppRunner:
    """The admin API (ingress/admin) on its own listener, over the keys and tenancy the edge serves with."""
    tenancy = app[GATEWAY].tenancy
    assert settings.admin is not None and tenancy is not None  # config.py: [admin] needs [tenancy]
    runner = web.AppRunner(create_admin_app(settings.admin, app[KEYSTORE], tenancy, app.get(LEDGER)),
                           handler_cancellation=True, access_log=None)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    log.info("admin API ready", listen=settings.admin.listen)
    return runner


def _reload_keys(app: web.Application) -> None:
    """SIGHUP: read the keys file again; traffic goes on, and a bad file keeps the keys in use."""
    tenancy = app[GATEWAY].tenancy if GATEWAY in app else None
    if tenancy is None or tenancy.policy.settings.keys_file is None:
        log.info("SIGHUP: no keys file to read")
        return
    try:
        tenancy.reload()
    except ValueError as exc:
        log.error("keys file not reloaded; the keys in use stay", error=str(exc))
        return
    log.info("keys reloaded", keys=len(tenancy.policy.keyring))


def run_worker(settings_json: bytes, sock: socket.socket, admin_sock: socket.socket | None = None) -> None:
    """One serving process (also the whole server when there is a single worker)."""
    settings = msgspec.json.decode(settings_json, type=Settings)
    configure(settings.log_level)
    capture_uncaught()
    loop = event_loop()
    try:
        loop.run_until_complete(_serve(settings, sock, admin_sock))
    finally:
        loop.close()


def workers_of(settings: Settings) -> int:
    return settings.worker_count()


def serve(settings: Settings) -> int:
    sock = bind(settings)
    admin_sock = bind_admin(settings)
    sealer(settings)  # its keys read (or, without [sealing], made) once, before any worker starts
    if workers_of(settings) == 1:
        run_worker(msgspec.json.encode(settings), sock, admin_sock)
        return 0
    return _supervise(settings, sock, admin_sock)


def _metrics_dir() -> tuple[str, bool]:
    """The workers' shared metrics directory, emptied; and whether this process made it."""
    given = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if given:
        os.makedirs(given, exist_ok=True)
        for name in os.listdir(given):  # counters must not carry over from an earlier run
            if name.endswith(".db"):
                os.unlink(os.path.join(given, name))
        return given, False
    made = tempfile.mkdtemp(prefix="ingress-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = made
    return made, True


FAST_CRASH_S = 5.0  # a worker dying this soon after starting is failing to start
FAST_CRASHES = 5  # ...and this many such deaths in a row end the supervisor with an error


def _supervise(settings: Settings, sock: socket.socket, admin_sock: socket.socket | None = None) -> int:
    metrics_dir, made = _metrics_dir()
    inner = os.environ[INNER_DIR] = tempfile.mkdtemp(prefix="ingress-inner-")  # the workers' bridges' sockets
    try:
        return _run_workers(settings, sock, admin_sock)
    finally:
        shutil.rmtree(inner, ignore_errors=True)  # a worker killed had no chance to remove its own
        if made:
            shutil.rmtree(metrics_dir, ignore_errors=True)


def _run_workers(settings: Settings, sock: socket.socket, admin_sock: socket.socket | None) -> int:
    """Start the workers, then wait on their sentinels (and a signal's wakeup): a worker that dies is
    seen at once, and replaced after its backoff, while the others are still watched and a SIGTERM
    during a backoff is acted on at once."""
    from prometheus_client import multiprocess

    context = multiprocessing.get_context("spawn")
    encoded = msgspec.json.encode(settings)
    procs: dict[int, BaseProcess] = {}
    started: dict[int, float] = {}
    restart_at: dict[int, float] = {}  # slots whose worker died, and when to start its replacement
    stopping = False
    crashes: list[float] = []
    fast_crashes = 0
    code = 0
    wakeup, wake = socket.socketpair()  # a signal's handler writes to `wake`: the wait below returns
    wake.setblocking(False)

    def start(slot: int) -> None:
        proc = context.Process(target=run_worker, args=(encoded, sock, admin_sock), name=f"ingress-worker-{slot}",
                               daemon=False)
        proc.start()
        procs[slot] = proc
        started[slot] = time.monotonic()
        log.info("worker started", slot=slot, pid=proc.pid)

    def on_signal(signum: int, _frame: Any) -> None:
        nonlocal stopping
        stopping = True
        # The listening socket is shared: while this process holds it, it keeps listening after the
        # workers stop accepting, and connections queue where nobody takes them (and, with
        # SO_REUSEPORT, away from a new edge on the same port). No worker will be started again.
        sock.close()
        if admin_sock is not None:
            admin_sock.close()
        for proc in procs.values():
            if proc.pid is not None and proc.is_alive():
                os.kill(proc.pid, signal.SIGTERM)
        with contextlib.suppress(OSError):  # full: a wakeup is already pending
            wake.send(b"\0")

    def on_hangup(signum: int, _frame: Any) -> None:
        for proc in procs.values():
            if proc.pid is not None and proc.is_alive():
                os.kill(proc.pid, signal.SIGHUP)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_hangup)
    for slot in range(workers_of(settings)):
        start(slot)
    while not stopping:
        timeout = max(0.0, min(restart_at.values()) - time.monotonic()) if restart_at else None
        watched = [proc.sentinel for slot, proc in procs.items() if slot not in restart_at]
        multiprocessing.connection.wait([*watched, wakeup], timeout)
        if stopping:
            break
        now = time.monotonic()
        for slot, proc in list(procs.items()):
            if slot in restart_at or proc.is_alive():
                continue
            multiprocess.mark_process_dead(proc.pid)  # type: ignore[no-untyped-call]  # unannotated upstream
            fast_crashes = fast_crashes + 1 if now - started[slot] < FAST_CRASH_S else 0
            if fast_crashes >= FAST_CRASHES:
                log.error("workers keep failing to start; stopping", exitcode=proc.exitcode)
                on_signal(signal.SIGTERM, None)
                code = 1
                break
            crashes[:] = [t for t in crashes if now - t < 60] + [now]
            backoff = min(0.5 * 2 ** (len(crashes) - 1), 30.0)
            log.error("worker died; replacing it", slot=slot, pid=proc.pid, exitcode=proc.exitcode,
                      backoff_s=backoff)
            restart_at[slot] = now + backoff
        for slot, at in sorted(restart_at.items(), key=lambda item: item[1]):
            if at <= time.monotonic() and not stopping:
                del restart_at[slot]
                start(slot)
    wakeup.close()
    wake.close()
    limit = time.monotonic() + settings.drain.delay + settings.drain.deadline + 10
    for proc in procs.values():
        proc.join(max(0.0, limit - time.monotonic()))
        if proc.is_alive():
            log.error("worker did not stop in time; killing it", pid=proc.pid)
            proc.kill()
            proc.join()
    if settings.unix and os.path.exists(settings.unix):
        os.unlink(settings.unix)
    log.info("all workers stopped")
    return code

