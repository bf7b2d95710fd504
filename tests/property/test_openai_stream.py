"""The OpenAI-compatible dialect's stream decoder gives the same chunks (or the same failure) for any
split of an engine's body, with either line ending, and with pings, comments and unknown events inserted
between its events (issue 12's Hypothesis tests, over every fixture in tests/fixtures/bridges/openai/)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingress import wire
from ingress.bridges.dialect import EngineFailed
from ingress.bridges.openai_answers import OpenAIStream

FIXTURES = {p.stem: p.read_bytes() for p in sorted((Path(__file__).resolve().parents[1] / "fixtures" / "bridges"
                                                    / "openai").glob("*.sse"))}
NOISE = [b": ping\n\n", b":\n", b"event: ping\ndata: {}\n\n", b"event: keepalive\ndata: x\n\n", b"id: 7\n",
         b"retry: 3000\n", b": OPENROUTER PROCESSING\n\n"]
SETTINGS = settings(max_examples=40, deadline=None, database=None)


def outcome(pieces: list[bytes]) -> list[wire.Chunk] | wire.ErrorInfo:
    stream = OpenAIStream(fallback_id="chatcmpl-split")
    chunks: list[wire.Chunk] = []
    try:
        for piece in pieces:
            chunks += stream.feed(piece)
        chunks += stream.finish()
    except EngineFailed as failed:
        return failed.info
    return chunks


def cut(body: bytes, points: list[int]) -> list[bytes]:
    edges = [0, *sorted(p % (len(body) + 1) for p in points), len(body)]
    return [body[a:b] for a, b in itertools.pairwise(edges)]


EXPECTED = {name: outcome([body]) for name, body in FIXTURES.items()}


def test_the_fixtures_are_there() -> None:
    engines = {"openai_text", "vllm_tools", "sglang_reasoning_tools", "tgi_tools", "ollama_tools", "llamacpp_text"}
    assert engines <= set(FIXTURES)


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_every_offset(name: str) -> None:
    body = FIXTURES[name]
    for offset in range(len(body) + 1):
        assert outcome([body[:offset], body[offset:]]) == EXPECTED[name], offset


@pytest.mark.parametrize("name", sorted(FIXTURES))
@SETTINGS
@given(points=st.lists(st.integers(min_value=0, max_value=10_000), max_size=40), crlf=st.booleans())
def test_any_split_either_line_ending(name: str, points: list[int], crlf: bool) -> None:
    body = FIXTURES[name].replace(b"\n", b"\r\n") if crlf else FIXTURES[name]
    assert outcome(cut(body, points)) == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(FIXTURES))
@SETTINGS
@given(data=st.data())
def test_pings_comments_and_unknown_events_change_nothing(name: str, data: st.DataObject) -> None:
    events = FIXTURES[name].split(b"\n\n")
    noisy = b""
    for i, event in enumerate(events):
        noisy += b"".join(data.draw(st.lists(st.sampled_from(NOISE), max_size=3), label=f"noise {i}"))
        noisy += event + (b"\n\n" if i < len(events) - 1 else b"")
    points = data.draw(st.lists(st.integers(min_value=0, max_value=10_000), max_size=10), label="points")
    assert outcome(cut(noisy, points)) == EXPECTED[name]
