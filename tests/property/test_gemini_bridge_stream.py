"""The Gemini dialect's stream reader (ingress/bridges/gemini_answers.py) gives the same chunks, or the same
failure, for any split of Google's body, with either line ending and with comments between its events: over
every fixture of tests/fixtures/gemini/, and over any generated stream of partial answers (text, thoughts,
function calls, signatures, usage, a finish reason or none), whose chunks then say what the events said."""

from __future__ import annotations

import base64
import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingress import wire
from ingress.bridges.dialect import EngineFailed
from ingress.bridges.gemini_answers import GeminiStream
from ingress.bridges.gemini_request import split_id

FIXTURES = {p.stem: p.read_bytes() for p in sorted((Path(__file__).resolve().parents[1] / "fixtures"
                                                    / "gemini").glob("*.sse"))}
SETTINGS = settings(max_examples=60, deadline=None, database=None)


def outcome(pieces: list[bytes]) -> list[wire.Chunk] | wire.ErrorInfo:
    stream = GeminiStream(1)
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


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_every_offset_of_every_fixture(name: str) -> None:
    body = FIXTURES[name]
    for offset in range(len(body) + 1):
        assert outcome([body[:offset], body[offset:]]) == EXPECTED[name], offset


TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=10)
SIGNATURE = st.one_of(st.none(), st.binary(min_size=1, max_size=12).map(lambda b: base64.b64encode(b).decode()))
PART = st.one_of(
    st.builds(lambda t, s: {"text": t, **({"thoughtSignature": s} if s else {})}, TEXT, SIGNATURE),
    st.builds(lambda t: {"text": t, "thought": True}, TEXT),
    st.builds(lambda n, a, s: {"functionCall": {"name": n, "args": a}, **({"thoughtSignature": s} if s else {})},
              st.sampled_from(["f", "get_weather"]), st.dictionaries(TEXT, st.integers(-9, 9), max_size=2), SIGNATURE),
)
EVENTS = st.lists(st.lists(PART, max_size=3), min_size=1, max_size=5)


def body_of(events: list[list[dict[str, Any]]], finish: str | None, crlf: bool, comments: bool) -> bytes:
    end = b"\r\n" if crlf else b"\n"
    out = b""
    for n, parts in enumerate(events):
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        if finish is not None and n == len(events) - 1:
            candidate["finishReason"] = finish
        answer = {"candidates": [candidate], "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": n},
                  "responseId": "r"}
        out += (b": keep-alive" + end if comments else b"") + b"data: " + json.dumps(answer).encode() + end + end
    return out


@SETTINGS
@given(events=EVENTS, finish=st.sampled_from([None, "STOP", "MAX_TOKENS", "SAFETY"]), crlf=st.booleans(),
       comments=st.booleans(), points=st.lists(st.integers(0, 10_000), max_size=30))
def test_any_stream_in_any_split(events: list[list[dict[str, Any]]], finish: str | None, crlf: bool,
                                 comments: bool, points: list[int]) -> None:
    body = body_of(events, finish, crlf, comments)
    whole = outcome([body])
    assert outcome(cut(body, points)) == whole
    if finish is None:
        assert isinstance(whole, wire.ErrorInfo) and whole.code == "upstream_unavailable"
        return
    assert isinstance(whole, list)
    parts = [p for e in events for p in e]
    assert "".join(c.content or "" for c in whole) == "".join(p["text"] for p in parts if "text" in p
                                                              and not p.get("thought"))
    assert "".join(c.reasoning or "" for c in whole) == "".join(p["text"] for p in parts if p.get("thought"))
    calls = [d for c in whole for d in c.tool_calls]
    called = [p for p in parts if "functionCall" in p]
    assert [(d.index, d.name, json.loads(d.arguments or "")) for d in calls] == [
        (n, p["functionCall"]["name"], p["functionCall"]["args"]) for n, p in enumerate(called)]
    assert [split_id(d.id or "")[1] for d in calls] == [p.get("thoughtSignature") for p in called]
    signatures = [p["thoughtSignature"] for p in parts if p.get("thoughtSignature")]
    assert [c.signature for c in whole if c.signature] == signatures[:1]  # the reasoning's: the first
    assert [c.sequence for c in whole] == list(range(len(whole)))
    assert whole[-1].done and whole[-1].usage is not None and whole[-1].usage.prompt_tokens == 3
    expected = {"STOP": "tool_calls" if calls else "stop", "MAX_TOKENS": "length", "SAFETY": "content_filter"}
    assert whole[-1].finish_reason == expected[finish]
