"""`python -m ingress serve --workers N`: a supervisor, its worker processes, and what they share.

The workers accept from one listening socket bound by the supervisor, write their metrics to files
in PROMETHEUS_MULTIPROC_DIR (so /metrics, answered by any worker, counts every worker's requests),
and are replaced when they die. SIGTERM to the supervisor drains and stops them all.

Each edge runs in a process group of its own, killed whole when its test ends, whatever happened.
Requests go over a new connection each, so that they spread over the workers and a killed worker
cannot take a kept-alive connection down with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from fakes import upstream as fu
from fakes.processes import EdgeProcess, free_port
from fakes.upstream import FakeUpstream
from prometheus_client.parser import text_string_to_metric_families
from waiting import eventually

CHAT = "/v1/chat/completions"
MODEL = "ingress-demo"


def _alive(pid: int) -> bool:
    """Running, and not a zombie left for a parent to reap."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class Supervisor(EdgeProcess):
    """An edge of several workers, and what /proc says about its processes."""

    def worker_pids(self) -> set[int]:
        """The supervisor's children that are workers (not multiprocessing's resource tracker)."""
        pids: set[int] = set()
        for children in Path(f"/proc/{self.proc.pid}/task").glob("*/children"):
            with contextlib.suppress(FileNotFoundError):
                pids.update(int(p) for p in children.read_text().split())
        workers = set()
        for pid in pids:
            with contextlib.suppress(FileNotFoundError):
                if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes() and _alive(pid):
                    workers.add(pid)
        return workers

    def metrics_dirs(self) -> set[str | None]:
        """The PROMETHEUS_MULTIPROC_DIR each running worker was started with."""
        dirs = set()
        for pid in self.worker_pids():
            environ = Path(f"/proc/{pid}/environ").read_text().split("\0")
            dirs.add(dict(e.split("=", 1) for e in environ if "=" in e).get("PROMETHEUS_MULTIPROC_DIR"))
        return dirs

    def all_pids(self) -> set[int]:
        """Every process of the edge's process group."""
        pids = set()
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError):
                fields = stat.read_text().rsplit(")", 1)[1].split()
                if int(fields[2]) == self.proc.pid:  # the process group id
                    pids.add(int(stat.parent.name))
        return pids


@contextlib.contextmanager
def supervisor(tmp_path: Path, *args: str, workers: int = 2, own_metrics_dir: bool = True) -> Iterator[Supervisor]:
    """An edge of `workers` processes. With several, their metrics directory is made under tmp_path
    unless `own_metrics_dir=False` leaves it to the supervisor; a single process has none."""
    metrics_dir = tmp_path / "metrics" if own_metrics_dir and workers > 1 else None
    edge = Supervisor(tmp_path, "edge", free_port(), list(args), workers, metrics_dir)
    try:
        yield edge
    finally:
        edge.kill()


@pytest.fixture
async def fresh() -> AsyncIterator[aiohttp.ClientSession]:
    """A client that opens a new connection for every request."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
        yield session


async def _chat(http: aiohttp.ClientSession, url: str, text: str) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": text}]}
    async with http.post(url + CHAT, json=body) as r:
        assert r.status == 200, await r.text()
        assert (await r.json())["choices"][0]["message"]["content"] == text


async def _scrape(http: aiohttp.ClientSession, url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    async with http.get(url + "/metrics") as r:
        assert r.status == 200
        text = await r.text()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _served(metrics: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> float:
    labels = frozenset({"route": CHAT, "model": MODEL, "status": "200"}.items())
    return metrics.get(("ingress_requests_total", labels), 0)


async def _scrapes_agree(http: aiohttp.ClientSession, url: str, expected: int) -> None:
    """Every worker's /metrics shows `expected` chat requests (scrapes land on any worker)."""
    async def agreed() -> bool:
        return _served(await _scrape(http, url)) == expected

    await eventually(agreed, f"/metrics counting {expected} chat requests", interval=0.1)
    for _ in range(6):
        assert _served(await _scrape(http, url)) == expected


def _remove(dirs: set[str | None]) -> None:
    """Metrics directories a supervisor made (and left behind)."""
    for path in dirs:
        if path is not None and path.startswith(tempfile.gettempdir()):
            shutil.rmtree(path, ignore_errors=True)


# --- metrics over several processes ---------------------------------------------------------------


async def test_metrics_count_the_requests_of_every_worker(tmp_path: Path, fresh: aiohttp.ClientSession) -> None:
    with supervisor(tmp_path, own_metrics_dir=False) as edge:
        await edge.started()
        assert len(edge.worker_pids()) == 2
        dirs = edge.metrics_dirs()
        try:
            assert len(dirs) == 1 and None not in dirs, "the supervisor gives every worker one metrics directory"
            # Each worker embeds its own demo service: the upstream in a request's log line tells the
            # workers apart. Send until both have served some (the kernel picks who accepts).
            sent = 0
            while len({e["upstream"] for e in edge.events("request") if e.get("path") == CHAT}) < 2:
                assert sent < 400, "one worker accepted every connection"
                await asyncio.gather(*(_chat(fresh, edge.url, f"request {sent + i}") for i in range(8)))
                sent += 8
            await _scrapes_agree(fresh, edge.url, sent)
            metrics = await _scrape(fresh, edge.url)
            assert metrics[("ingress_in_flight", frozenset())] == 1  # this scrape, summed over live workers
        finally:
            edge.kill()
            _remove(dirs)


# --- a worker that dies ---------------------------------------------------------------------------


async def test_a_killed_worker_is_replaced_and_its_counts_are_kept(
        tmp_path: Path, fresh: aiohttp.ClientSession) -> None:
    with supervisor(tmp_path) as edge:
        await edge.started()
        before = edge.worker_pids()
        assert len(before) == 2
        sent = 0
        for _ in range(10):
            await _chat(fresh, edge.url, f"request {sent}")
            sent += 1
        # Counts are folded into the shared files every second: a worker killed with SIGKILL loses at most its
        # last second. Once every worker's scrape agrees, the victim's requests are in the files.
        await _scrapes_agree(fresh, edge.url, sent)
        victim = min(before)
        os.kill(victim, signal.SIGKILL)
        async def replaced() -> set[int]:  # requests keep succeeding while the worker is replaced
            nonlocal sent
            await _chat(fresh, edge.url, f"request {sent}")
            sent += 1
            now = edge.worker_pids()
            return now if len(now) == 2 and victim not in now and len(edge.events("ready")) == 3 else set()

        now = await eventually(replaced, "the killed worker replaced", timeout=15)
        replacement = (now - before).pop()
        for _ in range(10):
            await _chat(fresh, edge.url, f"request {sent}")
            sent += 1
        died = edge.events("worker died; replacing it")
        assert [(e["pid"], e["exitcode"]) for e in died] == [(victim, -signal.SIGKILL)]
        assert [e["pid"] for e in edge.events("worker started")][-1] == replacement
        await _scrapes_agree(fresh, edge.url, sent)  # the dead worker's requests still count


async def _until(edge: Supervisor, what: str, condition: Any) -> None:
    try:
        await eventually(condition, what, timeout=20)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{edge.tail()}") from None


async def test_a_worker_dying_during_another_s_backoff_is_seen_at_once(tmp_path: Path) -> None:
    """The supervisor waits on its workers' sentinels: it does not sleep through a restart backoff."""
    with supervisor(tmp_path) as edge:
        await edge.started()

        def pid_of(slot: int) -> int:
            return int([e["pid"] for e in edge.events("worker started") if e["slot"] == slot][-1])

        def died() -> list[dict[str, Any]]:
            return edge.events("worker died; replacing it")

        for n in range(2):  # each death of slot 0 doubles the next backoff: 0.5 s, 1 s, then 2 s
            os.kill(pid_of(0), signal.SIGKILL)
            await _until(edge, f"replacement {n + 1}", lambda n=n: len(edge.events("ready")) == 3 + n)
        os.kill(pid_of(0), signal.SIGKILL)
        await _until(edge, "the third death", lambda: len(died()) == 3)
        assert died()[-1]["backoff_s"] == 2.0
        os.kill(pid_of(1), signal.SIGKILL)  # during slot 0's backoff
        await _until(edge, "both replacements", lambda: len(edge.events("ready")) == 6)

    order = [(e["event"], e.get("slot")) for e in edge.events() if e.get("event") in
             ("worker started", "worker died; replacing it")]
    last_start_of_0 = len(order) - 1 - order[::-1].index(("worker started", 0))
    assert order.index(("worker died; replacing it", 1)) < last_start_of_0, order  # seen during slot 0's backoff


# --- stopping -------------------------------------------------------------------------------------


async def test_sigterm_to_the_supervisor_drains_and_stops_every_process(
        tmp_path: Path, fake_upstream: FakeUpstream) -> None:
    fake_upstream.play(fu.answer(), pace=0.05)
    config = tmp_path / "drain.toml"
    config.write_text("[drain]\ndelay = 0.2\ndeadline = 5.0\n")
    with supervisor(tmp_path, "--config", str(config), "--upstream", fake_upstream.url) as edge:
        await edge.started()
        processes = edge.all_pids()
        assert len(processes) == 4  # the supervisor, two workers, multiprocessing's resource tracker
        text = " ".join(f"w{i}" for i in range(15))
        body = {"model": MODEL, "messages": [{"role": "user", "content": text}], "stream": True}
        async with aiohttp.ClientSession() as http, http.post(edge.url + CHAT, json=body) as r:
            assert r.status == 200
            await r.content.readline()
            edge.proc.send_signal(signal.SIGTERM)
            rest = (await r.read()).decode()
        assert rest.rstrip().endswith("data: [DONE]")  # the stream in flight was finished
        assert await edge.exit_code(timeout=15) == 0
        assert edge.events("all workers stopped")
        await eventually(lambda: not {pid for pid in processes if _alive(pid)}, "every process gone",
                         interval=0.05)


async def test_the_supervisor_removes_the_metrics_directory_it_made(tmp_path: Path) -> None:
    config = tmp_path / "drain.toml"
    config.write_text("[drain]\ndelay = 0.1\ndeadline = 1.0\n")
    with supervisor(tmp_path, "--config", str(config), own_metrics_dir=False) as edge:
        await edge.started()
        dirs = edge.metrics_dirs()
        try:
            (made,) = dirs
            assert made is not None and Path(made).is_dir()
            edge.proc.send_signal(signal.SIGTERM)
            assert await edge.exit_code(timeout=10) == 0
            assert not Path(made).exists(), f"{made} was left behind"
        finally:
            _remove(dirs)


async def test_the_workers_demo_sockets_are_removed_with_the_supervisor_even_a_killed_workers(
        tmp_path: Path, fresh: aiohttp.ClientSession) -> None:
    config = tmp_path / "drain.toml"
    config.write_text("[drain]\ndelay = 0.1\ndeadline = 1.0\n")
    with supervisor(tmp_path, "--config", str(config)) as edge:
        await edge.started()
        (inner,) = edge.temp.glob("ingress-inner-*")  # the supervisor's; the embedded demo of each worker inside
        assert (inner.stat().st_mode & 0o777, inner.stat().st_uid) == (0o700, os.getuid())
        assert len(list(inner.glob("*/service.sock"))) == 2
        await _chat(fresh, edge.url, "through a worker's own demo")
        victim = min(edge.worker_pids())
        os.kill(victim, signal.SIGKILL)  # it cannot remove its socket's directory
        await _until(edge, "the killed worker replaced", lambda: len(edge.events("ready")) == 3)
        assert len(list(inner.glob("*/service.sock"))) == 3
        edge.proc.send_signal(signal.SIGTERM)
        assert await edge.exit_code(timeout=10) == 0
        assert not inner.exists(), sorted(str(p) for p in inner.rglob("*"))


# --- what a served process exports ----------------------------------------------------------------


async def test_a_served_process_records_its_garbage_collections(tmp_path: Path, fresh: aiohttp.ClientSession) -> None:
    with supervisor(tmp_path, "--gc-threshold0", "50", workers=1) as edge:  # collect often
        await edge.started()
        for i in range(20):
            await _chat(fresh, edge.url, f"request {i}")
        metrics = await _scrape(fresh, edge.url)
    python_gen0 = metrics[("python_gc_collections_total", frozenset({"generation": "0"}.items()))]
    ours = sum(v for (name, _), v in metrics.items() if name == "ingress_gc_collections_total")
    assert python_gen0 > 0
    assert ours > 0, f"the interpreter counts {python_gen0:.0f} young collections; ingress_gc_collections_total {ours}"
