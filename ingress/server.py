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
import multiprocessing
import os
import signal
import socket
import tempfile
import time
from multiprocessing.process import BaseProcess
from typing import Any

import msgspec
from aiohttp import web

from ingress.app import create_app, tune_gc
from ingress.drain import DRAIN
from ingress.log import configure, get_logger
from ingress.settings import Settings

log = get_logger("ingress.server")


def event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # uvloop does not build on every platform; asyncio's loop still works
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def bind(settings: Settings) -> socket.socket:
    """The listening socket: a Unix socket path, or host:port."""
    if settings.unix:
        if os.path.exists(settings.unix):
            os.unlink(settings.unix)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(settings.unix)
    else:
        family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if hasattr(socket, "SO_REUSEPORT"):  # a new edge can bind the port while the old one drains
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((settings.host, settings.port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


async def _serve(settings: Settings, sock: socket.socket) -> None:
    app = create_app(settings)
    app.on_startup.append(tune_gc)  # after the cleanup contexts: everything built at start-up is frozen
    # aiohttp waits this long for running handlers once the listener is closed; the drain deadline
    # ends them first (with an in-band error), so this only bounds a handler that ignores it.
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None,
                           shutdown_timeout=settings.drain.deadline + 5)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info("ready", pid=os.getpid())
    await stop.wait()
    drain = app[DRAIN]
    drain.start()
    log.info("draining", delay_s=settings.drain.delay, deadline_s=settings.drain.deadline)
    await asyncio.sleep(settings.drain.delay)
    expire = loop.call_later(settings.drain.deadline, drain.expire)
    try:
        await runner.cleanup()  # closes the listener and idle connections, waits for running requests
    finally:
        expire.cancel()
    log.info("stopped", pid=os.getpid())


def run_worker(settings_json: bytes, sock: socket.socket) -> None:
    """One serving process (also the whole server when there is a single worker)."""
    settings = msgspec.json.decode(settings_json, type=Settings)
    configure(settings.log_level)
    loop = event_loop()
    try:
        loop.run_until_complete(_serve(settings, sock))
    finally:
        loop.close()


def workers_of(settings: Settings) -> int:
    return settings.workers or os.cpu_count() or 1


def serve(settings: Settings) -> int:
    sock = bind(settings)
    if workers_of(settings) == 1:
        run_worker(msgspec.json.encode(settings), sock)
        return 0
    return _supervise(settings, sock)


def _supervise(settings: Settings, sock: socket.socket) -> int:
    os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="ingress-metrics-"))
    from prometheus_client import multiprocess

    context = multiprocessing.get_context("spawn")
    encoded = msgspec.json.encode(settings)
    procs: dict[int, BaseProcess] = {}
    stopping = False
    crashes: list[float] = []

    def start(slot: int) -> None:
        proc = context.Process(target=run_worker, args=(encoded, sock), name=f"ingress-worker-{slot}", daemon=False)
        proc.start()
        procs[slot] = proc
        log.info("worker started", slot=slot, pid=proc.pid)

    def on_signal(signum: int, _frame: Any) -> None:
        nonlocal stopping
        stopping = True
        # The listening socket is shared: while this process holds it, it keeps listening after the
        # workers stop accepting, and connections queue where nobody takes them (and, with
        # SO_REUSEPORT, away from a new edge on the same port). No worker will be started again.
        sock.close()
        for proc in procs.values():
            if proc.pid is not None and proc.is_alive():
                os.kill(proc.pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    for slot in range(workers_of(settings)):
        start(slot)
    while not stopping:
        time.sleep(0.2)
        for slot, proc in list(procs.items()):
            if proc.is_alive() or stopping:
                continue
            multiprocess.mark_process_dead(proc.pid)  # type: ignore[no-untyped-call]  # unannotated upstream
            now = time.monotonic()
            crashes[:] = [t for t in crashes if now - t < 60] + [now]
            backoff = min(0.5 * 2 ** (len(crashes) - 1), 30.0)
            log.error("worker died; replacing it", slot=slot, pid=proc.pid, exitcode=proc.exitcode,
                      backoff_s=backoff)
            time.sleep(backoff)
            if not stopping:
                start(slot)
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
    return 0

