"""Tables for bench/e2e.py: each phase's results, printed as plain aligned text."""

from __future__ import annotations

import json
import statistics
from typing import Any


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]

    def line(cells: list[str]) -> str:
        return "  ".join(str(c).rjust(w) if i else str(c).ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=False)))

    return "\n".join([line(header), "  ".join("-" * w for w in widths), *map(line, rows)])


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in runs))


def print_latency(latency: dict[str, Any]) -> None:
    print("\n== Added latency at concurrency 1 (wrk -t1 -c1; direct = the FlatBuffers body straight to the demo) ==")
    rows = []
    for label, runs in latency.items():
        d50, d99 = _median(runs["direct"], "p50_ms"), _median(runs["direct"], "p99_ms")
        for name in ("edge", "stock"):
            e50, e99 = _median(runs[name], "p50_ms"), _median(runs[name], "p99_ms")
            rows.append([label if name == "edge" else "", "generated" if name == "edge" else "stock Builder",
                         f"{d50:.3f}", f"{d99:.3f}", f"{e50:.3f}", f"{e99:.3f}", f"{e50 - d50:.3f}", f"{e99 - d99:.3f}",
                         f"{_median(runs[name], 'rps'):,.0f}", f"{runs[f'{name}_cpu_us_per_request']:,.0f}",
                         f"{statistics.median(r['others_cpu_percent'] for r in runs[name]):.0f}"])
    print(table(rows, ["body", "edge encoder", "direct p50 ms", "p99", "edge p50 ms", "p99", "added p50 ms", "p99",
                       "edge req/s", "edge CPU µs/req", "others CPU %"]), flush=True)


def print_saturation(points: list[dict[str, Any]], direct: dict[str, Any], cycles: int, seconds: int) -> None:
    print(f"\n== Requests/s at saturation: generated vs stock edge ({cycles} x A B B A runs of {seconds} s;"
          f" medians, ratios of back-to-back runs; wrk -t1) ==")
    rows = [[p["body"], str(p["connections"]), f"{p['rps_generated']:,.0f}", f"{p['rps_stock']:,.0f}",
             f"{p['rps_ratio']:.2f}x",
             f"{p['cpu_us_per_req_generated']:,.0f}", f"{p['cpu_us_per_req_stock']:,.0f}", f"{p['cpu_ratio']:.2f}x",
             f"{1e6 / p['cpu_us_per_req_generated']:,.0f}/{1e6 / p['cpu_us_per_req_stock']:,.0f}",
             f"{p['edge_cpu_percent_generated']:.0f}/{p['edge_cpu_percent_stock']:.0f}", f"{p['demo_cpu_percent']:.0f}",
             f"{p['p99_ms_generated']:.1f}/{p['p99_ms_stock']:.1f}", f"{p['others_cpu_percent']:.0f}",
             "none" if not p["errors"] else json.dumps(p["errors"])] for p in points]
    print(table(rows, ["body", "conns", "gen req/s", "stock req/s", "ratio", "gen CPU µs/req", "stock CPU µs/req",
                       "CPU ratio", "req/s per core g/s", "edge CPU % g/s", "demo CPU %", "p99 ms g/s", "others %",
                       "errors"]))
    print("req/s per core = 1e6 / edge CPU µs per request: what one edge process could serve with a core to itself")
    best = max(points, key=lambda p: p["rps_generated"])
    print(f"max requests/s through the generated edge: {best['rps_generated']:,.0f}"
          f" ({best['body']}, {best['connections']} connections)")
    print(f"demo alone ({direct['body']} FlatBuffers body, {direct['connections']} conns): {direct['rps']:,.0f} req/s,"
          f" demo CPU {direct['cpu_percent']['demo']:.0f}%, {direct['cpu_us_per_request']['demo']:,.0f} µs/req",
          flush=True)


def print_streaming(levels: list[dict[str, Any]], words: int, pacing_ms: float, held_level: int) -> None:
    print(f"\n== Streaming: {words} deltas {pacing_ms:g} ms apart; held = every gap <= {2 * pacing_ms:g} ms ==")
    rows = []
    for p in levels:
        for which in ("direct", "edge"):
            s = p[which]
            edge = which == "edge"
            rows.append([str(p["concurrency"]) if not edge else "", which, f"{s['completed']}/{s['streams']}",
                         f"{s['held']}", f"{s['ttft_p50_ms']:.1f}", f"{s['ttft_p99_ms']:.1f}",
                         f"{s['lateness_p50_ms']:.1f}", f"{s['lateness_p99_ms']:.1f}", f"{s['gap_p50_ms']:.1f}",
                         f"{s['gap_p99_ms']:.1f}", f"{s['gap_max_ms']:.1f}", f"{s['chunks_per_s']:,.0f}",
                         f"{s['cpu_percent']['edge']:.0f}" if edge else "-",
                         f"{s['edge_cpu_us_per_event']:.0f}" if edge else "-",
                         f"{s['cpu_percent']['demo']:.0f}", f"{s['bench_client_cpu_percent']:.0f}",
                         f"{s['others_cpu_percent']:.0f}",
                         str(s["listen_overflows"] + s["errors"] + s["warmup_errors"])])
    print(table(rows, ["streams", "path", "complete", "held", "TTFT p50 ms", "p99", "late p50 ms", "p99",
                       "gap p50 ms", "p99", "max", "chunks/s", "edge CPU %", "edge µs/chunk", "demo CPU %",
                       "client CPU %", "others %", "drops+errors"]))
    print(table([[str(p["concurrency"]), f"{p['added_ttft_p50_ms']:.2f}", f"{p['added_chunk_p50_ms']:.2f}",
                  f"{p['added_chunk_p99_ms']:.2f}"] for p in levels],
                ["streams", "added TTFT p50 ms", "added per-chunk p50 ms", "added per-chunk p99 ms"]))
    print(f"concurrent streams held without stalls (>= 99% of streams): {held_level}"
          f" of levels {[p['concurrency'] for p in levels]}", flush=True)


STAGES = [("decode", "msgspec decode + validate"), ("passport", "passport"), ("encode_generated", "encode: generated"),
          ("encode_stock", "encode: stock Builder"),
          ("answer_decode_translate", "answer: verify + FlatBuffers read + translate"),
          ("answer_json_encode", "answer: JSON encode"), ("log_line", "request log line")]


def print_budget(budget: dict[str, Any]) -> None:
    requests, streaming = budget["requests"], budget["streaming"]
    print("\n== Where the edge's CPU goes, µs per request"
          " (stages timed in-process; edge total from /proc at saturation) ==")
    rows = [[title, *(f"{requests[b]['stages_us'][key]:,.1f}" for b in requests)] for key, title in STAGES]
    rows.append(["kernel (system time charged to the edge; loopback softirq work is not)",
                 *(f"{requests[b]['kernel_us_generated']:,.0f}" for b in requests)])
    rows.append(["aiohttp server + client, event loop (the rest of user time)",
                 *(f"{requests[b]['rest_us_generated']:,.0f}" for b in requests)])
    rows.append(["edge CPU per request, generated / stock",
                 *(f"{requests[b]['edge_cpu_us_per_request_generated']:,.0f}"
                   f" / {requests[b]['edge_cpu_us_per_request_stock']:,.0f}" for b in requests)])
    print(table(rows, ["stage", *requests]))
    print(f"streaming, per chunk: frame split + verify + FlatBuffers read + translate + SSE encode"
          f" {streaming['per_chunk']:.1f} µs; the edge spent {streaming['edge_cpu_us_per_event']:.0f} µs of CPU"
          f" per event"
          f" delivered ({streaming['edge_system_cpu_us_per_event']:.0f} µs of it in the kernel) at"
          f" {streaming['concurrency']} streams")


def print_rss(rest: dict[str, int], loaded: dict[str, int], after: dict[str, int]) -> None:
    def mib(kb: int) -> str:
        return f"{kb / 1024:.1f}"

    print("\n== Edge RSS (VmRSS, MiB) ==")
    print(table([
        ["generated edge", mib(rest["edge"]), mib(loaded["edge_saturation_peak"]), "-", mib(after["edge"])],
        ["stock edge", mib(rest["stock"]), mib(loaded["stock_saturation_peak"]), "-", mib(after["stock"])],
        ["generated edge, paced upstream", mib(rest["edge_paced"]), "-", mib(loaded["edge_streaming_peak"]),
         mib(after["edge_paced"])],
    ], ["process", "at rest", "peak, saturation", "peak, streaming", "after"]))


def print_verdict(verdict: dict[str, Any]) -> None:
    label = verdict["body"]
    if "c1_added_p50_ms_stock_minus_generated" in verdict:
        print(f"\nat concurrency 1, {label}: the stock-Builder edge adds"
              f" {verdict['c1_added_p50_ms_stock_minus_generated']:+.3f} ms"
              f" at p50 over the generated edge and uses {verdict['c1_cpu_ratio']:.2f}x its CPU per request")
    print(f"generated vs stock edge at saturation, {label} (median over {verdict['connections']} connections):"
          f" {verdict['value']:.2f}x requests/s (target >= 1.5x: {'met' if verdict['met'] else 'NOT met'});"
          f" {verdict['cpu_ratio']:.2f}x less edge CPU per request")
