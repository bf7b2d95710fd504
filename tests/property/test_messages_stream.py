"""Anthropic's stream grammar from any stream a service may send (ingress/translate/messages.py): text,
thinking and its signature, redacted thinking, tool calls in argument pieces, other choices, usage, the end,
or an Error frame anywhere before it; its bytes split into reads anywhere, framed back by FrameDecoder as
the edge's streaming code does. The events are one valid Anthropic sequence (or an exception and no
message_stop), each read by the official SDK, whose own accumulator makes of them the message
`message_from_response` makes of the same answer whole."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pydantic
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import Message as SdkMessage
from anthropic.types import RawMessageStreamEvent
from hypothesis import given, settings
from hypothesis import strategies as st

from ingress import wire
from ingress.errors import UpstreamAnswered
from ingress.translate.messages import MessagesStreamTranslator, message_from_response
from ingress.wire import Chunk, ToolCallDelta
from ingress.wire.answer import decode_frame
from ingress.wire.framing import FrameDecoder

SETTINGS = settings(max_examples=200, deadline=None, database=None)
EVENT = pydantic.TypeAdapter(RawMessageStreamEvent)
INPUT_TOKENS = 17  # the edge's count of the prompt

TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
PIECES = st.lists(TEXT, max_size=4)
JSON_VALUE = st.one_of(st.none(), st.booleans(), st.integers(-(2**40), 2**40), TEXT)
ARGUMENTS = st.one_of(st.just(""), st.dictionaries(TEXT, JSON_VALUE, max_size=3).map(json.dumps))
FINISH = st.sampled_from([None, "stop", "length", "tool_calls", "content_filter", "pause_turn", "refusal"])
USAGE = st.builds(wire.Usage, prompt_tokens=st.integers(0, 5000), completion_tokens=st.integers(0, 5000),
                  cached_tokens=st.integers(0, 3000), cache_write_tokens=st.integers(0, 3000),
                  web_search_requests=st.integers(0, 2), web_fetch_requests=st.integers(0, 2))


@dataclass
class Call:
    id: str | None
    name: str
    arguments: str
    cuts: list[int]  # where the arguments are split into pieces

    def pieces(self) -> list[str]:
        edges = [0, *sorted({c % (len(self.arguments) + 1) for c in self.cuts}), len(self.arguments)]
        return [self.arguments[a:b] for a, b in itertools.pairwise(edges) if b > a]


@dataclass
class Answer:
    """What a service answers, as the parts it streams, in the order Anthropic's blocks come."""

    reasoning: list[str]
    signature: str | None
    redacted: list[str]
    text: list[str]
    refusal: list[str]
    calls: list[Call]
    finish: str | None
    stop_sequence: str | None
    usage: wire.Usage | None
    opening: bool  # a first frame naming the role, with empty content
    ending: int  # 0: finish, usage and done in one frame; 1: each in its own
    noise: list[int] = field(default_factory=list)  # where another choice's frames come

    def chunks(self) -> list[Chunk]:
        """The frames' chunks, numbered in order."""
        out: list[Chunk] = [Chunk(sequence=0, role="assistant", content="")] if self.opening else []
        out += [Chunk(sequence=0, reasoning=r) for r in self.reasoning]
        if self.signature is not None:
            out.append(Chunk(sequence=0, signature=self.signature))
        if self.redacted:
            out.append(Chunk(sequence=0, redacted_thinking=self.redacted))
        out += [Chunk(sequence=0, content=t) for t in self.text]
        out += [Chunk(sequence=0, refusal=t) for t in self.refusal]
        for n, call in enumerate(self.calls):
            out.append(Chunk(sequence=0, tool_calls=[ToolCallDelta(index=n, id=call.id, type="function",
                                                                   name=call.name)]))
            out += [Chunk(sequence=0, tool_calls=[ToolCallDelta(index=n, arguments=p)]) for p in call.pieces()]
        for at in self.noise:  # a token of text (read in place), or a frame of every kind
            out.insert(at % (len(out) + 1), Chunk(sequence=0, choice_index=1, content="other") if at % 2 else Chunk(
                sequence=0, choice_index=1, content="other", reasoning="x", finish_reason="length",
                tool_calls=[ToolCallDelta(index=0, id="o", name="o")]))
        end = [Chunk(sequence=0, finish_reason=self.finish, stop_sequence=self.stop_sequence, usage=self.usage,
                     done=True)]
        if self.ending:
            end = [Chunk(sequence=0, finish_reason=self.finish, stop_sequence=self.stop_sequence),
                   Chunk(sequence=0, usage=self.usage), Chunk(sequence=0, done=True)]
        return [msgspec.structs.replace(c, sequence=i) for i, c in enumerate(out + end)]

    def response(self) -> wire.Response:
        """The same answer whole. No usage: the edge's count of the prompt, as message_start has it."""
        text = "".join(self.text)
        choice = wire.Choice(
            reasoning="".join(self.reasoning), signature=self.signature, redacted_thinking=self.redacted,
            content=text if text or not self.refusal else None, refusal="".join(self.refusal) or None,
            tool_calls=[wire.FunctionCall(id=c.id or "", name=c.name, arguments=c.arguments) for c in self.calls],
            finish_reason=self.finish, stop_sequence=self.stop_sequence)
        usage = self.usage if self.usage is not None else wire.Usage(prompt_tokens=INPUT_TOKENS)
        return wire.Response(id="chatcmpl-up", model="served", created=1, choices=[choice], usage=usage)


calls = st.builds(Call, id=st.none() | st.text("abcxyz_0123456789", min_size=1, max_size=8),
                  name=st.text("abcdefgh_", min_size=1, max_size=8), arguments=ARGUMENTS,
                  cuts=st.lists(st.integers(0, 200), max_size=4))
answers = st.builds(
    Answer, reasoning=PIECES, signature=st.none() | TEXT, redacted=st.lists(TEXT.filter(bool), max_size=2),
    text=PIECES, refusal=st.lists(TEXT, max_size=1), calls=st.lists(calls, max_size=3), finish=FINISH,
    stop_sequence=st.none() | st.sampled_from(["END", "\n\n"]), usage=st.none() | USAGE, opening=st.booleans(),
    ending=st.integers(0, 1), noise=st.lists(st.integers(0, 50), max_size=2))
ERROR = wire.ErrorInfo(status=503, type="server_error", code="upstream_overloaded", message="busy")


def frames_of(answer: Answer, error_at: int | None) -> list[bytes]:
    frames = [bytes(wire.write_chunk(c)) for c in answer.chunks()]
    if error_at is None:
        return frames
    at = error_at % len(frames)  # anywhere before the final frame: the service's last word
    return [*frames[:at], bytes(wire.write_error(ERROR, framed=True))]


def cut(data: bytes, points: list[int]) -> list[bytes]:
    edges = [0, *sorted(p % (len(data) + 1) for p in points), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


def stream(pieces: list[bytes]) -> tuple[list[dict[str, Any]], BaseException | None]:
    """The events the reads make, as the edge's streaming code feeds them, and the failure, if any."""
    decoder = FrameDecoder()
    translator = MessagesStreamTranslator(id="msg_edge", model="claude-x", input_tokens=INPUT_TOKENS)
    events: list[Any] = []
    try:
        for piece in pieces:
            for frame in decoder.feed(piece):
                events += translator.read_frame(frame)
        decoder.finish()
        translator.finish()
    except UpstreamAnswered as exc:
        return [msgspec.json.decode(msgspec.json.encode(e)) for e in events], exc
    return [msgspec.json.decode(msgspec.json.encode(e)) for e in events], None


_DELTAS = {"text": {"text_delta", "citations_delta"}, "thinking": {"thinking_delta", "signature_delta"},
           "redacted_thinking": set(), "tool_use": {"input_json_delta"}}


def assert_grammar(events: list[dict[str, Any]], complete: bool) -> None:
    """One message_start first; blocks at indices 0, 1, 2... each started, given deltas of its kind (a
    thinking block's signature last), and stopped before the next starts; then message_delta and
    message_stop, last; every event one the SDK reads. A stream that failed has no message_stop."""
    for e in events:
        EVENT.validate_python(e)
    kinds = [e["type"] for e in events]
    if not events:
        assert not complete
        return
    assert kinds[0] == "message_start" and kinds.count("message_start") == 1
    assert kinds.count("message_stop") == (1 if complete else 0)
    opened: dict[str, Any] | None = None
    signed = False
    next_index = 0
    for e in events[1:]:
        kind = e["type"]
        if kind == "content_block_start":
            assert opened is None, "a block started before the open one stopped"
            assert e["index"] == next_index
            opened, signed, next_index = e["content_block"], False, next_index + 1
        elif kind == "content_block_delta":
            assert opened is not None and e["index"] == next_index - 1
            assert e["delta"]["type"] in _DELTAS[opened["type"]]
            assert not signed, "a delta after the thinking block's signature"
            signed = e["delta"]["type"] == "signature_delta"
        elif kind == "content_block_stop":
            assert opened is not None and e["index"] == next_index - 1
            opened = None
        elif kind == "message_delta":
            assert opened is None and kinds.count("message_delta") == 1
        else:
            assert kind == "message_stop" and e is events[-1] and kinds[-2] == "message_delta"
    if complete:
        assert kinds[-2:] == ["message_delta", "message_stop"]


def accumulated(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The message the official SDK's accumulator makes of the events."""
    snapshot = None
    buffers: dict[int, bytes] = {}
    for e in events:
        snapshot = accumulate_event(event=EVENT.validate_python(e), current_snapshot=snapshot, json_bufs=buffers)
    assert snapshot is not None
    result: dict[str, Any] = SdkMessage.model_validate(snapshot.to_dict()).model_dump(mode="json")
    return result


def whole(answer: Answer) -> dict[str, Any]:
    m = message_from_response(answer.response(), id="msg_edge", model="claude-x")
    result: dict[str, Any] = SdkMessage.model_validate_json(msgspec.json.encode(m)).model_dump(mode="json")
    return result


@SETTINGS
@given(answer=answers, points=st.lists(st.integers(0, 100_000), max_size=12))
def test_any_stream_split_anywhere_is_anthropics_grammar_and_accumulates_to_the_whole_answer(
        answer: Answer, points: list[int]) -> None:
    data = b"".join(frames_of(answer, None))
    events, failure = stream(cut(data, points))
    assert failure is None
    assert_grammar(events, complete=True)
    assert accumulated(events) == whole(answer)
    assert stream([data]) == (events, None)  # however the bytes were split


@SETTINGS
@given(answer=answers, error_at=st.integers(0, 200), points=st.lists(st.integers(0, 100_000), max_size=12))
def test_an_error_frame_anywhere_is_raised_and_no_message_stop_is_sent(answer: Answer, error_at: int,
                                                                        points: list[int]) -> None:
    data = b"".join(frames_of(answer, error_at))
    events, failure = stream(cut(data, points))
    assert isinstance(failure, UpstreamAnswered) and failure.status == 503
    assert_grammar(events, complete=False)


@SETTINGS
@given(answer=answers)
def test_frames_read_in_place_make_the_events_decoded_frames_make(answer: Answer) -> None:
    fast = MessagesStreamTranslator(id="m", model="c", input_tokens=INPUT_TOKENS)
    slow = MessagesStreamTranslator(id="m", model="c", input_tokens=INPUT_TOKENS)
    for frame in frames_of(answer, None):
        assert fast.read_frame(frame) == slow.feed(decode_frame(frame))
    assert (fast.output, fast.usage, fast.done) == (slow.output, slow.usage, True)


def test_the_builders_cover_every_part() -> None:
    answer = Answer(reasoning=["a"], signature="s", redacted=["r"], text=["t", ""], refusal=["no"],
                    calls=[Call(id=None, name="f", arguments='{"k": 1}', cuts=[3])], finish="tool_calls",
                    stop_sequence=None, usage=None, opening=True, ending=1, noise=[2])
    events, failure = stream([b"".join(frames_of(answer, None))])
    assert failure is None
    assert_grammar(events, complete=True)
    blocks = [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"]
    assert blocks == ["thinking", "redacted_thinking", "text", "tool_use"]
    assert accumulated(events) == whole(answer)
