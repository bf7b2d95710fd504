"""The token delta read in place (`content_delta`) against the general path (verify, then decode): what
the fast read accepts, the verifier accepts and the readers decode to the same values, for encoded
frames of every shape and for mutants of them; and a translator fed frames through it makes the same
chunks (its Deltas standing for them), and keeps the same state, as one fed the decoded frames."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st
from mutation import mutants

from ingress import wire
from ingress.translate.stream import Delta, StreamTranslator
from ingress.wire import decode, verify
from ingress.wire.answer import content_delta, decode_frame
from ingress.wire.decode import WireError

TEXT = st.text(st.characters(codec="utf-8"), max_size=40)
DEFAULTS = wire.Chunk(sequence=0)


def _chunks(sequence: st.SearchStrategy[int]) -> st.SearchStrategy[wire.Chunk]:
    plain = st.builds(wire.Chunk, sequence=sequence, choice_index=st.integers(0, 2**32 - 1), content=TEXT)
    other = st.builds(
        wire.Chunk, sequence=sequence, choice_index=st.integers(0, 3), content=st.none() | TEXT,
        id=st.none() | TEXT, model=st.none() | TEXT, created=st.none() | st.integers(1, 2**40),
        role=st.none() | st.sampled_from(["assistant", "tool"]), refusal=st.none() | TEXT,
        finish_reason=st.none() | st.sampled_from(["stop", "length"]), system_fingerprint=st.none() | TEXT,
        done=st.booleans(), service_tier=st.none() | TEXT, reasoning=st.none() | TEXT,
        signature=st.none() | TEXT, stop_sequence=st.none() | TEXT, redacted_thinking=st.lists(TEXT, max_size=1),
        usage=st.none() | st.builds(wire.Usage, prompt_tokens=st.integers(0, 99), completion_tokens=st.integers(0, 99)),
        tool_calls=st.lists(st.builds(wire.ToolCallDelta, index=st.integers(0, 2), arguments=st.none() | TEXT),
                            max_size=2))
    return plain | other


def _only_a_delta(c: wire.Chunk) -> bool:
    delta = wire.Chunk(sequence=c.sequence, choice_index=c.choice_index, content=c.content)
    return c.content is not None and c == delta


def _agrees(frame: bytes) -> None:
    """If the fast read accepts `frame`, the general path accepts it and reads the same delta, nothing else."""
    fast = content_delta(frame)
    if fast is None:
        return
    verify.verify_chunk(frame)  # raises WireError if the verifier refuses what the fast read accepted
    chunk = decode.decode_chunk(frame[4:])
    assert (chunk.sequence, chunk.choice_index, chunk.content) == fast
    assert _only_a_delta(chunk), chunk


@settings(max_examples=600, deadline=None, database=None)
@given(_chunks(st.integers(0, 2**64 - 1)))
def test_a_delta_is_read_in_place_and_nothing_else_is(chunk: wire.Chunk) -> None:
    frame = bytes(wire.write_chunk(chunk))
    fast = content_delta(frame)
    if _only_a_delta(chunk):
        assert fast == (chunk.sequence, chunk.choice_index, chunk.content)
    else:
        assert fast is None
    _agrees(frame)


@settings(max_examples=300, deadline=None, database=None)
@given(st.builds(wire.Chunk, sequence=st.integers(0, 2**64 - 1), choice_index=st.integers(0, 9), content=TEXT),
       st.integers(0, 2**32))
def test_what_the_fast_read_accepts_of_a_mutant_the_verifier_accepts(chunk: wire.Chunk, seed: int) -> None:
    for mutant in mutants(bytes(wire.write_chunk(chunk)), random.Random(seed), size_prefixed=True):
        try:
            _agrees(mutant)
        except WireError as exc:
            raise AssertionError(f"accepted in place, refused by the verifier: {mutant.hex()}") from exc


def _state(t: StreamTranslator) -> tuple[object, ...]:
    return (t.id, t.model, t.created, t.usage, t.output, t.done, t.system_fingerprint, t.service_tier,
            t._next_sequence)


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(_chunks(st.just(0)), min_size=1, max_size=12), st.booleans(), st.booleans(), st.integers(0, 3))
def test_the_translator_makes_the_same_chunks_either_way(chunks: list[wire.Chunk], usage: bool, legacy: bool,
                                                          skip: int) -> None:
    frames = [bytes(wire.write_chunk(wire.Chunk(**{**{f: getattr(c, f) for f in c.__struct_fields__},
                                                   "sequence": i + (i >= skip > 0)})))
              for i, c in enumerate(chunks)]
    fast = StreamTranslator(id="chatcmpl-a", model="m", created=7, include_usage=usage, legacy_functions=legacy)
    slow = StreamTranslator(id="chatcmpl-a", model="m", created=7, include_usage=usage, legacy_functions=legacy)
    for frame in frames:
        try:
            want: object = slow.feed(decode_frame(frame))
        except Exception as exc:  # a skipped sequence, data after the end: the same error both ways
            want = (type(exc), str(exc))
        try:
            got: object = [c.chunk() if isinstance(c, Delta) else c for c in fast.read_frame(frame)]
        except Exception as exc:
            got = (type(exc), str(exc))
        assert got == want
        assert _state(fast) == _state(slow)
        if isinstance(want, tuple):
            break
