"""Micro benchmarks of the request path by payload size: decode, encode (stock vs generated), routing reads.

Every candidate is timed timeit-style (a calibrated loop, GC off inside it); the candidates of all sizes
are interleaved in a fresh random order each round, so noise from other processes lands on all of them
alike, and the reported figure is the median over rounds. The clock is the thread's CPU time: on a
shared machine, wall time also counts the slices other processes took (it is kept in the JSON). Ratios
are also taken per round, between figures measured side by side, and their median reported. Allocations
are measured afterwards, apart from the timing: allocator calls and bytes per op with a small allocator
hook (bench/_allocs.c), the peak and the retained memory of one op with tracemalloc (which sees only
live blocks, so it cannot count what an op allocated and freed again).

    .venv/bin/python -m bench micro [--quick] [--no-plot]
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import itertools
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import flatbuffers
import msgspec

from bench.lib.payloads import SIZES, chat_request
from bench.lib.provenance import code_version, describe
from bench.lib.rounds import Rounds, Spread
from ingress.encoding.passport import RequestMeta, compute_passport
from ingress.encoding.requests import encode_request, request_data
from ingress.encoding.stock import encode_request_stock
from ingress.oai.codec import decode_chat_request
from ingress.wire import read_request
from ingress.wire._generated.encoders import encode_CompletionRequest
from ingress.wire.stock import BuilderPool

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
REQUEST_ID = "req-0123456789abcdef0123456789abcdef"
META = RequestMeta(api_key="sk-bench", tenant_id="tenant-acme", priority=3)
NOW = 1_700_000_000.0

CANDIDATES = {
    "decode": "msgspec decode + validate (decode_chat_request)",
    "json_reencode": "msgspec.json.encode of the decoded struct",
    "stock": "stock flatbuffers.Builder, pooled (encode_request_stock)",
    "generated": "generated encoder (encode_request)",
    "mapping": "  of which: mapping to *Data structs (request_data)",
    "pure_encode": "  of which: encode_CompletionRequest, fresh bytearray",
    "pure_encode_reused": "  (same, into one cleared and reused bytearray)",
    "passport": "compute_passport (on the same request path)",
    "routing_read": "read_request + ModelName/Provider/Passport.TenantId",
}

TARGETS = [
    # name, numerator, denominator, size, comparison, bound, what
    ("generated_vs_stock_16KB", ("stock", "16KB"), ("generated", "16KB"), ">=", 6.0,
     "generated encoder speed-up over the stock Builder at 16 KB"),
    ("generated_vs_decode_16KB", ("generated", "16KB"), ("decode", "16KB"), "<=", 3.0,
     "generated encode time / msgspec decode time at 16 KB"),
    ("routing_read_1MB_vs_1KB", ("routing_read", "1MB"), ("routing_read", "1KB"), "<=", 1.2,
     "routing-field read at 1 MB / at 1 KB"),
]


@dataclass
class Task:
    size: str
    name: str
    fn: Callable[[], object]
    loops: int = 1
    samples: list[float] = field(default_factory=list)  # CPU µs/op, one per round
    wall: list[float] = field(default_factory=list)  # wall-clock µs/op, one per round
    allocs: dict[str, float] = field(default_factory=dict)


# --- what is measured -----------------------------------------------------------------------------


def build_tasks(sizes: dict[str, int]) -> tuple[list[Task], dict[str, dict[str, Any]]]:
    tasks: list[Task] = []
    info: dict[str, dict[str, Any]] = {}
    for label, size in sizes.items():
        body = chat_request(size)
        request = decode_chat_request(body)
        passport = compute_passport(request, META, now=NOW)
        data = request_data(request, REQUEST_ID, passport)
        builders = BuilderPool()
        generated = encode_request(request, REQUEST_ID, passport)
        stock = encode_request_stock(builders, request, REQUEST_ID, passport)
        view = read_request(generated)
        assert view.ModelName() == b"ingress-demo" and view.Passport().TenantId() == b"tenant-acme"
        assert read_request(stock).ModelName() == b"ingress-demo"
        info[label] = {
            "json_bytes": len(body),
            "flatbuffers_bytes_generated": len(generated),
            "flatbuffers_bytes_stock": len(stock),
            "generated_equals_stock": generated == stock,
        }
        json_encode = msgspec.json.encode

        def pure_encode(data: Any = data) -> bytearray:
            buf = bytearray()
            encode_CompletionRequest(buf, data)
            return buf

        reused = bytearray()

        def pure_encode_reused(data: Any = data, buf: bytearray = reused) -> bytearray:
            buf.clear()
            encode_CompletionRequest(buf, data)
            return buf

        def routing_read(buf: bytes = generated) -> tuple[object, ...]:
            r = read_request(buf)
            return r.ModelName(), r.Provider(), r.Passport().TenantId()

        fns: dict[str, Callable[[], object]] = {
            "decode": partial(decode_chat_request, body),
            "json_reencode": partial(json_encode, request),
            "stock": partial(encode_request_stock, builders, request, REQUEST_ID, passport),
            "generated": partial(encode_request, request, REQUEST_ID, passport),
            "mapping": partial(request_data, request, REQUEST_ID, passport),
            "pure_encode": pure_encode,
            "pure_encode_reused": pure_encode_reused,
            "passport": partial(compute_passport, request, META, now=NOW),
            "routing_read": routing_read,
        }
        tasks += [Task(label, name, fn) for name, fn in fns.items()]
    return tasks, info


# --- timing ---------------------------------------------------------------------------------------


def _run(fn: Callable[[], object], loops: int) -> tuple[float, float]:
    """CPU and wall seconds for `loops` calls, GC off as in timeit."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        wall, cpu = time.perf_counter(), time.thread_time()
        for _ in itertools.repeat(None, loops):
            fn()
        return time.thread_time() - cpu, time.perf_counter() - wall
    finally:
        if enabled:
            gc.enable()


def calibrate(task: Task, target_s: float) -> None:
    task.fn()  # warm: pools filled, code paths taken once
    loops = 1
    while True:
        elapsed = _run(task.fn, loops)[0]
        if elapsed >= target_s / 4:
            task.loops = max(1, round(loops * target_s / elapsed))
            return
        loops *= 4


def time_all(tasks: list[Task], rounds: int, target_s: float, seed: int = 1234) -> None:
    for task in tasks:
        calibrate(task, target_s)
    by = {(t.name, t.size): t for t in tasks}
    for i, order in Rounds(by, rounds, order="shuffle", rng=random.Random(seed)):  # the same orders each run
        if i % 10 == 0:
            gc.collect()
        for key in order:
            task = by[key]
            cpu, wall = _run(task.fn, task.loops)
            task.samples.append(cpu / task.loops * 1e6)
            task.wall.append(wall / task.loops * 1e6)


# --- allocations ----------------------------------------------------------------------------------


def load_alloc_counter() -> ctypes.PyDLL | None:
    """Compile bench/_allocs.c with gcc; None (and a note) where there is no compiler."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        print("note: no C compiler; allocator-call counts are skipped (tracemalloc figures remain)")
        return None
    with tempfile.TemporaryDirectory(prefix="ingress-bench-") as tmp:
        out = Path(tmp) / "_allocs.so"
        cmd = [gcc, "-O2", "-shared", "-fPIC", f"-I{sysconfig.get_paths()['include']}", str(HERE / "_allocs.c"),
               "-o", str(out)]
        built = subprocess.run(cmd, capture_output=True, text=True)
        if built.returncode != 0:
            print(f"note: could not build the allocation counter, skipped:\n{built.stderr}")
            return None
        lib = ctypes.PyDLL(str(out))  # stays mapped once the file is gone
    for name in ("allocs_calls", "allocs_bytes", "allocs_reallocs", "allocs_realloc_bytes"):
        getattr(lib, name).restype = ctypes.c_ulonglong
    return lib


def count_allocs(tasks: list[Task], lib: ctypes.PyDLL | None) -> None:
    if lib is not None:
        lib.allocs_install()
        try:
            for task in tasks:
                n = max(1, min(50, task.loops))
                task.fn()
                gc.disable()
                before = [lib.allocs_calls(), lib.allocs_bytes(), lib.allocs_reallocs(), lib.allocs_realloc_bytes()]
                for _ in itertools.repeat(None, n):
                    task.fn()
                after = [lib.allocs_calls(), lib.allocs_bytes(), lib.allocs_reallocs(), lib.allocs_realloc_bytes()]
                for key, a, b in zip(("allocs_per_op", "alloc_bytes_per_op", "reallocs_per_op",
                                      "realloc_bytes_per_op"), before, after, strict=False):
                    task.allocs[key] = (b - a) / n
                gc.enable()
        finally:
            lib.allocs_uninstall()
    own = tracemalloc.__file__
    for task in tasks:
        gc.collect()
        tracemalloc.start()
        result = task.fn()
        _current, peak = tracemalloc.get_traced_memory()
        snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, own)])
        tracemalloc.stop()
        kept = snapshot.statistics("filename")
        task.allocs["tracemalloc_peak_bytes"] = peak
        task.allocs["tracemalloc_kept_bytes"] = sum(s.size for s in kept)
        task.allocs["tracemalloc_kept_blocks"] = sum(s.count for s in kept)
        del result


# --- report ---------------------------------------------------------------------------------------


def _fmt_us(us: float) -> str:
    return f"{us:,.2f}" if us < 100 else f"{us:,.0f}"


def _fmt_kb(n: float | None) -> str:
    return "-" if n is None else f"{n / 1024:,.1f}"


def summarize(task: Task) -> dict[str, Any]:
    s = sorted(task.samples)
    q = statistics.quantiles(s, n=4) if len(s) >= 2 else [s[0]] * 3
    return {
        "us_per_op": statistics.median(s), "us_min": s[0], "us_p25": q[0], "us_p75": q[2],
        "wall_us_per_op": statistics.median(task.wall), "loops_per_round": task.loops,
        "rounds_cpu_us": [round(x, 4) for x in task.samples], "rounds_wall_us": [round(x, 4) for x in task.wall],
        **task.allocs,
    }


def ratios(tasks: list[Task]) -> list[dict[str, Any]]:
    by = {(t.name, t.size): t for t in tasks}
    out = []
    for name, num, den, op, bound, what in TARGETS:
        a, b = by.get(num), by.get(den)
        if a is None or b is None:
            continue
        paired = Spread.of(x / y for x, y in zip(a.samples, b.samples, strict=True))  # round by round
        ok = paired.median >= bound if op == ">=" else paired.median <= bound
        out.append({"name": name, "what": what, "value": paired.median, "target": f"{op} {bound}", "met": ok,
                    "ratio_of_medians": statistics.median(a.samples) / statistics.median(b.samples),
                    "paired_min": paired.low, "paired_max": paired.high})
    return out


def print_report(tasks: list[Task], info: dict[str, dict[str, Any]], rats: list[dict[str, Any]]) -> None:
    header = (f"{'size':>6} {'candidate':<55} {'µs/op':>9} {'IQR':>5} {'wall µs':>9} {'allocs/op':>9}"
              f" {'KB/op':>8} {'reallocs':>8} {'peak KB':>8} {'kept KB':>8}")
    print(header)
    print("-" * len(header))
    for label in info:
        i = info[label]
        print(f"{label:>6} JSON {i['json_bytes']:,} B -> FlatBuffers {i['flatbuffers_bytes_generated']:,} B"
              f" (stock {i['flatbuffers_bytes_stock']:,} B, identical bytes: {i['generated_equals_stock']})")
        for t in (t for t in tasks if t.size == label):
            s = summarize(t)
            iqr = (s["us_p75"] - s["us_p25"]) / s["us_per_op"] * 100
            allocs, reallocs = s.get("allocs_per_op"), s.get("reallocs_per_op")
            print(f"{'':>6} {CANDIDATES[t.name]:<55} {_fmt_us(s['us_per_op']):>9} {iqr:>4.0f}%"
                  f" {_fmt_us(s['wall_us_per_op']):>9} {'-' if allocs is None else f'{allocs:,.0f}':>9}"
                  f" {_fmt_kb(s.get('alloc_bytes_per_op')):>8} {'-' if reallocs is None else f'{reallocs:,.0f}':>8}"
                  f" {_fmt_kb(s['tracemalloc_peak_bytes']):>8} {_fmt_kb(s['tracemalloc_kept_bytes']):>8}")
    print("µs/op: median thread CPU time per op over the rounds; IQR: their interquartile range, % of the median;"
          " wall µs: median wall clock.\nallocs/op, KB/op: malloc/calloc calls and bytes; reallocs: realloc calls"
          " (growing buffers); peak KB, kept KB: tracemalloc's high-water mark during one op and what is still"
          " live after it (the result).")
    print()
    print("routing-field read by payload size (µs/op):",
          ", ".join(f"{t.size} {statistics.median(t.samples):.2f}" for t in tasks if t.name == "routing_read"))
    print()
    print(f"{'target':<28} {'value':>8} {'target':>8}  met   (median of per-round ratios; ratio of medians)")
    for r in rats:
        print(f"{r['name']:<28} {r['value']:>7.2f}x {r['target']:>8}  {'yes' if r['met'] else 'NO ':<4}  "
              f"({r['what']}; {r['ratio_of_medians']:.2f}x; rounds {r['paired_min']:.2f}-{r['paired_max']:.2f})")


def plot(tasks: list[Task], info: dict[str, dict[str, Any]], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("note: matplotlib is not installed; no plot (pip install matplotlib)")
        return False
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    x = [info[s]["json_bytes"] / 1024 for s in info]
    for name in ("decode", "json_reencode", "stock", "generated", "mapping", "pure_encode", "passport"):
        y = [statistics.median(t.samples) for s in info for t in tasks if t.size == s and t.name == name]
        left.plot(x, y, marker="o", label=CANDIDATES[name].strip())
    left.set(xscale="log", yscale="log", xlabel="request JSON size (KB)", ylabel="CPU µs per request (median)",
             title="Request path cost by payload size")
    left.grid(True, which="both", alpha=0.3)
    left.legend(fontsize=7)
    reads = [statistics.median(t.samples) for s in info for t in tasks if t.size == s and t.name == "routing_read"]
    right.bar(list(info), reads, color="tab:green")
    right.set(xlabel="request JSON size", ylabel="CPU µs per read (median)",
              title="Routing-field read (model, provider, tenant): zero-copy")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (about 15 s in all)")
    parser.add_argument("--rounds", type=int, help="timing rounds (default 100; 25 with --quick)")
    parser.add_argument("--target-ms", type=float, default=5.0, help="time per candidate per round (default 5)")
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS / "micro.json")
    args = parser.parse_args()
    rounds = args.rounds or (25 if args.quick else 100)
    target_s = args.target_ms / 1000

    load_before = os.getloadavg()
    version = code_version()
    tasks, info = build_tasks(SIZES)
    started = time.perf_counter()
    time_all(tasks, rounds, target_s)
    timing_s = time.perf_counter() - started
    count_allocs(tasks, load_alloc_counter())
    rats = ratios(tasks)
    print(f"python {platform.python_version()}, msgspec {msgspec.__version__}, flatbuffers {flatbuffers.__version__},"
          f" {os.cpu_count()} CPUs, load average {load_before[0]:.2f} -> {os.getloadavg()[0]:.2f};"
          f" {rounds} rounds x ~{target_s * 1000:.0f} ms per candidate, {timing_s:.0f} s of timing"
          f"\n{describe(version)}\n")
    print_report(tasks, info, rats)

    args.out.parent.mkdir(parents=True, exist_ok=True)
    result = {
        "meta": {"code": version, "python": platform.python_version(), "msgspec": msgspec.__version__,
                 "flatbuffers": flatbuffers.__version__, "cpus": os.cpu_count(), "rounds": rounds,
                 "target_ms_per_round": target_s * 1000, "load_average_before": load_before,
                 "load_average_after": os.getloadavg(), "timing_seconds": timing_s,
                 "candidates": {k: v.strip() for k, v in CANDIDATES.items()}},
        "sizes": {label: {**info[label], "candidates": {t.name: summarize(t) for t in tasks if t.size == label}}
                  for label in info},
        "ratios": rats,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {args.out.relative_to(Path.cwd()) if args.out.is_relative_to(Path.cwd()) else args.out}")
    if not args.no_plot and plot(tasks, info, args.out.with_suffix(".png")):
        print(f"wrote {args.out.with_suffix('.png').name} beside it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
