"""Session fixtures shared by every test suite, starting with the C++ Verifier oracle."""

from __future__ import annotations

import io
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

# Hypothesis's per-example deadline is a timing assertion, and this suite runs on shared, noisy machines:
# a slow example is no failure here (speed is measured in bench/, never asserted in tests).
settings.register_profile("ingress", deadline=None)
settings.load_profile("ingress")

# The helper modules in tests/support/ (`import waiting`, `from fakes.upstream import ...`), the test
# packages beside this file (`from unit.wire.test_verify import ...`), and the repository's own tooling
# (codegen/, not installed), importable whatever pytest's import mode.
_TESTS = Path(__file__).resolve().parent
for _path in (str(_TESTS.parent), str(_TESTS), str(_TESTS / "support")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import browser  # noqa: E402
import llama_engine  # noqa: E402
import podman_images  # noqa: E402
import redis_servers  # noqa: E402

# Debian's chromium for the admin console's tests (`browser` marker).
from browser import chromium  # noqa: E402, F401 (a fixture, by name)
from cxx_oracle import CxxVerifier, build_oracle  # noqa: E402

# The `llama_server` and `llama_embedder` fixtures (a real engine) and the hooks that build it before any
# test runs.
from llama_engine import (  # noqa: E402, F401 (pytest finds the fixture and hooks by name here)
    llama_binary,
    llama_embedder,
    llama_server,
    pytest_collection_modifyitems,
    pytest_runtest_makereport,
)
from logcapture import captured_logs  # noqa: E402

# The edge's image built and run with podman (`podman` marker).
from podman_images import containers, podman_image  # noqa: E402, F401 (fixtures, by name)

# Real Redis and Valkey servers for the limit-store tests (`redis` marker).
from redis_servers import limit_server, limit_servers, own_limit_server  # noqa: E402, F401 (fixtures, by name)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Before any test runs, outside every test's timeout: llama-server built, redis-server installed, the
    edge's image built with podman, chromium installed."""
    llama_engine.pytest_collection_finish(session)
    redis_servers.prepare(session)
    podman_images.prepare(session)
    browser.prepare(session)


@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    """The log lines a test makes the process write (see logcapture.lines)."""
    with captured_logs() as stream:
        yield stream


@pytest.fixture(scope="session")
def cxx_verifier() -> Iterator[CxxVerifier]:
    """The FlatBuffers C++ Verifier, built once and kept running for the whole session."""
    if shutil.which("g++") is None:
        reason = "g++ not found: cannot build the FlatBuffers C++ Verifier oracle"
        if os.environ.get("INGRESS_REQUIRE_CXX") == "1":
            pytest.fail(f"{reason} (INGRESS_REQUIRE_CXX=1)")
        pytest.skip(f"{reason}; set INGRESS_REQUIRE_CXX=1 to fail instead")
    verifier = CxxVerifier(build_oracle())
    try:
        yield verifier
    finally:
        verifier.close()
