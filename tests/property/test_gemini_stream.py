"""Google's stream from any stream a service may send (ingress/translate/gemini.py): thoughts and their
signature, text, refusals, tool calls in argument pieces, another candidate's frames, usage, the end, or an
Error frame anywhere before it; its bytes split into reads anywhere, framed back by FrameDecoder as the
edge's streaming code does. However the bytes were split the events are the same; each is a
GenerateContentResponse the google-genai SDK reads; function calls come whole, usage only on the last event;
and the parts, joined as a client joins them, are the parts `response_from_answer` makes of the same answer
whole."""

from __future__ import annotations

import base64
import itertools
import json
from dataclasses import dataclass, field
from typing import Any

import msgspec
from google.genai import types as sdk
from hypothesis import given, settings
from hypothesis import strategies as st

from ingress import wire
from ingress.errors import UpstreamAnswered
from ingress.translate.gemini import GeminiStreamTranslator, response_from_answer
from ingress.wire import Chunk, ToolCallDelta
from ingress.wire.framing import FrameDecoder

SETTINGS = settings(max_examples=150, deadline=None, database=None)

TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
PIECES = st.lists(TEXT, max_size=4)
JSON_VALUE = st.one_of(st.none(), st.booleans(), st.integers(-(2**40), 2**40), TEXT)
ARGUMENTS = st.one_of(st.just(""), st.dictionaries(TEXT, JSON_VALUE, max_size=3).map(json.dumps))
FINISH = st.sampled_from([None, "stop", "length", "tool_calls", "content_filter", "refusal"])
SIGNATURE = st.binary(min_size=1, max_size=12).map(lambda b: base64.b64encode(b).decode())
USAGE = st.builds(wire.Usage, prompt_tokens=st.integers(0, 5000), completion_tokens=st.integers(0, 5000),
                  cached_tokens=st.integers(0, 3000))


@dataclass
class Call:
    id: str | None
    name: str
    arguments: str
    cuts: list[int]

    def pieces(self) -> list[str]:
        edges = [0, *sorted({c % (len(self.arguments) + 1) for c in self.cuts}), len(self.arguments)]
        return [self.arguments[a:b] for a, b in itertools.pairwise(edges) if b > a]


@dataclass
class Answer:
    reasoning: list[str]
    signature: str | None
    text: list[str]
    refusal: list[str]
    calls: list[Call]
    finish: str | None
    usage: wire.Usage | None
    ending: int  # 0: finish, usage and done in one frame; 1: each in its own
    noise: list[int] = field(default_factory=list)  # where another candidate's frames come

    def chunks(self) -> list[Chunk]:
        out: list[Chunk] = [Chunk(sequence=0, reasoning=r) for r in self.reasoning]
        if self.signature is not None:
            out.append(Chunk(sequence=0, signature=self.signature))
        out += [Chunk(sequence=0, content=t) for t in self.text]
        out += [Chunk(sequence=0, refusal=t) for t in self.refusal]
        for n, call in enumerate(self.calls):
            out.append(Chunk(sequence=0, tool_calls=[ToolCallDelta(index=n, id=call.id, type="function",
                                                                   name=call.name)]))
            out += [Chunk(sequence=0, tool_calls=[ToolCallDelta(index=n, arguments=p)]) for p in call.pieces()]
        for at in self.noise:
            out.insert(at % (len(out) + 1), Chunk(sequence=0, choice_index=1, content="other") if at % 2 else Chunk(
                sequence=0, choice_index=1, reasoning="x", finish_reason="length",
                tool_calls=[ToolCallDelta(index=0, id="o", name="o", arguments="{}")]))
        end = [Chunk(sequence=0, finish_reason=self.finish, usage=self.usage, done=True)]
        if self.ending:
            end = [Chunk(sequence=0, finish_reason=self.finish), Chunk(sequence=0, usage=self.usage),
                   Chunk(sequence=0, done=True)]
        return [msgspec.structs.replace(c, sequence=i) for i, c in enumerate(out + end)]

    def response(self) -> wire.Response:
        text = "".join(self.text)
        choice = wire.Choice(
            reasoning="".join(self.reasoning), signature=self.signature,
            content=text if text or not self.refusal else None, refusal="".join(self.refusal) or None,
            tool_calls=[wire.FunctionCall(id=c.id or "", name=c.name, arguments=c.arguments) for c in self.calls],
            finish_reason=self.finish)
        return wire.Response(id="up", model="served", created=1, choices=[choice], usage=self.usage)


calls = st.builds(Call, id=st.none() | st.text("abcxyz_0123456789", min_size=1, max_size=8),
                  name=st.text("abcdefgh_", min_size=1, max_size=8), arguments=ARGUMENTS,
                  cuts=st.lists(st.integers(0, 200), max_size=4))
answers = st.builds(Answer, reasoning=PIECES, signature=st.none() | SIGNATURE, text=PIECES,
                    refusal=st.lists(TEXT, max_size=1), calls=st.lists(calls, max_size=3), finish=FINISH,
                    usage=st.none() | USAGE, ending=st.integers(0, 1), noise=st.lists(st.integers(0, 50), max_size=2))
ERROR = wire.ErrorInfo(status=503, type="server_error", code="upstream_overloaded", message="busy")


def frames_of(answer: Answer, error_at: int | None) -> list[bytes]:
    frames = [bytes(wire.write_chunk(c)) for c in answer.chunks()]
    if error_at is None:
        return frames
    at = error_at % len(frames)
    return [*frames[:at], bytes(wire.write_error(ERROR, framed=True))]


def cut(data: bytes, points: list[int]) -> list[bytes]:
    edges = [0, *sorted(p % (len(data) + 1) for p in points), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


def stream(pieces: list[bytes], thoughts: bool) -> tuple[list[dict[str, Any]], BaseException | None]:
    decoder = FrameDecoder()
    translator = GeminiStreamTranslator(id="resp-edge", model="gemini-x", include_thoughts=thoughts)
    events: list[Any] = []
    failure: BaseException | None = None
    try:
        for piece in pieces:
            for frame in decoder.feed(piece):
                events += translator.read_frame(frame)
        decoder.finish()
        translator.finish()
    except UpstreamAnswered as exc:
        failure = exc
    return [msgspec.json.decode(msgspec.json.encode(e)) for e in events], failure


def joined(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Parts as a client joins a stream's: consecutive texts of one kind (thought or not) as one, keeping a
    signature one of them had; function calls as they are, their args read."""
    out: list[dict[str, Any]] = []
    for part in parts:
        part = dict(part)
        if "functionCall" in part:
            out.append(part)
        elif out and "text" in out[-1] and out[-1].get("thought") == part.get("thought"):
            last = out[-1]
            last["text"] += part["text"]
            if "thoughtSignature" in part:
                last["thoughtSignature"] = part["thoughtSignature"]
        else:
            out.append(part)
    return out


def first_candidate_parts(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for e in events for c in e["candidates"] if c["index"] == 0
            for p in c.get("content", {}).get("parts", [])]


@SETTINGS
@given(answer=answers, thoughts=st.booleans(), points=st.lists(st.integers(0, 100_000), max_size=12))
def test_any_stream_split_anywhere_reads_as_the_whole_answer(answer: Answer, thoughts: bool,
                                                             points: list[int]) -> None:
    data = b"".join(frames_of(answer, None))
    events, failure = stream(cut(data, points), thoughts)
    assert failure is None
    assert stream([data], thoughts) == (events, None)  # however the bytes were split
    for e in events:
        sdk.GenerateContentResponse.model_validate_json(msgspec.json.encode(e))
    assert [("usageMetadata" in e) for e in events] == [False] * (len(events) - 1) + [True]
    last = {c["index"]: c for c in events[-1]["candidates"]}
    whole = msgspec.json.decode(msgspec.json.encode(response_from_answer(
        answer.response(), id="resp-edge", model="gemini-x", include_thoughts=thoughts)))
    assert last[0]["finishReason"] == whole["candidates"][0]["finishReason"]
    assert events[-1]["usageMetadata"] == whole["usageMetadata"]
    assert joined(first_candidate_parts(events)) == joined(whole["candidates"][0]["content"]["parts"])
    assert all(not any("finishReason" in c for c in e["candidates"]) for e in events[:-1])


@SETTINGS
@given(answer=answers, error_at=st.integers(0, 200), points=st.lists(st.integers(0, 100_000), max_size=12))
def test_an_error_frame_anywhere_is_raised_and_no_last_event_is_sent(answer: Answer, error_at: int,
                                                                      points: list[int]) -> None:
    events, failure = stream(cut(b"".join(frames_of(answer, error_at)), points), thoughts=True)
    assert isinstance(failure, UpstreamAnswered) and failure.status == 503
    assert all("usageMetadata" not in e for e in events)


def test_the_builders_cover_every_part() -> None:
    answer = Answer(reasoning=["a"], signature="c2ln", text=["t", ""], refusal=["no"],
                    calls=[Call(id=None, name="f", arguments='{"k": 1}', cuts=[3])], finish="tool_calls",
                    usage=None, ending=1, noise=[2])
    events, failure = stream([b"".join(frames_of(answer, None))], thoughts=True)
    assert failure is None
    assert joined(first_candidate_parts(events)) == [
        {"text": "a", "thought": True}, {"text": "tno", "thoughtSignature": "c2ln"},
        {"functionCall": {"name": "f", "args": {"k": 1}, "id": "call_resp-edge_0"}}]
