"""tests/support/clientenv.py keeps its promises: one environment per key, built atomically, shared by concurrent
builders, and nothing half-built left by a build that failed or was interrupted.

The environments here install nothing (pip has nothing to fetch), in a cache of the test's own.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from clientenv import ClientEnv, ClientScriptFailed

EMPTY = ClientEnv(())


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "ingress" / "clientenvs"


def _entries(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir())


def test_the_key_names_the_requirements_not_their_order() -> None:
    assert ClientEnv(("a==1", "b==2")).key == ClientEnv(("b==2", "a==1")).key != ClientEnv(("a==1",)).key


def test_an_env_is_built_once_then_reused(cache: Path) -> None:
    assert not EMPTY.ready()
    path = EMPTY.build()
    assert path == cache / EMPTY.key and EMPTY.ready()
    built = path.stat().st_ino
    assert EMPTY.build() == path and path.stat().st_ino == built
    assert json.loads(EMPTY.run("versions.py"))["prefix"] == str(path)  # the script runs in the env's Python


def test_concurrent_builders_share_one_env(cache: Path) -> None:
    with ThreadPoolExecutor(max_workers=4) as pool:
        paths = list(pool.map(lambda _: EMPTY.build(), range(4)))
    assert paths == [cache / EMPTY.key] * 4  # a second rename onto the built env would have raised
    assert _entries(cache) == [EMPTY.key, f"{EMPTY.key}.lock"]


def test_an_interrupted_build_does_not_count_and_is_swept(cache: Path) -> None:
    stale = cache / f"{EMPTY.key}.build-interrupted"
    (stale / "bin").mkdir(parents=True)
    (stale / "bin" / "python").write_text("half a venv")
    assert not EMPTY.ready()
    EMPTY.build()
    assert _entries(cache) == [EMPTY.key, f"{EMPTY.key}.lock"]


def test_a_failed_install_leaves_no_env(cache: Path) -> None:
    broken = ClientEnv(("/nonexistent/ingress-no-such-project",))
    with pytest.raises(RuntimeError, match="could not build"):
        broken.build()
    assert _entries(cache) == [f"{broken.key}.lock"] and not broken.ready()


def test_a_failing_script_fails_the_test_with_its_stderr(cache: Path) -> None:
    with pytest.raises(ClientScriptFailed, match="PackageNotFoundError"):
        EMPTY.run("versions.py", "ingress-no-such-distribution")
