#!/usr/bin/env python3
"""Bootstrap and run: `python3 dev.py serve` starts the proxy, `python3 dev.py test` runs every check.

Needs only python3: the first run creates .venv/ and installs the project with its dev tools; later
runs reinstall only when pyproject.toml changes.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = Path(os.environ.get("INGRESS_VENV", ROOT / ".venv"))
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / "python"
STAMP = VENV / ".ingress-installed"
PYTEST_NO_TESTS = 5


def _ensure_venv() -> None:
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if PYTHON.exists() and STAMP.exists() and STAMP.read_text() == wanted:
        return
    if not PYTHON.exists():
        print(f"dev: creating {VENV}", file=sys.stderr)
        venv.create(VENV, with_pip=True)
    print("dev: installing ingress and its dev tools", file=sys.stderr)
    subprocess.run([PYTHON, "-m", "pip", "install", "--quiet", "--upgrade", "pip"], check=True)
    subprocess.run([PYTHON, "-m", "pip", "install", "--quiet", "-e", f"{ROOT}[dev]"], check=True)
    STAMP.write_text(wanted)


def _run(*args: str | Path) -> int:
    return subprocess.run([str(a) for a in args], cwd=ROOT).returncode


def test(extra: list[str]) -> int:
    for step in (("-m", "codegen", "--check"), ("-m", "ruff", "check", "--quiet", "."), ("-m", "mypy")):
        if code := _run(PYTHON, *step):
            return code
    code = _run(PYTHON, "-m", "pytest", *extra)
    if code == PYTEST_NO_TESTS:
        print("dev: pytest collected no tests", file=sys.stderr)
        return 1
    return code


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("serve", "test", "venv"):
        print(__doc__, file=sys.stderr)
        return 2
    _ensure_venv()
    command, extra = argv[0], argv[1:]
    if command == "serve":  # the server takes this process's place: a signal sent to it reaches the server
        os.chdir(ROOT)
        os.execv(PYTHON, [str(PYTHON), "-m", "ingress", "serve", *extra])
    if command == "test":
        return test(extra)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit(130)
