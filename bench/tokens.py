"""Prompt token counting (ingress/tokens) by body size: the exact count, the estimate, and what a
request's count costs with the size limit, in µs and MB/s.

    python -m bench tokens [--rounds 5] [--out bench/results/tokens.json]

Bodies of 1 KB to 2 MB of English (the README, repeated), and the adversarial ones: a single
1M-character "word" of random letters, 2 MB of random printable Unicode, 2 MB of one repeated
character. For each, with o200k: "exact" counts the whole text (bpe-openai, no limit), "estimate" is the
upper bound alone, and "counted" is `counter_for("gpt-4o").text(body)`, what a request pays with the
default limit (exact up to max_exact_count_bytes, estimated past it). The clock is the thread's CPU
time; each figure is the median of --rounds runs.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent

from bench.lib.provenance import code_version, describe  # noqa: E402
from ingress.tokens import MAX_EXACT_COUNT_BYTES, counter_for, estimate  # noqa: E402
from ingress.tokens.engines import vocabulary  # noqa: E402

RESULTS = HERE / "results" / "tokens.json"
SIZES = (1024, 4096, 16_384, 65_536, 262_144, 1_048_576, 2_097_152)


def bodies() -> dict[str, str]:
    english = (HERE.parent / "README.md").read_text()
    english = english * (2 * SIZES[-1] // len(english) + 1)
    out = {f"English {size // 1024} KB": english[:size] for size in SIZES}
    r = random.Random(7)
    out["1M-char word"] = "".join(r.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(1_000_000))
    chars: list[str] = []
    size = 0
    while size < SIZES[-1]:
        c = chr(r.randint(0x20, 0x2FFFF))
        if c.isprintable() and not 0xD800 <= ord(c) < 0xE000:
            chars.append(c)
            size += len(c.encode())
    out["2 MB random Unicode"] = "".join(chars)
    out["2 MB one character"] = "x" * SIZES[-1]
    return out


def cpu_us(f: Callable[[str], int], text: str, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.thread_time_ns()
        f(text)
        times.append((time.thread_time_ns() - start) / 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    o200k = vocabulary("o200k")
    counter = counter_for("gpt-4o")
    ways: dict[str, Callable[[str], int]] = {"exact": o200k.count, "estimate": estimate, "counted": counter.text}
    version = code_version()
    print(f"# {describe(version)}; limit {MAX_EXACT_COUNT_BYTES} bytes; median of {args.rounds} (thread CPU time)")
    header = " ".join(f"{w + ' µs':>12} {'MB/s':>7}" for w in ways)
    print(f"{'body':22} {'MB':>6} {header}  tokens exact/estimate")
    results: dict[str, dict[str, float]] = {}
    for name, text in bodies().items():
        mb = len(text.encode()) / 1e6
        row: dict[str, float] = {"mb": mb}
        cells = []
        for way, f in ways.items():
            us = cpu_us(f, text, args.rounds)
            row[f"{way}_us"] = us
            cells.append(f"{us:12.0f} {mb / (us / 1e6):7.1f}")
        exact, bound = o200k.count(text), estimate(text)
        row.update(tokens=exact, estimate_tokens=bound, counted_tokens=counter.text(text))
        results[name] = row
        print(f"{name:22} {mb:6.3f} " + " ".join(cells) + f"  {exact}/{bound}", flush=True)
    args.out.write_text(json.dumps({"code": version, "rounds": args.rounds, "limit": MAX_EXACT_COUNT_BYTES,
                                    "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
