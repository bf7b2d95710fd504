"""The edge's image, built and run for real with podman: the tests' containers and pods, never left running.

    podman     Debian's podman, runc, catatonit (the pods' pause process) and debootstrap: found on PATH,
               else installed with apt-get (as root, as CI runs), under a file lock, like redis-server
    settings   deploy/podman/containers.conf through CONTAINERS_CONF, for these podman commands only
    storage    the tests' own, under `$XDG_CACHE_HOME/ingress` (or `~/.cache/ingress`) /podman/: the
               machine's own podman images and containers are never touched, and every container or pod
               found there belongs to a test
    base       deploy/podman/base-image.sh (Debian bookworm's python3 from debootstrap: no image registry
               is reached), its root file system cached as `podman-base-<digest>/rootfs.tar`, keyed by a
               digest of the script and of the CA bundle it copies in; imported once into the storage
    image      deploy/Dockerfile built on that base (`PYTHON_IMAGE`) at every run; podman's layer cache
               keeps an unchanged build to seconds

The base and the image are made once collection is done, before any test runs and outside every
test's timeout, and only when a selected test is marked `podman`. A test is skipped only where no
container can start (not root, podman not installable, or a container that will not run); a failed
build fails the tests that need it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from llama_engine import cache_root, locked

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "deploy" / "podman" / "containers.conf"
BASE_SCRIPT = REPO / "deploy" / "podman" / "base-image.sh"
IGNORE = REPO / "deploy" / "podman" / "build.ignore"  # what an unchanged build must not see change
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
PACKAGES = ("podman", "runc", "catatonit", "debootstrap")
TOOLS = ("podman", "runc", "catatonit", "debootstrap")
APT_LOCK = Path(tempfile.gettempdir()) / "ingress-apt-podman.lock"
IMAGE = "localhost/ingress:test"
BASE_TIMEOUT = 600.0  # debootstrap takes about a minute where Debian's mirror answers quickly
BUILD_TIMEOUT = 600.0
STOP_TIMEOUT = 60.0



def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    """A GET's status and body, an HTTP error's included (a probe's 503 is an answer to read)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()

class PodmanError(RuntimeError):
    """podman could not be installed, or a build or command failed."""


class PodmanUnavailable(PodmanError):
    """No container can start on this machine: the tests that need one are skipped, saying why."""


def storage() -> Path:
    return cache_root() / "podman"


def command() -> list[str]:
    """podman on the tests' own storage (the run and state directories are in /run, as podman's are)."""
    return ["podman", "--root", str(storage() / "storage"), "--runroot", "/run/ingress-podman/storage",
            "--tmpdir", "/run/ingress-podman/libpod"]


def environment() -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": str(CONF)}


def podman(*args: str, timeout: float = 120.0, check: bool = True) -> subprocess.CompletedProcess[str]:
    """One podman command; its output as text. `check`: raise PodmanError, with its stderr, if it fails."""
    proc = subprocess.run([*command(), *args], capture_output=True, text=True, env=environment(),
                          timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise PodmanError(f"podman {' '.join(args[:3])} ... exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return proc


# --- installing ------------------------------------------------------------------------------------------


def _missing() -> list[str]:
    path = f"{os.environ.get('PATH', '')}:/usr/bin:/usr/sbin"
    return [tool for tool in TOOLS if shutil.which(tool, path=path) is None]


def install() -> None:
    """podman and what the tests use with it, from Debian's packages when any is missing."""
    if os.geteuid() != 0:  # rootless podman needs subordinate IDs and a user network stack: not set up here
        raise PodmanUnavailable("the tests run podman as root (as CI does), and this is not root")
    if not _missing():
        return
    if shutil.which("apt-get") is None:
        raise PodmanUnavailable(f"{', '.join(_missing())} not installed, and there is no apt-get to install them")
    install_argv = ("apt-get", "install", "-y", "--no-install-recommends", *PACKAGES)
    with locked(APT_LOCK):
        if not _missing():  # another run installed them while this one waited
            return
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        attempt = subprocess.run(install_argv, capture_output=True, text=True, env=env, check=False)
        if attempt.returncode != 0:  # a fresh machine has no package lists yet
            subprocess.run(("apt-get", "update"), capture_output=True, text=True, env=env, check=False)
            attempt = subprocess.run(install_argv, capture_output=True, text=True, env=env, check=False)
        if attempt.returncode != 0 or _missing():
            raise PodmanUnavailable(f"apt-get could not install {', '.join(PACKAGES)}:\n"
                                    f"{(attempt.stderr or attempt.stdout)[-2000:]}")


# --- the base image and the edge's image --------------------------------------------------------------------


def base_key() -> str:
    """A digest of what makes the base: the recipe script and the CA bundle it copies in."""
    digest = hashlib.sha256(BASE_SCRIPT.read_bytes())
    digest.update(CA_BUNDLE.read_bytes() if CA_BUNDLE.is_file() else b"")
    return digest.hexdigest()[:12]


def base_tag() -> str:
    return f"localhost/ingress-base:bookworm-{base_key()}"


def ensure_base() -> str:
    """The base image in the tests' storage, made from the cached root file system (debootstrap if none)."""
    tag = base_tag()
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    name = f"podman-base-{base_key()}"
    with locked(root / f"{name}.lock"):
        if podman("image", "exists", tag, check=False).returncode == 0:
            return tag
        cached = root / name
        env = {**environment(), "PODMAN": " ".join(command())}
        log = root / f"{name}.log"
        if not (cached / "rootfs.tar").is_file():
            for stale in root.glob(f".{name}-*"):  # only the lock holder makes it: these were interrupted
                shutil.rmtree(stale, ignore_errors=True)
            work = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
            try:
                (work / "out").mkdir()
                _script(work / "out" / "rootfs.tar", tag, env, log)
                os.replace(work / "out", cached)  # atomic: nobody sees a half-made directory
            finally:
                shutil.rmtree(work, ignore_errors=True)
        else:
            _script(cached / "rootfs.tar", tag, env, log)
    return tag


def _script(tarball: Path, tag: str, env: dict[str, str], log: Path) -> None:
    with log.open("w") as out:
        code = subprocess.run(["sh", str(BASE_SCRIPT), tag, str(tarball)], stdout=out, stderr=subprocess.STDOUT,
                              env=env, timeout=BASE_TIMEOUT, check=False).returncode
    if code != 0:
        raise PodmanError(f"{BASE_SCRIPT.name} exited {code}:\n{_tail(log)}")


@dataclass(frozen=True)
class Image:
    tag: str
    base: str
    size_bytes: int
    build_seconds: float


def build_image(base: str) -> Image:
    """deploy/Dockerfile built from the repository on `base`; the image it replaces is removed."""
    before = podman("image", "inspect", "--format", "{{.Id}}", IMAGE, check=False).stdout.strip()
    started = time.monotonic()
    # --format docker: the OCI format has no HEALTHCHECK, and podman would drop the Dockerfile's.
    proc = podman("build", "--format", "docker", "--layers", "--ignorefile", str(IGNORE),
                  "--build-arg", f"PYTHON_IMAGE={base}",
                  "-f", str(REPO / "deploy" / "Dockerfile"), "-t", IMAGE, str(REPO), timeout=BUILD_TIMEOUT,
                  check=False)
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        raise PodmanError(f"podman build exited {proc.returncode}:\n{(proc.stdout + proc.stderr)[-4000:]}")
    image_id = podman("image", "inspect", "--format", "{{.Id}}", IMAGE).stdout.strip()
    if before and before != image_id:
        podman("rmi", before, check=False)
    # Replaced builds' stages, once a day old: the newer ones are the layer cache of the next build.
    podman("image", "prune", "--force", "--filter", "until=24h", check=False)
    size = int(podman("image", "inspect", "--format", "{{.Size}}", IMAGE).stdout.strip())
    return Image(IMAGE, base, size, elapsed)


def smoke(base: str) -> None:
    """A container starts and runs, or no test here can: PodmanUnavailable, saying why."""
    proc = podman("run", "--rm", "--network", "none", base, "true", check=False)
    if proc.returncode != 0:
        raise PodmanUnavailable(f"podman cannot start a container here: {proc.stderr.strip()[-1500:]}")


def sweep() -> None:
    """Whatever an earlier run left behind in the tests' storage (killed before it could clean up)."""
    for pod in podman("pod", "ps", "--quiet", check=False).stdout.split():
        podman("pod", "rm", "--force", "--time", "0", pod, check=False)
    for container in podman("ps", "--all", "--quiet", check=False).stdout.split():
        podman("rm", "--force", "--time", "0", container, check=False)
    podman("volume", "prune", "--force", check=False)


def _tail(log: Path, lines: int = 40) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


# --- running containers ---------------------------------------------------------------------------------


@dataclass
class Container:
    name: str

    def logs(self) -> tuple[str, str]:
        """What the container wrote on stdout and on stderr, apart."""
        proc = podman("logs", self.name, check=False)
        return proc.stdout, proc.stderr

    def exec(self, *argv: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        return podman("exec", self.name, *argv, timeout=timeout, check=False)

    def inspect(self) -> dict[str, object]:
        found: list[dict[str, object]] = json.loads(podman("container", "inspect", self.name).stdout)
        return found[0]

    def signal(self, name: str) -> None:
        podman("kill", "--signal", name, self.name)

    def wait(self, timeout: float) -> int:
        """Its exit code, once it has exited."""
        return int(podman("wait", self.name, timeout=timeout).stdout.strip())

    def diff(self) -> list[str]:
        """What changed in its file system, as `podman diff` lists it ("A /path", "C /path")."""
        return podman("diff", self.name).stdout.splitlines()


class Podman:
    """Containers, pods and played manifests of one test, all removed when it ends, passed or failed."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._stack = contextlib.ExitStack()

    def run(self, name: str, *args: str) -> Container:
        """`podman run --detach --name PREFIX-name ARGS...`; removed at the end."""
        full = f"{self.prefix}-{name}"
        self._stack.callback(podman, "rm", "--force", "--time", "0", full, check=False)
        podman("run", "--detach", "--name", full, *args)
        return Container(full)

    def pod(self, name: str, *args: str) -> str:
        full = f"{self.prefix}-{name}"
        self._stack.callback(podman, "pod", "rm", "--force", "--time", "0", full, check=False)
        podman("pod", "create", "--name", full, *args)
        return full

    def play(self, manifest: Path) -> list[str]:
        """`podman kube play`: the pods it started; `podman kube down` and their volumes' removal at the end."""
        volumes = set(podman("volume", "ls", "--quiet").stdout.split())
        self._stack.callback(self._down, manifest, volumes)
        proc = podman("kube", "play", "--replace", str(manifest), timeout=180.0)
        out = proc.stdout.split()
        return [out[i + 1] for i, word in enumerate(out[:-1]) if word == "Pod:"]

    def down(self, manifest: Path) -> subprocess.CompletedProcess[str]:
        return podman("kube", "down", str(manifest), timeout=STOP_TIMEOUT, check=False)

    def _down(self, manifest: Path, volumes_before: set[str]) -> None:
        self.down(manifest)
        for volume in set(podman("volume", "ls", "--quiet", check=False).stdout.split()) - volumes_before:
            podman("volume", "rm", "--force", volume, check=False)

    def close(self) -> None:
        self._stack.close()


# --- pytest: the `podman_image` fixture, and the builds before any test runs -----------------------------

MARKER = "podman"
_IMAGE = pytest.StashKey[Image]()
_ERROR = pytest.StashKey[PodmanError]()


def prepare(session: pytest.Session) -> None:
    """tests/conftest.py's pytest_collection_finish calls this."""
    if session.config.option.collectonly or not any(item.get_closest_marker(MARKER) for item in session.items):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    say = reporter.write_line if reporter is not None else print
    try:
        if missing := _missing():
            say(f"podman: installing {', '.join(missing)} with apt-get (Debian's packages)")
        install()
        storage().mkdir(parents=True, exist_ok=True)
        sweep()
        if podman("image", "exists", base_tag(), check=False).returncode != 0:
            say(f"podman: making the base image {base_tag()} ({BASE_SCRIPT.relative_to(REPO)}; "
                "debootstrap takes about a minute when nothing is cached)")
        started = time.monotonic()
        base = ensure_base()
        base_seconds = time.monotonic() - started
        smoke(base)
        image = build_image(base)
    except (PodmanError, OSError, subprocess.TimeoutExpired) as exc:
        error = exc if isinstance(exc, PodmanError) else PodmanError(str(exc))
        session.config.stash[_ERROR] = error
        say(f"podman: {error}")
        return
    session.config.stash[_IMAGE] = image
    say(f"podman: base {base} ready in {base_seconds:.1f} s; {image.tag} built in {image.build_seconds:.1f} s, "
        f"{image.size_bytes / 1e6:.0f} MB")


@pytest.fixture(scope="session")
def podman_image(request: pytest.FixtureRequest) -> Image:
    """The edge's image, built by this run; the test is skipped where no container can start."""
    if error := request.config.stash.get(_ERROR, None):
        if isinstance(error, PodmanUnavailable):
            pytest.skip(str(error))
        pytest.fail(f"the image could not be made: {error}")
    image = request.config.stash.get(_IMAGE, None)
    if image is None:
        pytest.fail("the image was not built: is the test marked `podman`?")
    return image


@pytest.fixture
def containers(request: pytest.FixtureRequest) -> Iterator[Podman]:
    """This test's containers and pods, named after it and removed when it ends."""
    digest = hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:8]
    runner = Podman(f"ingress-test-{os.getpid()}-{digest}")
    try:
        yield runner
    finally:
        runner.close()
