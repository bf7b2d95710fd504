"""The access line's CPU a request, two commits' ingress/log.py side by side, on a uvloop loop writing to a pipe.

    python -m bench access_line --before 7f0ac6f --after . [--rounds 9] [--turns 2000] [--lines 1 4 16]

Each side's `access` writes a typical access line (keys and limits on, an OpenAI-family model) to the UTF-8
stdout-like stream over a pipe that a `cat` drains into /dev/null, `--lines` requests ending in each loop
turn, `--turns` turns a run. The figure is the thread's CPU time a line (the writes' system time included),
less that of the same turns without the line (the loop's turn and the record's copy); each round runs both
sides back to back in alternating order, and the table gives medians over rounds and the after/before ratio
of each round's pair. `.` is the working tree, anything else a commit.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import io
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvloop

ROOT = Path(__file__).resolve().parent.parent
RECORD: dict[str, Any] = {
    "method": "POST", "path": "/v1/chat/completions", "status": 200, "outcome": "ok", "duration_ms": 3.412,
    "model": "gpt-4o", "stream": False, "upstream": "http://10.0.3.17:8000", "route": "gpt-4o",
    "served_model": "gpt-4o-2024-08-06", "tenant": "acme", "key_id": "key_7Hq2mZ", "api": "chat",
    "limit": "admitted", "ttfb_ms": 3.101, "prompt_tokens": 3412, "completion_tokens": 128,
    "cost_usd": 0.00981,
}
Access = Callable[[int, dict[str, Any], str], None]


def _log_module(rev: str, name: str, stream: io.TextIOWrapper) -> Access:
    """`rev`'s ingress/log.py as a module of its own, configured onto `stream`; its `access`."""
    path = "ingress/log.py"
    source = ((ROOT / path).read_text() if rev == "." else
              subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, check=True, capture_output=True,
                             text=True).stdout)
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(compile(source, f"{rev}:{path}", "exec"), module.__dict__)
    module.configure("info", stream, cache=False)
    assert module._binary is not None  # the bytes under the text layer, as on a UTF-8 stdout
    access: Access = module.access
    return access


async def _run(access: Access | None, lines: int, turns: int) -> int:
    """The thread's CPU time (ns) of `turns` loop turns, each ending `lines` requests."""
    start = time.thread_time_ns()
    for _ in range(turns):
        for _ in range(lines):
            fields = dict(RECORD)
            if access is not None:
                access(20, fields, "0b6f2d7e9c4a4e1f")
        await asyncio.sleep(0)
    await asyncio.sleep(0)  # the last turn's lines written
    return time.thread_time_ns() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="7f0ac6f")
    parser.add_argument("--after", default=".")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--lines", type=int, nargs="+", default=[1, 4, 16])
    args = parser.parse_args()

    drain = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    assert drain.stdin is not None
    stream = io.TextIOWrapper(drain.stdin, encoding="utf-8")
    sides = {"before": _log_module(args.before, "access_line_before", stream),
             "after": _log_module(args.after, "access_line_after", stream)}
    per_line: dict[tuple[str, int], list[float]] = {}
    ratios: dict[int, list[float]] = {}
    loop = uvloop.new_event_loop()
    gc.disable()
    try:
        for lines in args.lines:
            loop.run_until_complete(_run(sides["before"], lines, args.turns // 4))  # warm
            loop.run_until_complete(_run(sides["after"], lines, args.turns // 4))
        for r in range(args.rounds):
            for lines in args.lines:
                names = ["before", "after"] if r % 2 == 0 else ["after", "before"]
                figures = {}
                for name in names:
                    empty = loop.run_until_complete(_run(None, lines, args.turns))
                    full = loop.run_until_complete(_run(sides[name], lines, args.turns))
                    figures[name] = (full - empty) / (args.turns * lines) / 1000
                    per_line.setdefault((name, lines), []).append(figures[name])
                ratios.setdefault(lines, []).append(figures["after"] / figures["before"])
    finally:
        gc.enable()
        loop.close()
        stream.close()
        drain.wait()

    print(f"before = {args.before}, after = {args.after}; medians over {args.rounds} rounds of {args.turns} turns")
    print(f"{'lines a turn':>12} {'before µs/line':>15} {'after µs/line':>14} {'ratio (rounds)':>22}")
    for lines in args.lines:
        before, after = (statistics.median(per_line[name, lines]) for name in ("before", "after"))
        spread = ratios[lines]
        print(f"{lines:>12} {before:>15.2f} {after:>14.2f} "
              f"{statistics.median(spread):>9.3f} ({min(spread):.2f}-{max(spread):.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
