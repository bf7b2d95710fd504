"""A client for paced streams: many concurrent streams, the arrival time of every event, and their stats."""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from ingress.wire import FrameDecoder


@dataclass
class StreamResult:
    started: float
    times: list[float] = field(default_factory=list)  # arrival time of each event / frame
    error: str | None = None
    warmup: bool = False


async def _one_stream(session: aiohttp.ClientSession, url: str, body: bytes, ctype: str, sse: bool) -> StreamResult:
    result = StreamResult(time.perf_counter())
    try:
        async with session.post(url, data=body, headers={"Content-Type": ctype}) as resp:
            if resp.status != 200:
                result.error = f"HTTP {resp.status}"
                return result
            times = result.times
            if sse:  # events end with a blank line; JSON escapes newlines, so none occurs inside one
                pending = b""
                async for data in resp.content.iter_any():
                    now = time.perf_counter()
                    data = pending + data
                    n = data.count(b"\n\n")
                    pending = data[data.rfind(b"\n\n") + 2:] if n else data
                    times.extend([now] * n)
            else:
                frames = FrameDecoder()
                async for data in resp.content.iter_any():
                    now = time.perf_counter()
                    times.extend(now for _ in frames.feed(data))
    except (TimeoutError, aiohttp.ClientError) as exc:
        result.error = type(exc).__name__
    return result


async def stream_level(url: str, body: bytes, ctype: str, sse: bool, concurrency: int, rounds: int,
                       pacing_s: float) -> tuple[list[StreamResult], float]:
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=30)
    results: list[StreamResult] = []
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        async def client(i: int) -> None:
            # Starts spread over one pacing interval, so the streams' chunks are not all due at once; the
            # first stream opens the connections (client to edge, edge to service) and is not counted.
            await asyncio.sleep(i / concurrency * pacing_s)
            warm = await _one_stream(session, url, body, ctype, sse)
            warm.warmup = True
            results.append(warm)
            for _ in range(rounds):
                results.append(await _one_stream(session, url, body, ctype, sse))

        t0 = time.perf_counter()
        await asyncio.gather(*(client(i) for i in range(concurrency)))
        return results, time.perf_counter() - t0


def _pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, max(0, round(p / 100 * (len(values) - 1))))]


def analyze_streams(every: list[StreamResult], wall: float, pacing_s: float, words: int) -> dict[str, Any]:
    """Events 1..words are the content deltas (0 is the role, then finish, usage/done). Warm-up streams
    count only towards errors and chunks/s."""
    results = [r for r in every if not r.warmup]
    complete = [r for r in results if r.error is None and len(r.times) >= words + 2]
    warm_errors = sum(1 for r in every if r.warmup and (r.error is not None or len(r.times) < words + 2))
    ttft, lateness, gaps, max_gaps = [], [], [], []
    for r in complete:
        content = r.times[1:words + 1]
        ttft.append(content[0] - r.started)
        lateness += [t - r.started - (k + 1) * pacing_s for k, t in enumerate(content)]
        g = [b - a for a, b in itertools.pairwise(content)]
        gaps += g
        max_gaps.append(max(g))
    held = sum(1 for m in max_gaps if m <= 2 * pacing_s)
    ms = 1000.0
    return {
        "streams": len(results), "completed": len(complete), "errors": len(results) - len(complete),
        "warmup_errors": warm_errors, "events": sum(len(r.times) for r in every),
        "held": held, "held_fraction": held / len(results) if results else 0.0,
        "ttft_p50_ms": _pct(ttft, 50) * ms, "ttft_p99_ms": _pct(ttft, 99) * ms,
        "lateness_p50_ms": _pct(lateness, 50) * ms, "lateness_p99_ms": _pct(lateness, 99) * ms,
        "gap_p50_ms": _pct(gaps, 50) * ms, "gap_p99_ms": _pct(gaps, 99) * ms,
        "gap_max_ms": max(gaps, default=float("nan")) * ms,
        "chunks_per_s": sum(max(0, min(len(r.times) - 1, words)) for r in every) / wall, "wall_s": wall,
    }
