"""A real browser for the admin console's tests: Debian's chromium, headless, driven by Playwright (PyPI).

    chromium   /usr/bin/chromium (or `chromium` on PATH), else installed with apt-get (as root, as CI runs),
               under a file lock, like redis-server and podman; Playwright's own browser downloads
               (`playwright install`) are never used
    launch     a fresh profile for each test, and the flags that keep chromium from reaching out (a closed
               network makes it stall otherwise): no background networking, component updates, sync or QUIC
    artifacts  what a run keeps (screenshots): `$INGRESS_TEST_ARTIFACTS`, else tests/.artifacts/ (git-ignored)

Chromium is made ready once collection is done, before any test runs and outside every test's timeout, and
only when a selected test is marked `browser`. A test is skipped only where chromium cannot be installed
(not root, or no apt-get); an install that fails fails the tests that need it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from llama_engine import locked

if TYPE_CHECKING:  # imported where a browser is started: the rest of the suite does not load Playwright
    from playwright.async_api import BrowserContext

MARKER = "browser"
PACKAGE = "chromium"
APT_LOCK = Path(tempfile.gettempdir()) / "ingress-apt-chromium.lock"
APT_INSTALL = ("apt-get", "install", "-y", "--no-install-recommends", "-o", "DPkg::Lock::Timeout=600", PACKAGE)
ARGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync")
REPO = Path(__file__).resolve().parents[2]
_ERROR = pytest.StashKey[Exception]()


class BrowserUnavailable(RuntimeError):
    """Chromium is not installed and cannot be here: the tests that need it are skipped, saying why."""


class BrowserError(RuntimeError):
    """apt-get could not install chromium."""


def executable() -> Path | None:
    found = shutil.which("chromium", path=f"{os.environ.get('PATH', '')}:/usr/bin")
    return Path(found) if found else None


def install() -> Path:
    """Chromium's path, installed from Debian's package if missing."""
    if (found := executable()) is not None:
        return found
    if os.geteuid() != 0:
        raise BrowserUnavailable("chromium is not installed, and installing it with apt-get needs root")
    if shutil.which("apt-get") is None:
        raise BrowserUnavailable("chromium is not installed, and there is no apt-get to install it")
    with locked(APT_LOCK):
        if (found := executable()) is not None:  # another run installed it while this one waited
            return found
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        attempt = subprocess.run(APT_INSTALL, capture_output=True, text=True, env=env, check=False)
        if attempt.returncode != 0:  # a fresh machine has no package lists yet
            subprocess.run(("apt-get", "update"), capture_output=True, text=True, env=env, check=False)
            attempt = subprocess.run(APT_INSTALL, capture_output=True, text=True, env=env, check=False)
        if attempt.returncode != 0 or (found := executable()) is None:
            raise BrowserError(f"apt-get could not install {PACKAGE}:\n{attempt.stderr[-3000:]}")
        return found


def prepare(session: pytest.Session) -> None:
    """tests/conftest.py's pytest_collection_finish calls this."""
    if session.config.option.collectonly or not any(item.get_closest_marker(MARKER) for item in session.items):
        return
    if executable() is not None:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    say = reporter.write_line if reporter is not None else print
    say(f"{PACKAGE} not found: installing it with apt-get (Debian's {PACKAGE} package)")
    try:
        say(f"{PACKAGE}: {install()}")
    except (BrowserError, BrowserUnavailable, OSError) as exc:
        session.config.stash[_ERROR] = exc
        say(f"{PACKAGE}: {exc}")


@pytest.fixture(scope="session")
def chromium(request: pytest.FixtureRequest) -> Path:
    """Debian's chromium; the test is skipped where it cannot be installed."""
    if error := request.config.stash.get(_ERROR, None):
        if isinstance(error, BrowserUnavailable):
            pytest.skip(str(error))
        pytest.fail(f"chromium could not be installed: {error}")
    found = executable()
    if found is None:
        pytest.fail("chromium is not installed: is the test marked `browser`?")
    return found


@asynccontextmanager
async def browsing(exe: Path, profile: Path) -> AsyncIterator[BrowserContext]:
    """A headless chromium on a fresh profile in `profile`, closed when the block ends."""
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            str(profile), executable_path=str(exe), headless=True, args=list(ARGS))
        context.set_default_timeout(15_000)
        try:
            yield context
        finally:
            await context.close()


def artifacts() -> Path:
    """Where a run keeps what it shows (screenshots): made if missing."""
    folder = Path(os.environ.get("INGRESS_TEST_ARTIFACTS") or REPO / "tests" / ".artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder
