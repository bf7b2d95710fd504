"""Where a benchmark's result goes, and the priority a long benchmark runs at."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent.parent / "results"


def result_path(name: str, quick: bool = False, out: Path | None = None) -> Path:
    """`out` when given; else bench/results/<name>.json, or <name>-quick.json for a quick run (the latest
    result of each benchmark is kept there; its history is in git)."""
    return out or RESULTS / (f"{name}-quick.json" if quick else f"{name}.json")


def write_result(result: dict[str, Any], out: Path) -> None:
    """The result as indented JSON, and a line saying where it went (and how long the run took, when its
    `meta` says)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    wall = result.get("meta", {}).get("wall_s")
    print(f"wrote {out}" + (f" in {wall:.0f} s" if wall is not None else ""))


def niced(level: int = 10) -> None:
    """Run at `level` niceness at least: a benchmark of several minutes leaves the machine's other work its
    share of the cores (its ratios are measured side by side, so a share taken from both sides cancels)."""
    if os.nice(0) < level:
        os.nice(level - os.nice(0))
