"""The common answer read in place (`common_response`) against the general path (verify, then decode): what
the fast read accepts, the verifier accepts and the readers decode to the same value, for answers of every
shape (written by the generated encoder and by the stock flatbuffers Builder) and for mutants of them; and
every answer of the common shape is read in place."""

from __future__ import annotations

import random

import flatbuffers
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mutation import mutants
from stock_buffers import encode_response_stock

from ingress import wire
from ingress.wire import decode, verify
from ingress.wire._generated.LLMGateway import Choice, CompletionResponse, Message
from ingress.wire.answer import common_response, decode_answer
from ingress.wire.decode import FINISH_NAMES, WireError
from ingress.wire.stock import BuilderPool

TEXT = st.text(st.characters(codec="utf-8"), max_size=40)
U32 = st.integers(0, 2**32 - 1)
FINISH = st.sampled_from([None, "stop", "length", "tool_calls", "content_filter", "pause_turn", "refusal"])
USAGE = st.builds(wire.Usage, prompt_tokens=U32, completion_tokens=U32, total_tokens=U32, cached_tokens=U32,
                  reasoning_tokens=U32, completion_text_tokens=U32, web_search_requests=U32)
POOL = BuilderPool()

common_choices = st.builds(wire.Choice, index=U32, content=st.none() | TEXT, refusal=st.none() | TEXT,
                           finish_reason=FINISH, reasoning=st.none() | TEXT, signature=st.none() | TEXT,
                           stop_sequence=st.none() | TEXT)
other_choices = st.builds(
    wire.Choice, index=st.integers(0, 3), content=st.none() | TEXT, finish_reason=FINISH,
    tool_calls=st.lists(st.builds(wire.FunctionCall, id=TEXT, name=TEXT, arguments=TEXT), max_size=2),
    logprobs=st.none() | st.lists(st.builds(wire.TokenLogprob, token=TEXT, logprob=st.floats(-5, 0, width=32)),
                                  max_size=2),
    annotations=st.lists(st.builds(wire.Annotation, url=TEXT, title=TEXT), max_size=1),
    redacted_thinking=st.lists(TEXT, max_size=2))


def _responses(choices: st.SearchStrategy[wire.Choice], most: int) -> st.SearchStrategy[wire.Response]:
    return st.builds(wire.Response, id=TEXT, model=TEXT, created=st.integers(-(2**63), 2**63 - 1),
                     choices=st.lists(choices, max_size=most), usage=st.none() | USAGE,
                     system_fingerprint=st.none() | TEXT, service_tier=st.none() | TEXT)


def _common(r: wire.Response) -> bool:
    return len(r.choices) <= 64 and all(
        not c.tool_calls and c.logprobs is None and c.refusal_logprobs is None and not c.annotations
        and not c.redacted_thinking for c in r.choices)


def _agrees(buf: bytes) -> None:
    """If the fast read accepts `buf`, the general path accepts it and reads the same answer."""
    fast = common_response(buf)
    if fast is None:
        return
    verify.verify_response(buf)  # raises WireError if the verifier refuses what the fast read accepted
    assert decode.decode_response(buf) == fast


@settings(max_examples=500, deadline=None, database=None)
@given(_responses(common_choices, 3) | _responses(other_choices | common_choices, 3), st.booleans())
def test_a_common_answer_is_read_in_place_and_nothing_else_is(response: wire.Response, stock: bool) -> None:
    buf = encode_response_stock(POOL, response) if stock else bytes(wire.write_response(response))
    fast = common_response(buf)
    if _common(response):
        assert fast == decode.decode_response(buf)
        assert fast is not None
    else:
        assert fast is None
    _agrees(buf)
    assert decode_answer(buf) == decode.decode_response(buf)


def test_many_choices_are_read_the_general_way() -> None:
    response = wire.Response(id="a", model="m", created=1, choices=[wire.Choice(index=i, content="x")
                                                                   for i in range(65)])
    buf = bytes(wire.write_response(response))
    assert common_response(buf) is None
    assert decode_answer(buf) == decode.decode_response(buf)
    assert common_response(bytes(wire.write_response(wire.Response(
        id="a", model="m", created=1, choices=response.choices[:64])))) is not None


def test_an_unknown_finish_reason_is_left_to_the_general_way() -> None:
    buf = bytes(wire.write_response(wire.Response(id="a", model="m", created=1, choices=[
        wire.Choice(index=0, content="x", finish_reason="length")])))
    assert common_response(buf) is not None
    mutants = [buf[:at] + bytes([value]) + buf[at + 1:] for at in range(len(buf)) if buf[at] == 2
               for value in (len(FINISH_NAMES), 9, 255)]
    refused = [m for m in mutants if _refused(m)]  # the finish reason's byte: the general way names it
    assert refused
    assert all(common_response(m) is None for m in refused)


def test_a_choice_reached_many_times_is_left_to_the_general_way() -> None:
    """One Choice table behind all 64 of the vector's offsets: the verifier walks it once (its memo), the fast
    read counts what it follows each time, past the offsets a buffer this size holds, and leaves it."""
    b = flatbuffers.Builder(0)
    content = b.CreateString("x")
    Message.Start(b)
    Message.AddContent(b, content)
    message = Message.End(b)
    Choice.Start(b)
    Choice.AddMessage(b, message)
    choice = Choice.End(b)
    CompletionResponse.StartChoicesVector(b, 64)
    for _ in range(64):
        b.PrependUOffsetTRelative(choice)
    choices = b.EndVector()
    CompletionResponse.Start(b)
    CompletionResponse.AddChoices(b, choices)
    b.Finish(CompletionResponse.End(b), file_identifier=b"LGRS")
    buf = bytes(b.Output())
    verify.verify_response(buf)
    assert common_response(buf) is None
    answer = decode_answer(buf)
    assert [c.content for c in answer.choices] == ["x"] * 64


def _empty(vtable_at: int) -> bytes:
    """A CompletionResponse with no fields, by hand: the root table at 12, its 4-byte vtable at `vtable_at`."""
    buf = bytearray(24)
    buf[0:4] = (12).to_bytes(4, "little")
    buf[4:8] = b"LGRS"
    buf[12:16] = (12 - vtable_at).to_bytes(4, "little", signed=True)
    buf[vtable_at:vtable_at + 4] = (4).to_bytes(2, "little") + (4).to_bytes(2, "little")
    return bytes(buf)


def test_a_vtable_out_of_alignment_is_left_to_the_general_way() -> None:
    aligned, odd = _empty(16), _empty(17)
    assert common_response(aligned) == decode.decode_response(aligned) == wire.Response(
        id="", model="", created=0, choices=[])
    with pytest.raises(WireError, match="misaligned"):
        verify.verify_response(odd)
    assert common_response(odd) is None


def _refused(buf: bytes) -> bool:
    try:
        decode_answer(buf)
    except Exception:
        return True
    return False


@settings(max_examples=300, deadline=None, database=None)
@given(_responses(common_choices, 2), st.booleans(), st.integers(0, 2**32))
def test_what_the_fast_read_accepts_of_a_mutant_the_verifier_accepts(response: wire.Response, stock: bool,
                                                                      seed: int) -> None:
    buf = encode_response_stock(POOL, response) if stock else bytes(wire.write_response(response))
    for mutant in mutants(buf, random.Random(seed)):
        try:
            _agrees(mutant)
        except WireError as exc:
            raise AssertionError(f"accepted in place, refused by the verifier: {mutant.hex()}") from exc


def test_the_fast_read_knows_every_field_of_the_tables_it_reads() -> None:
    """A field appended to CompletionResponse, Choice, Message or Usage is one the fast read checks: read,
    or required absent (a buffer carrying it is read the general way), never skipped."""
    from ingress.wire import answer
    from ingress.wire._generated import slots
    from ingress.wire._generated.encoders import ChoiceData, CompletionResponseData, MessageData, UsageData

    for table, data, read, others in (
        (slots.CompletionResponse, CompletionResponseData, answer._response_fields, answer._response_others),
        (slots.Choice, ChoiceData, answer._choice_fields, answer._choice_others),
        (slots.Message, MessageData, answer._message_fields, answer._message_others),
    ):
        assert len(data.__struct_fields__) == table.SLOTS
        entries = tuple(range(1, table.SLOTS + 1))  # each slot's entry: its own number, one up
        assert sorted([*read(entries), *(others(entries) if others is not None else ())]) == list(entries)
    assert len(UsageData.__struct_fields__) == slots.Usage.SLOTS  # every slot checked, then the generated read
