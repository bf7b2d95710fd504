"""Client environments: a virtualenv per requirement set, built once in a cache outside the work tree,
and client scripts run in it as subprocesses.

For clients whose pins cannot share the dev venv (instructor 1.17 pins `jiter<0.15`, which holds `openai`
at 3.3.0 while the contract test walks the newest SDK). An environment lives in
`$XDG_CACHE_HOME/ingress/clientenvs/<key>` (`~/.cache/...` without it), keyed by a hash of its
requirements and of the Python that runs the tests, so a changed pin or interpreter builds a new one.

A build is atomic: it happens in `<key>.build-*` beside the final directory, which appears only by
`rename` once pip has succeeded. A lock file serialises builders of one key, so a second concurrent
run waits and then reuses the first one's environment; a build that was interrupted leaves only its
temporary directory, which the next builder (holding the lock, hence alone) removes. Scripts are run
as `<env>/bin/python script.py`: a venv moved by rename keeps working that way (its `bin/` entry
points would still name the temporary path, and are never used).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import venv
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

BUILD_TIMEOUT = 900.0  # seconds for pip to build a fresh environment (a minute or two here; slow mirrors)
RUN_TIMEOUT = 30.0  # seconds for one client script against a loopback edge

CLIENTS = Path(__file__).resolve().parents[1] / "clients"  # the scripts; no test_ prefix, so pytest leaves them be


def cache_root() -> Path:
    """Where client environments are kept: the XDG cache (an absolute $XDG_CACHE_HOME, else ~/.cache)."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "ingress" / "clientenvs"


class ClientScriptFailed(AssertionError):
    """A client script exited non-zero: its stderr says why (the client's own traceback)."""


@dataclass(frozen=True)
class ClientEnv:
    """A named set of requirements, installed into its own cached virtualenv on first use."""

    requirements: tuple[str, ...]

    @property
    def key(self) -> str:
        identity = {"requirements": sorted(self.requirements), "python": sys.version, "base": sys.base_prefix}
        return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def path(self) -> Path:
        return cache_root() / self.key

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    def ready(self) -> bool:
        """Whether the environment is already built (cheap: the directory appears only when complete)."""
        return self.python.exists()

    def build(self, timeout: float = BUILD_TIMEOUT) -> Path:
        """Build the environment unless it exists; its directory."""
        if self.ready():
            return self.path
        root = cache_root()
        root.mkdir(parents=True, exist_ok=True)
        with _locked(root / f"{self.key}.lock"):
            if self.ready():  # another run built it while we waited for the lock
                return self.path
            for stale in root.glob(f"{self.key}.build-*"):  # an interrupted build's: we hold the lock
                shutil.rmtree(stale, ignore_errors=True)
            staging = Path(tempfile.mkdtemp(prefix=f"{self.key}.build-", dir=root))
            try:
                self._install(staging, timeout)
                staging.rename(self.path)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
        return self.path

    def _install(self, where: Path, timeout: float) -> None:
        venv.create(where, with_pip=False)  # this venv's own pip installs into it (`--python`): no ensurepip
        (where / "requirements.txt").write_text("".join(f"{r}\n" for r in self.requirements))
        pip = [sys.executable, "-m", "pip", "--python", str(where / "bin" / "python"), "install", "--quiet",
               "--disable-pip-version-check", "-r", str(where / "requirements.txt")]
        done = subprocess.run(pip, capture_output=True, text=True, timeout=timeout, env=_clean_env(), check=False)
        if done.returncode:
            raise RuntimeError(f"pip could not build the client environment {self.requirements}:\n"
                               f"{done.stdout[-4000:]}{done.stderr[-4000:]}")

    def run(self, script: str, *args: str, timeout: float = RUN_TIMEOUT) -> str:
        """Run tests/clients/<script> in this environment (built if needed) with `args`; its stdout.

        A non-zero exit fails the test with the script's stderr."""
        self.build()
        command = [str(self.python), str(CLIENTS / script), *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=_clean_env(), check=False)
        if done.returncode:
            raise ClientScriptFailed(f"{script} {' '.join(args)} exited {done.returncode}:\n{done.stderr[-8000:]}")
        return done.stdout


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `path`, released when the block ends or the process dies."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _clean_env() -> dict[str, str]:
    """This process's environment without what would make a child Python see the dev venv's packages."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PYTHONNOUSERSITE"] = "1"
    return env


# instructor 1.17 with what it pins (openai 3.3.0 today); its own pydantic.
INSTRUCTOR = ClientEnv(("instructor==1.17.0",))
