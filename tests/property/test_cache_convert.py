"""An answer from one shape to the other (ingress/wire/convert.py), as the response cache serves it: a whole
answer streamed and made whole again is the same answer (but for its annotations, which a frame cannot
carry); any stream made whole is its deltas joined, and that whole answer streams back to itself; every
buffer and frame the conversions write passes the FlatBuffers C++ Verifier."""

from __future__ import annotations

import itertools

import msgspec
import pytest
from cxx_oracle import CxxVerifier
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingress import wire
from ingress.errors import IngressError
from ingress.wire import decode
from ingress.wire.convert import complete_stream, response_frames, stream_chunks, stream_response
from ingress.wire.framing import FrameDecoder

TEXT = st.text(st.characters(codec="utf-8"), max_size=30)
U32 = st.integers(0, 2**32 - 1)
FINISH = st.sampled_from([None, "stop", "length", "tool_calls", "content_filter", "pause_turn", "refusal"])
USAGE = st.builds(wire.Usage, prompt_tokens=U32, completion_tokens=U32, total_tokens=U32, cached_tokens=U32,
                  reasoning_tokens=U32)
LOGPROBS = st.none() | st.lists(st.builds(wire.TokenLogprob, token=TEXT, logprob=st.floats(-5, 0, width=32),
                                          top_logprobs=st.lists(st.builds(wire.TopLogprob, token=TEXT,
                                                                          logprob=st.floats(-5, 0, width=32)),
                                                                max_size=2)), max_size=3)
CALLS = st.lists(st.builds(wire.FunctionCall, id=TEXT, name=TEXT, arguments=TEXT,
                           type=st.sampled_from(["function", "custom"])), max_size=3)
SETTINGS = settings(max_examples=150, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def responses(draw: st.DrawFn) -> wire.Response:
    indexes = sorted(draw(st.sets(st.integers(0, 5), max_size=3)))
    choices = [wire.Choice(
        index=i, content=draw(st.none() | TEXT), refusal=draw(st.none() | TEXT), finish_reason=draw(FINISH),
        tool_calls=draw(CALLS), logprobs=draw(LOGPROBS), refusal_logprobs=draw(LOGPROBS),
        reasoning=draw(st.none() | TEXT), signature=draw(st.none() | TEXT),
        redacted_thinking=draw(st.lists(TEXT, max_size=2)), stop_sequence=draw(st.none() | TEXT),
        annotations=draw(st.lists(st.builds(wire.Annotation, url=TEXT, title=TEXT), max_size=1)))
        for i in indexes]
    return wire.Response(id=draw(TEXT), model=draw(TEXT), created=draw(st.integers(0, 2**62)), choices=choices,
                         usage=draw(st.none() | USAGE), system_fingerprint=draw(st.none() | TEXT),
                         service_tier=draw(st.none() | TEXT))


def as_streamed(r: wire.Response) -> wire.Response:
    """What a whole answer is after a trip through frames: no annotations; a choice with tool calls or a
    refusal and empty text has no text (as a stream's empty opening delta is not text)."""
    return msgspec.structs.replace(r, choices=[msgspec.structs.replace(
        c, annotations=[], content=None if c.content == "" and (c.tool_calls or c.refusal is not None) else c.content)
        for c in r.choices])


def frames_in(body: bytes) -> list[bytes]:
    return list(FrameDecoder().feed(body))


@SETTINGS
@given(response=responses())
def test_a_whole_answer_streamed_and_made_whole_is_the_same_answer(cxx_verifier: CxxVerifier,
                                                                 response: wire.Response) -> None:
    frames = response_frames(bytes(wire.write_response(response)))
    assert complete_stream(frames)
    for frame in frames_in(frames):
        assert cxx_verifier.verify("chunk", frame, size_prefixed=True)
    whole = stream_response(frames)
    assert cxx_verifier.verify("response", whole)
    assert decode.decode_response(whole) == as_streamed(response)


def _pieces(text: str | None, cuts: list[int]) -> list[str]:
    if text is None:
        return []
    edges = [0, *sorted({c % (len(text) + 1) for c in cuts}), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(edges) if b > a] or [text]


@SETTINGS
@given(response=responses(), cuts=st.lists(st.integers(0, 100), max_size=4))
def test_any_stream_made_whole_is_its_deltas_joined_and_streams_back_to_itself(
        cxx_verifier: CxxVerifier, response: wire.Response, cuts: list[int]) -> None:
    chunks: list[wire.Chunk] = []
    head = {"id": response.id, "model": response.model, "created": response.created,
            "system_fingerprint": response.system_fingerprint, "service_tier": response.service_tier}
    for c in response.choices:  # each text in pieces, in the order a live stream has them; a choice opens with its role
        chunks.append(wire.Chunk(sequence=0, choice_index=c.index, role="assistant"))
        chunks += [wire.Chunk(sequence=0, choice_index=c.index, reasoning=p) for p in _pieces(c.reasoning, cuts)]
        if c.signature is not None or c.redacted_thinking:
            chunks.append(wire.Chunk(sequence=0, choice_index=c.index, signature=c.signature,
                                     redacted_thinking=c.redacted_thinking))
        chunks += [wire.Chunk(sequence=0, choice_index=c.index, content=p) for p in _pieces(c.content, cuts)]
        if c.logprobs is not None:
            chunks.append(wire.Chunk(sequence=0, choice_index=c.index, logprobs=c.logprobs))
        chunks += [wire.Chunk(sequence=0, choice_index=c.index, refusal=p) for p in _pieces(c.refusal, cuts)]
        if c.refusal_logprobs is not None:
            chunks.append(wire.Chunk(sequence=0, choice_index=c.index, refusal_logprobs=c.refusal_logprobs))
        for n, call in enumerate(c.tool_calls):
            chunks.append(wire.Chunk(sequence=0, choice_index=c.index, tool_calls=[
                wire.ToolCallDelta(index=n, id=call.id, type=call.type, name=call.name)]))
            chunks += [wire.Chunk(sequence=0, choice_index=c.index, tool_calls=[
                wire.ToolCallDelta(index=n, arguments=p)]) for p in _pieces(call.arguments, cuts)]
        chunks.append(wire.Chunk(sequence=0, choice_index=c.index, finish_reason=c.finish_reason,
                                 stop_sequence=c.stop_sequence))
    chunks.append(wire.Chunk(sequence=0, usage=response.usage, done=True))
    chunks = [msgspec.structs.replace(k, sequence=i, **(head if i == 0 else {})) for i, k in enumerate(chunks)]
    body = b"".join(bytes(wire.write_chunk(k)) for k in chunks)
    whole = stream_response(body)
    assert cxx_verifier.verify("response", whole)
    made = decode.decode_response(whole)
    assert made == as_streamed(response)
    again = response_frames(whole)
    assert stream_response(again) == whole


def test_what_is_not_a_whole_stream_is_refused() -> None:
    chunks = [wire.Chunk(sequence=0, role="assistant", content="hi"), wire.Chunk(sequence=1, done=True)]
    frames = [bytes(wire.write_chunk(k)) for k in chunks]
    assert complete_stream(b"".join(frames))
    error = bytes(wire.write_error(wire.ErrorInfo(status=503, message="busy"), framed=True))
    for body in (frames[0], frames[0] + error, frames[1] + frames[0], b"".join(frames) + frames[0],
                 b"".join(frames)[:-1], b"", frames[1]):
        assert not complete_stream(body)
        with pytest.raises((ValueError, IngressError)):  # the Error frame raises as the error it stands for
            stream_chunks(body)
