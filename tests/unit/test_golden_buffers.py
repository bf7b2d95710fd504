"""Every released schema version's golden buffers: today's readers read them, today's encoder writes the
latest ones byte for byte, and both verifiers (ours and FlatBuffers' C++ one) accept them all."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import golden_buffers as golden
import pytest
from cxx_oracle import CxxVerifier

from ingress.wire import verify

KINDS = ("request", "response", "chunk", "error")
VERSIONS = golden.versions()
LATEST = VERSIONS[-1]
VERIFIERS: dict[str, Callable[[bytes], None]] = {
    "request": verify.verify_request, "response": verify.verify_response, "chunk": verify.verify_chunk,
    "error": verify.verify_error}
ALL = [pytest.param(version, kind, id=f"{version.name}-{kind}") for version in VERSIONS for kind in KINDS]


def _unset(value: Any) -> bool:
    return value in (None, [], {}, 0, False, "")


def _reads_as(old: Any, new: Any, where: str = "$") -> None:
    """`new` (read today) holds everything `old` (read at release) did; what it has beyond is a field
    appended since, which old bytes cannot carry, so it is unset."""
    if isinstance(old, dict) and isinstance(new, dict):
        assert old.keys() <= new.keys(), f"{where}: fields no longer read: {sorted(old.keys() - new.keys())}"
        for key in new.keys() - old.keys():
            assert _unset(new[key]), f"{where}.{key}: a field the old bytes do not have reads as {new[key]!r}"
        for key in old:
            _reads_as(old[key], new[key], f"{where}.{key}")
    elif isinstance(old, list) and isinstance(new, list):
        assert len(old) == len(new), f"{where}: {len(old)} items then, {len(new)} now"
        for i, (o, n) in enumerate(zip(old, new, strict=True)):
            _reads_as(o, n, f"{where}[{i}]")
    else:
        assert old == new, f"{where}: {old!r} then, {new!r} now"


def test_the_latest_golden_version_is_the_released_schema() -> None:
    # A release copies the schema over schema/baseline/ and adds its golden buffers in the same commit.
    assert (LATEST / "SCHEMA_SHA256").read_text().strip() == golden.schema_sha256(), (
        f"schema/baseline/ changed since {LATEST.name}'s golden buffers: "
        "write the new release's with `python tests/support/golden_buffers.py <version>`")


@pytest.mark.parametrize(("version", "kind"), ALL)
def test_todays_readers_read_every_released_buffer(version: Path, kind: str) -> None:
    data = (version / f"{kind}.bin").read_bytes()
    expected = json.loads((version / f"{kind}.json").read_text())
    # Unset fields may read as absent or as their default, as the Python types choose (Usage is the
    # schema's own data class, which spells its zeros out); the latest bytes are pinned exactly below.
    _reads_as(expected, golden.read(kind, data))


SCHEMA = golden.REPO / "schema" / "llm_gateway.fbs"


@pytest.mark.parametrize("kind", KINDS)
def test_todays_encoder_writes_the_latest_buffers_byte_for_byte(kind: str) -> None:
    today = golden.buffers()[kind]
    if golden.schema_sha256(SCHEMA) == golden.schema_sha256():
        assert today == (LATEST / f"{kind}.bin").read_bytes()
    else:
        # Fields appended since the release: the generated encoder lays every table out with a slot for
        # each of its fields, so the bytes grow; what they carry must still read as the release's did.
        _reads_as(json.loads((LATEST / f"{kind}.json").read_text()), golden.read(kind, today))


@pytest.mark.parametrize(("version", "kind"), ALL)
def test_our_verifier_accepts_every_released_buffer(version: Path, kind: str) -> None:
    VERIFIERS[kind]((version / f"{kind}.bin").read_bytes())  # raises on a buffer it refuses


@pytest.mark.cxx
@pytest.mark.parametrize(("version", "kind"), ALL)
def test_the_cxx_verifier_accepts_every_released_buffer(cxx_verifier: CxxVerifier, version: Path, kind: str) -> None:
    data = (version / f"{kind}.bin").read_bytes()
    assert cxx_verifier.verify(kind, data, size_prefixed=kind == "chunk")
