"""Benchmark servers as subprocesses: each on a free loopback port, awaited until it answers, stopped after."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO

from bench.lib.procs import cpu_seconds, rss_kb

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def python_in(checkout: Path, *then: Path) -> list[str]:
    """Python running `checkout`'s code. `-P`: the servers start in the project's root, and `python -m`
    would otherwise put the working directory first on sys.path, ahead of PYTHONPATH: every side of a
    comparison would run the working tree's code. `then`: searched after `checkout` (the project's root, for
    a `bench` module `checkout` may not have)."""
    return ["env", "PYTHONPATH=" + os.pathsep.join(map(str, (checkout, *then))), sys.executable, "-P"]


class NotReady(RuntimeError):
    """A server exited, or did not answer in time; the message names its log and ends with the log's tail."""


@dataclass
class Server:
    """One process listening on `port`. Its stderr goes to `log`; its stdout to /dev/null (one JSON access
    line a request: rendered as in production, unread), to `stdout` if named, or to the log too if `stdout`
    is the log. `env` is added to this process's environment (a None value removes the variable).

    As a context manager: started, awaited, and stopped on leaving, whatever happened."""

    name: str
    argv: list[str]
    port: int
    log: Path
    env: Mapping[str, str | None] = field(default_factory=dict)
    cwd: Path = ROOT
    health: str | None = "/healthz"  # a GET answered 200 when ready; None: ready once the port accepts
    stdout: Path | None = None
    new_session: bool = False  # its own process group (a peer whose children must not get our signals)
    stop_timeout: float = 5.0  # how long SIGTERM's drain may take before the process is killed
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"{self.name} was not started"
        return self.proc.pid

    def start(self) -> None:
        env = None
        if self.env:
            env = {k: v for k, v in os.environ.items() if self.env.get(k, v) is not None}
            env.update({k: v for k, v in self.env.items() if v is not None})
        with ExitStack() as files:
            err = files.enter_context(open(self.log, "wb"))
            out: int | IO[bytes] = subprocess.DEVNULL
            if self.stdout == self.log:
                out = err
            elif self.stdout is not None:
                out = files.enter_context(open(self.stdout, "wb"))
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=err, cwd=self.cwd, env=env,
                                         start_new_session=self.new_session)

    def _tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def _answers(self) -> bool:
        try:
            if self.health is None:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return True
            with urllib.request.urlopen(self.url + self.health, timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def wait_ready(self, timeout: float = 30.0, poll: float = 0.1) -> None:
        assert self.proc is not None, f"{self.name} was not started"
        where = self.url + self.health if self.health is not None else f"port {self.port}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise NotReady(f"{self.name} exited with {self.proc.returncode} before {where} answered; "
                               f"its log, {self.log}, ends:\n{self._tail()}")
            if self._answers():
                return
            time.sleep(poll)
        raise NotReady(f"{self.name} did not answer {where} in {timeout:.0f} s; its log, {self.log}, ends:\n"
                       f"{self._tail()}")

    def cpu_seconds(self) -> tuple[float, float]:
        """(user, system) CPU seconds of the process and its descendants so far, from /proc."""
        return cpu_seconds(self.pid)

    def rss_kb(self) -> int:
        """VmRSS of the process and its descendants, in KiB."""
        return rss_kb(self.pid)

    def kill(self) -> None:
        """Stopped at once, with no drain (SIGTERM's takes seconds): for a server measured and done with."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(self.stop_timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def __enter__(self) -> Server:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def start_all(*servers: Server, timeout: float = 30.0) -> None:
    """Every server started (all at once: they start side by side), then each awaited; if one cannot start
    or does not answer, every one is stopped before the error goes on."""
    try:
        for server in servers:
            server.start()
        for server in servers:
            server.wait_ready(timeout)
    except BaseException:
        stop_all(*servers)
        raise


def stop_all(*servers: Server) -> None:
    for server in servers:
        server.stop()


@contextmanager
def serving(*servers: Server, timeout: float = 30.0) -> Iterator[tuple[Server, ...]]:
    """start_all() on entering the block; every server stopped on leaving it, whatever happened in it."""
    start_all(*servers, timeout=timeout)
    try:
        yield servers
    finally:
        stop_all(*servers)
