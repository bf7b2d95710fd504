"""Which code a benchmark run measured: the commit, and whether ingress/ had uncommitted changes.

Outside a git work tree (a snapshot made with `git archive`), a file COMMIT beside bench/ names it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TypedDict

ROOT = Path(__file__).resolve().parents[2]


class CodeVersion(TypedDict):
    commit: str
    ingress_uncommitted: list[str]


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT)
    return done.stdout if done.returncode == 0 else ""


def code_version() -> CodeVersion:
    commit = _git("rev-parse", "--short", "HEAD").strip()
    if not commit:
        marker = ROOT / "COMMIT"
        return {"commit": marker.read_text().strip() + " (snapshot)" if marker.exists() else "unknown",
                "ingress_uncommitted": []}
    changed = [line[3:] for line in _git("status", "--porcelain", "--", "ingress").splitlines() if line.strip()]
    return {"commit": commit, "ingress_uncommitted": changed}


def describe(version: CodeVersion) -> str:
    changed = version["ingress_uncommitted"]
    return f"commit {version['commit']}" + (f" + uncommitted changes in {', '.join(changed)}" if changed else "")
