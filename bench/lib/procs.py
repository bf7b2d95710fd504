"""What /proc says about benchmark servers and the machine: CPU time, RSS, listen overflows, load."""

from __future__ import annotations

import os
import resource
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

CLK_TCK = os.sysconf("SC_CLK_TCK")


def family(pid: int) -> list[int]:
    """A process and all its descendants (an edge started with several workers is one process tree)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo += children.get(current, [])
    return found


@contextmanager
def paused(pids: list[int]) -> Iterator[None]:
    """The process trees of `pids` stopped (SIGSTOP) while the block runs, then continued: servers pinned to
    the core of the one being measured do no work of their own on it meanwhile (a Python or Node server
    left idle still runs its timers and collector). Connections to a stopped server wait in the kernel."""
    import signal

    stopped = [p for pid in pids for p in family(pid)]
    for pid in stopped:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 2.0  # a signal is delivered when the process is next scheduled
    while time.monotonic() < deadline and any(_state(pid) not in ("T", "t", "Z", "") for pid in stopped):
        time.sleep(0.001)
    try:
        yield
    finally:
        for pid in stopped:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def _state(pid: int) -> str:
    """A process's state letter ("" once it is gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def _rss_one(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:  # exited meanwhile
        pass
    return 0


def _cpu_one(pid: int) -> tuple[float, float]:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK  # utime, stime


def rss_kb(pid: int) -> int:
    """VmRSS of a process tree, in KiB."""
    return sum(_rss_one(p) for p in family(pid))


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process tree so far."""
    times = [_cpu_one(p) for p in family(pid)]
    return sum(u for u, _ in times), sum(k for _, k in times)


def listen_overflows() -> int:
    """The kernel's count of connections dropped because a listen backlog was full (TcpExt)."""
    lines = [ln.split() for ln in Path("/proc/net/netstat").read_text().splitlines() if ln.startswith("TcpExt:")]
    return int(dict(zip(lines[0], lines[1], strict=False)).get("ListenOverflows", 0)) if len(lines) >= 2 else 0


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    total = sum(values[:8])
    idle = values[3] + values[4]
    return (total - idle) / CLK_TCK, total / CLK_TCK


def steal_seconds() -> float:
    """CPU time the hypervisor gave to other guests, machine-wide so far (/proc/stat `steal`)."""
    return int(Path("/proc/stat").read_text().split()[8]) / CLK_TCK


class Watch:
    """CPU time of each watched process, of this process and of the whole machine over a block, and the
    peak RSS of each watched process sampled every 100 ms."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.peak_rss_kb = {name: 0 for name in pids}
        self.cpu: dict[str, float] = {}  # user + system
        self.sys: dict[str, float] = {}  # system (kernel) alone
        self.wall = 0.0
        self.self_cpu = 0.0
        self.children_cpu = 0.0
        self.machine_busy_cores = 0.0
        self._stop = threading.Event()

    def _sample(self) -> None:
        while not self._stop.wait(0.1):
            for name, pid in self.pids.items():
                self.peak_rss_kb[name] = max(self.peak_rss_kb[name], rss_kb(pid))

    @contextmanager
    def during(self) -> Iterator[Watch]:
        cpu0 = {n: cpu_seconds(p) for n, p in self.pids.items()}
        busy0, total0 = machine_busy()
        self_0 = resource.getrusage(resource.RUSAGE_SELF)
        child_0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        thread = threading.Thread(target=self._sample, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join()
            self.wall = time.perf_counter() - t0
            cpu1 = {n: cpu_seconds(p) for n, p in self.pids.items()}
            self.cpu = {n: sum(cpu1[n]) - sum(cpu0[n]) for n in self.pids}
            self.sys = {n: cpu1[n][1] - cpu0[n][1] for n in self.pids}
            busy1, total1 = machine_busy()
            self.machine_busy_cores = (busy1 - busy0) / ((total1 - total0) / (os.cpu_count() or 1) or 1)
            self_1 = resource.getrusage(resource.RUSAGE_SELF)
            child_1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            self.self_cpu = (self_1.ru_utime + self_1.ru_stime) - (self_0.ru_utime + self_0.ru_stime)
            self.children_cpu = (child_1.ru_utime + child_1.ru_stime) - (child_0.ru_utime + child_0.ru_stime)

    def summary(self) -> dict[str, Any]:
        ours = sum(self.cpu.values()) + self.self_cpu + self.children_cpu
        wall = self.wall or 1.0
        return {
            "cpu_percent": {n: round(c / wall * 100, 1) for n, c in self.cpu.items()},
            "system_cpu_percent": {n: round(c / wall * 100, 1) for n, c in self.sys.items()},
            "bench_client_cpu_percent": round(self.self_cpu / wall * 100, 1),
            "wrk_cpu_percent": round(self.children_cpu / wall * 100, 1),
            "machine_busy_percent": round(self.machine_busy_cores * 100, 1),
            "others_cpu_percent": round(max(0.0, self.machine_busy_cores - ours / wall) * 100, 1),
            "peak_rss_kb": dict(self.peak_rss_kb),
        }
