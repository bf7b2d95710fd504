"""The README's first command, `python3 dev.py serve`: a signal sent to it reaches the server, which
drains and stops; nothing is left serving behind it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from fakes.processes import free_port

ROOT = Path(__file__).resolve().parents[2]


def _answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def test_sigterm_to_dev_serve_stops_the_server() -> None:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "dev.py", "serve", "--port", str(port), "--workers", "1"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not _answers(port):
            assert proc.poll() is None and time.monotonic() < deadline, "dev.py serve did not start"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0  # drained (5 s delay) and stopped
        assert not _answers(port)  # no server left behind, orphaned
    finally:
        with contextlib.suppress(ProcessLookupError):  # its whole group: a server it left behind too
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
