"""Build and drive the FlatBuffers C++ Verifier oracle (tests/oracle/verify.cpp) over a pipe."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

from codegen.flatc import include_dir, run_flatc

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "schema" / "llm_gateway.fbs"
SOURCE = Path(__file__).resolve().parents[1] / "oracle" / "verify.cpp"
CACHE = REPO / "build" / "oracle"

KINDS = {"request": b"Q", "response": b"R", "chunk": b"C", "error": b"E",
         "embedding_request": b"M", "embedding_response": b"V"}


class OracleError(RuntimeError):
    """The oracle could not be built, or it died mid-conversation."""


def _run(argv: list[str]) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise OracleError(f"{argv[0]} failed:\n{proc.stderr or proc.stdout}")
    return proc.stdout


def build_oracle(cxx: str = "g++", cache: Path = CACHE) -> Path:
    """The oracle executable, compiled once per (schema, verify.cpp, flatc, compiler) and cached."""
    key = hashlib.sha256()
    for part in (
        SCHEMA.read_bytes(),
        SOURCE.read_bytes(),
        run_flatc("--version").stdout.encode(),
        _run([cxx, "--version"]).encode(),
    ):
        key.update(hashlib.sha256(part).digest())
    target = cache / key.hexdigest()[:20]
    exe = target / "verify"
    if exe.is_file():
        return exe

    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=cache))
    try:
        run_flatc("--cpp", "-o", work, SCHEMA)
        _run([
            cxx, "-std=c++17", "-O1", "-Wall", "-Wextra",
            f"-I{include_dir()}", f"-I{work}", str(SOURCE), "-o", str(work / "verify"),
        ])
        try:
            os.replace(work, target)  # atomic: concurrent sessions never see a half-built oracle
        except OSError:
            if not exe.is_file():  # anything but "another session got there first"
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return exe


class CxxVerifier:
    """One long-lived oracle process; `verify` sends a buffer and reads back the verdict."""

    def __init__(self, exe: Path) -> None:
        self._proc = subprocess.Popen(
            [str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        self._reported = False

    def verify(self, kind: str, data: bytes | bytearray, size_prefixed: bool = False) -> bool:
        """Whether flatbuffers::Verifier accepts `data` as the root table `kind`, identifier included."""
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r}, expected one of {sorted(KINDS)}")
        assert self._proc.stdin is not None and self._proc.stdout is not None
        record = KINDS[kind] + bytes([size_prefixed]) + struct.pack("<I", len(data)) + bytes(data)
        try:
            self._proc.stdin.write(record)
            self._proc.stdin.flush()
            answer = self._proc.stdout.read(1)
        except BrokenPipeError:
            answer = b""
        if answer in (b"0", b"1"):
            return answer == b"1"
        self._reported = True
        raise OracleError(f"oracle exited {self._proc.wait()}: {self._stderr()}")

    def _stderr(self) -> str:
        assert self._proc.stderr is not None
        return self._proc.stderr.read().decode(errors="replace").strip()

    def close(self) -> None:
        """End the process at EOF on its stdin and release the pipes."""
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self._proc.stdin.close()
        try:
            status = self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            status = self._proc.wait()
        stderr = self._stderr()
        for pipe in (self._proc.stdout, self._proc.stderr):
            if pipe is not None:
                pipe.close()
        if status != 0 and not self._reported:
            raise OracleError(f"oracle exited {status}: {stderr}")

    def __enter__(self) -> CxxVerifier:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
