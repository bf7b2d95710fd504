"""`python -m ingress serve ...` as a real process group, for tests of signals, drains and workers."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from waiting import eventually

ROOT = Path(__file__).resolve().parents[3]
CHAT = "/v1/chat/completions"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EdgeProcess:
    """The edge in its own process group, its JSON log lines in a file. With several workers, their
    metrics directory is `metrics_dir` (left to the supervisor when None). With `stderr_apart`, what
    the edge writes to stderr goes to a file of its own, `err`, instead of the log."""

    def __init__(self, tmp_path: Path, name: str, port: int, args: list[str], workers: int,
                 metrics_dir: Path | None, *, stderr_apart: bool = False) -> None:
        self.port = port
        self.workers = workers
        self.log = tmp_path / f"{name}.log"
        self.err = tmp_path / f"{name}.stderr" if stderr_apart else self.log
        env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
        # What the edge makes in the temporary directory (its workers' metrics, its bridges' sockets) goes
        # here, removed once the group is killed: a SIGKILL gives the edge no chance to remove its own.
        # Not under tmp_path: a Unix socket's path must stay under 108 bytes.
        self.temp = Path(tempfile.mkdtemp(prefix="edge-"))
        env["TMPDIR"] = str(self.temp)
        if metrics_dir is not None:
            metrics_dir.mkdir()
            env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
        argv = [sys.executable, "-m", "ingress", "serve", "--port", str(port), "--workers", str(workers), *args]
        with self.log.open("wb") as out, self.err.open("ab") as err:
            self.proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out,
                                         stderr=err if stderr_apart else subprocess.STDOUT, start_new_session=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def events(self, event: str | None = None) -> list[dict[str, Any]]:
        lines = []
        for line in self.log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                lines.append(json.loads(line))
        return [e for e in lines if isinstance(e, dict) and (event is None or e.get("event") == event)]

    def served(self, status: int = 200) -> int:
        """Chat completions this edge logged with `status`."""
        return sum(1 for e in self.events("request") if e.get("path") == CHAT and e.get("status") == status)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    async def started(self, timeout: float = 20.0) -> None:
        """Until every worker has logged "ready" (its SIGTERM handler is installed by then)."""
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"the edge exited with {self.proc.returncode}")
            return len(self.events("ready")) >= self.workers

        try:
            await eventually(ready, f"{self.workers} workers ready", timeout=timeout, interval=0.05)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.tail()}") from None

    def terminate(self) -> None:
        self.proc.send_signal(signal.SIGTERM)

    async def exit_code(self, timeout: float) -> int:
        try:
            await eventually(lambda: self.proc.poll() is not None, "the edge exited", timeout=timeout, interval=0.05)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.tail()}") from None
        return self.proc.returncode

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):  # the whole group: workers too
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        shutil.rmtree(self.temp, ignore_errors=True)
